"""GPU clocks held still while mneme measures, and always given back.

A kernel's time moves with the SM clock: boost rises and falls with temperature, power and
what ran just before, so two runs of the same measurement can disagree by more than the
speedup a tuner looks for. As Nsight Compute does (``--clock-control base``), mneme locks
the SM clock of each GPU it measures on for the length of the command, then unlocks it:

- ``base`` (the default): the GPU's default applications clock, which NVML reports for
  every data-centre GPU (1980 MHz on the H200, where it is also the maximum). The memory
  clock is locked to its highest supported value where the GPU allows it (HBM parts do
  not: NVML answers "not supported", and HBM runs at one clock anyway);
- a number: that SM clock, in MHz (what tests and experiments use);
- ``none``: clocks as the driver sets them.

Locking needs root (NVML answers "insufficient permissions" otherwise): the command then
says so in one line and measures unlocked. The clocks are given back when the command ends,
on Ctrl-C, and when the command is killed: a guard process (clock_guard.py, started with
the lock, in a session of its own) waits on a pipe from the command and unlocks what the
command still holds once the pipe closes, however the command ended. A marker per locked
GPU (``~/.local/state/mneme/clock-locks/<uuid>.json``) says who holds it; a mneme command
that finds a marker of a process that no longer runs (the guard was killed too) unlocks
that GPU and says so. A GPU whose marker names a live mneme process is measured at that
process's lock and left locked. mneme never unlocks a GPU it did not lock: a GPU whose
applications clocks someone set (``nvidia-smi -ac``) is left as it is, said in one line
(NVML does not report a lock set with ``nvidia-smi -lgc`` by another tool: see
docs/replay.md).

CUDA ordinals map to NVML devices through ``CUDA_VISIBLE_DEVICES`` (indices or UUIDs);
NVML indices follow PCI bus order, as CUDA's own order does on a node of one GPU model.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import subprocess
import sys
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from .errors import ClockPolicyError
from .kernel_timing import nvml_index
from .processes import pid_alive
from .user_dirs import user_state_dir

__all__ = ["CLOCK_POLICIES", "ClockLock", "ClockPolicyError", "held_clocks", "parse_clock_policy",
           "repair_abandoned_locks"]

#: the policies by name (a number of MHz is accepted too)
CLOCK_POLICIES = ("base", "none")
DEFAULT_POLICY = "base"
_NVML_SUCCESS, _NVML_NOT_SUPPORTED, _NVML_NO_PERMISSION = 0, 3, 4
_CLOCK_SM, _CLOCK_MEM = 1, 2


def parse_clock_policy(text: str | None) -> str | int:
    """``base`` / ``none`` / a whole number of MHz; anything else is one line."""
    value = (text or DEFAULT_POLICY).strip().lower()
    if value in CLOCK_POLICIES:
        return value
    if value.isdigit() and 100 <= int(value) <= 10_000:
        return int(value)
    raise ClockPolicyError(f"--clock-control {text!r} is not one of {', '.join(CLOCK_POLICIES)} or an SM "
                           "clock in MHz (100-10000)")


def lock_dir() -> Path:
    return user_state_dir() / "clock-locks"


class _Nvml:
    """The few NVML calls clock control needs (libnvidia-ml.so.1, loaded on first use)."""

    def __init__(self) -> None:
        self.lib = ctypes.CDLL("libnvidia-ml.so.1")
        self.lib.nvmlErrorString.restype = ctypes.c_char_p
        self._check(self.lib.nvmlInit_v2(), "nvmlInit")

    def error(self, code: int) -> str:
        return self.lib.nvmlErrorString(code).decode(errors="replace")

    def _check(self, code: int, what: str) -> None:
        if code != _NVML_SUCCESS:
            raise OSError(f"{what}: {self.error(code)}")

    def handle(self, physical: str) -> ctypes.c_void_p:
        device = ctypes.c_void_p()
        if physical.upper().startswith(("GPU-", "MIG-")):
            code = self.lib.nvmlDeviceGetHandleByUUID(physical.encode(), ctypes.byref(device))
        else:
            code = self.lib.nvmlDeviceGetHandleByIndex_v2(int(physical), ctypes.byref(device))
        self._check(code, f"NVML device {physical}")
        return device

    def uuid(self, device) -> str:
        buffer = ctypes.create_string_buffer(96)
        self._check(self.lib.nvmlDeviceGetUUID(device, buffer, 96), "nvmlDeviceGetUUID")
        return buffer.value.decode()

    def clock(self, getter: str, device, kind: int) -> int:
        value = ctypes.c_uint()
        self._check(getattr(self.lib, getter)(device, kind, ctypes.byref(value)), getter)
        return int(value.value)

    def memory_clocks(self, device) -> list[int]:
        count, values = ctypes.c_uint(64), (ctypes.c_uint * 64)()
        if self.lib.nvmlDeviceGetSupportedMemoryClocks(device, ctypes.byref(count), values) != _NVML_SUCCESS:
            return []
        return [int(v) for v in values[: count.value]]


def open_nvml() -> _Nvml | None:
    try:
        return _Nvml()
    except OSError:
        return None


def _visible() -> list[str] | None:
    """CUDA_VISIBLE_DEVICES's entries (indices or UUIDs); None where it is not set."""
    if "CUDA_VISIBLE_DEVICES" not in os.environ:
        return None
    return [v.strip() for v in os.environ["CUDA_VISIBLE_DEVICES"].split(",") if v.strip()]


def _physical(ordinal: int) -> str:
    """The NVML index (kernel_timing.nvml_index) or UUID of CUDA ordinal ``ordinal``."""
    visible = _visible() or []
    if ordinal < len(visible) and not visible[ordinal].isdigit():
        return visible[ordinal]  # a UUID
    return str(nvml_index(ordinal))


def _visible_ordinals(nvml: _Nvml) -> list[int]:
    """Every CUDA ordinal an application here sees (CUDA_VISIBLE_DEVICES, else NVML's count)."""
    visible = _visible()
    if visible is not None:
        return list(range(len(visible)))
    count = ctypes.c_uint()
    if nvml.lib.nvmlDeviceGetCount_v2(ctypes.byref(count)) != _NVML_SUCCESS:
        return []
    return list(range(count.value))


def read_marker(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def unlock(nvml: _Nvml, marker: dict) -> None:
    """Gives back what ``marker`` says mneme locked on its GPU."""
    device = nvml.handle(marker["uuid"])
    nvml.lib.nvmlDeviceResetGpuLockedClocks(device)
    if marker.get("memory_mhz"):
        nvml.lib.nvmlDeviceResetMemoryLockedClocks(device)


def repair_abandoned_locks(say: Callable[[str], None], nvml: _Nvml | None = None) -> list[str]:
    """Unlocks every GPU whose marker names a process that no longer runs (a command and
    its guard both killed); the UUIDs it unlocked, each said in one line."""
    folder = lock_dir()
    if not folder.is_dir():
        return []
    repaired: list[str] = []
    for path in sorted(folder.glob("*.json")):
        marker = read_marker(path)
        if marker is None or pid_alive(int(marker.get("pid", 0))):
            continue
        nvml = nvml or open_nvml()
        if nvml is None:
            return repaired
        try:
            unlock(nvml, marker)
        except OSError as error:
            say(f"mneme: could not unlock GPU {marker.get('uuid')} (locked by mneme process "
                f"{marker.get('pid')}, which ended): {error}")
            continue
        path.unlink(missing_ok=True)
        repaired.append(marker["uuid"])
        say(f"mneme: unlocked the clocks of GPU {marker['uuid']}, which mneme process {marker['pid']} "
            f"locked at {marker.get('sm_mhz')} MHz and did not give back (it was killed)")
    return repaired


@dataclass
class ClockLock:
    """What a command's clock control did, per CUDA ordinal: the SM clock every
    measurement runs at (``locked``), or why it runs unlocked (``unlocked``)."""

    policy: str | int
    locked: dict[int, int] = field(default_factory=dict)  # ordinal -> SM MHz
    unlocked: dict[int, str] = field(default_factory=dict)  # ordinal -> reason
    markers: list[Path] = field(default_factory=list)  # the GPUs this process locked
    guard: subprocess.Popen | None = None

    def describe(self) -> dict:
        """For reports: the policy, the clocks measurements ran at, and why not where not."""
        return {"policy": self.policy, "locked_sm_mhz": {str(k): v for k, v in self.locked.items()},
                "unlocked": {str(k): v for k, v in self.unlocked.items()}}


def _lock_one(nvml: _Nvml, ordinal: int, policy: str | int, state: ClockLock) -> str | None:
    """Locks one GPU; the reason it stays unlocked, or None."""
    device = nvml.handle(_physical(ordinal))
    uuid = nvml.uuid(device)
    folder = lock_dir()
    marker_path = folder / f"{uuid}.json"
    held = read_marker(marker_path)
    if held is not None and int(held.get("pid", 0)) != os.getpid() and pid_alive(int(held["pid"])):
        state.locked[ordinal] = int(held.get("sm_mhz") or 0)
        return None  # another mneme command's lock: measured at it, left to that command
    default_sm = nvml.clock("nvmlDeviceGetDefaultApplicationsClock", device, _CLOCK_SM)
    if nvml.clock("nvmlDeviceGetApplicationsClock", device, _CLOCK_SM) != default_sm:
        return "its applications clocks were set by someone else (nvidia-smi -ac): left as they are"
    target = default_sm if policy == "base" else int(policy)
    memory = max(nvml.memory_clocks(device), default=0)
    folder.mkdir(parents=True, exist_ok=True)
    marker = {"pid": os.getpid(), "uuid": uuid, "ordinal": ordinal, "sm_mhz": target, "memory_mhz": 0}
    temporary = marker_path.with_suffix(f".{os.getpid()}.tmp")
    temporary.write_text(json.dumps(marker))
    os.replace(temporary, marker_path)  # before locking: a kill in between still unlocks
    code = nvml.lib.nvmlDeviceSetGpuLockedClocks(device, target, target)
    if code != _NVML_SUCCESS:
        marker_path.unlink(missing_ok=True)
        why = ("locking clocks needs root" if code == _NVML_NO_PERMISSION else nvml.error(code))
        return f"NVML cannot lock its SM clock ({why})"
    if memory and nvml.lib.nvmlDeviceSetMemoryLockedClocks(device, memory, memory) == _NVML_SUCCESS:
        marker["memory_mhz"] = memory
        marker_path.write_text(json.dumps(marker))
    state.locked[ordinal] = target
    state.markers.append(marker_path)
    return None


def _start_guard(markers: Sequence[Path]) -> subprocess.Popen | None:
    """A process that unlocks ``markers``' GPUs once this process's pipe to it closes."""
    try:
        return subprocess.Popen([sys.executable, "-m", "mneme.runtime.clock_guard", str(os.getpid()),
                                 *map(str, markers)], stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                                start_new_session=True, close_fds=True)
    except OSError:
        return None  # the markers remain: the next mneme command repairs them


def _release(state: ClockLock, nvml: _Nvml) -> None:
    for path in state.markers:
        marker = read_marker(path)
        if marker is None or int(marker.get("pid", 0)) != os.getpid():
            continue
        with contextlib.suppress(OSError):
            unlock(nvml, marker)
        path.unlink(missing_ok=True)
    state.markers.clear()
    if state.guard is not None:
        # Its pipe closed, the guard finds nothing of ours left and exits by itself: not
        # waited for, so its interpreter's start never adds to this command's exit.
        with contextlib.suppress(OSError):
            state.guard.stdin.close()  # type: ignore[union-attr]


@contextlib.contextmanager
def held_clocks(policy: str | int, devices: Sequence[int] | None,
                say: Callable[[str], None]) -> Iterator[ClockLock]:
    """Locks the SM clock of each CUDA ordinal in ``devices`` (None: every GPU an
    application here sees) for the block (``policy``: parse_clock_policy's value), and
    gives every lock back however the block ends. Where a GPU cannot be locked, ``say``
    gets one line and the block runs unlocked there."""
    state = ClockLock(policy)
    abandoned = lock_dir().is_dir() and any(lock_dir().glob("*.json"))
    nvml = open_nvml() if (policy != "none" and devices != []) or abandoned else None
    if nvml is not None:
        repair_abandoned_locks(say, nvml)
        if devices is None:
            devices = _visible_ordinals(nvml)
    if nvml is None or policy == "none" or not devices:
        if policy != "none" and devices:
            for ordinal in devices:
                state.unlocked[ordinal] = "NVML (libnvidia-ml.so.1) is not available"
            # (no line: without NVML there is no NVIDIA driver, so nothing is measured)
        yield state
        return
    try:
        for ordinal in devices:
            try:
                reason = _lock_one(nvml, ordinal, policy, state)
            except (OSError, ValueError, IndexError) as error:  # (NVML, the marker, a device list)
                reason = str(error)
            if reason:
                state.unlocked[ordinal] = reason
                say(f"mneme: GPU {ordinal}'s clocks are not locked: {reason}; measuring unlocked "
                    "(--clock-control none says nothing)")
        if state.markers:
            state.guard = _start_guard(state.markers)
        yield state
    finally:
        _release(state, nvml)
