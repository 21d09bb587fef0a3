"""Replay throughput on one kernel (GPU).

    hatch run python benchmarks/replay_throughput.py            # builds its own recording
    hatch run python benchmarks/replay_throughput.py --db APP.rdb --rid KERNEL/INSTANCE

Measures verified observations per second for

  (a) launch-configuration changes with the compile cached (one ReplaySession, block size
      cycling through 64..1024, grid adjusted to cover the same elements),
  (b) a fresh default<O3> compile per observation (the compile cache emptied each time),
  (c) the baseline of one ``mneme replay`` subprocess per observation,

and the bandwidth of the per-iteration memory reset next to the device-to-device copy
bandwidth measured on the same GPU. Goals (issue 5): (a) >= 50 obs/s, (b) >= 10 obs/s,
(a)/(c) >= 20x, reset >= 0.7x D2D.

First, without a GPU (``--compile-only`` stops there), it compares the two PTX
assemblers per kernel in one run (issue 12): nvJitLink in-process against the ptxas
executable, on the PTX of the benchmark's saxpy and of tests/jit/kernels (those need
clang++-22), runs interleaved, medians, with the registers/stack each reports.

Without --db it compiles a saxpy kernel with clang++-22 and writes a recording of
2 x --mib MiB (default 64) with the database writer, at 0x240000000000.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
BASE = 0x240000000000
SOURCE = r"""
__global__ void saxpy(float a, const float *x, float *y, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = a * x[i] + y[i];
}
"""
BLOCKS = (64, 128, 256, 512, 1024)


def build_recording(folder: Path, mib: int) -> tuple[Path, str]:
    """A recording of one saxpy instance over 2 x ``mib`` MiB."""
    from mneme.replay.db import (
        DatabaseWriter,
        InstanceRecord,
        KernelRecord,
        Param,
        RecordingInfo,
        Region,
    )

    bitcode = saxpy_bitcode(folder)
    n = mib * (1 << 20) // 4
    rng = np.random.default_rng(0)
    x = rng.integers(-1000, 1000, n).astype(np.float32)
    y = rng.integers(-1000, 1000, n).astype(np.float32)
    out = (np.float32(2.0) * x + y).astype(np.float32)  # integers: exact on any GPU
    xa, ya = BASE, BASE + mib * (1 << 20)
    info = RecordingInfo(
        vas_base=BASE,
        vas_size=4 << 30,
        gpu_name="benchmark",
        compute_capability="9.0",
        command_line=("replay_throughput",),
    )
    params = (Param(4, 4, 0), Param(8, 8, 8, True), Param(8, 8, 16, True), Param(4, 4, 24))
    kernel = KernelRecord(
        static_hash="5a5a5a5a5a5a5a5a",
        name="_Z5saxpyfPKfPfi",
        ir=bitcode.read_bytes(),
        demangled_name="saxpy(float, float const*, float*, int)",
        params=params,
    )
    record = InstanceRecord(
        grid=(-(-n // 256), 1, 1),
        block=(256, 1, 1),
        args=struct.pack("<f4xQQi4x", 2.0, xa, ya, n),
        prologue=(Region("heap", xa, x.view(np.uint8)), Region("heap", ya, y.view(np.uint8))),
        epilogue=(Region("heap", xa, x.view(np.uint8)), Region("heap", ya, out.view(np.uint8))),
    )
    path = folder / "bench.rdb"
    with DatabaseWriter.create(path, info, epilogue_format="bytes") as writer:
        writer.add_kernel(kernel)
        dynamic, _ = writer.add_instance(kernel.static_hash, record)
    return path, f"{kernel.static_hash}/{dynamic}"


def saxpy_bitcode(folder: Path) -> Path:
    """Unoptimised device bitcode of the benchmark's saxpy (prebuilt on GPU hosts)."""
    sys.path.insert(0, str(ROOT / "tests" / "corpus"))
    import build as corpus_build

    source = folder / "saxpy.cu"
    source.write_text(SOURCE)
    bitcode = folder / "saxpy.bc"
    prebuilt = Path(os.environ.get("MNEME_PREBUILT_BITCODE", "/nonexistent")) / "saxpy.bc"
    if prebuilt.is_file():  # GPU hosts have no clang
        shutil.copy(prebuilt, bitcode)
    else:
        flags = corpus_build.cuda_compile_flags(corpus_build.find_cuda_root())
        subprocess.run(
            ["clang++-22", *flags, "--cuda-device-only", "-emit-llvm", "-c", "-O1",
             "-Xclang", "-disable-llvm-passes", str(source), "-o", str(bitcode)],
            check=True,
        )
    return bitcode


def benchmark_kernels(folder: Path) -> dict[str, str]:
    """Kernel name -> its default<O3> PTX: saxpy, and tests/jit/kernels where clang exists."""
    from mneme.replay.jit import CompileConfig, compile_kernel, kernel_names, parse_module

    bitcodes = [saxpy_bitcode(folder)]
    if shutil.which("clang++-22"):
        sys.path.insert(0, str(ROOT / "tests" / "corpus"))
        import build as corpus_build

        flags = corpus_build.cuda_compile_flags(corpus_build.find_cuda_root())
        for source in sorted((ROOT / "tests" / "jit" / "kernels").glob("*.cu")):
            target = folder / f"jit_{source.stem}.bc"
            subprocess.run(
                ["clang++-22", *flags, "--cuda-device-only", "-emit-llvm", "-c",
                 "-Xclang", "-disable-llvm-passes", str(source), "-o", str(target)],
                check=True,
            )
            bitcodes.append(target)
    ptx: dict[str, str] = {}
    for path in bitcodes:
        ir = path.read_bytes()
        for kernel in kernel_names(parse_module(ir)):
            ptx.setdefault(kernel, compile_kernel(ir, CompileConfig(), kernel).ptx)
    return ptx


def compare_assemblers(ptx: dict[str, str], repeats: int) -> list[dict]:
    """Per kernel: median seconds of nvJitLink and of the ptxas executable (PTX → cubin,
    alternating, after one warm-up each), and what each reports."""
    from mneme.replay.jit import run_ptxas
    from mneme.replay.jit.ptxas import assembler_id

    names = {a: assembler_id(a) for a in ("nvjitlink", "ptxas")}
    rows = []
    for kernel, text in ptx.items():
        times: dict[str, list[float]] = {"nvjitlink": [], "ptxas": []}
        results = {}
        for assembler in times:
            results[assembler] = run_ptxas(text, "sm_90", assembler=assembler)  # warm-up
        for _ in range(repeats):
            for assembler, samples in times.items():
                start = time.perf_counter()
                run_ptxas(text, "sm_90", assembler=assembler)
                samples.append(time.perf_counter() - start)
        row = {"kernel": kernel, "assemblers": names}
        for assembler, samples in times.items():
            metrics = results[assembler].metrics[kernel]
            row[assembler] = {
                "median_ms": 1e3 * float(np.median(samples)),
                "registers": metrics.registers,
                "stack_frame_bytes": metrics.stack_frame_bytes,
                "binary_size": len(results[assembler].cubin),
            }
        rows.append(row)
    return rows


def print_assembler_table(rows: list[dict]) -> None:
    names = rows[0]["assemblers"]
    print(f"PTX -> cubin per kernel (sm_90, -O3, medians): nvJitLink = {names['nvjitlink']}, "
          f"ptxas = {names['ptxas']}")
    width = max(len(r["kernel"]) for r in rows)
    print(f"  {'kernel':<{width}}  {'nvJitLink':>10} {'ptxas':>10} {'speedup':>8}  "
          f"{'registers nvJitLink/ptxas':>25}  {'stack nvJitLink/ptxas':>21}")
    for r in rows:
        a, b = r["nvjitlink"], r["ptxas"]
        print(f"  {r['kernel']:<{width}}  {a['median_ms']:8.2f}ms {b['median_ms']:8.2f}ms "
              f"{b['median_ms'] / a['median_ms']:7.2f}x  "
              f"{a['registers']:>14} / {b['registers']:<8}  "
              f"{a['stack_frame_bytes']:>10} / {b['stack_frame_bytes']:<8}")
    total_a = sum(r["nvjitlink"]["median_ms"] for r in rows)
    total_b = sum(r["ptxas"]["median_ms"] for r in rows)
    print(f"  {'all kernels':<{width}}  {total_a:8.2f}ms {total_b:8.2f}ms {total_b / total_a:7.2f}x")


def covering_grid(instance, block: int) -> tuple[int, int, int]:
    threads = instance.grid[0] * instance.block[0]
    return (-(-threads // block), 1, 1)


def observe_cached(session, instance, seconds: float, iterations: int) -> dict:
    from mneme.replay.engine import ReplayConfig
    from mneme.replay.jit import CompileConfig

    config = CompileConfig.for_level("O3")
    count = verified = 0
    session.run(config, ReplayConfig(iterations=1))  # restore + first compile
    start = time.perf_counter()
    while time.perf_counter() - start < seconds:
        block = BLOCKS[count % len(BLOCKS)]
        replay = ReplayConfig(
            block=(block, 1, 1),
            grid=covering_grid(instance, block),
            iterations=iterations,
            warmup=0,
        )
        verified += bool(session.run(config, replay).verified)
        count += 1
    elapsed = time.perf_counter() - start
    return rate(count, verified, elapsed)


def rate(count: int, verified: int, elapsed: float) -> dict:
    """Observations made, of them verified, and verified observations per second."""
    return {"observations": count, "verified": verified, "seconds": elapsed,
            "obs_per_s": verified / elapsed}


def observe_fresh(session, seconds: float, iterations: int) -> dict:
    from mneme.replay.engine import ReplayConfig
    from mneme.replay.jit import CompileConfig

    config = CompileConfig.for_level("O3")
    replay = ReplayConfig(iterations=iterations, warmup=0)
    count = verified = 0
    compile_seconds = 0.0
    start = time.perf_counter()
    while time.perf_counter() - start < seconds:
        session.clear_compiled()  # nothing cached: parse, O3, codegen, ptxas, module load
        result = session.run(config, replay)
        assert not result.compile_cached
        compile_seconds += result.compile_time
        verified += bool(result.verified)
        count += 1
    elapsed = time.perf_counter() - start
    return {**rate(count, verified, elapsed), "mean_compile_ms": 1e3 * compile_seconds / count}


def observe_subprocess(db: Path, rid: str, count: int, iterations: int) -> dict:
    command = [
        sys.executable,
        "-m",
        "mneme.cli",
        "replay",
        "-rdb",
        str(db),
        "-rid",
        rid,
        "--json",
        "--iterations",
        str(iterations),
        "--warmup",
        "0",
        "default<O3>",
    ]
    verified = 0
    start = time.perf_counter()
    for _ in range(count):
        done = subprocess.run(command, capture_output=True, text=True)
        if done.returncode == 0 and json.loads(done.stdout).get("verified"):
            verified += 1
        elif done.returncode not in (0, 1):
            raise SystemExit(f"mneme replay failed: {done.stderr.strip()}")
    elapsed = time.perf_counter() - start
    return rate(count, verified, elapsed)


def bandwidths(session, repeats: int) -> dict:
    """Reset (all recorded bytes, pristine copy → recorded addresses) vs one plain D2D copy
    of the same size between two fresh buffers, both timed with CUDA events."""
    image = session.image()
    device = session.device
    stream = device.stream()
    nbytes = image.reset_bytes
    start, end = device.event(), device.event()

    def timed(action) -> float:
        action()  # warm
        start.record(stream)
        for _ in range(repeats):
            action()
        end.record(stream)
        end.synchronize()
        return start.elapsed_ms(end) / 1e3

    reset_s = timed(lambda: image.reset(stream))
    granule = 2 << 20
    size = -(-(2 * nbytes + (64 << 20)) // granule) * granule
    with device.address_space(0x250000000000, size) as space:
        a, b = space.allocate(nbytes), space.allocate(nbytes)
        copy_s = timed(lambda: device.copy_device_to_device(b, a, nbytes, stream))
    reset_bw = nbytes * repeats / reset_s
    copy_bw = nbytes * repeats / copy_s
    return {
        "bytes": nbytes,
        "reset_GBps": reset_bw / 1e9,
        "d2d_GBps": copy_bw / 1e9,
        "ratio": reset_bw / copy_bw,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--db", type=Path, help="recording database (default: build one)")
    parser.add_argument("--rid", help="KERNEL/INSTANCE to replay (with --db)")
    parser.add_argument("--mib", type=int, default=64, help="MiB per array of the built recording")
    parser.add_argument("--seconds", type=float, default=10.0, help="duration of (a) and (b)")
    parser.add_argument("--subprocess-runs", type=int, default=5, help="observations for (c)")
    parser.add_argument(
        "--iterations", type=int, default=1, help="timed iterations per observation"
    )
    parser.add_argument("--json", type=Path, help="also write the numbers here")
    parser.add_argument(
        "--compile-only", action="store_true", help="only compare the PTX assemblers (no GPU)"
    )
    parser.add_argument(
        "--compile-repeats", type=int, default=10, help="runs per kernel and assembler"
    )
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="mneme-bench-") as tmp:
        assemblers = compare_assemblers(benchmark_kernels(Path(tmp)), args.compile_repeats)
    print_assembler_table(assemblers)
    if args.compile_only:
        if args.json:
            args.json.write_text(json.dumps({"assemblers": assemblers}, indent=2))
        return

    from mneme.replay.db import Database
    from mneme.replay.engine import ReplaySession, select_instance
    from mneme.runtime import Device, driver_available

    if not driver_available():
        raise SystemExit("replay_throughput needs an NVIDIA GPU and driver past this point "
                         "(--compile-only stops after the assembler comparison)")
    with tempfile.TemporaryDirectory(prefix="mneme-bench-") as tmp:
        if args.db is None:
            db_path, rid = build_recording(Path(tmp), args.mib)
        else:
            db_path, rid = args.db, args.rid
        db = Database.open(db_path)
        instance = select_instance(db, None, rid)
        rid = instance.id
        device = Device(0)
        print(f"device   {device}")
        print(f"kernel   {instance.kernel.demangled_name}  instance {rid}")
        print(f"memory   {sum(r.size for r in instance.regions) / 2**20:.1f} MiB recorded")
        with ReplaySession(instance, device=device) as session:
            cached = observe_cached(session, instance, args.seconds, args.iterations)
            fresh = observe_fresh(session, args.seconds, args.iterations)
            bw = bandwidths(session, repeats=20)
        # the session's address range is free again: the subprocesses can reserve it
        baseline = observe_subprocess(db_path, rid, args.subprocess_runs, args.iterations)

    speedup = cached["obs_per_s"] / baseline["obs_per_s"] if baseline["obs_per_s"] else float("inf")
    rows = [
        (
            "(a) launch config, cached compile",
            f"{cached['obs_per_s']:.1f} obs/s",
            ">= 50",
            cached["obs_per_s"] >= 50,
        ),
        (
            "(b) fresh O3 compile per obs",
            f"{fresh['obs_per_s']:.1f} obs/s (compile {fresh['mean_compile_ms']:.1f} ms)",
            ">= 10",
            fresh["obs_per_s"] >= 10,
        ),
        ("(c) mneme replay subprocess per obs", f"{baseline['obs_per_s']:.2f} obs/s", "", None),
        ("(a)/(c)", f"{speedup:.1f}x", ">= 20x", speedup >= 20),
        (
            "reset bandwidth",
            f"{bw['reset_GBps']:.0f} GB/s vs D2D {bw['d2d_GBps']:.0f} GB/s "
            f"= {bw['ratio']:.2f}x ({bw['bytes'] / 2**20:.0f} MiB)",
            ">= 0.7x",
            bw["ratio"] >= 0.7,
        ),
    ]
    width = max(len(r[0]) for r in rows)
    for name, value, goal, ok in rows:
        status = "" if ok is None else ("PASS" if ok else "FAIL")
        print(f"{name:<{width}}  {value:<48} {goal:<7} {status}")
    unverified = (
        cached["observations"] - cached["verified"] + fresh["observations"] - fresh["verified"]
    )
    if unverified:
        print(f"WARNING: {unverified} observations did not verify")
    if args.json:
        args.json.write_text(
            json.dumps(
                {
                    "device": device.name,
                    "instance": rid,
                    "cached": cached,
                    "fresh": fresh,
                    "subprocess": baseline,
                    "speedup": speedup,
                    "bandwidth": bw,
                    "assemblers": assemblers,
                },
                indent=2,
            )
        )


if __name__ == "__main__":
    main()
