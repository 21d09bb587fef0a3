"""The guarded probe: a launch shape tried first with the kernel's guarded variant.

A kernel that assumes its block size (a shared array sized by a constant, a TILE x TILE
tile) writes out of bounds under other shapes, and the fault costs the CUDA context: the
worker process must go, and the driver's fault handling alone takes most of a second.
The guarded variant (``CompileConfig(guard=True)``, native ``llvm_guard.cpp``) checks every
memory access before it is made: an access outside the array it indexes, outside every
allocation of the recording, or misaligned goes to a sink instead and is reported in the
device global ``__mneme_guard_report``. One launch of it answers whether the shape would
fault, with the context intact; only a shape that passes is then replayed as it is.

The guard is checked once per session on the recorded launch shape: if it reports
anything there (memory the recording does not hold, an access the application made
itself), it is not trusted for this instance and the probe launches unguarded, as before.
Where the guarded variant itself faults on the recorded shape (an access the guard's
instrumentation got wrong), the context is lost: the worker that met it leaves a marker
beside the database (``.mneme/guard/<static>/<dynamic>.json``), so that the workers after
it probe that instance unguarded instead of meeting the same fault trial after trial.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from ..files import write_atomic
from ..jit.config import GUARD_RANGES
from .cooperative import check_resident
from .errors import (
    CONTEXT_POISONED,
    LAUNCH_REFUSED,
    KernelFailedError,
    LaunchConfigError,
    OutOfBoundsError,
    ReplayError,
)
from .launch_limits import DEFAULT_SHARED_LIMIT, check_launch, product

if TYPE_CHECKING:
    from .session import ReplaySession

__all__ = ["GUARD_RANGES", "REPORT_SYMBOL", "TABLE_SYMBOL", "OutOfBoundsError", "check",
           "describe", "range_table"]

REPORT_SYMBOL = "__mneme_guard_report"
TABLE_SYMBOL = "__mneme_guard_table"
#: what the report's first word says (llvm_guard.cpp, GuardKind)
_KINDS = {1: "outside the array it indexes", 2: "outside every allocation of the recording",
          3: "at a misaligned address"}


def range_table(ranges: list[tuple[int, int]], limit: int = GUARD_RANGES) -> list[tuple[int, int]]:
    """(begin, end) pairs covering ``ranges`` ((address, size)), at most ``limit``: sorted,
    overlapping ones joined, then the smallest gaps closed until they fit (a gap closed
    lets an access there pass: the guard stays sound for everything else)."""
    spans: list[list[int]] = []
    for address, size in sorted((int(a), int(s)) for a, s in ranges if int(s) > 0):
        if spans and address <= spans[-1][1]:
            spans[-1][1] = max(spans[-1][1], address + size)
        else:
            spans.append([address, address + size])
    while len(spans) > max(1, limit):
        gap = min(range(len(spans) - 1), key=lambda i: spans[i + 1][0] - spans[i][1])
        spans[gap][1] = spans[gap + 1][1]
        del spans[gap + 1]
    return [(lo, hi) for lo, hi in spans]


def describe(report: np.ndarray) -> str | None:
    """What the report (its two 64-bit words) says was caught, or None: nothing."""
    kind, address = int(report[0]), int(report[1])
    if kind == 0:
        return None
    return f"an access {_KINDS.get(kind, f'of kind {kind}')} at {address:#x}"


def _memory(image) -> list[tuple[int, int]]:
    """The memory the recording holds: its heap regions and the globals bound now."""
    ranges = [(r.address, r.size) for r in image.heap]
    ranges += [(g.address, g.region.size) for g in image.globals if g.address is not None]
    return ranges


def _launch(session: ReplaySession, base, replay) -> str | None:
    """One launch of the guarded variant with ``replay``'s shape: what it caught, or None.
    Raises what the replay itself would for a shape the device refuses."""
    from mneme.runtime import DriverError

    from .session import derive_compile_config

    device = session.device
    grid, block, shared = session.launch_shape(replay)
    check_launch(grid, block, shared, device.properties)
    arch, _ = session.target_arch(replay, False)
    config = derive_compile_config(base, session.kernel, session.instance, replay, grid, block,
                                   arch, session.args, session.multiprocessors(False))
    if config.max_threads is not None and product(block) > config.max_threads:
        raise LaunchConfigError(f"block of {product(block)} threads exceeds the kernel's launch "
                                f"bound of {config.max_threads} threads")
    compiled, _ = session.compile(dataclasses.replace(config, guard=True))
    image = session.image()
    try:
        loaded = session._load(compiled)
        image.bind_module(loaded.module)
        function = loaded.function
        if product(block) > int(function.attributes.max_threads_per_block):
            raise LaunchConfigError(
                f"block of {product(block)} threads exceeds what the compiled kernel allows "
                f"({function.attributes.max_threads_per_block} threads)")
        if shared > DEFAULT_SHARED_LIMIT:
            function.set_max_dynamic_shared_memory(shared)
        if session.instance.cooperative:  # (its grid synchronises: launched cooperatively)
            try:
                check_resident(session, function, grid, block, shared)
            except LaunchConfigError:
                # The guard's checks cost registers the kernel's own code does not spend:
                # this shape is not probed; the replay checks co-residency with that code.
                return None
        table = range_table(_memory(image))
        words = np.zeros(1 + 2 * GUARD_RANGES, dtype=np.uint64)
        words[0] = len(table)
        words[1:1 + 2 * len(table)] = np.array(table, dtype=np.uint64).reshape(-1)
        device.copy_to_device(loaded.module.global_address(TABLE_SYMBOL)[0], words)
        report_at = loaded.module.global_address(REPORT_SYMBOL)[0]
        device.fill(report_at, 0, 16)
        needed = max((p.offset + p.size for p in function.params), default=0)
        if session._stream is None:
            session._stream = device.stream()
        stream = session._stream
        image.launched()
        function.launch(grid, block, session.args[:needed], shared, stream,
                        cluster=session.instance.cluster, cooperative=session.instance.cooperative)
        stream.synchronize()
        caught = describe(device.read(report_at, 2, np.uint64))
        image.reset(stream)  # (the replay after it starts from the recorded memory)
        stream.synchronize()
    except DriverError as error:
        raise session._driver_failure(f"the guarded probe launch failed: {error}", error,
                                      LAUNCH_REFUSED, KernelFailedError) from None
    return caught


def _marker(instance) -> Path:
    return (Path(instance.kernel.db.root) / ".mneme" / "guard" / instance.kernel.static_hash
            / f"{instance.dynamic_hash}.json")


def _untrusted(instance) -> str | None:
    """Why an earlier worker found the guard unusable for ``instance`` (None: it did not)."""
    path = _marker(instance)
    try:
        if path.is_symlink() or not path.is_file() or path.stat().st_size > 1 << 16:
            return None
        return str(json.loads(path.read_text()).get("why") or "") or None
    except (OSError, ValueError, AttributeError):
        return None


def _distrust(instance, why: str) -> None:
    """Leave the marker (atomically; nothing where the database is read-only)."""
    path = _marker(instance)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(path, json.dumps({"why": why}).encode())
    except OSError:
        pass


def check(session: ReplaySession, base=None, replay=None) -> None:
    """Try ``replay``'s launch shape with the guarded variant of ``base``'s code (a
    CompileConfig and a ReplayConfig; None: the recorded ones); raise OutOfBoundsError
    when it caught an access that would fault. Nothing to do for a kernel without IR (nvcc
    builds), or where the guard proved untrustworthy."""
    from ..jit import CompileConfig
    from ..jit.errors import JitError
    from .config import ReplayConfig

    base, replay = base or CompileConfig(), replay or ReplayConfig()

    if not session.kernel.has_ir or not session.gpu or session.guard_note is not None:
        return
    try:
        if not session.guard_trusted:
            if (earlier := _untrusted(session.instance)) is not None:
                session.guard_note = f"{earlier}: launch shapes probed unguarded"
                return
            recorded = replay.with_(grid=None, block=None, shared_mem=None)
            try:
                caught = _launch(session, base, recorded)
            except ReplayError as error:  # the guard's own failure blames no probed shape
                if error.kind == CONTEXT_POISONED:
                    _distrust(session.instance, "the guarded variant faulted with the recorded launch "
                                                f"shape ({str(error).splitlines()[0][:200]})")
                    raise
                session.guard_note = (f"the guarded variant does not run with the recorded "
                                      f"launch shape ({error}): launch shapes probed unguarded")
                return
            if caught is not None:
                session.guard_note = (f"the guarded variant reports {caught} with the recorded "
                                      "launch shape: launch shapes probed unguarded")
                return
            session.guard_trusted = True
        caught = _launch(session, base, replay)
    except JitError as error:  # (e.g. the sink's 32 bytes of shared memory do not fit)
        session.guard_note = f"the guarded variant does not compile ({error}): probed unguarded"
        return
    if caught is not None:
        grid, block, _ = session.launch_shape(replay)
        raise OutOfBoundsError(
            f"block {tuple(block)} x grid {tuple(grid)}: the guarded probe caught {caught} "
            "(unguarded, this launch faults)")
