"""Helpers of the tuning tests: the shipped recording, hooks that break workers, storage."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import optuna
from optuna.trial import TrialState

DATA = Path(__file__).resolve().parents[1] / "data"
GOLDEN = DATA / "golden.rdb"
SAXPY = "5acf7c2e2f6ed113/1b783248d1ae4a7d"
ROW_SUM = "e7f17c4ea52f6596/124f544219bb53cf"

#: a register cap the hooks below treat as "this candidate breaks the worker"
POISON_REGISTERS = 40


def abort_on_poison(settings) -> None:
    """Worker hook: a candidate with the poison register cap kills its worker (SIGABRT),
    standing in for a kernel that takes the GPU context down."""
    if settings.compile.max_registers == POISON_REGISTERS:
        os.abort()


#: seconds a spare's prepare takes under slow_prepare (a large restore)
SLOW_PREPARE_SECONDS = 1.5


def slow_prepare(key) -> None:
    """Worker hook: a spare's prepare (restore and code load) takes SLOW_PREPARE_SECONDS."""
    time.sleep(SLOW_PREPARE_SECONDS)


def abort_on_block_512(settings) -> None:
    """Worker hook: a candidate launched with blocks of 512 threads kills its worker, as a
    kernel with a 256-entry shared array faults at that size on a GPU."""
    if settings.replay.block == (512, 1, 1):
        os.abort()


def abort_on_wide_blocks(settings) -> None:
    """Worker hook: blocks wider than 512 threads kill their worker, as a kernel whose
    shared array is sized for 512 threads faults on them (16 of saxpy's 32 shapes)."""
    if settings.replay.block and settings.replay.block[0] > 512:
        os.abort()


def slow_baseline_and_abort_on_wide_blocks(settings) -> None:
    """Worker hook: abort_on_wide_blocks, and the recorded launch (the baseline) takes a
    second more, so that the spares started beside it are prepared when the probe begins
    (on two loaded cores they sometimes were not, and no probe task was tried beside)."""
    if settings.replay.block is None and settings.replay.grid is None:
        time.sleep(1.0)
    abort_on_wide_blocks(settings)


def fail_the_recorded_configuration(settings) -> None:
    """Worker hook: the recorded configuration (no register cap, O3) fails, as a recording
    whose kernel does not replay would."""
    if settings.compile.max_registers is None and settings.compile.pipeline == "default<O3>":
        raise RuntimeError("stand-in for a recording that does not replay")


def hang_on_poison(settings) -> None:
    """Worker hook: a candidate with the poison register cap never returns."""
    if settings.compile.max_registers == POISON_REGISTERS:
        time.sleep(3600)


def mneme_process(*args: str, **kwargs) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "mneme.cli", *map(str, args)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kwargs)


def run_mneme(*args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "mneme.cli", *map(str, args)],
                          capture_output=True, text=True, timeout=timeout)


def compile_only_report(folder: Path, trials: int, seed: int) -> tuple[Path, subprocess.CompletedProcess]:
    """A report folder (best.json with its identity) of saxpy tuned compile-only over
    pipelines on the shipped recording, and the run that wrote it."""
    run = run_mneme("tune", "-rdb", GOLDEN, "-rid", SAXPY, "--compile-only", "--trials", str(trials),
                    "--space", "pipeline", "--seed", str(seed), "--storage",
                    f"sqlite:///{folder / 't.sqlite3'}", "--report", folder / "report")
    assert run.returncode == 0, run.stderr
    return folder / "report", run


def one_line_error(run: subprocess.CompletedProcess, *words: str) -> None:
    """A user error: exit 2, one line `mneme: error: ...` holding each of `words`."""
    assert run.returncode == 2 and "Traceback" not in run.stderr, (run.stdout, run.stderr)
    lines = run.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("mneme: error: "), run.stderr
    for word in words:
        assert word in lines[0], lines[0]


def trials_by_state(storage, study: str) -> dict[TrialState, list]:
    trials = optuna.load_study(study_name=study, storage=storage).get_trials(deepcopy=False)
    out: dict[TrialState, list] = {}
    for t in trials:
        out.setdefault(t.state, []).append(t)
    return out


def examples_database() -> Path | None:
    """The recording of the examples: $MNEME_EXAMPLES_RDB (made on the GPU host just
    before) or the shipped tests/data/examples.rdb."""
    path = Path(os.environ.get("MNEME_EXAMPLES_RDB", DATA / "examples.rdb"))
    return path if (path / "zarr.json").is_file() else None


def instance_of(database: Path, name_part: str) -> str:
    """The instance of a kernel whose name contains ``name_part`` that ran most often,
    and among those the one that changes most memory (a first launch on zeroed inputs
    changes nothing and verifies trivially)."""
    from mneme.replay.db import Database

    db = Database.open(database)
    for kernel in db.kernels():
        if name_part in (kernel.demangled_name or kernel.name):
            instances = sorted(kernel.instances(), key=lambda i: (
                -i.occurrences, -sum(c.changed_bytes for c in i.changes())))
            if instances:
                return instances[0].id
    raise LookupError(f"no recorded kernel named like {name_part!r} in {database}")


#: a register cap the hook below treats as "the driver refuses this launch"
REFUSED_REGISTERS = 254


def _refused_launch():
    """What the replay engine raises when cuLaunchKernel refuses a launch and the context
    survives (engine/session.py: a KernelFailedError of kind launch-refused)."""
    from mneme.replay.engine import KernelFailedError
    from mneme.runtime import DriverError

    error = DriverError("cuLaunchKernel failed: CUDA_ERROR_INVALID_VALUE (invalid argument)",
                        1, "CUDA_ERROR_INVALID_VALUE")
    raise KernelFailedError(f"the launch was refused: {error}", kind="launch-refused")


def _faulted_kernel():
    """What the replay engine raises when the kernel faulted (kind context-poisoned)."""
    from mneme.replay.engine import KernelFailedError

    raise KernelFailedError("the kernel failed on the device: cuStreamSynchronize failed: "
                            "CUDA_ERROR_ILLEGAL_ADDRESS (the GPU context is unusable now; "
                            "replay in a fresh process)")


def refuse_on_poison(settings) -> None:
    """Worker hook: the driver refuses the launch of a candidate with the refused register
    cap (as a launch configuration it cannot run), a candidate with the poison cap faults."""
    if settings.compile.max_registers == REFUSED_REGISTERS:
        _refused_launch()
    if settings.compile.max_registers == POISON_REGISTERS:
        _faulted_kernel()


#: seconds a faulted worker's clean-up takes under fault_with_slow_cleanup
SLOW_CLEANUP_SECONDS = 60.0


def fault_with_slow_cleanup(settings) -> None:
    """Worker hook: a candidate with the poison register cap faults (context-poisoned) in
    a worker whose session clean-up would then take SLOW_CLEANUP_SECONDS, as CUDA calls
    into a faulted context may: a worker that cleans up after such a fault lingers."""
    if settings.compile.max_registers == POISON_REGISTERS:
        from mneme.tune.workers import _worker as worker

        worker.SessionPool.close = lambda self: time.sleep(SLOW_CLEANUP_SECONDS)
        _faulted_kernel()


def recorded_on_gpu(tmp_path_factory, program: str, folder_name: str) -> tuple[Path, Path, Path]:
    """(database, executable, folder) of corpus ``program`` recorded on this machine's GPU
    (``-mr 2``) for a module of GPU tests; the module is skipped without a driver."""
    import pytest
    from mneme.runtime import driver_available
    from record.record_support import executable, mneme_record

    if not driver_available():
        pytest.skip("no GPU driver")
    folder = tmp_path_factory.mktemp(folder_name)
    exe = executable(program, folder)
    db = folder / f"{program}.rdb"
    run = mneme_record(db, exe, "-mr", "2")
    assert run.returncode == 0, run.stderr
    return db, exe, folder
