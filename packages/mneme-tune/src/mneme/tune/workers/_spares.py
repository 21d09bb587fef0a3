"""Spare workers: processes started ahead, per device, to take a failed worker's place.

A kernel fault poisons its worker's CUDA context: the process must go, and the next trial
needs another with a context and the instance restored. A spare does all of that while it
waits (imports, context, and for each instance the workers were sent: restore with the
pristine copy, code compiled and loaded, stream and clock made; ``prepare`` in worker.py),
so a restart is a hand-over: the slot takes the spare's pipe and the next trial is sent.

Faults come in bursts (the probe tries every launch shape with the recorded code, and a
kernel that assumes its block size faults on most), faster than one spare can be made
(~1 s: process, context, restore). So the pool holds one spare per device in the steady
state and, while the tuner expects failures (``expect_failures``), grows with each
hand-over of the burst, up to what the device can hold (``capacity``): a context plus
copies of the instance per spare, within a share of the memory free at start. Spares
start in parallel and are refilled in the background as they are taken. A starting spare
is never thrown away for a fresh process: the slot takes the readiest one there is.

During a burst, prepared spares may also be lent (``lend``) to try the probe's launch
shapes beside the slot's worker (probe_workers.py): a lent spare counts against the
pool's size until it is given back (``give_back``) or lost to a fault (``lost``).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from typing import Any

#: a spare restores an instance ahead when its memory is at most this large (it holds a
#: second copy on the device while it waits)
SPARE_RESTORE_BYTES = 1 << 30
#: spares per device at most, however much memory is free
MAX_SPARES = 32
#: spares of the CPU workers at most (compile-only: nothing faults there but test hooks)
CPU_SPARES = 4
#: spares kept when a burst of failures begins (more follow with each hand-over)
BURST_SPARES = 8
#: device memory a spare's context takes besides the instance (CUDA context, modules,
#: the verifier; measured 300-500 MiB on H100/H200 contexts)
CONTEXT_BYTES = 512 << 20
#: copies of an instance a restored spare holds (prologue at its addresses, the pristine
#: copy, the recorded epilogue)
INSTANCE_COPIES = 3
#: share of the device memory free at start that spares may take
MEMORY_SHARE = 0.5


def capacity(memory_free: int | None, instance_bytes: int, cores: int | None = None) -> int:
    """Spares a device can hold: each a context plus the instance's copies, within
    MEMORY_SHARE of the memory free when its worker started; and at most one per two
    cores (at least two): spares starting side by side take CPU from the worker and the
    compile pool (on 2 cores, 4 spares made a probe with 16 faults 20-30 % slower than 1).

    Parameters:
        memory_free: the device memory free when its worker started; None when unknown
            (CPU workers, which fault only under test hooks: CPU_SPARES).
        instance_bytes: the device memory an instance holds.
        cores: the usable cores; None for no bound.

    Returns:
        The number of spares (at least one).
    """
    if memory_free is None:
        fits = CPU_SPARES
    else:
        each = CONTEXT_BYTES + INSTANCE_COPIES * min(instance_bytes, SPARE_RESTORE_BYTES)
        fits = min(MAX_SPARES, int(memory_free * MEMORY_SHARE) // each)
    if cores is not None:
        fits = min(fits, max(2, cores // 2))
    return max(1, fits)


class SparePool:
    """Spare workers per device (None: the CPU workers).

    Parameters:
        devices: the devices.
        spawn: ``spawn(device)`` starts a worker process (an executor's WorkerRecord, not
            ready until its hello).
        kill: ``kill(worker)`` ends one.
        instance_bytes: ``instance_bytes(instance)``: the device memory a restored
            instance holds.
        enabled: whether spares are kept at all.
        cores: the usable cores (bounds the spares per device); None for no bound.
    """

    def __init__(self, devices: Iterable[int | None], spawn: Callable[[int | None], Any],
                 kill: Callable[[Any], None], instance_bytes: Callable[[Any], int],
                 enabled: bool = True, cores: int | None = None):
        self.devices = list(dict.fromkeys(devices))
        self._spawn = spawn
        self._kill = kill
        self._instance_bytes = instance_bytes
        self.enabled = enabled
        self.cores = cores
        self.started = False  # spares are kept once the executor says so (after a baseline)
        self.spares: dict[int | None, list[Any]] = {d: [] for d in self.devices}
        #: per device, the memory free when its first worker started (from its hello)
        self.memory_free: dict[int | None, int | None] = {d: None for d in self.devices}
        self._largest = 0  # bytes of the largest instance sent (sizes the pool)
        self._sized: set[str] = set()  # instance keys whose size is in _largest
        self._expected = 0  # failures the tuner expects now (the probe's trials)
        self._burst_handovers = 0  # hand-overs since the burst began
        #: per hand-over: (device, seconds the spare had been ready, or None when it was not)
        self.handovers: list[tuple[int | None, float | None]] = []
        #: per device, spares lent out (they count against the pool's size)
        self.lent: dict[int | None, int] = {d: 0 for d in self.devices}

    # -- size ---------------------------------------------------------------------------------

    def note_hello(self, device: int | None, hello: dict) -> None:
        if self.memory_free.get(device) is None and "memory_free" in hello:
            self.memory_free[device] = int(hello["memory_free"])

    def capacity(self, device: int | None) -> int:
        return capacity(self.memory_free.get(device), self._largest, self.cores)

    def target(self, device: int | None) -> int:
        """Spares to keep for ``device`` now: one, or during a burst of failures
        BURST_SPARES growing by two per hand-over, at most the failures expected and what
        the device holds (less the spares lent out)."""
        if not self.enabled:
            return 0
        if self._expected <= 0:
            return 1
        burst = BURST_SPARES + 2 * self._burst_handovers
        return max(1, min(self.capacity(device), self._expected, burst) - self.lent.get(device, 0))

    @property
    def bursting(self) -> bool:
        """Whether failures are expected now (the probe)."""
        return self.enabled and self._expected > 0

    def expect_failures(self, count: int) -> None:
        """The tuner expects up to ``count`` failures that end their worker soon (probe
        trials), or none (0): the pool grows for them, and shrinks back afterwards."""
        if count > 0 and self._expected <= 0:
            self._burst_handovers = 0
        self._expected = max(0, int(count))
        self.start()

    # -- lifetime -------------------------------------------------------------------------------

    def start(self) -> None:
        """Keep spares from now on, and prepare them (the first replays are done)."""
        self.started = True
        self.refill()

    def spawn_ahead(self, expected_failures: int) -> None:
        """Start the processes of a burst's spares now (imports, CUDA context: the slow
        part), before the first replays, without preparing them until ``start``: the probe
        that follows a tuner's baseline then finds them started."""
        self._expected = max(0, int(expected_failures))
        self._refill(self.started or self._expected > 0)

    def refill(self) -> None:
        """Start the spares missing (all at once: they start in parallel) and stop the
        ones beyond the target (the least ready first)."""
        self._refill(self.started)

    def _refill(self, allowed: bool) -> None:
        if not allowed:
            return
        for device in self.devices:
            spares = self.spares[device]
            want = self.target(device)
            while len(spares) < want:
                spares.append(self._spawn(device))
            if len(spares) > want:
                spares.sort(key=self._readiness, reverse=True)
                for extra in spares[want:]:
                    self._stop(extra)
                del spares[want:]

    def _stop(self, spare) -> None:
        if spare.conn is not None:
            try:
                spare.conn.send(None)
            except OSError:
                pass
        self._kill(spare)

    def close(self) -> list[Any]:
        """Every spare, taken out of the pool (the executor stops them with its workers)."""
        everyone = [s for spares in self.spares.values() for s in spares]
        for spares in self.spares.values():
            spares.clear()
        self.started = False
        return everyone

    # -- state --------------------------------------------------------------------------------

    def connections(self) -> dict[Any, Any]:
        return {s.conn: s for spares in self.spares.values() for s in spares if s.conn is not None}

    def is_prepared(self, spare, sent: Iterable[str]) -> bool:
        """Started, and every instance in ``sent`` restored and its code loaded."""
        return spare.ready and set(sent) <= spare.restored

    def _readiness(self, spare) -> tuple:
        # prepared for more instances > started > older (further along in its start)
        return (spare.ready, len(spare.restored), -spare.started)

    def ready_count(self, device: int | None, sent: Iterable[str]) -> int:
        sent = set(sent)
        return sum(1 for s in self.spares.get(device, []) if self.is_prepared(s, sent))

    def owns(self, spare) -> bool:
        return any(spare is s for s in self.spares.get(spare.device, []))

    # -- messages ---------------------------------------------------------------------------------

    def receive(self, spare) -> None:
        """A message from a spare: its hello, a prepare's answer, or its end."""
        try:
            message = spare.conn.recv()
        except (EOFError, OSError):
            self._discard(spare)
            self.refill()
            return
        if message[0] == "hello":
            spare.ready, spare.hello = True, message[1]
            self.note_hello(spare.device, message[1])
        elif message[0] in ("prepared", "unprepared"):
            spare.restored.add(message[1])
            if all(k in spare.restored for k in spare.prepared):
                spare.ready_since = time.monotonic()
        elif message[0] == "fatal":
            self._discard(spare)  # a spare that cannot start: restarts spawn as before

    def _discard(self, spare) -> None:
        self._kill(spare)
        spares = self.spares.get(spare.device, [])
        spares[:] = [s for s in spares if s is not spare]

    def prepare(self, sent: dict[str, tuple[Any, str]]) -> None:
        """Send each started spare the instances the workers were sent (``sent``: key ->
        (instance, settings_json of a task for it)) that it has not been told to prepare:
        restored and its code loaded ahead when small enough to hold twice. Not before
        ``start``: a restore beside the first replays (a baseline) would disturb them."""
        if not self.started:
            return
        grown = False
        for key, (instance, _) in sent.items():
            if key not in self._sized:
                self._sized.add(key)
                size = self._instance_bytes(instance)
                if size <= SPARE_RESTORE_BYTES and size > self._largest:
                    self._largest, grown = size, True
        if grown:
            self.refill()  # a larger instance: fewer spares fit
        for spares in self.spares.values():
            for spare in spares:
                if spare.ready:
                    self._prepare_one(spare, sent)

    def _prepare_one(self, spare, sent: dict[str, tuple[Any, str]]) -> None:
        for key, (instance, settings_json) in list(sent.items()):
            if key in spare.prepared:
                continue
            spare.prepared.add(key)
            if spare.device is not None and self._instance_bytes(instance) > SPARE_RESTORE_BYTES:
                spare.restored.add(key)  # restored at its first replay, as without a spare
                continue
            try:
                spare.conn.send(("prepare", key, instance, settings_json))
            except (OSError, BrokenPipeError):
                return
            spare.known.add(key)
        if all(k in spare.restored for k in spare.prepared) and spare.ready_since is None:
            spare.ready_since = time.monotonic()

    # -- lent spares (probe workers) --------------------------------------------------------------

    def lend(self, device: int | None, sent: Iterable[str]) -> Any | None:
        """A prepared spare of ``device``, out of the pool, to try tasks beside the slot's
        worker; None unless another prepared spare stays in the pool (for a hand-over)."""
        sent = set(sent)
        prepared = [s for s in self.spares.get(device, [])
                    if self.is_prepared(s, sent) and s.process is not None and s.process.is_alive()]
        if len(prepared) < 2:
            return None
        spare = max(prepared, key=lambda s: s.ready_since or 0.0)  # (the least long ready)
        self.spares[device] = [s for s in self.spares[device] if s is not spare]
        self.lent[device] = self.lent.get(device, 0) + 1
        return spare

    def give_back(self, spare) -> None:
        """A lent spare back in the pool (its context intact)."""
        self.lent[spare.device] = max(0, self.lent.get(spare.device, 0) - 1)
        self.spares.setdefault(spare.device, []).append(spare)

    def lost(self, device: int | None) -> None:
        """A lent spare's process ended (a fault): the pool may start another."""
        self.lent[device] = max(0, self.lent.get(device, 0) - 1)

    # -- hand-over ----------------------------------------------------------------------------------

    def take(self, device: int | None) -> Any | None:
        """The readiest spare of ``device`` (prepared, else started, else the one that
        started first), out of the pool; None without one. ``refill`` starts its
        replacement (the executor calls it once the next task is sent: starting a process
        takes milliseconds the hand-over need not wait)."""
        spares = []
        for spare in self.spares.get(device, []):
            if spare.process is not None and spare.process.is_alive():
                spares.append(spare)
            else:
                self._kill(spare)  # (died waiting: its pipe closed here)
        self.spares[device] = spares
        if not spares:
            return None
        spares.sort(key=self._readiness, reverse=True)
        spare = spares.pop(0)
        ready_for = (time.monotonic() - spare.ready_since
                     if spare.ready and spare.ready_since is not None else None)
        self.handovers.append((device, ready_for))
        if self._expected > 0:
            self._burst_handovers += 1
        return spare  # (its replacement starts at the next refill: after the next task is sent)
