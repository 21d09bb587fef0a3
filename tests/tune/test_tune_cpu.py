"""`mneme tune` end to end without a GPU: compile-only objectives, reports, resume after
SIGKILL, crash isolation, several processes on one study, and bad input."""

import csv
import json
import re
import signal
import time

import optuna
from mneme.replay.engine import ReplaySettings
from mneme.tune import TuneOptions, Tuner
from mneme.tune.search import TRIAL_ATTR
from mneme.tune.study import open_storage
from optuna.trial import TrialState
from tune_support import (
    GOLDEN,
    POISON_REGISTERS,
    REFUSED_REGISTERS,
    SAXPY,
    abort_on_poison,
    mneme_process,
    one_line_error,
    refuse_on_poison,
    run_mneme,
    trials_by_state,
)


def test_compile_only_tuning_end_to_end(tmp_path):
    storage = f"sqlite:///{tmp_path / 'tune.sqlite3'}"
    report = tmp_path / "report"
    run = run_mneme("tune", "-rdb", GOLDEN, "-rid", SAXPY, "--compile-only", "--trials", "25",
                    "--space", "pipeline,bounds,codegen", "--objective", "registers,binary_size",
                    "--storage", storage, "--seed", "3", "--report", report, "--plots", "wait")
    assert run.returncode == 0, run.stderr
    assert "best configurations" in run.stdout and "25 trials this run" in run.stdout
    summary = json.loads((report / "summary.json").read_text())
    assert summary["trials"] == 25
    assert summary["objectives"] == [{"name": "registers", "unit": "registers"},
                                     {"name": "binary_size", "unit": "bytes"}]
    # Every metric under its one name (as in ReplayResult and docs/replay.md)
    assert set(summary["best"][0]["metrics"]) == {"registers", "spills", "binary_size",
                                                  "compile_time"}
    assert summary["baseline"]["values"][0] > 0
    with open(report / "trials.csv") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 25 and {"value_registers", "value_binary_size", "opt_level", "max_registers", "registers",
                              "binary_size", "spills", "compile_time"} <= set(rows[0])
    # Trial 0 is the recorded configuration: default<O3>, no caps.
    assert rows[0]["opt_level"] == "O3" and rows[0]["max_registers"] == "0"
    # Several objectives: the Pareto front is the best list, nothing dominated in it.
    front = [(b["values"][0], b["values"][1]) for b in summary["best"]]
    for a in front:
        assert not any(b[0] <= a[0] and b[1] <= a[1] and b != a for b in front)
    for name in ("pareto", "importance", "parallel", "times"):
        assert (report / f"{name}.png").stat().st_size > 1000
        assert "plotly" in (report / f"{name}.html").read_text()[:100000]
    # The best configuration replays through `mneme replay --config`.
    best = ReplaySettings.from_json((report / "best.json").read_text())
    replay = run_mneme("replay", "-rdb", GOLDEN, "-rid", SAXPY, "--config", report / "best.json",
                       "--compile-only", "--json")
    assert replay.returncode == 0, replay.stderr
    assert json.loads(replay.stdout)["configuration"]["compile"]["pipeline"] == best.compile.pipeline
    # Running again with the same budget resumes the study: nothing left to run (the
    # earlier spellings regs and size name the same objectives, hence the same study).
    again = run_mneme("tune", "-rdb", GOLDEN, "-rid", SAXPY, "--compile-only", "--trials", "25",
                      "--space", "pipeline,bounds,codegen", "--objective", "regs,size",
                      "--storage", storage)
    assert again.returncode == 0 and "0 trials this run" in again.stdout


def test_single_objective_best_is_minimal(tmp_path):
    options = TuneOptions(trials=15, devices=None, cpu_workers=2, sampler="random", seed=1,
                          storage=f"sqlite:///{tmp_path / 's.db'}")
    outcome = Tuner(GOLDEN, [SAXPY], "pipeline,bounds", options).run()
    complete = [t for t in outcome.trials if t.state == "complete"]
    assert len(outcome.trials) == 15
    assert outcome.best[0].values[0] == min(t.values[0] for t in complete)
    assert outcome.baseline["metrics"]["registers"] > 0


def test_the_tuner_takes_instance_objects_and_looks_nothing_up_again(tmp_path):
    """As `mneme tune` passes them: resolved once; the tuner, the executor and every
    worker use the objects (the metadata on disk is gone, the run still completes)."""
    import shutil

    from mneme.replay.db import Database

    copy = tmp_path / "golden.rdb"
    shutil.copytree(GOLDEN, copy)
    db = Database.open(copy)
    instance = db.instance(SAXPY)
    options = TuneOptions(trials=4, devices=None, cpu_workers=2, sampler="grid",
                          storage=f"sqlite:///{tmp_path / 's.db'}")
    tuner = Tuner(db, [instance], "pipeline", options)
    (instance.kernel.path / "zarr.json").unlink()
    (instance.path / "zarr.json").unlink()
    outcome = tuner.run()
    assert [t.state for t in outcome.trials] == ["complete"] * 4
    assert outcome.identity["instance"] == SAXPY and outcome.baseline["metrics"]["registers"] > 0


def test_a_crashing_candidate_fails_its_trial_and_the_run_goes_on(tmp_path):
    options = TuneOptions(trials=30, devices=None, cpu_workers=2, sampler="random", seed=5,
                          storage=f"sqlite:///{tmp_path / 's.db'}", before_run=abort_on_poison)
    outcome = Tuner(GOLDEN, [SAXPY], "bounds", options).run()
    poisoned = [t for t in outcome.trials if t.params["max_registers"] == POISON_REGISTERS]
    others = [t for t in outcome.trials if t.params["max_registers"] != POISON_REGISTERS]
    assert poisoned, "the seed must sample the poison cap at least once"
    # A repeated point reuses its measurement, so only first visits ran and crashed.
    assert all(t.state == "failed" and t.failure == "crashed" and "SIGABRT" in t.reason
               for t in poisoned)
    assert all(t.state == "complete" for t in others) and len(outcome.trials) == 30


def _finished(storage, study):
    try:
        states = trials_by_state(storage, study)
    except KeyError:
        return 0
    return len(states.get(TrialState.COMPLETE, [])) + len(states.get(TrialState.FAIL, []))


def test_a_failing_recorded_configuration_is_said_to_be_the_recordings_problem(tmp_path):
    from mneme.tune.search import baseline_failure_line
    from tune_support import fail_the_recorded_configuration

    options = TuneOptions(trials=4, cpu_workers=1, seed=1, sampler="random",
                          storage=f"sqlite:///{tmp_path / 's.db'}",
                          before_run=fail_the_recorded_configuration)
    outcome = Tuner(GOLDEN, [SAXPY], "pipeline", options).run()
    assert outcome.baseline["failure"] == "error"
    line = baseline_failure_line(outcome.baseline)
    assert line.startswith("baseline failed: error: ") and "stand-in for a recording" in line
    assert "a problem of the recording" in line and "mneme check" in line


def test_resume_after_sigkill_loses_and_duplicates_nothing(tmp_path):
    url = f"sqlite:///{tmp_path / 'resume.db'}"
    args = ["tune", "-rdb", GOLDEN, "-rid", SAXPY, "--compile-only", "--trials", "60",
            "--space", "pipeline,bounds,codegen", "--study", "resume", "--storage", url,
            "--sampler", "random", "--seed", "7"]
    storage = open_storage(url)
    tuner = mneme_process(*args)
    deadline = time.monotonic() + 300
    while _finished(storage, "resume") < 12:
        assert tuner.poll() is None, tuner.communicate()
        assert time.monotonic() < deadline
        time.sleep(0.2)
    tuner.send_signal(signal.SIGKILL)
    tuner.wait()
    before = trials_by_state(storage, "resume")
    done_before = {t.number: t.values for t in before.get(TrialState.COMPLETE, [])}
    # The study lives in memory while it runs (MirroredStorage): the storage holds finished
    # trials only, each written whole, so a kill leaves nothing half-written or running.
    assert not before.get(TrialState.RUNNING), "only finished trials reach the storage"

    resumed = run_mneme(*args)
    assert resumed.returncode == 0, resumed.stderr
    after = optuna.load_study(study_name="resume", storage=storage).get_trials(deepcopy=False)
    by_number = {t.number: t for t in after}
    # No completed trial was lost or changed, and the budget counts each trial once.
    for number, values in done_before.items():
        assert by_number[number].state == TrialState.COMPLETE and by_number[number].values == values
    counted = [t for t in after if t.state in (TrialState.COMPLETE, TrialState.FAIL)]
    assert len(counted) == 60
    assert not [t for t in after if t.state == TrialState.RUNNING]
    assert len({t.number for t in after}) == len(after)
    # the resumed tuner's sampler started from what the killed one had finished
    assert all(t.params for t in counted)


def test_a_study_interrupted_by_an_older_tuner_is_recovered(tmp_path):
    """Trials a tuner that wrote the storage directly left RUNNING (or one whose process
    died between ask and tell) are failed as interrupted, and their points run again."""
    url = f"sqlite:///{tmp_path / 'old.db'}"
    args = ["tune", "-rdb", GOLDEN, "-rid", SAXPY, "--compile-only", "--space", "pipeline",
            "--study", "old", "--storage", url, "--sampler", "random"]
    assert run_mneme(*args, "--trials", "2").returncode == 0
    storage = open_storage(url)
    left = optuna.load_study(study_name="old", storage=storage).ask()  # never finished
    resumed = run_mneme(*args, "--trials", "6")
    assert resumed.returncode == 0, resumed.stderr
    after = optuna.load_study(study_name="old", storage=storage).get_trials(deepcopy=False)
    interrupted = [t for t in after if t.user_attrs.get(TRIAL_ATTR, {}).get("failure") == "interrupted"]
    assert [t.number for t in interrupted] == [left.number]
    assert not [t for t in after if t.state == TrialState.RUNNING]


def test_several_processes_share_one_journal_study(tmp_path):
    journal = tmp_path / "shared.log"
    # 3 tuners of 4 workers keep up to 3 * (2 * 4 + 2) = 30 trials in flight: more than the
    # budget of 24, so their first claims must see each other's.
    args = ["tune", "-rdb", GOLDEN, "-rid", SAXPY, "--compile-only", "--trials", "24",
            "--space", "pipeline,bounds,codegen", "--study", "shared",
            "--storage", f"journal:{journal}", "--sampler", "random", "--cpu-workers", "4"]
    tuners = [mneme_process(*args, "--seed", str(seed)) for seed in (1, 2, 3)]
    outputs = [t.communicate(timeout=600) for t in tuners]
    assert all(t.returncode == 0 for t in tuners), outputs
    storage = open_storage(f"journal:{journal}")
    trials = optuna.load_study(study_name="shared", storage=storage).get_trials(deepcopy=False)
    finished = [t for t in trials if t.state in (TrialState.COMPLETE, TrialState.FAIL)]
    # Each tuner launches only trials it claimed from the shared budget (study.claim, one
    # atomic step among the tuners): together they run it exactly.
    assert len(finished) == 24
    # Every process worked on the one study: the trials it says it ran are its own there,
    # and the last to look saw everyone's (a tuner that starts after the others spent the
    # budget rightly runs none, so how many ran some depends on the machine's timing).
    held = []
    for tuner, (out, _) in zip(tuners, outputs, strict=True):
        line = " ".join(out.split())  # as printed, wrapped to the console's width
        ran, seen = re.search(r"(\d+) trials this run: .*? holds (\d+) finished trials", line).groups()
        owned = [t for t in finished if t.user_attrs["mneme"]["owner"].endswith(f":{tuner.pid}")]
        assert int(ran) == len(owned), out
        held.append(int(seen))
    assert max(held) == len(finished)
    assert len({t.number for t in trials}) == len(trials)



def tune(*args, tmp_path):
    return run_mneme("tune", "-rdb", GOLDEN, "-rid", SAXPY, "--compile-only", "--trials", "3",
                     "--storage", f"sqlite:///{tmp_path / 'bad.db'}", *args)


def test_bad_input_is_one_line(tmp_path):
    one_line_error(tune("--space", "warp", tmp_path=tmp_path), "unknown space 'warp'")
    one_line_error(tune("--space", ",", tmp_path=tmp_path), "search space is empty")
    never = tmp_path / "never.py"
    never.write_text(
        "from mneme.tune import Categorical, Constraint, space\n"
        "@space(Categorical('x', (1, 2)), constraints=[Constraint('x above 5', lambda p: p['x'] > 5)])\n"
        "def never(params, settings, ctx):\n    return settings\n"
    )
    one_line_error(tune("--space", f"{never}:never", tmp_path=tmp_path), "rule out every point",
                   "x above 5")
    one_line_error(tune("--storage", "sqlite:////no/such/folder/t.db", tmp_path=tmp_path),
                   "does not exist")
    one_line_error(tune("--storage", "postgresql://mneme@127.0.0.1:9/none", tmp_path=tmp_path),
                   "postgresql://mneme@127.0.0.1:9/none")
    one_line_error(tune("--objective", "time", tmp_path=tmp_path), "needs a GPU")
    one_line_error(tune("--objective", "speed", tmp_path=tmp_path), "unknown objective")
    one_line_error(run_mneme("tune", "-rdb", GOLDEN, "-rid", SAXPY, "--devices", "7", "--trials", "3"),
                   "--devices")
    one_line_error(run_mneme("tune", "-rdb", GOLDEN, "-rid", "nope", "--compile-only"), "nope")
    # A study name that exists with another space.
    first = tune("--space", "pipeline", "--study", "s1", tmp_path=tmp_path)
    assert first.returncode == 0, first.stderr
    one_line_error(tune("--space", "bounds", "--study", "s1", tmp_path=tmp_path),
                   "exists with another search space")


def test_grid_sampler_walks_every_feasible_point_once(tmp_path):
    options = TuneOptions(trials=500, devices=None, cpu_workers=2, sampler="grid",
                          storage=f"sqlite:///{tmp_path / 'g.db'}")
    tuner = Tuner(GOLDEN, [SAXPY], "pipeline", options)
    outcome = tuner.run()
    points = [tuple(sorted(t.params.items())) for t in outcome.trials]
    assert len(points) == len(set(points)) == tuner.bound[0].feasible_count() == 30
    first = min(outcome.trials, key=lambda t: t.number)
    assert first.params == {"opt_level": "O3", "passes": ""}  # the recorded configuration


def test_a_user_space_that_raises_fails_its_trials_only(tmp_path):
    from mneme.tune import Categorical, settings_with, space

    @space(Categorical("level", ("O1", "O2", "O3")), name="fragile")
    def fragile(params, settings, ctx):
        if params["level"] == "O2":
            raise ZeroDivisionError("a bug in the user's space")
        return settings_with(settings, compile={"pipeline": f"default<{params['level']}>"})

    options = TuneOptions(trials=3, devices=None, cpu_workers=1, sampler="grid",
                          storage=f"sqlite:///{tmp_path / 'f.db'}")
    outcome = Tuner(GOLDEN, [SAXPY], [fragile], options).run()
    by_level = {t.params["level"]: t for t in outcome.trials}
    assert by_level["O2"].state == "failed" and "ZeroDivisionError" in by_level["O2"].reason
    assert by_level["O1"].state == by_level["O3"].state == "complete"


def test_a_recorded_launch_outside_the_space_is_no_trial(tmp_path):
    from mneme.tune import BoundSpace, SpaceContext, resolve_spaces

    odd = SpaceContext(grid=(10, 10, 1), block=(24, 8, 1))  # 24 is no power of two
    bound = BoundSpace(resolve_spaces("launch"), odd)
    assert bound.baseline() is None
    assert BoundSpace(resolve_spaces("pipeline"), odd).baseline() == {"opt_level": "O3", "passes": ""}


def _variants(refused: bool):
    """Pipeline levels times a variant: variant 1 is a launch the driver refuses (through
    the refuse_on_poison hook) or, with ``refused`` False, a register cap that compiles."""
    from mneme.tune import Categorical, settings_with, space

    cap = REFUSED_REGISTERS if refused else REFUSED_REGISTERS - 1

    @space(Categorical("level", ("O0", "O1", "O2", "O3", "Os", "Oz")),
           Categorical("variant", (0, 1, 2, 3)), name="variants")
    def variants(params, settings, ctx):
        registers = cap if params["variant"] % 2 else 100 + params["variant"]
        return settings_with(settings, compile={"pipeline": f"default<{params['level']}>",
                                                "max_registers": registers})
    return variants


def test_failing_points_keep_the_rate(tmp_path):
    """About half the points are refused launches: they cost no worker restart, and the
    run keeps at least half the rate of a space where none fail."""
    rates = {}
    for refused in (False, True):
        options = TuneOptions(trials=40, devices=None, cpu_workers=2, sampler="random", seed=3,
                              storage=f"sqlite:///{tmp_path / f'{refused}.db'}",
                              before_run=refuse_on_poison, reuse_repeats=False)
        outcome = Tuner(GOLDEN, [SAXPY], [_variants(refused)], options).run()
        assert len(outcome.trials) == 40 and outcome.restarts == 0
        failed = [t for t in outcome.trials if t.state == "failed"]
        if refused:
            assert 10 <= len(failed) <= 30
            assert all(t.failure == "launch-refused" and "refused" in t.reason for t in failed)
        else:
            assert not failed
        rates[refused] = outcome.trials_per_second
    assert rates[True] >= 0.5 * rates[False], rates


def test_unwritable_report_folder_is_refused_before_the_search(tmp_path):
    """One line and a non-zero exit before any trial runs (not after the whole search)."""
    import subprocess
    import sys

    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    result = subprocess.run(
        [sys.executable, "-m", "mneme.cli", "tune", "-rdb", str(GOLDEN), "-rid", SAXPY,
         "--compile-only", "--trials", "3", "--storage", f"sqlite:///{tmp_path / 't.db'}",
         "--report", str(blocker / "report")],
        capture_output=True, text=True, timeout=300)
    assert result.returncode != 0 and "Traceback" not in result.stderr, result.stderr
    assert "cannot write the report" in result.stderr
    assert "trials this run" not in result.stdout
