"""Recording overhead and snapshot throughput on a GPU host, in one run.

    python benchmarks/record_overhead.py --plain PLAIN_EXE --instrumented INSTR_EXE [--mib 2048]

Both executables are builds of tests/corpus/cuda/large_working_set (two buffers of --mib
MiB each live, several kernels): PLAIN_EXE with clang++-22, INSTR_EXE with mneme-clang++.
Prints (1) wall time of the plain run, the instrumented run without recording, and the
recorded run (each kernel once, -mr 1), with overhead ratios (goal: not recording <= 1 %),
and (2) snapshot throughput (snapshot bytes / extra time of the recorded run) next to the
raw pinned device-to-host bandwidth measured in the same run with CuPy (goal >= 0.5x).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def wall(command: list[str]) -> float:
    start = time.perf_counter()
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - start


def pinned_d2h_gbs(nbytes: int) -> float:
    import cupy as cp

    device = cp.empty(nbytes, dtype=cp.uint8)
    device.fill(1)
    host = cp.cuda.alloc_pinned_memory(nbytes)
    stream = cp.cuda.Stream(non_blocking=True)
    best = 0.0
    for _ in range(5):
        start = time.perf_counter()
        cp.cuda.runtime.memcpyAsync(host.ptr, device.data.ptr, nbytes,
                                    cp.cuda.runtime.memcpyDeviceToHost, stream.ptr)
        stream.synchronize()
        best = max(best, nbytes / (time.perf_counter() - start) / 1e9)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--plain", type=Path, required=True)
    parser.add_argument("--instrumented", type=Path, required=True)
    parser.add_argument("--mib", type=int, default=2048, help="MiB per buffer (two buffers)")
    args = parser.parse_args()
    from mneme.replay.db import Database

    argv = [str(args.mib)]
    wall([str(args.plain), "4"])  # warm the driver and the file cache
    plain = wall([str(args.plain), *argv])
    instrumented = wall([str(args.instrumented), *argv])
    with tempfile.TemporaryDirectory() as tmp:
        db = Path(tmp) / "bench.rdb"
        recorded = wall([sys.executable, "-m", "mneme.cli", "record", "-rdb", str(db),
                         "-vass", str(max(16, 3 * args.mib // 1024 + 2)), "-mr", "1", "--",
                         str(args.instrumented), *argv])
        database = Database.open(db)
        instances = list(database.instances())
        snapshot = sum(2 * sum(r.size for r in i.regions) for i in instances)
        stored = database.stored_bytes()
    raw = pinned_d2h_gbs(1 << 30)
    extra = max(recorded - instrumented, 1e-9)
    print(f"live device memory      {2 * args.mib / 1024:.1f} GiB, {len(instances)} instances recorded")
    print(f"plain run               {plain:8.2f} s")
    print(f"instrumented, no record {instrumented:8.2f} s   overhead {100 * (instrumented / plain - 1):+.2f} %   (goal <= 1 %)")
    print(f"recorded (-mr 1)        {recorded:8.2f} s   x{recorded / plain:.2f} of plain")
    print(f"snapshot bytes          {snapshot / 2**30:.2f} GiB -> {stored / 2**30:.2f} GiB on disk")
    print(f"snapshot throughput     {snapshot / extra / 1e9:.2f} GB/s vs raw pinned D2H {raw:.2f} GB/s "
          f"= {snapshot / extra / 1e9 / raw:.2f}x (goal >= 0.5x)")


if __name__ == "__main__":
    main()
