"""Probe workers: prepared spares lent to try probe tasks beside each other.

The tuner's probe runs the recorded code with each launch shape, and a kernel that assumes
its shape faults on most of them; tried one at a time, each fault waits for the one
before. While failures are expected (the spare pool's burst), up to ``per_device``
prepared spares per device are lent (``SparePool.lend``) to try probe tasks at once. Only
whether a shape runs is learned there: a failure is the task's answer, and a task that
runs is marked ``tried`` and replayed again alone by the slot's worker, whose result (and
times) it gets. A device's slot workers and its probe workers never run at the same time,
so no time the study keeps was measured beside another replay.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from ._spares import SparePool

__all__ = ["ProbeWorkers"]


class ProbeWorkers:
    """Per device, the spares lent as probe workers (WorkerRecords, ``beside`` set).

    Parameters:
        devices: the devices (None: the CPU workers).
        per_device: probe workers per device at most.
        spares: the spare pool they are lent from.
    """

    def __init__(self, devices: Iterable[int | None], per_device: int, spares: SparePool):
        self.per_device = max(0, int(per_device))
        self._spares = spares
        self._lent: dict[int | None, list[Any]] = {d: [] for d in dict.fromkeys(devices)}

    @property
    def capacity(self) -> int:
        """Probe tasks that may run at once beside the slots' workers, at most."""
        return self.per_device * len(self._lent)

    def workers(self) -> list[Any]:
        """Every probe worker lent now."""
        return [w for workers in self._lent.values() for w in workers]

    def lent_to(self, device: int | None) -> list[Any]:
        """The probe workers of ``device`` (None: the CPU workers')."""
        return list(self._lent.get(device, ()))

    def lend(self, untried: bool, sent: Iterable[str], closing: bool) -> None:
        """While failures are expected and probe tasks wait ``untried``, lend prepared
        spares to try them (up to ``per_device`` per device; ``sent``: the instance keys a
        spare must have prepared); once no failure is expected, give the idle ones back
        to the pool."""
        for device, workers in self._lent.items():
            if self._spares.bursting and untried and not closing:
                while len(workers) < self.per_device:
                    spare = self._spares.lend(device, sent)
                    if spare is None:
                        break
                    spare.beside = True
                    workers.append(spare)
            elif not self._spares.bursting:
                for worker in [w for w in workers if w.task is None]:
                    workers.remove(worker)
                    worker.beside = False
                    self._spares.give_back(worker)

    def lost(self, worker) -> None:
        """A probe worker's process ended (a fault): it is not replaced by a hand-over (the
        next prepared spare is lent when there is one)."""
        workers = self._lent[worker.device]
        workers[:] = [w for w in workers if w is not worker]
        self._spares.lost(worker.device)

    def next_task(self, worker, pending, slots: Iterable[Any]):
        """The pending task ``worker`` may run now (taken out of ``pending``, a deque; the
        caller holds its lock), or None: a probe worker takes the first probe task not
        tried yet while no slot worker of its device (in ``slots``) runs; a slot's worker
        takes the first task while no probe worker of its device runs (what it measures
        runs alone)."""
        device = worker.device
        if worker.beside:
            if any(w.task is not None for w in slots if w.device == device):
                return None
            for index, task in enumerate(pending):
                if task.probe and not task.tried:
                    del pending[index]
                    return task
            return None
        if any(w.task is not None for w in self.lent_to(device)):
            return None
        return pending.popleft()

    def close(self) -> list[Any]:
        """Every probe worker, no longer lent (the executor stops them with its workers)."""
        everyone = self.workers()
        for workers in self._lent.values():
            workers.clear()
        return everyone
