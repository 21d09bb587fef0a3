"""Recording overhead and snapshot throughput on a GPU host, in one run.

    python benchmarks/record_overhead.py --plain PLAIN_EXE --instrumented INSTR_EXE \\
        [--mib 2048] [--repeat 5] [--host-memory GiB ...]

Both executables are builds of tests/corpus/cuda/large_working_set (two buffers of --mib
MiB each live, several kernels): PLAIN_EXE with clang++-22, INSTR_EXE with mneme-clang++.
They run with --quiet (no per-launch host checksums), so the times are the kernels' and
the recorder's, not the program's FNV loops.

Prints
(1) wall time of the plain run and of the instrumented run without recording (median of
    --repeat runs, the two alternating so drift hits both), their ratio (goal: not
    recording <= 1 %) next to the plain runs' own spread, and whether the instrumented
    executable's loaded image is byte-identical to the plain build's (then any difference
    is noise: the same instructions run); and the recorded run (each kernel once, -mr 1);
(2) snapshot throughput = snapshot bytes / time the application was blocked in
    snapshots, both from the recorder's own statistics line (`mneme record --stats`),
    next to the raw pinned device-to-host bandwidth measured in the same run with mneme's
    device layer (one large cuMemcpyDtoHAsync into page-locked memory; goal >= 0.5x),
    with the time the application waited while the staging pool grew (`alloc_s`) or
    for the background writes to free staging (`wait_s`, back-pressure at the cap).
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

STATS = re.compile(r"^mneme record: stats (.*)$", re.M)


def wall(command: list[str], repeat: int = 1, env=None) -> tuple[float, subprocess.CompletedProcess]:
    best, result = float("inf"), None
    for _ in range(repeat):
        start = time.perf_counter()
        result = subprocess.run(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env)
        took = time.perf_counter() - start
        if result.returncode != 0:
            sys.exit(f"{' '.join(command)} failed ({result.returncode}):\n{result.stderr}")
        best = min(best, took)
    return best, result


def alternating(commands: list[list[str]], repeat: int) -> list[list[float]]:
    """Wall times of each command, run in turn `repeat` times (drift hits all alike)."""
    times: list[list[float]] = [[] for _ in commands]
    for _ in range(repeat):
        for command, series in zip(commands, times, strict=True):
            series.append(wall(command)[0])
    return times


def parse_stats(stderr: str) -> dict[str, float]:
    match = STATS.search(stderr)
    if not match:
        sys.exit(f"no statistics line in the recorder's output:\n{stderr}")
    return {k: float(v) for k, v in (kv.split("=") for kv in match.group(1).split())}


def raw_pinned_d2h(nbytes: int) -> dict[str, float]:
    """Best-of-5 GB/s of one cuMemcpyDtoHAsync of `nbytes` into pinned memory, plus the
    rate at which page-locked memory is allocated (what a first snapshot pays)."""
    from mneme.runtime import Device

    device = Device(0)
    with device.address_space(base=0x300000000000, size=2 * nbytes) as space:
        src = space.allocate(nbytes)
        device.fill(src, 1, nbytes)
        start = time.perf_counter()
        host = device.pinned_array(nbytes)
        pin_gbs = nbytes / (time.perf_counter() - start) / 1e9
        stream = device.stream()
        best = 0.0
        for _ in range(5):
            start = time.perf_counter()
            device.copy_from_device(host, src, stream)
            stream.synchronize()
            best = max(best, nbytes / (time.perf_counter() - start) / 1e9)
        device.synchronize()
        space.free(src)
    return {"d2h_gbs": best, "pin_gbs": pin_gbs}


def record_once(args, argv: list[str], host_memory: float | None) -> dict:
    from mneme.replay.db import Database
    from mneme.runtime.native_settings import RECORD_DIGESTS, RECORD_PRESTAGE

    extra = ["--host-memory", str(host_memory)] if host_memory else []
    with tempfile.TemporaryDirectory() as tmp:
        db = Path(tmp) / "bench.rdb"
        record = [sys.executable, "-m", "mneme.cli", "record", "-rdb", str(db),
                  "-vass", str(max(16, 3 * args.mib // 1024 + 2)), "-mr", "1", "--stats", *extra,
                  "--", str(args.instrumented), *argv]
        env = {**os.environ, RECORD_PRESTAGE: "0" if args.no_prestage else "1",
               RECORD_DIGESTS: "0" if args.no_digests else "1"}
        recorded, result = wall(record, env=env)
        database = Database.open(db)
        instances = list(database.instances())
        return {"wall": recorded, "stats": parse_stats(result.stderr), "instances": len(instances),
                "snapshot": sum(2 * sum(r.size for r in i.regions) for i in instances),
                "stored": database.stored_bytes(), "disk": database.disk_bytes(),
                "line": STATS.search(result.stderr).group(0)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--plain", type=Path, required=True)
    parser.add_argument("--instrumented", type=Path, required=True)
    parser.add_argument("--mib", type=int, default=2048, help="MiB per buffer (two buffers)")
    parser.add_argument("--repeat", type=int, default=5, help="runs of the plain and instrumented builds each")
    parser.add_argument("--host-memory", type=float, action="append", default=None,
                        help="the recorder's staging cap in GiB (default: its own default); "
                             "repeat the option to record once per cap")
    parser.add_argument("--no-digests", action="store_true",
                        help="copy every epilogue chunk (MNEME_RECORD_DIGESTS=0), to compare")
    parser.add_argument("--no-prestage", action="store_true",
                        help="record without growing the staging memory ahead of the first snapshot "
                             "(MNEME_RECORD_PRESTAGE=0), to compare")
    args = parser.parse_args()

    argv = [str(args.mib), "--quiet"]
    wall([str(args.plain), "4", "--quiet"])  # warm the driver and the file cache
    plain_runs, instrumented_runs = alternating(
        [[str(args.plain), *argv], [str(args.instrumented), *argv]], args.repeat)
    plain, instrumented = statistics.median(plain_runs), statistics.median(instrumented_runs)
    spread = (max(plain_runs) - min(plain_runs)) / plain
    sys.path.insert(0, str(Path(__file__).parent))
    from instrument_overhead import loaded_sections_equal

    identical = "yes" if loaded_sections_equal(args.plain, args.instrumented) else "NO"
    try:
        raw = raw_pinned_d2h(1 << 30)
    except Exception as exc:  # still report the recording
        print(f"raw pinned D2H not measured: {exc}")
        raw = {"d2h_gbs": float("nan"), "pin_gbs": float("nan")}
    print(f"live device memory      {2 * args.mib / 1024:.1f} GiB")
    print(f"plain run               {plain:8.2f} s   median of {args.repeat} "
          f"({min(plain_runs):.2f}..{max(plain_runs):.2f}, spread {100 * spread:.1f} %)")
    print(f"instrumented, no record {instrumented:8.2f} s   median of {args.repeat} "
          f"({min(instrumented_runs):.2f}..{max(instrumented_runs):.2f})   overhead "
          f"{100 * (instrumented / plain - 1):+.2f} %   (goal <= 1 %)")
    print(f"loaded image identical to the plain build's (every SHF_ALLOC section but the "
          f"build-id): {identical}")
    print(f"raw pinned D2H          {raw['d2h_gbs']:.2f} GB/s (1 GiB, one cuMemcpyDtoHAsync); "
          f"page-locking runs at {raw['pin_gbs']:.1f} GB/s")
    for cap in args.host_memory or [None]:
        r = record_once(args, argv, cap)
        stats, snapshot, recorded = r["stats"], r["snapshot"], r["wall"]
        gbs = stats["snapshot_bytes"] / max(stats["blocked_s"], 1e-9) / 1e9
        print(f"--- recorded (-mr 1), staging cap {stats['host_memory_bytes'] / 2**30:.2f} GiB, "
              f"{int(stats['threads'])} writer threads, {r['instances']} instances")
        print(f"  {r['line']}")
        print(f"  wall                  {recorded:8.2f} s   x{recorded / plain:.2f} of plain "
              f"(blocked in snapshots {stats['blocked_s']:.2f} s, kernels {stats['kernel_s']:.2f} s, "
              f"writing after the program's end {stats['drain_s']:.2f} s)")
        print(f"  snapshot bytes        {snapshot / 2**30:.2f} GiB raw (recorder: {stats['snapshot_bytes'] / 2**30:.2f} GiB)"
              f" -> {r['stored'] / 2**30:.2f} GiB stored by the instances -> {r['disk'] / 2**30:.2f} GiB unique "
              f"on disk ({int(stats.get('deduplicated_chunks', 0))} chunks found already stored; "
              f"{stats.get('unchanged_bytes', 0) / 2**30:.2f} GiB of epilogue not copied, unchanged "
              "by the kernel)")
        stages = ("crc_s", "delta_s", "hash_s", "encode_s", "decode_s", "write_s")
        if all(k in stats for k in stages):
            busy = sum(stats[k] for k in stages)
            print("  background            " + ", ".join(
                f"{k[:-2]} {stats[k]:.2f}" for k in stages) + f" thread-s ({busy:.2f} in all on "
                f"{int(stats['threads'])} threads: {stats['snapshot_bytes'] / max(busy, 1e-9) / 1e9:.2f} GB/s "
                "per busy thread)")
        print(f"  staging               peak {stats['peak_staged_bytes'] / 2**30:.2f} GiB, "
              f"{stats['pinned_bytes'] / 2**30:.2f} GiB pinned (the application waited {stats['alloc_s']:.2f} s "
              f"for it), back-pressure waits {stats['wait_s']:.2f} s")
        print(f"  snapshot throughput   {gbs:.2f} GB/s vs raw pinned D2H {raw['d2h_gbs']:.2f} GB/s "
              f"= {gbs / raw['d2h_gbs']:.2f}x (goal >= 0.5x)")
        print(f"  end to end            {snapshot / max(recorded - instrumented, 1e-9) / 1e9:.2f} GB/s "
              f"(snapshot bytes / extra wall time of the recorded run, compression and writes included)")


if __name__ == "__main__":
    main()
