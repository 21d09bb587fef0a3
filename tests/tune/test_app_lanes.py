"""The scheduler that runs an application's kernels side by side, one GPU each (lanes.py):
every job runs once, the largest first, on every lane at once; in order on one lane; the
first error stops the lanes taking more and reaches the caller."""

from __future__ import annotations

import threading
import time

import pytest
from mneme.tune.app.lanes import run_on_lanes


def test_one_lane_runs_in_the_given_order_on_the_callers_thread():
    seen = []
    run_on_lanes([("a", 1.0), ("b", 9.0), ("c", 5.0)], ["gpu0"],
                 lambda job, amount, lane: seen.append((job, lane, threading.current_thread())))
    assert [(job, lane) for job, lane, _ in seen] == [("a", "gpu0"), ("b", "gpu0"), ("c", "gpu0")]
    assert all(thread is threading.main_thread() for *_, thread in seen)


def test_lanes_take_the_largest_job_left_and_run_side_by_side():
    started: dict[str, tuple[str, float]] = {}
    both_running = threading.Barrier(2, timeout=10)
    lock = threading.Lock()

    def work(job, amount, lane):
        with lock:
            started[job] = (lane, time.monotonic())
        if job in ("big", "second"):  # the two largest start together, one per lane
            both_running.wait()
        time.sleep(amount / 100)

    jobs = [("small", 1.0), ("big", 20.0), ("mid", 5.0), ("second", 10.0)]
    run_on_lanes(jobs, ["gpu0", "gpu1"], work)
    assert set(started) == {"small", "big", "mid", "second"}
    assert {started["big"][0], started["second"][0]} == {"gpu0", "gpu1"}
    order = sorted(started, key=lambda job: started[job][1])
    assert order[:2] in (["big", "second"], ["second", "big"]) and order[2:] == ["mid", "small"]
    # "second" (10) ends before "big" (20): its lane takes both of the small ones
    assert started["mid"][0] == started["small"][0] == started["second"][0]


def test_a_lane_without_jobs_joins_the_one_still_running():
    """One kernel, two GPUs: the second lane joins it (once), and a lane that finished its
    own short job joins the long one; with nothing running a lane stops."""
    joined: list[tuple[str, str]] = []
    worked: list[tuple[str, str]] = []
    lock = threading.Lock()

    def work(job, amount, lane):
        with lock:
            worked.append((job, lane))
        time.sleep(amount / 100)

    def join(job, lane):
        with lock:
            joined.append((job, lane))
        time.sleep(0.02)

    run_on_lanes([("only", 20.0)], ["gpu0", "gpu1"], work, join)
    assert worked == [("only", "gpu0")] or worked == [("only", "gpu1")]
    assert joined == [("only", "gpu1" if worked[0][1] == "gpu0" else "gpu0")]  # once, by the other lane

    joined.clear(), worked.clear()
    run_on_lanes([("long", 30.0), ("short", 1.0)], ["gpu0", "gpu1"], work, join)
    assert {job for job, _ in worked} == {"long", "short"}
    long_lane = next(lane for job, lane in worked if job == "long")
    assert joined == [("long", next(lane for job, lane in worked if job == "short"))]
    assert long_lane != joined[0][1]


def test_the_first_error_stops_new_jobs_and_is_raised():
    ran = []

    def work(job, amount, lane):
        ran.append(job)
        if job == "bad":
            raise RuntimeError("lane failed")
        time.sleep(0.05)

    with pytest.raises(RuntimeError, match="lane failed"):
        run_on_lanes([("bad", 9.0), ("ok", 8.0)] + [(f"later{n}", 1.0) for n in range(20)],
                     ["gpu0", "gpu1"], work)
    assert "bad" in ran and len(ran) < 22


def test_a_worker_sees_its_gpu_first_and_the_others_behind_it():
    """Its GPU is its device 0; the others stay visible for instances that read another
    GPU's memory; under an inherited list (Slurm's) ordinals index that list."""
    from mneme.tune.workers import MAX_VISIBLE_GPUS, worker_visible_devices

    mine = worker_visible_devices(1, None).split(",")
    assert mine[:3] == ["1", "0", "2"] and len(mine) == MAX_VISIBLE_GPUS
    assert sorted(map(int, mine)) == list(range(MAX_VISIBLE_GPUS))
    assert worker_visible_devices(0, "") .split(",")[:2] == ["0", "1"]
    assert worker_visible_devices(1, "2,3") == "3,2"
    assert worker_visible_devices(0, "GPU-aa, GPU-bb") == "GPU-aa,GPU-bb"
    assert worker_visible_devices(3, "2,3") == "-1"  # not given to this task: no GPU at all


def test_a_joining_tuner_gets_a_seed_of_its_own():
    """A tuner that joins a kernel's round shares its study: with the round's seed, its
    sampler would propose what the kernel's own does (app_tuning.joining_options)."""
    from mneme.tune import TuneOptions
    from mneme.tune.app.app_tuning import joining_options

    goal = TuneOptions(trials=30, seed=7, devices=[0])
    seeds = [joining_options(goal, n).seed for n in range(3)]
    assert 7 not in seeds and len(set(seeds)) == 3
    helper = joining_options(goal, 0)
    assert (helper.probe, helper.confirm_runs, helper.trials) == (False, 0, 30)
    assert joining_options(TuneOptions(trials=30, devices=[0]), 0).seed is None  # (unseeded stays so)
