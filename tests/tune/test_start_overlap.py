"""A fast start (issue 23): the tuner's workers start while its study opens
(worker_start.py), the compile pool forks from the workers' server beside them, and what
the worker processes and the command import at start stays small (CPU, compile-only)."""

import os
import subprocess
import sys
import threading

import pytest
from mneme.tune import ReplayExecutor, StudyError, TuneOptions, Tuner, space
from mneme.tune.search import _tuner as tuner_module
from mneme.tune.workers import _worker_start as worker_start
from mneme.tune.workers._executor import _worker_context
from tune_support import GOLDEN, SAXPY, run_mneme


def _options(tmp_path, **kwargs) -> TuneOptions:
    return TuneOptions(**{"trials": 4, "devices": None, "cpu_workers": 1, "sampler": "random",
                          "seed": 1, "storage": f"sqlite:///{tmp_path / 's.sqlite3'}", **kwargs})


def test_the_workers_start_while_the_study_opens(tmp_path, monkeypatch):
    """Opening the storage waits for the workers to answer: that ends only when they start
    beside it (a tuner that started them after the study would wait the whole timeout)."""
    answered = threading.Event()
    real_start = ReplayExecutor._start_all

    def start_all(self, *args, **kwargs):
        real_start(self, *args, **kwargs)
        answered.set()

    real_open = tuner_module.open_storage
    seen_while_opening: list[bool] = []

    def open_storage(*args, **kwargs):
        seen_while_opening.append(answered.wait(60))
        return real_open(*args, **kwargs)

    monkeypatch.setattr(ReplayExecutor, "_start_all", start_all)
    monkeypatch.setattr(tuner_module, "open_storage", open_storage)
    tuner = Tuner(GOLDEN, [SAXPY], "pipeline", _options(tmp_path), start_workers=True)
    assert seen_while_opening == [True]
    outcome = tuner.run()  # on the workers started with it
    assert outcome.ran == 4 and outcome.best
    assert outcome.phases["workers"] < outcome.phases["study"]  # (ready before run() began)


def test_workers_started_for_a_run_that_never_comes_are_stopped(tmp_path, monkeypatch):
    made: list[ReplayExecutor] = []
    stopped: list[ReplayExecutor] = []

    class Recorded(ReplayExecutor):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            made.append(self)

        def shutdown(self, *args, **kwargs):
            stopped.append(self)
            super().shutdown(*args, **kwargs)

    monkeypatch.setattr(worker_start, "ReplayExecutor", Recorded)
    Tuner(GOLDEN, [SAXPY], "pipeline", _options(tmp_path, study="one"))  # (no workers)
    assert made == []
    # The same study name with another space: refused once the study is read, after the
    # workers were started: they are stopped, not left running.
    with pytest.raises(StudyError, match="another search space"):
        Tuner(GOLDEN, [SAXPY], "bounds", _options(tmp_path, study="one"), start_workers=True)
    assert len(made) == 1 and stopped == made
    # And one built but not run is stopped by close().
    tuner = Tuner(GOLDEN, [SAXPY], "pipeline", _options(tmp_path, study="one"), start_workers=True)
    tuner.close()
    assert len(made) == 2 and stopped == made


def test_the_compile_pool_forks_from_the_workers_server_at_start():
    with ReplayExecutor(GOLDEN, instance=SAXPY, cpu_workers=1, compile_workers=2) as pool:
        compile_pool = pool._compile_pool
        # Started with the workers, not at the first compile, and forked (not spawned).
        assert len(compile_pool._processes) >= 1
        assert compile_pool._mp_context.get_start_method() == _worker_context().get_start_method()
        from mneme.replay.engine import ReplayConfig, ReplaySettings
        from mneme.replay.jit import CompileConfig

        result = pool.submit(ReplaySettings(CompileConfig(), ReplayConfig(compile_only=True))).result(120)
        assert result.registers > 0


#: what a worker process (the fork server's preload) and the tune command import
IMPORTS = """
import sys
import mneme.tune.workers._worker
light = not any(m == "optuna" or m.startswith("mneme.tune.workers._executor") for m in sys.modules)
import mneme.tune.tune_command
print(light, any("app_confirm" in m or "apply_command" in m for m in sys.modules))
"""


def test_the_worker_server_and_the_command_import_only_what_they_need():
    run = subprocess.run([sys.executable, "-c", IMPORTS], capture_output=True, text=True,
                         timeout=120, env=os.environ.copy())
    assert run.returncode == 0, run.stderr
    # The worker's modules without Optuna nor the pool; the command without --confirm-in-app's.
    assert run.stdout.split() == ["True", "False"], run.stdout
    # The package's names are there all the same (imported when used).
    import mneme.tune as package

    assert callable(space) and space.__module__ == "mneme.tune.space.base"
    assert package.Tuner is Tuner and set(package.__all__) <= set(dir(package))


def test_a_command_refused_after_the_first_tuner_started_its_workers_exits_at_once(tmp_path):
    """Workers start with the first tuner; a refusal after it (an unwritable report
    folder) stops them: one line, no trial."""
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    run = run_mneme("tune", "-rdb", GOLDEN, "--compile-only", "--trials", "3",
                    "--storage", f"sqlite:///{tmp_path / 't.db'}", "--report", blocker / "report",
                    timeout=300)
    assert run.returncode == 2 and "cannot write the report" in run.stderr, run.stderr
    assert "Traceback" not in run.stderr and "trials this run" not in run.stdout


def test_the_slot_workers_prepare_the_baseline_before_its_task_comes():
    """prepare_baseline (worker_start.py, on a GPU while the study opens): the recorded
    configuration is compiled (and on a GPU restored and loaded) before its task, which
    finds its code compiled and is not sent the instance again."""
    from mneme.replay.engine import ReplayConfig, ReplaySettings
    from mneme.replay.jit import CompileConfig
    from mneme.tune.workers import instance_key

    settings = ReplaySettings(CompileConfig(pipeline="default<O2>"), ReplayConfig(iterations=1))
    with ReplayExecutor(GOLDEN, cpu_workers=1) as pool:
        worker_start.prepare_baseline(pool, [(SAXPY, settings)])
        key = instance_key(pool._resolve(SAXPY))
        assert all(key in w.known for w in pool._workers)
        result = pool.submit(settings, SAXPY).result(timeout=120)
        assert result.compile_cached is True
        other = pool.submit(ReplaySettings(CompileConfig(pipeline="default<O1>"),
                                           ReplayConfig(iterations=1)), SAXPY).result(timeout=120)
        assert other.compile_cached is False  # (what an unprepared configuration gets)


def test_a_fresh_study_opens_beside_the_baseline(tmp_path, monkeypatch):
    """defer_study (study_open.py): a study surely not in its storage opens on a thread,
    and the baseline is submitted before it is joined: opening the storage waits for the
    baseline's submission, which comes only if the two overlap."""
    from mneme.tune.search import _baseline as baseline_module

    submitted = threading.Event()
    real_submit = baseline_module.submit_baseline

    def submit_baseline(*args, **kwargs):
        submitted.set()
        return real_submit(*args, **kwargs)

    real_open = tuner_module.open_storage
    seen_while_opening: list[bool] = []

    def open_storage(*args, **kwargs):
        seen_while_opening.append(submitted.wait(60))
        return real_open(*args, **kwargs)

    monkeypatch.setattr(tuner_module, "submit_baseline", submit_baseline)
    monkeypatch.setattr(tuner_module, "open_storage", open_storage)
    tuner = Tuner(GOLDEN, [SAXPY], "pipeline", _options(tmp_path), start_workers=True,
                  defer_study=True)
    assert not hasattr(tuner, "study")  # (built without waiting for the storage)
    outcome = tuner.run()
    assert seen_while_opening == [True]
    assert outcome.ran == 4 and outcome.best and "values" in outcome.baseline
    assert tuner.study.user_attrs["mneme.baseline"] == outcome.baseline  # (stored as before)


def test_a_resumed_study_opens_first_and_its_baseline_is_not_measured_again(tmp_path, monkeypatch):
    first = Tuner(GOLDEN, [SAXPY], "pipeline", _options(tmp_path), defer_study=True).run()
    from mneme.tune.search import _baseline as baseline_module

    submits: list[int] = []

    def no_submit(*args, **kwargs):
        submits.append(1)
        return []

    monkeypatch.setattr(tuner_module, "submit_baseline", no_submit)
    monkeypatch.setattr(baseline_module, "submit_baseline", no_submit)
    tuner = Tuner(GOLDEN, [SAXPY], "pipeline", _options(tmp_path, trials=6), defer_study=True)
    assert tuner._study_opening is None and tuner.study is not None  # (it exists: opened here)
    again = tuner.run()
    assert submits == [] and again.baseline == first.baseline
    assert again.ran == 2 and not any(k.startswith("baseline.") for k in again.phases)


def test_only_a_study_surely_not_in_a_writable_local_storage_is_fresh(tmp_path):
    from mneme.tune.study._study_open import fresh_study

    file = tmp_path / "s.sqlite3"
    assert fresh_study(f"sqlite:///{file}", None, "a")  # (no file yet)
    assert fresh_study(None, tmp_path, "a") and fresh_study("sqlite:///:memory:", None, "a")
    assert fresh_study(f"journal:{tmp_path / 'j.log'}", None, "a")
    assert not fresh_study(f"sqlite:///{tmp_path / 'no' / 's.sqlite3'}", None, "a")  # (no folder)
    assert not fresh_study("postgresql://u@localhost/db", None, "a")  # (a server: unsure)
    Tuner(GOLDEN, [SAXPY], "pipeline", _options(tmp_path, study="a"))
    assert not fresh_study(f"sqlite:///{file}", None, "a") and fresh_study(f"sqlite:///{file}", None, "b")
    (tmp_path / "j.log").write_text("")
    assert not fresh_study(f"journal:{tmp_path / 'j.log'}", None, "a")  # (it exists: unsure)
    (tmp_path / "bad.sqlite3").write_text("not a database")
    assert not fresh_study(f"sqlite:///{tmp_path / 'bad.sqlite3'}", None, "a")


def test_the_help_and_a_deferred_tuner_import_no_sqlalchemy_on_the_commands_thread():
    """SQLAlchemy (0.3-1 s of imports) is the study's: `mneme tune --help` never imports it,
    and a tuner of a fresh study is built without it (its thread imports it)."""
    code = """
import sys, tempfile, threading
from mneme.cli.main import cli
try:
    cli.main(args=["tune", "--help"], standalone_mode=False)
except SystemExit:
    pass
print("help", "sqlalchemy" in sys.modules)
from mneme.tune import Tuner, TuneOptions
from mneme.tune.search import _tuner
gate = threading.Event()
real = _tuner.open_storage
def gated(*args, **kwargs):
    gate.wait(60)
    return real(*args, **kwargs)
_tuner.open_storage = gated
folder = tempfile.mkdtemp()
tuner = Tuner(sys.argv[1], [sys.argv[2]], "pipeline", TuneOptions(trials=1, devices=None,
              storage=f"sqlite:///{folder}/s.sqlite3"), defer_study=True)
print("built", "sqlalchemy" in sys.modules)
gate.set()
tuner._join_study()
print("joined", "sqlalchemy" in sys.modules)
"""
    run = subprocess.run([sys.executable, "-c", code, str(GOLDEN), SAXPY], capture_output=True,
                         text=True, timeout=300, env=os.environ.copy())
    assert run.returncode == 0, run.stderr
    said = [line for line in run.stdout.splitlines() if line.startswith(("help ", "built ", "joined "))]
    assert said == ["help False", "built False", "joined True"], run.stdout


def _tune_here(folder, trials: int, *options: str) -> subprocess.CompletedProcess:
    """`mneme tune` of saxpy (compile-only) run in ``folder``, its imports on stderr."""
    return subprocess.run([sys.executable, "-X", "importtime", "-m", "mneme.cli", "tune", "-rdb",
                           str(GOLDEN), "-rid", SAXPY, "--compile-only", "--trials", str(trials),
                           "--space", "pipeline", "--seed", "1", *options],
                          cwd=folder, capture_output=True, text=True, timeout=300)


def test_the_default_storage_is_a_journal_file_no_process_of_the_run_imports_sqlalchemy(tmp_path):
    """The default storage (study.default_storage_url) opens without SQLAlchemy and
    Optuna's table models, the imports that were most of a short tuning's wait before
    its search; the same command again resumes the study."""
    first = _tune_here(tmp_path, 2)
    assert first.returncode == 0, first.stderr[-2000:]
    assert (tmp_path / "mneme-tune.journal").is_file()
    assert [line for line in first.stderr.splitlines() if "sqlalchemy" in line] == []
    again = _tune_here(tmp_path, 3)
    assert again.returncode == 0, again.stderr[-2000:]
    assert "holds 3 finished trials" in again.stdout, again.stdout


def test_a_folder_that_holds_only_the_earlier_sqlite_default_resumes_it(tmp_path):
    from mneme.tune.study import default_storage_url

    sqlite = tmp_path / "mneme-tune.sqlite3"
    first = _tune_here(tmp_path, 2, "--storage", f"sqlite:///{sqlite}")
    assert first.returncode == 0, first.stderr[-2000:]
    assert default_storage_url(tmp_path) == f"sqlite:///{sqlite}"
    again = _tune_here(tmp_path, 3)  # (no --storage: the SQLite file's study goes on)
    assert again.returncode == 0, again.stderr[-2000:]
    assert "holds 3 finished trials" in again.stdout and not (tmp_path / "mneme-tune.journal").exists()
    (tmp_path / "mneme-tune.journal").touch()  # a journal beside it is the default again
    assert default_storage_url(tmp_path) == f"journal:{tmp_path / 'mneme-tune.journal'}"


GPU_START_ORDER = """
import sys
import mneme.tune._gpu_start as gpu_start

real = gpu_start.start_gpu_driver

def spy(nvml, workers=None):
    print("before-engine", "mneme.tune._tune_run" not in sys.modules and "optuna" not in sys.modules,
          "nvml", nvml, "workers", workers, flush=True)
    thread = real(nvml, workers)
    thread.join(60)
    print("thread-ended", not thread.is_alive(), flush=True)
    return thread

gpu_start.start_gpu_driver = spy
from mneme.cli.main import main
main(sys.argv[1:])
"""


@pytest.mark.parametrize("options, expected", [
    ((), ["before-engine True nvml True workers [0]", "thread-ended True"]),
    (("--clock-control", "none", "--workers-per-device", "2"),
     ["before-engine True nvml False workers [0, 0]", "thread-ended True"]),
    (("--compile-only",), []),
], ids=["gpu", "unlocked", "compile-only"])
def test_the_gpu_driver_starts_before_the_commands_imports(tmp_path, options, expected):
    """The driver's start (cuInit, NVML's init: 0.1-0.3 s, the GIL released) and then the
    GPU workers' (early_workers.py) are begun on a thread before the command imports the
    engine and Optuna, so that they overlap; a compile-only run starts no driver. Without a
    GPU the thread ends having found none, starts no worker, and the command says so
    itself, as before."""
    run = subprocess.run([sys.executable, "-c", GPU_START_ORDER, "tune", "-rdb", str(GOLDEN), "-rid", SAXPY,
                          "--trials", "2", "--storage", f"sqlite:///{tmp_path / 's.sqlite3'}", *options],
                         capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    assert [line for line in run.stdout.splitlines() if line.startswith(("before-engine", "thread-ended"))] \
        == expected, run.stdout
    assert "Traceback" not in run.stderr


def test_workers_started_before_the_executor_are_adopted_not_started_again():
    """`mneme tune` starts its GPU workers before its executor exists (early_workers.py);
    the executor takes them, with their cache folder, and replays on them. Here with a CPU
    worker: the same processes, the same hand-over."""
    from mneme.tune.workers import _early_workers

    early = _early_workers.begin([None])
    early.start()
    pids = [worker.process.pid for worker in early.workers]
    assert len(pids) == 1
    with ReplayExecutor(GOLDEN, instance=SAXPY, cpu_workers=1, compile_workers=0) as pool:
        assert [worker.process.pid for worker in pool._workers] == pids
        assert pool.cache_dir == early.cache.name
        assert pool.submit(_compile_only()).result(timeout=120).binary_size > 0
    assert not os.path.exists(early.cache.name)  # (the executor's own, removed at its end)


def test_workers_started_for_other_slots_are_stopped_and_the_executor_starts_its_own():
    from mneme.tune.workers import _early_workers

    early = _early_workers.begin([None, None])
    early.start()
    processes = [worker.process for worker in early.workers]
    with ReplayExecutor(GOLDEN, instance=SAXPY, cpu_workers=1, compile_workers=0) as pool:
        assert all(p.pid not in {w.process.pid for w in pool._workers} for p in processes)
        for process in processes:
            process.join(30)
            assert not process.is_alive()
        assert pool.submit(_compile_only()).result(timeout=120).binary_size > 0
    assert _early_workers.take([None]) is None  # (taken once)


def _compile_only():
    from mneme.replay.engine import ReplayConfig, ReplaySettings
    from mneme.replay.jit import CompileConfig

    return ReplaySettings(CompileConfig.for_level("O3"), ReplayConfig(compile_only=True))
