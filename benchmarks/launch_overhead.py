"""Per-launch overhead of an instrumented executable that is not being recorded (GPU).

    python benchmarks/launch_overhead.py [--build-only DIR] [--prebuilt DIR] [--launches 200000]

Builds one launch-bound program (an empty kernel launched back to back, timed inside the
program) with plain clang++-22 and with mneme-clang++, runs the two alternately --rounds times
and prints the median ns/launch of each, their ratio (goal: <= 1.01) and the run-to-run
spread, which on a shared GPU host is larger than the goal. `--build-only DIR`
only builds (on a machine with clang); `--prebuilt DIR` runs binaries built that way
(on a GPU host without clang).
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SOURCE = r"""
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cuda_runtime.h>
__global__ void empty_kernel(int *p, int v) { if (p && v < 0) *p = v; }
int main(int argc, char **argv) {
  long n = argc > 1 ? std::atol(argv[1]) : 200000;
  for (int i = 0; i < 1000; ++i) empty_kernel<<<1, 32>>>(nullptr, i);  // warm up
  cudaDeviceSynchronize();
  auto start = std::chrono::steady_clock::now();
  for (long i = 0; i < n; ++i) empty_kernel<<<1, 32>>>(nullptr, int(i));
  cudaDeviceSynchronize();
  double ns = std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - start).count();
  if (cudaGetLastError() != cudaSuccess) return 1;
  std::printf("%.1f\n", ns / n);
  return 0;
}
"""


def build(out: Path) -> None:
    sys.path.insert(0, str(ROOT / "tests" / "corpus"))
    import build as corpus_build

    cuda = corpus_build.find_cuda_root()
    flags = corpus_build.cuda_compile_flags(cuda)
    libdir = corpus_build.cuda_library_dir(cuda)
    out.mkdir(parents=True, exist_ok=True)
    source = out / "launches.cu"
    source.write_text(SOURCE)
    for compiler, name in (("clang++-22", "plain"), ("mneme-clang++", "instrumented")):
        subprocess.run([compiler, *flags, "-O2", str(source), "-o", str(out / name),
                        f"-L{libdir}", "-lcudart", f"-Wl,-rpath,{libdir}"], check=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--build-only", type=Path)
    parser.add_argument("--prebuilt", type=Path)
    parser.add_argument("--launches", type=int, default=200000)
    parser.add_argument("--rounds", type=int, default=15, help="alternating runs of each build")
    args = parser.parse_args()
    if args.build_only:
        build(args.build_only)
        return
    with tempfile.TemporaryDirectory() as tmp:
        folder = args.prebuilt or Path(tmp)
        if not args.prebuilt:
            build(folder)
        times = {"plain": [], "instrumented": []}
        for _ in range(args.rounds):
            for name in times:
                out = subprocess.run([str(folder / name), str(args.launches)], check=True,
                                     capture_output=True, text=True).stdout
                times[name].append(float(out.strip()))
    med = {k: statistics.median(v) for k, v in times.items()}
    spread = statistics.pstdev(times["plain"]) / med["plain"]
    print(f"plain clang++-22      median {med['plain']:8.1f} ns/launch  (min {min(times['plain']):.1f})")
    print(f"mneme-clang++         median {med['instrumented']:8.1f} ns/launch  (min {min(times['instrumented']):.1f}, not recording)")
    print(f"ratio of medians      {med['instrumented'] / med['plain']:8.3f}  (goal <= 1.01); "
          f"run-to-run spread of the plain build {100 * spread:.1f} %")


if __name__ == "__main__":
    main()
