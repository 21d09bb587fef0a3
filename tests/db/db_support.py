"""Shared helpers of the recording-database tests (importable: conftest is not)."""

from __future__ import annotations

import os
import subprocess
import sys
import warnings

import numpy as np
from mneme.replay.db import (
    InstanceRecord,
    KernelRecord,
    Param,
    RecordingInfo,
    Region,
)

BASE = 0x7F0000000000
INFO = RecordingInfo(vas_base=BASE, vas_size=1 << 30, gpu_name="test GPU", compute_capability="9.0")
STATIC = "00112233445566ff"
BITCODE = b"BC\xc0\xde" + bytes(range(60))

warnings.filterwarnings("ignore", message="Object at .mneme is not recognized")


def kernel_record(static: str = STATIC) -> KernelRecord:
    return KernelRecord(static, "_Z1kPfi", BITCODE, "k(float*, int)", (Param(8, 8, 0, True), Param(4, 4, 8)))


def simple_instance(seed: int = 0, size: int = 1 << 16, changed: float = 0.01) -> InstanceRecord:
    rng = np.random.default_rng(seed)
    before = rng.integers(0, 256, size, dtype=np.uint8)
    after = before.copy()
    idx = rng.choice(size, max(1, int(size * changed)), replace=False)
    after[idx] ^= 0xFF
    g_before = rng.integers(0, 256, 64, dtype=np.uint8)
    g_after = g_before[::-1].copy()
    args = seed.to_bytes(8, "little") + bytes(4)
    return InstanceRecord(
        grid=(1 + seed % 7, 1, 1),
        block=(128, 1, 1),
        args=args,
        prologue=(Region("heap", BASE, before), Region("global", 0x1000, g_before, "g_table")),
        epilogue=(Region("heap", BASE, after), Region("global", 0x1000, g_after, "g_table")),
    )


def assert_regions_read_back(instance, node, regions) -> None:
    """Each region ``(kind, address, symbol, before, after)`` of ``instance`` reads back
    exactly through our reader and through zarr-python (``node``: the instance's group
    opened with zarr; a ``diff`` epilogue is stored as epilogue XOR prologue)."""
    for kind, address, symbol, before, after in regions:
        name = f"r-{address:016x}"
        info = instance.region(name)
        assert (info.kind, info.size, info.symbol or "") == (kind, before.size, symbol)
        assert instance.prologue(name).tobytes() == before.tobytes()
        assert instance.epilogue(name).tobytes() == after.tobytes()
        stored = node[f"epilogue/{name}"]
        prologue = node[f"prologue/{name}"][:]
        got = stored[:] if stored.attrs["mneme"]["encoding"] == "bytes" else prologue ^ stored[:]
        assert got.tobytes() == after.tobytes()


def random_regions(rng, count, *, base: int, size_of, gap_of) -> list:
    """``count`` regions ``(kind, address, symbol, before, after)`` from ``base`` up, the
    last one a global: ``size_of(i)`` bytes each, ``gap_of()`` bytes apart, epilogues in
    turn unchanged, sparsely changed and rewritten."""
    regions, address = [], base
    for i in range(count):
        size = size_of(i)
        before = rng.integers(0, 256, size, dtype=np.uint8)
        after = before.copy()
        mode = i % 3
        if mode == 1 and size:
            after[rng.integers(0, size, 50)] ^= 0x3C
        elif mode == 2:
            after = rng.integers(0, 256, size, dtype=np.uint8)
        kind, symbol = ("global", f"g_{i}") if i == count - 1 else ("heap", "")
        regions.append((kind, address, symbol, before, after))
        address += size + gap_of()
    return regions


def mneme_piped(*args, columns: int = 40) -> str:
    """The real command with its output piped, as `COLUMNS=40 mneme ... | cat` runs it."""
    env = {**os.environ, "COLUMNS": str(columns)}
    result = subprocess.run([sys.executable, "-m", "mneme.cli", *map(str, args)],
                            capture_output=True, text=True, env=env, check=False)
    assert result.returncode == 0, result.stderr
    return result.stdout
