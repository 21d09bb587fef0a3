"""What runs inside a worker process: a replay session per instance, one task at a time.

The parent talks to a worker over a ``multiprocessing`` pipe:

    worker → parent   ("hello", {...device...})  or  ("fatal", message)   once, at start
    parent → worker   (task_id, instance_id, settings_json)  ...  None to stop
    worker → parent   ("ok", task_id, result_dict)  or  (kind, task_id, message)

A kernel fault leaves the CUDA context unusable, so after ``crashed`` the worker exits
and the parent starts a fresh one (whose first replay restores the memory again). Every
other failure (a launch the driver refuses, a compile error, a result that does not
verify) is answered and the worker goes on with the next task: failures are cheap.
Kept free of Optuna so a worker starts fast.
"""

from __future__ import annotations

import os
import traceback
from collections import OrderedDict
from typing import Any

#: sessions (restored device images) a worker keeps; each holds an instance's memory
SESSIONS_PER_WORKER = 4


#: driver errors that leave the CUDA context unusable ("sticky"): the process must go.
#: Everything else the driver says (a launch refused for its configuration or resources,
#: a module it cannot load, memory it cannot give) fails the trial and the worker goes on.
STICKY_DRIVER_ERRORS = frozenset({
    "CUDA_ERROR_ILLEGAL_ADDRESS", "CUDA_ERROR_LAUNCH_TIMEOUT", "CUDA_ERROR_ASSERT",
    "CUDA_ERROR_CONTEXT_IS_DESTROYED", "CUDA_ERROR_HARDWARE_STACK_ERROR",
    "CUDA_ERROR_ILLEGAL_INSTRUCTION", "CUDA_ERROR_MISALIGNED_ADDRESS",
    "CUDA_ERROR_INVALID_ADDRESS_SPACE", "CUDA_ERROR_INVALID_PC", "CUDA_ERROR_LAUNCH_FAILED",
    "CUDA_ERROR_ECC_UNCORRECTABLE", "CUDA_ERROR_NVLINK_UNCORRECTABLE",
    "CUDA_ERROR_DEINITIALIZED", "CUDA_ERROR_UNKNOWN", "CUDA_ERROR_EXTERNAL_DEVICE",
})
#: what the replay engine says when a kernel faulted (engine/session.py)
CONTEXT_LOST = "the GPU context is unusable"


def _driver_error(error: BaseException):
    """The driver error behind ``error`` (itself, or the one a KernelFailedError was
    raised from), or None."""
    from mneme.runtime import DriverError

    seen = 0
    while error is not None and seen < 4:
        if isinstance(error, DriverError):
            return error
        error = error.__cause__ or error.__context__
        seen += 1
    return None


def poisons_context(error: BaseException) -> bool:
    """Whether ``error`` left the CUDA context unusable (a fault, a sticky error)."""
    from mneme.replay.engine import KernelFailedError

    if CONTEXT_LOST in str(error):
        return True
    driver = _driver_error(error)
    if driver is not None:
        return getattr(driver, "name", "") in STICKY_DRIVER_ERRORS or any(
            name in str(driver) for name in STICKY_DRIVER_ERRORS)
    # A KernelFailedError without the driver's word: assume the worst.
    return isinstance(error, KernelFailedError) and "the launch was refused" not in str(error)


def classify(error: BaseException) -> tuple[str, bool]:
    """(failure kind, whether the worker must exit) for an exception of a replay.

    Only what poisons the CUDA context costs the worker (``crashed``); a launch the driver
    refuses (configuration, resources), a compile error or a bad value is ``invalid`` and
    the worker replays the next trial in the same process."""
    from mneme.replay.engine import (
        KernelFailedError,
        LaunchConfigError,
        ReplayConfigError,
    )
    from mneme.replay.jit import JitError
    from mneme.runtime import DriverError

    if isinstance(error, KernelFailedError | DriverError):
        if poisons_context(error):
            return "crashed", True
        return "invalid", False
    if isinstance(error, LaunchConfigError | ReplayConfigError | JitError):
        return "invalid", False
    return "error", False


def context_usable(device) -> str | None:
    """None when the device's context still works, else why not (checked after a trial
    that failed in the driver but did not look fatal)."""
    if device is None:
        return None
    try:
        device.synchronize()
        device.memory_info()
    except Exception as error:  # noqa: BLE001 - any failure here means a lost context
        return f"{type(error).__name__}: {error}"
    return None


class SessionPool:
    """Replay sessions of one database, opened on first use, least recently used closed."""

    def __init__(self, database: str, *, gpu: bool, device=None, cache_dir: str | None = None):
        from mneme.replay.db import Database
        from mneme.replay.jit import CompileCache

        self.db = Database.open(database)
        self.gpu = gpu
        self.device = device
        self.cache = CompileCache(cache_dir)
        self.sessions: OrderedDict[str, Any] = OrderedDict()

    def get(self, instance_id: str):
        from mneme.replay.engine import ReplaySession

        if instance_id in self.sessions:
            self.sessions.move_to_end(instance_id)
            return self.sessions[instance_id]
        while len(self.sessions) >= SESSIONS_PER_WORKER:
            _, old = self.sessions.popitem(last=False)
            old.close()
        session = ReplaySession(
            self.db.instance(instance_id), device=self.device, cache=self.cache, gpu=self.gpu,
            make_room=self._make_room,
        )
        self.sessions[instance_id] = session
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
    from mneme.replay.engine import arch_of

    p = device.properties
    return {
        "name": device.name,
        "arch": arch_of(device.compute_capability),
        "max_threads_per_block": int(p.max_threads_per_block),
        "warp_size": int(p.warp_size),
        "multiprocessor_count": int(p.multiprocessor_count),
        "max_shared_memory_per_block": int(p.max_shared_memory_per_block),
        "max_shared_memory_per_block_optin": int(p.max_shared_memory_per_block_optin),
        "pid": os.getpid(),
    }


def worker_main(conn, spec: dict[str, Any]) -> None:
    """Entry point of a worker process (``spec``: database, device, cache_dir, before_run)."""
    device_ordinal = spec.get("device")
    device = None
    try:
        if device_ordinal is not None:
            # One GPU per process: the fixed-address reservation is per process, and a
            # fault in one worker's context cannot touch another's.
            os.environ["CUDA_VISIBLE_DEVICES"] = str(device_ordinal)
            from mneme.runtime import Device

            device = Device(0)
            hello = device_hello(device)
        else:
            hello = {"name": "cpu", "arch": None, "pid": os.getpid()}
        pool = SessionPool(
            spec["database"], gpu=device is not None, device=device, cache_dir=spec.get("cache_dir")
        )
    except Exception as error:  # noqa: BLE001 - reported to the parent as one line
        conn.send(("fatal", f"{type(error).__name__}: {error}"))
        return
    conn.send(("hello", hello))
    before_run = spec.get("before_run")
    from mneme.replay.engine import ReplaySettings

    while True:
        try:
            message = conn.recv()
        except EOFError:
            break
        if message is None:
            break
        task_id, instance_id, settings_json = message
        try:
            settings = ReplaySettings.from_json(settings_json)
            if before_run is not None:
                before_run(settings)
            result = pool.get(instance_id).run(settings.compile, settings.replay)
        except Exception as error:  # noqa: BLE001 - every failure becomes a failed trial
            kind, fatal = classify(error)
            text = str(error) if kind != "error" else traceback.format_exception_only(error)[-1].strip()
            if not fatal and _driver_error(error) is not None:
                lost = context_usable(device)  # a driver error we took for harmless
                if lost is not None:
                    kind, fatal = "crashed", True
                    text = f"{text} (the GPU context was unusable afterwards: {lost})"
            conn.send((kind, task_id, text))
            if fatal:
                break
            continue
        conn.send(("ok", task_id, result.to_dict()))
    try:
        pool.close()
    except Exception:  # noqa: BLE001 - after a fault the context is gone: nothing to free
        pass


#: per-process sessions of the compile pool (compile-only, one per instance)
_compile_sessions: dict[tuple[str, str], Any] = {}


def precompile(database: str, instance_id: str, settings_json: str, arch: str | None,
               cache_dir: str) -> None:
    """Compile a configuration into the shared on-disk cache (runs in the CPU pool), so
    the GPU worker that replays it finds the cubin ready (``arch`` None: the recorded
    arch, as a compile-only worker uses). Raises what compiling raises."""
    import dataclasses

    from mneme.replay.db import Database
    from mneme.replay.engine import ReplaySession, ReplaySettings
    from mneme.replay.jit import CompileCache

    key = (database, instance_id)
    if key not in _compile_sessions:
        instance = Database.open(database).instance(instance_id)
        _compile_sessions[key] = ReplaySession(instance, cache=CompileCache(cache_dir), gpu=False)
    settings = ReplaySettings.from_json(settings_json)
    replay = dataclasses.replace(settings.replay, compile_only=True, arch=arch)
    _compile_sessions[key].run(settings.compile, replay)
