"""ReplayExecutor on the CPUs (compile-only): futures, failures, crash isolation, watchdog."""

import multiprocessing
import os
import shutil
import time

import pytest
from mneme.replay.db import Database
from mneme.replay.engine import ReplayConfig, ReplaySettings
from mneme.replay.jit import CompileConfig
from mneme.tune import ReplayExecutor, TrialFailedError, TuneError, as_completed
from mneme.tune.workers._dispatcher import SPARE_AFTER_TASKS
from tune_support import (
    GOLDEN,
    POISON_REGISTERS,
    REFUSED_REGISTERS,
    ROW_SUM,
    SAXPY,
    abort_on_poison,
    fault_with_slow_cleanup,
    hang_on_poison,
    refuse_on_poison,
)

# spares must be ready in time and hand-overs are timed: no other test beside them
pytestmark = pytest.mark.exclusive


def settings(level="O3", block=None, registers=None):
    return ReplaySettings(CompileConfig.for_level(level, max_registers=registers),
                          ReplayConfig(block=block, compile_only=True))


def test_submit_map_and_as_completed():
    with ReplayExecutor(GOLDEN, instance=SAXPY, cpu_workers=2) as pool:
        levels = ["O0", "O1", "O2", "O3"]
        results = list(pool.map([settings(level) for level in levels]))
        assert [r.configuration.compile.pipeline for r in results] == [f"default<{x}>" for x in levels]
        assert all(r.compile_only and r.registers > 0 and r.binary_size > 0 for r in results)
        other = pool.submit(settings(), instance=ROW_SUM)
        futures = [pool.submit(settings(block=(64, 1, 1))), other]
        done = list(as_completed(futures, timeout=120))
        assert len(done) == 2
        assert other.result().kernel.startswith("row_sum")
        assert futures[0].result().launch["block"] == [64, 1, 1]


def _without_metadata(database, instance) -> None:
    """Remove the kernel's and the instance's metadata (zarr.json) from ``database``: a
    process that looked the instance up again would find nothing."""
    (instance.kernel.path / "zarr.json").unlink()
    (instance.path / "zarr.json").unlink()
    assert instance.kernel.static_hash not in Database.open(database).kernel_hashes()


def test_workers_replay_the_instance_objects_they_are_sent(tmp_path):
    """The instance is resolved once, in the parent: the workers and the compile pool get
    the object (its database's path and records) and look nothing up again."""
    copy = tmp_path / "golden.rdb"
    shutil.copytree(GOLDEN, copy)
    instance = Database.open(copy).instance(SAXPY)
    with ReplayExecutor(devices=None, cpu_workers=2, compile_workers=1) as pool:
        first = pool.submit(settings("O1"), instance)
        _without_metadata(copy, instance)
        results = [first.result(timeout=120),
                   *pool.map([settings(level) for level in ("O2", "O3", "Os")], instance)]
        assert all(r.instance == SAXPY and r.registers > 0 for r in results)
        with pytest.raises(TuneError, match="no database"):
            pool.submit(settings(), SAXPY)


def test_an_invalid_configuration_fails_only_its_task():
    with ReplayExecutor(GOLDEN, instance=SAXPY, cpu_workers=1) as pool:
        bad = pool.submit(settings(block=(2048, 1, 1)))
        good = pool.submit(settings())
        with pytest.raises(TrialFailedError) as failure:
            bad.result()
        assert failure.value.kind == "launch-refused" and "exceeds CUDA's limit" in failure.value.message
        assert good.result().registers > 0
        assert pool.restarts == 0


def test_a_worker_that_dies_costs_one_task_and_is_restarted():
    with ReplayExecutor(GOLDEN, instance=SAXPY, cpu_workers=1, before_run=abort_on_poison) as pool:
        before = pool.submit(settings())
        poison = pool.submit(settings(registers=POISON_REGISTERS))
        after = [pool.submit(settings(level)) for level in ("O1", "O2")]
        assert before.result().registers > 0
        with pytest.raises(TrialFailedError) as failure:
            poison.result()
        assert failure.value.kind == "crashed" and "SIGABRT" in failure.value.message
        assert all(f.result().registers > 0 for f in after)
        assert pool.restarts == 1 and pool.failures["crashed"] == 1


def test_the_watchdog_kills_a_hung_worker():
    with ReplayExecutor(GOLDEN, instance=SAXPY, cpu_workers=1, timeout=3,
                        before_run=hang_on_poison) as pool:
        hung = pool.submit(settings(registers=POISON_REGISTERS))
        after = pool.submit(settings())
        with pytest.raises(TrialFailedError) as failure:
            hung.result(timeout=60)
        assert failure.value.kind == "timeout" and "no answer within 3 s" in failure.value.message
        assert after.result(timeout=60).registers > 0
        assert pool.restarts == 1


def test_compiles_ahead_into_the_cache_the_workers_read():
    """The compile pool (what GPU workers use) fills the shared cache: the worker replaying
    a configuration finds it compiled; a compile failure fails the task before any worker."""
    with ReplayExecutor(GOLDEN, instance=SAXPY, cpu_workers=1, compile_workers=2) as pool:
        results = list(pool.map([settings(level) for level in ("O1", "O2", "O3", "Os")]))
        assert all(r.compile_cached for r in results)
        bad = pool.submit(ReplaySettings(CompileConfig(pipeline="no-such-pass"),
                                         ReplayConfig(compile_only=True)))
        with pytest.raises(TrialFailedError) as failure:
            bad.result(timeout=120)
        assert failure.value.kind == "compile" and "no-such-pass" in failure.value.message


def test_a_refused_launch_costs_no_worker_a_fault_does():
    """Only errors that poison the CUDA context restart the worker: a launch the driver
    refuses (configuration, resources) fails its task and the same process goes on."""
    with ReplayExecutor(GOLDEN, instance=SAXPY, cpu_workers=1, before_run=refuse_on_poison) as pool:
        pid = pool.device_info[0]["pid"]
        refused = [pool.submit(settings(registers=REFUSED_REGISTERS)) for _ in range(3)]
        after = pool.submit(settings("O1"))
        for future in refused:
            with pytest.raises(TrialFailedError) as failure:
                future.result(timeout=120)
            assert failure.value.kind == "launch-refused"
            assert "the launch was refused" in failure.value.message
        assert after.result(timeout=120).registers > 0
        assert pool.restarts == 0 and pool.failures["launch-refused"] == 3
        faulted = pool.submit(settings(registers=POISON_REGISTERS))
        with pytest.raises(TrialFailedError) as failure:
            faulted.result(timeout=120)
        assert failure.value.kind == "context-poisoned" and "unusable" in failure.value.message
        assert pool.submit(settings("O2")).result(timeout=120).registers > 0
        assert pool.restarts == 1 and pool.device_info[0]["pid"] != pid


def test_the_worker_reports_the_kind_the_raiser_set():
    """The failure kind travels with the error (also pickled, from the compile pool):
    nothing is reconstructed from exception types."""
    import pickle

    from mneme.replay.engine import KernelFailedError
    from mneme.replay.jit import UnknownPassError
    from mneme.tune.workers import failure_kind

    refused = KernelFailedError("the launch was refused: ...", kind="launch-refused")
    assert failure_kind(pickle.loads(pickle.dumps(refused))) == "launch-refused"
    assert failure_kind(pickle.loads(pickle.dumps(UnknownPassError("no-such-pass")))) == "compile"
    assert failure_kind(KernelFailedError("the kernel failed")) == "context-poisoned"
    assert failure_kind(ValueError("a bug")) == "error"


def test_a_sticky_driver_error_that_escaped_unclassified_retires_the_worker():
    """benchmarks/fidelity.py on the H100: cuStreamSynchronize failed with
    CUDA_ERROR_ILLEGAL_ADDRESS outside the engine's classification; the worker must go."""
    from mneme.runtime import DriverError
    from mneme.tune.workers import failure_kind

    illegal = DriverError("cuStreamSynchronize failed: CUDA_ERROR_ILLEGAL_ADDRESS", 700,
                          "CUDA_ERROR_ILLEGAL_ADDRESS")
    assert failure_kind(illegal) == "context-poisoned"
    assert failure_kind(DriverError("cuMemAlloc failed", 2, "CUDA_ERROR_OUT_OF_MEMORY")) == "error"


def _spare_ready(pool, device=None, timeout=120.0, count=1) -> None:
    import time

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pool.spare_ready(device, count):
            return
        time.sleep(0.05)
    raise AssertionError(f"{count} spare worker(s) did not get ready")


def _spare_pids(pool, device=None) -> set[int]:
    return {s.process.pid for s in pool.spares.spares[device]}


def test_a_ready_spare_takes_a_failed_workers_place_at_once():
    """A worker killed by its task is replaced by the spare started ahead (its instance
    already prepared there), not by a process started then; a new spare follows it."""
    with ReplayExecutor(GOLDEN, instance=SAXPY, cpu_workers=1, before_run=abort_on_poison) as pool:
        assert pool.submit(settings()).result(timeout=120).registers > 0
        assert not _spare_pids(pool), "no spare beside the first replays (a baseline's times)"
        assert all(f.result(timeout=120).registers > 0
                   for f in [pool.submit(settings()) for _ in range(SPARE_AFTER_TASKS)])
        _spare_ready(pool)
        (spare_pid,) = _spare_pids(pool)
        with pytest.raises(TrialFailedError):
            pool.submit(settings(registers=POISON_REGISTERS)).result(timeout=120)
        assert pool.submit(settings("O1")).result(timeout=120).registers > 0
        assert pool._workers[0].process.pid == spare_pid
        restart = pool.restart_log[0]
        assert restart.by_spare and restart.spare_prepared and restart.seconds < 0.5, pool.restart_log
        # The next failure finds the next spare once it is up.
        _spare_ready(pool)
        assert spare_pid not in _spare_pids(pool)
        with pytest.raises(TrialFailedError):
            pool.submit(settings(registers=POISON_REGISTERS)).result(timeout=120)
        assert pool.submit(settings("O2")).result(timeout=120).registers > 0
        assert [r.by_spare for r in pool.restart_log] == [True, True] and pool.restarts == 2


#: seconds a blocking join of a retired worker takes under _slow_to_exit
SLOW_EXIT_SECONDS = 2.0


def _slow_to_exit(monkeypatch) -> set[int]:
    """Processes whose pid is put in the returned set take SLOW_EXIT_SECONDS to join (a
    join that waits), as a GPU worker whose context faulted takes hundreds of ms to exit
    (the driver tears the context and its memory down); a join that does not wait is not
    slowed."""
    slow: set[int] = set()
    join = multiprocessing.process.BaseProcess.join

    def slow_join(process, timeout=None):
        if process.pid in slow and (timeout is None or timeout > 0):
            time.sleep(SLOW_EXIT_SECONDS)
        return join(process, timeout)

    monkeypatch.setattr(multiprocessing.process.BaseProcess, "join", slow_join)
    return slow


@pytest.mark.parametrize("hook", [refuse_on_poison, abort_on_poison],
                         ids=["context-poisoned", "died"])
def test_a_failure_hands_the_slot_to_the_spare_without_waiting_for_the_old_process(
        monkeypatch, hook):
    """The failed worker's process is retired off the dispatcher: the spare gets the next
    task and answers it long before the old process could be joined (the dispatcher used
    to kill and join it first: no task went to any worker meanwhile). A worker that died
    still fails its task with its exit status, once it is reaped."""
    slow = _slow_to_exit(monkeypatch)
    with ReplayExecutor(GOLDEN, instance=SAXPY, cpu_workers=1, before_run=hook) as pool:
        pool.expect_failures(1)
        assert pool.submit(settings()).result(timeout=120).registers > 0
        _spare_ready(pool)
        (spare_pid,) = _spare_pids(pool)
        slow.add(pool._workers[0].process.pid)
        failed = pool.submit(settings(registers=POISON_REGISTERS))
        after = pool.submit(settings())
        with pytest.raises(TrialFailedError) as failure:
            failed.result(timeout=120)
        start = time.monotonic()
        assert after.result(timeout=120).registers > 0
        assert time.monotonic() - start < SLOW_EXIT_SECONDS / 4
        if hook is abort_on_poison:
            assert failure.value.kind == "crashed" and "SIGABRT" in failure.value.message
        else:
            assert failure.value.kind == "context-poisoned"
        assert pool._workers[0].process.pid == spare_pid
        (restart,) = pool.restart_log
        assert restart.by_spare and restart.spare_prepared, restart
        assert restart.seconds < 0.1 and restart.next_task < SLOW_EXIT_SECONDS / 4, restart
        deadline = time.monotonic() + 30
        while restart.exited is None:  # reaped in the background
            assert time.monotonic() < deadline
            time.sleep(0.02)
        slow.clear()


def test_retired_workers_are_all_reaped_by_shutdown(monkeypatch):
    """Processes retired without waiting (failed workers, spares beyond the pool's size)
    are reaped by the dispatcher or joined at shutdown: none is left running."""
    started = []
    spawn = ReplayExecutor._spawn

    def recording_spawn(self, worker):
        spawn(self, worker)
        started.append(worker.process.pid)

    monkeypatch.setattr(ReplayExecutor, "_spawn", recording_spawn)
    with ReplayExecutor(GOLDEN, instance=SAXPY, cpu_workers=1, before_run=abort_on_poison) as pool:
        pool.expect_failures(3)
        assert pool.submit(settings()).result(timeout=120).registers > 0
        failed = [pool.submit(settings(registers=POISON_REGISTERS)) for _ in range(3)]
        assert pool.submit(settings()).result(timeout=120).registers > 0
        for future in failed:
            with pytest.raises(TrialFailedError, match="SIGABRT"):
                future.result(timeout=120)
        pool.expect_failures(0)  # (the extra spares are stopped)
        assert pool.submit(settings("O1")).result(timeout=120).registers > 0
    assert pool.restarts == 3 and len(started) > 4
    assert pool.reaper.pending == 0
    alive = [pid for pid in started if os.path.exists(f"/proc/{pid}")]
    assert alive == [], alive


def test_a_faulted_worker_answers_and_exits_without_cleaning_up(tmp_path):
    """After its context-poisoned answer the worker leaves at once (os._exit): no session
    clean-up, no exit handlers (on a GPU each would call into the faulted context). Here
    the clean-up would take a minute."""
    from mneme.tune.workers import POISONED_EXIT_STATUS, worker_main
    from mneme.tune.workers._executor import _worker_context

    context = _worker_context()
    parent, child = context.Pipe()
    spec = {"device": None, "cache_dir": str(tmp_path), "before_run": fault_with_slow_cleanup}
    process = context.Process(target=worker_main, args=(child, spec), daemon=True)
    process.start()
    child.close()
    try:
        assert parent.poll(120) and parent.recv()[0] == "hello"
        instance = Database.open(GOLDEN).instance(SAXPY)
        parent.send((1, "saxpy", instance, settings(registers=POISON_REGISTERS).to_json(), False))
        assert parent.poll(120)
        kind, task_id, message = parent.recv()
        assert (kind, task_id) == ("context-poisoned", 1) and "unusable" in message
        process.join(10)
        assert process.exitcode == POISONED_EXIT_STATUS
    finally:
        process.kill()
        process.join()
