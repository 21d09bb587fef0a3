"""Build-time and executable-size overhead of mneme-clang++ against plain clang++-22.

Builds every CUDA program of tests/corpus twice in the same run — once with clang++-22,
once with mneme-clang++ (same flags) — alternating which goes first, and prints per
program and in total: build seconds, the ratio (goal <= 1.2x), executable bytes and the
growth (all of it is the non-loaded .mneme.kernels section). It also checks that the
loaded part of each instrumented executable (every SHF_ALLOC section but the build-id
note) is byte-identical to the plain build's: nothing runs differently, so a launch
costs exactly what it did (the per-launch overhead is 0 by construction).

    hatch run python benchmarks/instrument_overhead.py [--repeat N] [--out DIR] [PROGRAM ...]
"""

from __future__ import annotations

import argparse
import importlib.util
import shutil
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def load_corpus_build():
    spec = importlib.util.spec_from_file_location(
        "mneme_corpus_build", REPO / "tests/corpus/build.py"
    )
    module = importlib.util.module_from_spec(spec)
    sys.modules["mneme_corpus_build"] = module
    spec.loader.exec_module(module)
    return module


def loaded_sections_equal(a: Path, b: Path) -> bool:
    """Whether every SHF_ALLOC section but the build-id note has the same bytes in a and b."""
    from mneme.instrument.section import loaded_sections

    ours, theirs = loaded_sections(a), loaded_sections(b)
    for image in (ours, theirs):
        image.pop(".note.gnu.build-id", None)  # it hashes the whole file
    return ours == theirs


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("programs", nargs="*", help="corpus program names (default: all CUDA ones)")
    parser.add_argument("--repeat", type=int, default=1, help="builds per compiler and program")
    parser.add_argument("--out", help="build folder (default: a temporary one)")
    args = parser.parse_args(argv)

    corpus = load_corpus_build()
    wrapper = shutil.which("mneme-clang++") or str(Path(sys.executable).parent / "mneme-clang++")
    plain = "clang++-22"
    programs = [
        p
        for p in corpus.discover_programs("cuda")
        if (not args.programs or p.name in args.programs) and "-lcuda" not in p.link_flags
    ]
    out_root = Path(args.out) if args.out else Path(tempfile.mkdtemp(prefix="mneme-bench-"))
    totals = {"plain": 0.0, "mneme": 0.0}
    sizes = {"plain": 0, "mneme": 0}
    print(
        f"{'program':<22}{'clang++-22 s':>13}{'mneme s':>10}{'ratio':>8}{'plain B':>11}{'mneme B':>11}{'growth':>9}"
    )
    for n, program in enumerate(programs):
        seconds = {"plain": [], "mneme": []}
        exes = {}
        for r in range(args.repeat):
            order = [("plain", plain), ("mneme", wrapper)]
            if (n + r) % 2:
                order.reverse()
            for label, compiler in order:
                out = out_root / label / program.name
                shutil.rmtree(out, ignore_errors=True)
                start = time.perf_counter()
                result = corpus.build_program(program.directory, out, compiler=compiler)
                seconds[label].append(time.perf_counter() - start)
                exes[label] = result.executable
        best = {label: min(values) for label, values in seconds.items()}
        size = {label: exes[label].stat().st_size for label in exes}
        for label in totals:
            totals[label] += best[label]
            sizes[label] += size[label]
        same = loaded_sections_equal(exes["plain"], exes["mneme"])
        print(
            f"{program.name:<22}{best['plain']:>13.2f}{best['mneme']:>10.2f}"
            f"{best['mneme'] / best['plain']:>7.2f}x{size['plain']:>11}{size['mneme']:>11}"
            f"{(size['mneme'] - size['plain']) / size['plain']:>8.1%}"
            + ("" if same else "  LOADED PART DIFFERS")
        )
    ratio = totals["mneme"] / totals["plain"]
    growth = (sizes["mneme"] - sizes["plain"]) / sizes["plain"]
    print(
        f"{'total':<22}{totals['plain']:>13.2f}{totals['mneme']:>10.2f}{ratio:>7.2f}x"
        f"{sizes['plain']:>11}{sizes['mneme']:>11}{growth:>8.1%}"
    )
    print(
        f"build-time ratio {ratio:.3f}x (goal <= 1.2x); executable size growth {growth:.1%} "
        f"(+{(sizes['mneme'] - sizes['plain']) / len(programs) / 1024:.1f} KiB per program, not loaded at run time)"
    )
    return 0 if ratio <= 1.2 else 1


if __name__ == "__main__":
    sys.exit(main())
