"""The tuner's worker pool, started while the study opens (its fork server earlier still:
executor.py's start_worker_server).

Starting the ReplayExecutor is mostly waiting on other processes: the fork server
importing the replay engine, each worker's hello (on a GPU, its CUDA context). Opening
the study is the main process's own work (importing SQLAlchemy and alembic, reading the
storage). ``WorkerStart`` makes the executor on a thread of its own, begun before the
study is opened, so the two overlap instead of following each other; ``Tuner.run``
takes the executor when it needs it (the tuner gives what the executor is made
with: search/_tuner.py's make_executor).
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from ._executor import ReplayExecutor
from ._worker import instance_key

__all__ = ["WorkerStart", "executor_factory", "prepare_baseline"]


def executor_factory(db, baseline, **kwargs) -> Callable[[], ReplayExecutor]:
    """A function that makes the executor of ``db`` (``kwargs``: ReplayExecutor's
    arguments) and sends its slot workers ``baseline`` ((instance, settings) pairs) to
    prepare: GPU workers get the recorded configuration ready (compiled, loaded, restored,
    the clock started) while the study opens, and the baseline then pays only its
    launches. Everything it needs is given here, on the caller's thread (nothing is read
    from the starting thread)."""

    def make() -> ReplayExecutor:
        executor = ReplayExecutor(db, **kwargs)
        prepare_baseline(executor, baseline)
        return executor
    return make


def prepare_baseline(executor: ReplayExecutor, baseline) -> None:
    """Send each slot's worker the instances of ``baseline`` ((instance, settings) pairs)
    to prepare, as a spare prepares (worker.py): before any task exists, so nothing else
    writes to their pipes yet.

    Parameters:
        executor: the executor whose workers prepare.
        baseline: (instance, settings) pairs.
    """
    for instance, settings in baseline:
        target = executor._resolve(instance)
        key, settings_json = instance_key(target), settings.to_json()
        for worker in executor._workers:
            if not worker.ready or worker.conn is None or key in worker.known:
                continue
            try:
                worker.conn.send(("prepare", key, target, settings_json))
            except (OSError, BrokenPipeError):
                continue  # (a dead worker: the dispatcher replaces it)
            worker.known.add(key)


class WorkerStart:
    """An executor being made on a thread of its own.

    Parameters:
        make: makes the executor (executor_factory's).
    """

    def __init__(self, make: Callable[[], ReplayExecutor]):
        self._make = make
        self._executor: ReplayExecutor | None = None
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._start, name="mneme-worker-start", daemon=True)
        self._thread.start()

    def _start(self) -> None:
        try:
            self._executor = self._make()
        except BaseException as error:  # noqa: BLE001 - raised again on the tuner's thread
            self._error = error

    def result(self) -> ReplayExecutor:
        """The executor once its workers answered; what stopped them from starting is
        raised here (a GPU that cannot be used: DeviceSelectionError)."""
        self._thread.join()
        if self._error is not None:
            raise self._error
        assert self._executor is not None
        return self._executor

    def close(self) -> None:
        """Stop the workers of a start whose run never comes (the tuner failed after it)."""
        self._thread.join()
        if self._executor is not None:
            self._executor.shutdown(wait=False, cancel_futures=True)
            self._executor = None
