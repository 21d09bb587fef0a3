"""Hand-made recordings for the replay-engine tests.

The kernels of tests/replay/kernels are compiled to device bitcode with clang-22 (as the
mneme compiler wrapper records them: -O1 with LLVM passes disabled), their memory is
computed on the host with numpy, and everything is written with the database writer at
addresses inside a recorded address range. GPU tests replay these on the device.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from mneme.replay.db import (
    Annotation,
    DatabaseWriter,
    GlobalVar,
    InstanceRecord,
    KernelRecord,
    Param,
    RecordingInfo,
    Region,
)
from mneme.replay.jit import parse_module

TESTS = Path(__file__).resolve().parents[1]
KERNELS = Path(__file__).resolve().parent / "kernels"
GOLDEN = TESTS / "data" / "golden.rdb"
sys.path.insert(0, str(TESTS / "corpus"))
import build as corpus_build  # noqa: E402

#: our recordings live here (away from the runtime tests' 0x200000000000 and the golden
#: database's 0x7f0000000000)
BASE = 0x210000000000
VAS_SIZE = 1 << 30
MIB2 = 2 << 20
SAXPY = "_Z5saxpyfPKfPfi"
ADD_BIAS = "_Z8add_biasPii"
REVERSE = "_Z14reverse_chunksPf"
SMOOTH = "_Z6smoothPKfPfi"
INFO = RecordingInfo(
    vas_base=BASE,
    vas_size=VAS_SIZE,
    gpu_name="NVIDIA H100 80GB HBM3",
    compute_capability="9.0",
    driver_version="13.0",
    runtime_version="13.0",
    host="replay-tests",
    command_line=("replay_support",),
)


def compile_bitcode(source: Path, out: Path) -> bytes:
    # GPU hosts have no clang: MNEME_PREBUILT_BITCODE=DIR holds <stem>.bc built elsewhere.
    prebuilt = os.environ.get("MNEME_PREBUILT_BITCODE")
    if prebuilt and (Path(prebuilt) / f"{source.stem}.bc").is_file():
        return (Path(prebuilt) / f"{source.stem}.bc").read_bytes()
    if shutil.which("clang++-22") is None:
        pytest.skip("clang++-22 is not installed")
    flags = corpus_build.cuda_compile_flags(corpus_build.find_cuda_root())
    subprocess.run(
        [
            "clang++-22",
            *flags,
            "--cuda-device-only",
            "-emit-llvm",
            "-c",
            "-O1",
            "-Xclang",
            "-disable-llvm-passes",
            str(source),
            "-o",
            str(out),
        ],
        check=True,
        capture_output=True,
    )
    return out.read_bytes()


def static_hash(name: str) -> str:
    return hashlib.sha256(name.encode()).hexdigest()[:16]


def kernel_record(bitcode: bytes, name: str, demangled: str, globals=()) -> KernelRecord:
    function = parse_module(bitcode).function(name)
    params = tuple(
        Param(
            size=a.size,
            align=a.align,
            offset=a.offset,
            is_pointer=a.type == "ptr",
            by_value=a.byval,
        )
        for a in function.arguments
    )
    return KernelRecord(
        static_hash=static_hash(name),
        name=name,
        ir=bitcode,
        demangled_name=demangled,
        params=params,
        globals=tuple(globals),
    )


def heap(address: int, array: np.ndarray) -> Region:
    return Region("heap", address, np.ascontiguousarray(array).view(np.uint8).reshape(-1))


def saxpy_record(n: int = 1000, a: float = 2.0, seed: int = 1) -> InstanceRecord:
    rng = np.random.default_rng(seed)
    x = rng.integers(-100, 100, n).astype(np.float32)
    y = rng.integers(-100, 100, n).astype(np.float32)
    out = (np.float32(a) * x + y).astype(np.float32)  # small integers: exact
    xa, ya = BASE, BASE + MIB2
    return InstanceRecord(
        grid=(-(-n // 256), 1, 1),
        block=(256, 1, 1),
        args=struct.pack("<f4xQQi4x", a, xa, ya, n),
        prologue=(heap(xa, x), heap(ya, y)),
        epilogue=(heap(xa, x), heap(ya, out)),
    )


def add_bias_record(n: int = 777, bias: int = 7) -> InstanceRecord:
    data = np.arange(n, dtype=np.int32) * 3
    address = BASE + 4 * MIB2 + 512  # not granule-aligned on purpose
    g_bias, g_count = 0x1000, 0x1004  # the recording's addresses of the globals
    return InstanceRecord(
        grid=(-(-n // 128), 1, 1),
        block=(128, 1, 1),
        args=struct.pack("<Qi4x", address, n),
        prologue=(
            heap(address, data),
            Region("global", g_bias, np.array([bias], np.int32).view(np.uint8), "g_bias"),
            Region("global", g_count, np.array([5], np.uint32).view(np.uint8), "g_count"),
        ),
        epilogue=(
            heap(address, data + bias),
            Region("global", g_bias, np.array([bias], np.int32).view(np.uint8), "g_bias"),
            Region("global", g_count, np.array([5 + n], np.uint32).view(np.uint8), "g_count"),
        ),
    )


def reverse_record(blocks: int = 8, threads: int = 128) -> InstanceRecord:
    data = np.arange(blocks * threads, dtype=np.float32)
    out = data.reshape(blocks, threads)[:, ::-1].reshape(-1).copy()
    address = BASE + 6 * MIB2
    return InstanceRecord(
        grid=(blocks, 1, 1),
        block=(threads, 1, 1),
        shared_mem=threads * 4,
        args=struct.pack("<Q", address),
        prologue=(heap(address, data),),
        epilogue=(heap(address, out),),
    )


def smooth_record(n: int = 4096, perturb: float = 0.0, annotate=None) -> InstanceRecord:
    """``out`` is numpy's float32 result, optionally perturbed: the device's differs in the
    last bits, so only a tolerance verifies it."""
    rng = np.random.default_rng(3)
    values = rng.uniform(-2, 2, n).astype(np.float32)
    out = (np.sin(values) * np.float32(0.5) + np.exp(-values * values)).astype(np.float32)
    out = (out * np.float32(1 + perturb)).astype(np.float32)
    ia, oa = BASE + 8 * MIB2, BASE + 10 * MIB2
    return InstanceRecord(
        grid=(-(-n // 256), 1, 1),
        block=(256, 1, 1),
        args=struct.pack("<QQi4x", ia, oa, n),
        prologue=(heap(ia, values), heap(oa, np.zeros(n, np.float32))),
        epilogue=(heap(ia, values), heap(oa, out)),
        annotations={} if annotate is None else {f"r-{oa:016x}": annotate},
    )


def write_database(path: Path, workdir: Path) -> Path:
    """A database with one instance of each test kernel (smooth: float32 rtol 1e-5)."""
    bitcode = compile_bitcode(KERNELS / "replay_kernels.cu", workdir / "replay_kernels.bc")
    kernels = {
        SAXPY: ("saxpy(float, float const*, float*, int)", (), saxpy_record()),
        ADD_BIAS: (
            "add_bias(int*, int)",
            (GlobalVar("g_bias", 4, 1), GlobalVar("g_count", 4, 1)),
            add_bias_record(),
        ),
        REVERSE: ("reverse_chunks(float*)", (), reverse_record()),
        SMOOTH: (
            "smooth(float const*, float*, int)",
            (),
            smooth_record(annotate=Annotation("float32", atol=1e-6, rtol=1e-5)),
        ),
    }
    with DatabaseWriter.create(path, INFO) as writer:
        for name, (demangled, globals_, record) in kernels.items():
            writer.add_kernel(kernel_record(bitcode, name, demangled, globals_))
            writer.add_instance(static_hash(name), record)
    return path
