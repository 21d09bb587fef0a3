"""The tuner's worker pool, started while the study opens.

Starting the ReplayExecutor is mostly waiting on other processes: the fork server
importing the replay engine, each worker's hello (on a GPU, its CUDA context). Opening
the study is the main process's own work (importing SQLAlchemy and alembic, reading the
storage). ``WorkerStart`` makes the executor on a thread of its own, begun before the
study is opened, so the two overlap instead of following each other; ``Tuner.run``
takes the executor when it needs it.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING

from . import launch_probe
from .executor import ReplayExecutor
from .worker import instance_key

if TYPE_CHECKING:  # (tuner.py imports this module)
    from .tuner import Tuner

__all__ = ["WorkerStart", "make_executor", "prepare_baseline"]


def make_executor(tuner: Tuner, **overrides) -> ReplayExecutor:
    """The executor of a tuner's run (its workers started: returns once they answered).
    ``overrides``: ReplayExecutor arguments other than the tuner's options give (one GPU
    of several, as ``mneme tune --app`` runs a kernel per GPU)."""
    return _executor_factory(tuner, overrides)()


def _executor_factory(tuner: Tuner, overrides: dict | None = None):
    """A function that makes the tuner's executor, its arguments read now (on the caller's
    thread: the tuner is not read from the starting thread)."""
    o = tuner.options
    kwargs = dict(devices=o.devices, workers_per_device=o.workers_per_device,
                  cpu_workers=o.cpu_workers, compile_workers=o.compile_workers,
                  timeout=o.trial_timeout, before_run=o.before_run,
                  expect_failures=launch_probe.probe_estimate(tuner),
                  probe_workers=o.probe_workers if o.probe else 0)
    kwargs.update(overrides or {})
    db = tuner.db
    # GPU workers get the recorded configuration ready (compiled, loaded, restored, the
    # clock started) while the study opens: the baseline then pays only its launches.
    baseline = ([(i, tuner.base_settings(n)) for n, i in enumerate(tuner.instances)]
                if kwargs["devices"] else [])

    def make() -> ReplayExecutor:
        executor = ReplayExecutor(db, **kwargs)
        prepare_baseline(executor, baseline)
        return executor
    return make


def prepare_baseline(executor: ReplayExecutor, baseline) -> None:
    """Send each slot's worker the instances of ``baseline`` ((instance, settings) pairs)
    to prepare, as a spare prepares (worker.py): before any task exists, so nothing else
    writes to their pipes yet."""
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
    """A tuner's executor being made on a thread of its own."""

    def __init__(self, tuner: Tuner):
        self._make = _executor_factory(tuner)
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
