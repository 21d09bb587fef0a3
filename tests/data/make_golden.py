"""Write the golden recording database of the current format version (run only when the
format version changes; the databases of earlier versions stay as they are, frozen).

    hatch run python tests/data/make_golden.py

Writes tests/data/golden-v<N>.rdb and golden-v<N>.json (the expected content: metadata
and a SHA-256 of every region before and after); format 1 was golden.rdb/golden.json. The kernels are real: saxpy and row_sum
from tests/jit/kernels/saxpy.cu, compiled to device bitcode with clang-22, with memory
contents computed exactly (integer-valued floats, so every rounding mode agrees).
"""

from __future__ import annotations

import hashlib
import json
import shutil
import struct
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(ROOT / "tests" / "corpus"))
import build as corpus_build  # noqa: E402
from mneme.replay.db import (  # noqa: E402
    Annotation,
    Database,
    DatabaseWriter,
    InstanceRecord,
    KernelRecord,
    Param,
    RecordingInfo,
    Region,
    FORMAT_VERSION,
    fnv1a64,
)

BASE = 0x7F0000000000
MIB2 = 2 << 20
INFO = RecordingInfo(
    vas_base=BASE,
    vas_size=1 << 30,
    gpu_name="NVIDIA H100 80GB HBM3",
    compute_capability="9.0",
    driver_version="13.0",
    runtime_version="13.0",
    host="golden",
    command_line=("./saxpy_app", "1000"),
    created="2026-11-22T00:00:00+00:00",
)


def device_bitcode() -> bytes:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "saxpy.bc"
        flags = corpus_build.cuda_compile_flags(corpus_build.find_cuda_root())
        subprocess.run(
            ["clang++-22", *flags, "--cuda-device-only", "-emit-llvm", "-c", "-O1",
             "-Xclang", "-disable-llvm-passes", str(ROOT / "tests/jit/kernels/saxpy.cu"),
             "-o", str(out)],
            check=True,
        )
        return out.read_bytes()


def saxpy_instance(a: float, n: int, seed: int) -> InstanceRecord:
    rng = np.random.default_rng(seed)
    x = rng.integers(-100, 100, n).astype(np.float32)
    y = rng.integers(-100, 100, n).astype(np.float32)
    out = (np.float32(a) * x + y).astype(np.float32)  # exact: small integers
    xa, ya = BASE, BASE + MIB2
    args = struct.pack("<f4xQQi", a, xa, ya, n)
    return InstanceRecord(
        grid=(-(-n // 256), 1, 1),
        block=(256, 1, 1),
        args=args,
        prologue=(Region("heap", xa, x.view(np.uint8)), Region("heap", ya, y.view(np.uint8))),
        epilogue=(Region("heap", xa, x.view(np.uint8)), Region("heap", ya, out.view(np.uint8))),
        annotations={f"r-{ya:016x}": Annotation("float32", atol=1e-6, rtol=0.0)},
    )


def row_sum_instance(rows: int, cols: int) -> InstanceRecord:
    m = (np.arange(rows * cols) % 7).astype(np.float32)
    out = np.zeros(rows, np.float32)
    result = m.reshape(rows, cols).sum(axis=1, dtype=np.float32)
    ma, oa = BASE, BASE + MIB2
    args = struct.pack("<QQi", ma, oa, cols)
    return InstanceRecord(
        grid=(rows // 64, 1, 1),
        block=(64, 1, 1),
        args=args,
        prologue=(Region("heap", ma, m.view(np.uint8)), Region("heap", oa, out.view(np.uint8))),
        epilogue=(Region("heap", ma, m.view(np.uint8)), Region("heap", oa, result.view(np.uint8))),
    )


def main() -> None:
    stem = "golden" if FORMAT_VERSION == 1 else f"golden-v{FORMAT_VERSION}"
    target = HERE / f"{stem}.rdb"
    shutil.rmtree(target, ignore_errors=True)
    ir = device_bitcode()
    static = f"{fnv1a64(ir):016x}"
    # Both kernels share the translation unit's module; the static hash folds in the name.
    kernels = {
        "_Z5saxpyfPKfPfi": (
            "saxpy(float, float const*, float*, int)",
            (Param(4, 4, 0), Param(8, 8, 8, True), Param(8, 8, 16, True), Param(4, 4, 24)),
        ),
        "_Z7row_sumPKfPfi": (
            "row_sum(float const*, float*, int)",
            (Param(8, 8, 0, True), Param(8, 8, 8, True), Param(4, 4, 16)),
        ),
    }
    hashes = {name: f"{fnv1a64(name.encode(), int(static, 16)):016x}" for name in kernels}
    with DatabaseWriter.create(target, INFO) as db:
        for name, (demangled, params) in kernels.items():
            db.add_kernel(KernelRecord(hashes[name], name, ir, demangled, params))
        db.add_instance(hashes["_Z5saxpyfPKfPfi"], saxpy_instance(2.0, 1000, 1), epilogue_format="diff")
        db.add_instance(hashes["_Z5saxpyfPKfPfi"], saxpy_instance(-3.0, 300, 2), epilogue_format="bytes")
        db.add_instance(hashes["_Z5saxpyfPKfPfi"], saxpy_instance(-3.0, 300, 2), epilogue_format="bytes")
        db.add_instance(hashes["_Z7row_sumPKfPfi"], row_sum_instance(128, 16), epilogue_format="best")
    expected = {"info": {}, "kernels": {}}
    database = Database.open(target)
    expected["info"] = database.info.to_json()
    for kernel in database.kernels():
        entry = {"name": kernel.name, "demangled_name": kernel.demangled_name,
                 "ir_sha256": hashlib.sha256(kernel.ir()).hexdigest(),
                 "params": [p.__dict__ for p in kernel.params], "instances": {}}
        for inst in kernel.instances():
            entry["instances"][inst.dynamic_hash] = {
                "grid": list(inst.grid), "block": list(inst.block), "shared_mem": inst.shared_mem,
                "occurrences": inst.occurrences, "args": inst.args.hex(),
                "epilogue_format": inst.epilogue_format,
                "regions": {
                    r.name: {
                        "address": r.address, "size": r.size,
                        "prologue_sha256": hashlib.sha256(inst.prologue(r.name).tobytes()).hexdigest(),
                        "epilogue_sha256": hashlib.sha256(inst.epilogue(r.name).tobytes()).hexdigest(),
                    }
                    for r in inst.regions
                },
                "annotations": {k: v.to_json() for k, v in inst.annotations.items()},
            }
        expected["kernels"][kernel.static_hash] = entry
    (HERE / f"{stem}.json").write_text(json.dumps(expected, indent=2, sort_keys=True) + "\n")
    print(f"wrote {target} and {stem}.json")


if __name__ == "__main__":
    main()
