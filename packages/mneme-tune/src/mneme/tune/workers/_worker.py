"""What runs inside a worker process: a replay session per instance, one task at a time.

The parent talks to a worker over a ``multiprocessing`` pipe:

    worker → parent   ("hello", {...device...})  or  ("fatal", message)   once, at start
    parent → worker   (task_id, key, instance or None, settings_json, guard)  ...  None to stop
    worker → parent   ("ok", task_id, result_dict)  or  (kind, task_id, message)

A spare worker (started ahead, to take a failed worker's place at once) is first told to
prepare each instance with the settings of a task the workers were sent, so that everything
its first replay would do before launching (compile, module load, restore with the pristine
copy, stream, clock) is done before it is needed, no kernel run:

    parent → worker   ("prepare", key, instance, settings_json)
    worker → parent   ("prepared", key, seconds, compile_seconds)  or  ("unprepared", key, message)

A warm worker a command server kept (_warm_workers.py) is first given the folder and
environment of the command it is handed to, before anything else:

    parent → worker   ("adopt", folder, environ)

The parent resolves each instance once and sends it (a mneme.replay.db Instance: it pickles
as its database's path and the kernel's and instance's records, already read and checked)
with the first task for it; later tasks name it by ``key``. A worker never opens the
database or looks an id up. ``guard``: a task whose launch shape is not known to run (a
probe task among them), tried first with the kernel's guarded variant
(mneme.replay.engine.guarded_probe), so a shape that would fault fails as
``out-of-bounds`` and the worker goes on.

``kind`` is the failure kind the error's raiser set (mneme.replay.engine.errors). A kernel
fault leaves the CUDA context unusable, so after its ``context-poisoned`` answer the worker
exits at once (``os._exit``: nothing more is asked of the faulted context) and a spare
takes its place. Every other
failure (a launch the driver refuses, a compile error, a result that does not verify) is
answered and the worker goes on with the next task: failures are cheap. Kept free of
Optuna so a worker starts fast.
"""

from __future__ import annotations

import os
import time
import traceback
from collections import OrderedDict
from typing import Any

from mneme.replay.engine.errors import CONTEXT_POISONED, ERROR, is_sticky

#: sessions (restored device images) a worker keeps; each holds an instance's memory
SESSIONS_PER_WORKER = 4


def failure_kind(error: BaseException) -> str:
    """The failure kind its raiser gave ``error`` (replay engine and compile errors carry
    one, mneme.replay.engine.errors); a driver error that escaped unclassified is
    ``context-poisoned`` when it is sticky (the worker must go: every later replay in its
    context would fail too); anything else is an ``error``.

    Parameters:
        error: the exception.

    Returns:
        The failure kind.
    """
    kind = getattr(error, "kind", None)
    if kind:
        return kind
    from mneme.runtime.errors import DriverError

    if isinstance(error, DriverError) and is_sticky(error):
        return CONTEXT_POISONED
    return ERROR


def instance_key(instance) -> str:
    """What names an instance between the parent and its workers (the same id may exist in
    two databases).

    Parameters:
        instance: the instance.

    Returns:
        ``<database>:<id>``.
    """
    return f"{instance.kernel.db.root}:{instance.id}"


def resolved(instance):
    """An instance with its kernel's and its own records read (and checked) now: they
    travel with it when it is pickled, so no worker reads them again.

    Parameters:
        instance: the instance.

    Returns:
        The same instance.
    """
    _ = (instance.grid, instance.kernel.name)  # cached on the objects once read
    return instance


class SessionPool:
    """Replay sessions of the instances a worker was sent, opened on first use, least
    recently used closed.

    Parameters:
        gpu: whether the sessions replay on the GPU.
        device: the worker's Device; None to open one on first use.
        cache_dir: the compile cache the workers share; None for one in memory.
    """

    def __init__(self, *, gpu: bool, device=None, cache_dir: str | None = None):
        from mneme.replay.jit import CompileCache

        self.gpu = gpu
        self.device = device
        self.cache = CompileCache(cache_dir)
        self.sessions: OrderedDict[str, Any] = OrderedDict()

    def get(self, key: str, instance):
        from mneme.replay.engine import ReplaySession

        if key in self.sessions:
            self.sessions.move_to_end(key)
            return self.sessions[key]
        while len(self.sessions) >= SESSIONS_PER_WORKER:
            _, old = self.sessions.popitem(last=False)
            old.close()
        session = ReplaySession(instance, device=self.device, cache=self.cache, gpu=self.gpu,
                                make_room=self._make_room)
        self.sessions[key] = session
        return session

    def _make_room(self, wanting) -> bool:
        """Instances of one recording (or of recordings at the same base) need the same
        device addresses: the other sessions give their restored memory back and restore
        it again when next replayed."""
        released = False
        for other in self.sessions.values():
            if other is not wanting and other.holds_memory:
                other.release_memory()
                released = True
        return released

    def close(self) -> None:
        for session in self.sessions.values():
            session.close()
        self.sessions.clear()


def device_hello(device) -> dict[str, Any]:
    """What a GPU worker tells the executor when it has started.

    Parameters:
        device: its Device.

    Returns:
        The device's name, arch and limits, and the process's pid.
    """
    from mneme.replay.engine import arch_of

    p = device.properties
    hello = {
        "name": device.name,
        "arch": arch_of(device.compute_capability),
        "max_threads_per_block": int(p.max_threads_per_block),
        "warp_size": int(p.warp_size),
        "multiprocessor_count": int(p.multiprocessor_count),
        "max_threads_per_multiprocessor": int(getattr(p, "max_threads_per_multiprocessor", 0)),
        "max_blocks_per_multiprocessor": int(getattr(p, "max_blocks_per_multiprocessor", 0)),
        "max_shared_memory_per_block": int(p.max_shared_memory_per_block),
        "max_shared_memory_per_block_optin": int(p.max_shared_memory_per_block_optin),
        "pid": os.getpid(),
    }
    try:  # (bounds how many spare workers the device can hold)
        hello["memory_free"], hello["memory_total"] = (int(x) for x in device.memory_info())
    except Exception:  # noqa: BLE001 - unknown: one spare
        pass
    return hello


#: exit status of a worker that left after a context-poisoned answer
POISONED_EXIT_STATUS = 3


def poisoned_exit(conn) -> None:
    """End the process after its ``context-poisoned`` answer was sent: no clean-up (every
    CUDA call would go to the faulted context), no exit handlers (os._exit).

    Parameters:
        conn: the worker's end of the pipe (closed first).
    """
    try:
        conn.close()
    finally:
        os._exit(POISONED_EXIT_STATUS)


#: GPUs listed behind a worker's own when the parent saw every GPU of the machine
MAX_VISIBLE_GPUS = 64


def worker_visible_devices(ordinal: int, inherited: str | None) -> str:
    """CUDA_VISIBLE_DEVICES of a worker on GPU ``ordinal`` (an index among the GPUs the
    parent sees: ``inherited``, as Slurm sets it, or all): that GPU first, so that it is
    the worker's device 0, then the parent's others in their order, onto which an instance
    that read other GPUs' memory (peer regions) restores it. Without an inherited list the
    ordinals run up to MAX_VISIBLE_GPUS: CUDA shows those before the first index that does
    not exist. An ordinal beyond the inherited list leaves the worker no GPU (never one
    the parent was not given).

    Parameters:
        ordinal: the worker's GPU among the parent's.
        inherited: the parent's CUDA_VISIBLE_DEVICES; None when unset.

    Returns:
        The worker's CUDA_VISIBLE_DEVICES (``-1``: none).
    """
    if inherited is not None and inherited.strip():
        entries = [e.strip() for e in inherited.split(",") if e.strip()]
    else:
        entries = [str(n) for n in range(max(MAX_VISIBLE_GPUS, ordinal + 1))]
    if not 0 <= ordinal < len(entries):
        return "-1"  # not a GPU the parent was given: the worker sees none and says so
    return ",".join([entries[ordinal]] + entries[:ordinal] + entries[ordinal + 1:])


def worker_main(conn, spec: dict[str, Any]) -> None:
    """Entry point of a worker process: it answers tasks on its pipe until told to stop.

    Parameters:
        conn: its end of the pipe.
        spec: device, cache_dir, before_run, before_prepare.
    """
    device_ordinal = spec.get("device")
    device = None
    try:
        if device_ordinal is not None:
            # One GPU per process: the fixed-address reservation is per process, and a
            # fault in one worker's context cannot touch another's. The others stay
            # visible behind it, for instances that read another GPU's memory.
            os.environ["CUDA_VISIBLE_DEVICES"] = worker_visible_devices(
                device_ordinal, os.environ.get("CUDA_VISIBLE_DEVICES"))
            from mneme.runtime import Device

            device = Device(0)
            hello = device_hello(device)
        else:
            hello = {"name": "cpu", "arch": None, "pid": os.getpid()}
        pool = SessionPool(gpu=device is not None, device=device, cache_dir=spec.get("cache_dir"))
    except Exception as error:  # noqa: BLE001 - reported to the parent as one line
        conn.send(("fatal", f"{type(error).__name__}: {error}"))
        return
    conn.send(("hello", hello))
    before_run = spec.get("before_run")
    before_prepare = spec.get("before_prepare")  # (tests: a slow restore)
    instances: dict[str, Any] = {}  # key -> Instance, as the parent sent them
    from mneme.replay.engine import ReplaySettings, guarded_probe

    while True:
        try:
            message = conn.recv()
        except (EOFError, ConnectionError):  # (the parent is gone: reset, not only closed)
            break
        if message is None:
            break
        if message[0] == "adopt":  # (a command server's warm worker, handed to a command)
            _, folder, environ = message
            visible = os.environ.get("CUDA_VISIBLE_DEVICES")  # (its own GPU, set above)
            os.environ.clear()
            os.environ.update(environ)
            if visible is not None:
                os.environ["CUDA_VISIBLE_DEVICES"] = visible
            os.chdir(folder)
            continue
        if message[0] == "prepare":
            _, key, instance, settings_json = message
            instances[key] = instance
            began = time.monotonic()
            try:
                if before_prepare is not None:
                    before_prepare(key)
                settings = ReplaySettings.from_json(settings_json)
                # No kernel runs beside the worker being timed: prepare stops at the launch.
                compiled_in = pool.get(key, instance).prepare(settings.compile, settings.replay)
            except Exception as error:  # noqa: BLE001 - the first replay does it then
                conn.send(("unprepared", key, f"{type(error).__name__}: {error}"))
                continue
            conn.send(("prepared", key, time.monotonic() - began, compiled_in))
            continue
        task_id, key, instance, settings_json, guard = message
        if instance is not None:
            instances[key] = instance
        try:
            settings = ReplaySettings.from_json(settings_json)
            if before_run is not None:
                before_run(settings)
            session = pool.get(key, instances[key])
            if guard:  # a shape not known to run: one that would fault is caught here
                guarded_probe.check(session, settings.compile, settings.replay)
            result = session.run(settings.compile, settings.replay)
            if guard and session.guard_note:
                result.notes.append(session.guard_note)
        except Exception as error:  # noqa: BLE001 - every failure becomes a failed trial
            kind = failure_kind(error)
            text = str(error) if kind != ERROR else traceback.format_exception_only(error)[-1].strip()
            conn.send((kind, task_id, text))
            if kind == CONTEXT_POISONED:
                # The process must go (the parent hands its slot to a spare on this answer):
                # out now, touching CUDA no more. Freeing the sessions, unloading modules,
                # CUPTI's and the interpreter's exit handlers would each call into the
                # faulted context; the driver tears it down when the process is gone.
                poisoned_exit(conn)
            continue
        conn.send(("ok", task_id, result.to_dict()))
    try:
        pool.close()
    except Exception:  # noqa: BLE001 - after a fault the context is gone: nothing to free
        pass


#: per-process sessions of the compile pool (compile-only, one per instance)
_compile_sessions: dict[str, Any] = {}


def precompile(key: str, instance, settings_json: str, arch: str | None, cache_dir: str,
               guard: bool = False) -> float:
    """Compile a configuration into the shared on-disk cache (runs in the CPU pool), so
    the GPU worker that replays it finds the cubin ready (``arch`` None: the recorded
    arch, as a compile-only worker uses; ``guard``: its guarded variant too). Raises what
    compiling raises (the guarded variant's failure is the worker's to note: it probes
    unguarded then).

    Parameters:
        key: the instance's key.
        instance: the instance.
        settings_json: the configuration, as JSON.
        arch: the target; None for the recorded one.
        cache_dir: the shared compile cache.
        guard: compile the guarded variant too.

    Returns:
        The seconds it took.
    """
    import dataclasses

    from mneme.replay.engine import ReplaySession, ReplaySettings
    from mneme.replay.jit import CompileCache

    if key not in _compile_sessions:
        _compile_sessions[key] = ReplaySession(instance, cache=CompileCache(cache_dir), gpu=False)
    settings = ReplaySettings.from_json(settings_json)
    replay = dataclasses.replace(settings.replay, compile_only=True, arch=arch)
    started = time.perf_counter()
    _compile_sessions[key].run(settings.compile, replay)
    if guard:
        try:
            _compile_sessions[key].run(dataclasses.replace(settings.compile, guard=True), replay)
        except Exception:  # noqa: BLE001 - the worker says why when it compiles it again
            pass
    return time.perf_counter() - started  # (the executor adds up the pool's busy time)
