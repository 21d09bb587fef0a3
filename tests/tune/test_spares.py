"""Spare workers (CPU, compile-only; a worker hook aborts as a kernel fault ends a worker):
a spare is prepared before it is needed, a hand-over waits on nothing, the pool grows for
a burst of failures and refills behind it, and its size is bounded by device memory."""

import time

import pytest
from mneme.replay.db import Database
from mneme.replay.engine import ReplayConfig, ReplaySession, ReplaySettings
from mneme.replay.jit import CompileCache, CompileConfig
from mneme.tune import ReplayExecutor, TrialFailedError, TuneOptions, Tuner
from mneme.tune.workers import CONTEXT_BYTES, CPU_SPARES, MAX_SPARES, SPARE_RESTORE_BYTES, capacity
from test_executor import _spare_pids, _spare_ready, settings
from tune_support import (
    GOLDEN,
    POISON_REGISTERS,
    SAXPY,
    SLOW_PREPARE_SECONDS,
    abort_on_poison,
    abort_on_wide_blocks,
    slow_baseline_and_abort_on_wide_blocks,
    slow_prepare,
)

# spares must be ready in time and hand-overs are timed: no other test beside them
pytestmark = pytest.mark.exclusive


def _poison(pool) -> None:
    with pytest.raises(TrialFailedError):
        pool.submit(settings(registers=POISON_REGISTERS)).result(timeout=120)


def test_capacity_is_what_the_free_device_memory_holds():
    gib = 1 << 30
    # a small instance: a context each, within half the free memory
    assert capacity(8 * gib, 1 << 20) == (4 * gib) // (CONTEXT_BYTES + 3 * (1 << 20))
    assert capacity(80 * gib, 0) == MAX_SPARES  # never more than MAX_SPARES
    assert capacity(gib // 4, 0) == 1  # always one
    assert capacity(None, 0) == CPU_SPARES  # CPU workers: no device memory
    # an instance too large to restore ahead is not held by the spares
    assert capacity(8 * gib, 5 * gib) == capacity(8 * gib, SPARE_RESTORE_BYTES)
    # and one per two cores (at least two): starting spares take CPU
    assert capacity(80 * gib, 0, cores=16) == 8 and capacity(80 * gib, 0, cores=2) == 2
    assert capacity(None, 0, cores=64) == CPU_SPARES


def test_prepare_does_a_replays_set_up_for_the_settings_it_is_given():
    """What a spare does while it waits: the code of the task's settings is compiled (and
    on a GPU loaded, the memory restored), so its first replay finds it."""
    instance = Database.open(GOLDEN).instance(SAXPY)
    chosen = ReplaySettings(CompileConfig.for_level("O1"), ReplayConfig(block=(64, 1, 1)))
    with ReplaySession(instance, gpu=False, cache=CompileCache(None)) as session:
        session.prepare(chosen.compile, chosen.replay)
        result = session.run(chosen.compile, chosen.replay)
        assert result.compile_cached and result.compile_only
        assert session.run(CompileConfig.for_level("O2")).compile_cached is False


def test_a_spare_is_ready_only_once_prepared_and_then_the_handover_sends_a_task_only():
    """A spare whose prepare is slow (a large restore) is not counted ready until it has
    answered; once it is, a failure's next task takes no longer than a task does (it would
    take SLOW_PREPARE_SECONDS more if the hand-over waited on the prepare)."""
    with ReplayExecutor(GOLDEN, instance=SAXPY, cpu_workers=1, before_run=abort_on_poison,
                        before_prepare=slow_prepare) as pool:
        pool.expect_failures(1)  # (the pool starts now, not after the first tasks)
        assert pool.submit(settings()).result(timeout=120).registers > 0
        deadline = time.monotonic() + 120
        while not any(s.ready for s in pool.spares.spares[None]):  # started, preparing
            assert time.monotonic() < deadline
            time.sleep(0.02)
        assert not pool.spare_ready(), "ready before its prepare answered"
        _spare_ready(pool)
        (spare_pid,) = _spare_pids(pool)
        _poison(pool)
        start = time.monotonic()
        assert pool.submit(settings("O1")).result(timeout=120).registers > 0
        assert time.monotonic() - start < SLOW_PREPARE_SECONDS / 3
        assert pool._workers[0].process.pid == spare_pid
        restart = pool.restart_log[0]
        assert restart.by_spare and restart.spare_prepared, pool.restart_log


def test_a_starting_spare_takes_the_slot_rather_than_a_fresh_process():
    """A failure before the spare is ready gives the slot the spare as it is (further
    along than a process started then), and the next task runs there."""
    with ReplayExecutor(GOLDEN, instance=SAXPY, cpu_workers=1, before_run=abort_on_poison) as pool:
        assert pool.submit(settings()).result(timeout=120).registers > 0
        pool.expect_failures(1)
        deadline = time.monotonic() + 30
        while not _spare_pids(pool):
            assert time.monotonic() < deadline
            time.sleep(0.01)
        (starting,) = _spare_pids(pool)
        _poison(pool)
        assert pool.submit(settings("O1")).result(timeout=120).registers > 0
        assert pool._workers[0].process.pid == starting
        assert pool.restart_log[0].by_spare, pool.restart_log


def test_the_pool_grows_for_a_burst_of_failures_refills_and_shrinks_after():
    """While failures are expected (the probe), several spares are kept ready: failures in
    a row are each handed over to a prepared spare; the pool refills behind them, and
    shrinks to one spare when the burst is over."""
    burst = 2  # (spares are bounded by cores: two on the smallest machines)
    with ReplayExecutor(GOLDEN, instance=SAXPY, cpu_workers=1, before_run=abort_on_poison) as pool:
        assert pool.submit(settings()).result(timeout=120).registers > 0
        pool.expect_failures(burst)
        _spare_ready(pool, count=burst)
        first = _spare_pids(pool)
        for _ in range(burst):
            _poison(pool)
        assert pool.submit(settings("O1")).result(timeout=120).registers > 0
        assert [(r.by_spare, r.spare_prepared) for r in pool.restart_log] == [(True, True)] * burst
        assert pool._workers[0].process.pid in first
        _spare_ready(pool, count=burst)  # refilled: new processes
        assert not _spare_pids(pool) & first
        pool.expect_failures(0)
        deadline = time.monotonic() + 30
        while len(pool.spares.spares[None]) != 1:
            assert time.monotonic() < deadline, pool.spares.spares
            time.sleep(0.02)
        _poison(pool)
        assert pool.submit(settings("O2")).result(timeout=120).registers > 0
        assert pool.restarts == burst + 1


def _probe_run(tmp_path, study: str, probe_workers: int, before_run=abort_on_wide_blocks):
    """A tuner run whose probe ends the worker on each of the 16 wide shapes: its outcome
    and the crashed trials (one per wide shape, one restart each)."""
    options = TuneOptions(trials=64, devices=None, cpu_workers=1, sampler="random", seed=3,
                          storage=f"sqlite:///{tmp_path / 's.db'}", study=study,
                          before_run=before_run, probe_workers=probe_workers)
    outcome = Tuner(GOLDEN, [SAXPY], "launch", options).run()
    crashed = [t for t in outcome.trials if t.failure == "crashed"]
    assert len(crashed) == 16 and outcome.restarts == 16
    return outcome, crashed


def test_the_probes_faults_are_handed_to_spares_kept_for_them(tmp_path):
    """The tuner's probe tries every launch shape with the recorded code; 16 of them end
    their worker. Spares are kept for the probe (started beside the baseline), so every
    one of those restarts is a hand-over to a spare, never a process started then."""
    # (the baseline held a second: on two loaded cores the spares started beside it were
    # sometimes not prepared yet when the probe's faults came, CI 2026-11-29)
    outcome, crashed = _probe_run(tmp_path, "probe-spares", probe_workers=0,
                                  before_run=slow_baseline_and_abort_on_wide_blocks)
    assert len(outcome.restart_log) == 16
    assert all(r.by_spare for r in outcome.restart_log), outcome.restart_log
    assert any(r.spare_prepared for r in outcome.restart_log), outcome.restart_log


def _never_beside_a_slot(monkeypatch) -> tuple[list[str], dict]:
    """Records (in the list returned) each time the dispatcher left a slot's worker and a
    probe worker of the same device running at once, and (in the dict) each task's runs:
    task id -> [(pid, by a probe worker), ...]."""
    import mneme.tune.workers._executor as executor

    overlaps: list[str] = []
    runs: dict[int, list[tuple[int, bool]]] = {}
    assign = executor.ReplayExecutor._assign

    def checked(pool):
        assign(pool)
        for device in {w.device for w in pool._workers}:
            slot = [w for w in pool._workers if w.device == device and w.task]
            tried = [w for w in pool.probes.lent_to(device) if w.task]
            if slot and tried:
                overlaps.append(f"device {device}: slot tasks {[w.task.id for w in slot]}, "
                                f"probe tasks {[w.task.id for w in tried]}")
            for worker in slot + tried:
                run = (worker.process.pid, worker.beside)
                if run not in runs.setdefault(worker.task.id, []):
                    runs[worker.task.id].append(run)

    monkeypatch.setattr(executor.ReplayExecutor, "_assign", checked)
    monkeypatch.setattr(executor, "usable_cores", lambda: 8)  # (4 spares: CPU_SPARES)
    return overlaps, runs


def test_probe_tasks_are_tried_beside_each_other_and_replayed_alone_when_they_run(
        monkeypatch):
    """While failures are expected, prepared spares are lent as probe workers: probe tasks
    are tried there beside each other (a failure there is the task's answer, a lost probe
    worker is not replaced by a hand-over), a task that runs is replayed again alone by the
    slot's worker, which never runs beside a probe worker; afterwards they go back to the
    pool."""
    overlaps, runs = _never_beside_a_slot(monkeypatch)
    with ReplayExecutor(GOLDEN, instance=SAXPY, cpu_workers=1, before_run=abort_on_poison,
                        probe_workers=2) as pool:
        assert pool.submit(settings()).result(timeout=120).registers > 0
        pool.expect_failures(6)
        _spare_ready(pool, count=4)
        first = max(runs) + 1
        good = [pool.submit(settings(block=(b, 1, 1)), probe=True) for b in (32, 64)]
        bad = [pool.submit(settings(block=(b, 1, 1), registers=POISON_REGISTERS), probe=True)
               for b in (96, 128, 160, 192)]
        for future in bad:
            with pytest.raises(TrialFailedError, match="SIGABRT"):
                future.result(timeout=120)
        results = [f.result(timeout=120) for f in good]
        assert [r.launch["block"][0] for r in results] == [32, 64]
        beside = [r for r in pool.restart_log if r.beside]
        assert beside and len(pool.restart_log) == 4, pool.restart_log
        good_runs = [runs[first], runs[first + 1]]
        # each ran on a slot's worker last, after at most one try beside
        assert all(r[-1][1] is False and len(r) <= 2 for r in good_runs), good_runs
        assert any(r[0][1] for r in good_runs) and any(len(runs[first + 2 + i]) == 1
                                                       and runs[first + 2 + i][0][1]
                                                       for i in range(4)), runs
        pool.expect_failures(0)
        deadline = time.monotonic() + 30
        while pool.probes.workers() or len(pool.spares.spares[None]) != 1:
            assert time.monotonic() < deadline, (pool.probes.workers(), pool.spares.spares)
            time.sleep(0.02)
        assert pool.submit(settings("O1")).result(timeout=120).registers > 0
    assert overlaps == [], overlaps


def test_the_probe_with_probe_workers_finds_the_same_shapes(monkeypatch, tmp_path):
    """The tuner's probe with probe workers: each of the 16 wide shapes fails once (some
    beside the slot's worker), the others complete, timed by the slot's worker alone."""
    overlaps, _ = _never_beside_a_slot(monkeypatch)
    outcome, crashed = _probe_run(tmp_path, "probe-beside", probe_workers=2,
                                  before_run=slow_baseline_and_abort_on_wide_blocks)
    assert len({tuple(sorted(t.params.items())) for t in crashed}) == 16
    assert any(r.beside for r in outcome.restart_log), outcome.restart_log
    assert all(t.state == "complete" for t in outcome.trials if t.failure is None)
    assert overlaps == [], overlaps


def test_a_small_instance_counts_its_regions_so_spares_restore_it():
    """The bytes a spare would hold twice are the instance's regions (Instance.regions is
    a property: calling it raised, and every instance counted as too large to restore)."""
    from pathlib import Path

    from mneme.replay.db import Database
    from mneme.tune.workers._executor import _instance_bytes

    db = Database.open(Path(__file__).resolve().parents[1] / "data" / "golden.rdb")
    instance = db.kernels()[0].instances()[0]
    size = sum(region.size for region in instance.regions)
    assert 0 < _instance_bytes(instance) == size <= SPARE_RESTORE_BYTES
