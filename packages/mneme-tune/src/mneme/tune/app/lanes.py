"""Kernels of one application tuned side by side, one GPU each.

With several GPUs, ``mneme tune --app`` keeps a worker pool per GPU (a lane) and gives
each kernel's round to the next free lane, largest amount first (longest-processing-time
order), so every GPU stays busy while kernels are left. A lane with no kernel left joins
a kernel still running (its study shared, app_tuning.py), so that one dominant kernel
still uses every GPU. With one GPU the kernels run in turn, in the order given, on the
caller's thread.
"""

from __future__ import annotations

import collections
import concurrent.futures
import threading
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, TypeVar

from ..search._tuner import make_executor
from ..workers._executor import ReplayExecutor, usable_cores

if TYPE_CHECKING:
    from ..search._tuner import Tuner

__all__ = ["make_lanes", "run_on_lanes"]

Job = TypeVar("Job")


def make_lanes(tuners: Sequence[Tuner], devices: Sequence[int] | None,
               compile_workers: int | None, workers_per_device: int) -> list[ReplayExecutor]:
    """One executor per GPU of ``devices`` (started together), or one for all when there
    is at most one GPU (or none: compile-only on the CPUs). The cores the GPU workers
    leave are shared out between the lanes' compile pools. ``tuners``: the kernels, the
    first of each lane's prepared ahead (its baseline ready when the lane starts)."""
    if devices is None or len(devices) < 2:
        return [make_executor(tuners[0])]
    if compile_workers is None:
        compile_workers = max(1, (usable_cores() - len(devices) * max(1, workers_per_device))
                              // len(devices))
    with concurrent.futures.ThreadPoolExecutor(len(devices), thread_name_prefix="mneme-lane") as pool:
        starts = [pool.submit(make_executor, tuners[n % len(tuners)], devices=[device],
                              compile_workers=compile_workers)
                  for n, device in enumerate(devices)]
        lanes, error = [], None
        for start in starts:
            try:
                lanes.append(start.result())
            except BaseException as caught:  # noqa: BLE001 - raised once every lane is known
                error = error or caught
    if error is not None:
        for lane in lanes:
            lane.shutdown(wait=False, cancel_futures=True)
        raise error
    return lanes


def run_on_lanes(jobs: Sequence[tuple[Job, float]], lanes: Sequence[ReplayExecutor],
                 work: Callable[[Job, float, ReplayExecutor], None],
                 join: Callable[[Job, ReplayExecutor], None] | None = None) -> None:
    """``work(job, amount, lane)`` for every job: in order on one lane; on several, each
    lane's thread takes the largest job left. A lane left without jobs while others still
    work calls ``join(job, lane)`` on a running job (the one with the fewest lanes on it,
    then the largest; each job once per lane), so that an application with fewer kernels
    than GPUs, or one kernel longer than the rest together, still keeps every GPU busy.
    The first error stops the lanes taking new jobs and is raised here once the running
    ones ended."""
    if len(lanes) == 1:
        for job, amount in jobs:
            work(job, amount, lanes[0])
        return
    queue = collections.deque(sorted(jobs, key=lambda pair: -pair[1]))
    lock = threading.Lock()
    errors: list[BaseException] = []
    running: dict[int, tuple[Job, float]] = {}  # id(job) -> (job, amount), while its lane works
    on_job: collections.Counter[int] = collections.Counter()  # lanes working on each job

    def next_step(joined: set[int]) -> tuple[str, Job, float] | None:
        if errors:
            return None
        if queue:
            job, amount = queue.popleft()
            running[id(job)] = (job, amount)
            on_job[id(job)] += 1
            return "work", job, amount
        if join is None:
            return None
        open_jobs = [pair for key, pair in running.items() if key not in joined]
        if not open_jobs:
            return None
        job, amount = min(open_jobs, key=lambda pair: (on_job[id(pair[0])], -pair[1]))
        joined.add(id(job))
        on_job[id(job)] += 1
        return "join", job, amount

    def lane_loop(lane: ReplayExecutor) -> None:
        joined: set[int] = set()
        while True:
            with lock:
                step = next_step(joined)
            if step is None:
                return
            what, job, amount = step
            try:
                if what == "work":
                    work(job, amount, lane)
                else:
                    join(job, lane)  # type: ignore[misc]
            except BaseException as error:  # noqa: BLE001 - raised on the caller's thread
                with lock:
                    errors.append(error)
                return
            finally:
                with lock:
                    on_job[id(job)] -= 1
                    if what == "work":
                        running.pop(id(job), None)

    threads = [threading.Thread(target=lane_loop, args=(lane,), name=f"mneme-lane-{n}", daemon=True)
               for n, lane in enumerate(lanes)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if errors:
        raise errors[0]
