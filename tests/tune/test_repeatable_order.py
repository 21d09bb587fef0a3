"""A seeded `mneme tune` proposes the same trials in the same order in every fresh process
(search/_trial_order.py): two compile-only runs with one --seed, several CPU workers and
trials that compile in different times hold the same study."""

import json

import optuna
from tune_support import GOLDEN, SAXPY, run_mneme

ARGS = ["tune", "-rdb", GOLDEN, "-rid", SAXPY, "--compile-only", "--cpu-workers", "4",
        "--trials", "40", "--space", "pipeline,bounds", "--seed", "5"]


def _trials(storage: str) -> list[tuple]:
    (name,) = optuna.get_all_study_names(storage)
    study = optuna.load_study(study_name=name, storage=storage)
    return [(t.number, t.state.name, json.dumps(t.params, sort_keys=True), t.values)
            for t in study.get_trials(deepcopy=False)]


def test_a_seeded_search_is_the_same_in_every_fresh_process(tmp_path):
    runs = []
    for n in range(2):
        storage = f"sqlite:///{tmp_path / f'run{n}.sqlite3'}"
        run = run_mneme(*ARGS, "--storage", storage)
        assert run.returncode == 0, run.stderr
        runs.append(_trials(storage))
    first, second = runs
    assert len(first) >= 40
    differ = [(a, b) for a, b in zip(first, second, strict=False) if a != b]
    assert len(first) == len(second) and not differ, \
        f"{len(differ)} of {len(first)} trials differ; the first: {differ[:3]}"


def test_a_repeatable_order_tells_the_oldest_trial_alone_and_only_once_finished():
    from concurrent.futures import Future

    from mneme.tune.search._trial_order import TrialOrder

    def done(value=None) -> Future:
        future: Future = Future()
        future.set_result(value)
        return future

    for repeatable in (True, False):
        order = TrialOrder(repeatable)
        oldest, later = Future(), done()
        order.submitted(3, [oldest, done()])
        order.submitted(4, [later])
        order.submitted(5, [done()])
        order.wait(timeout=0.01)
        # The later trials finished first: in repeatable order they wait for trial 3.
        assert order.finished() == ([] if repeatable else [4, 5])
        oldest.set_result(None)
        order.wait(timeout=0.01)
        assert order.finished() == ([3] if repeatable else [3, 4, 5])
        order.take(3)
        assert order.finished() == ([4] if repeatable else [4, 5])
        order.take(4)
        order.submitted(4, [Future()])  # measured again in full (screened): it keeps its place
        assert order.finished() == ([] if repeatable else [5])
