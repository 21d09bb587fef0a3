"""Helpers of the examples tests: examples/build.py, the expected kernels, and the helpers of
tests/record (checksum lines, `mneme record`) and tests/instrument (toolchain, `mneme`)."""

from __future__ import annotations

import hashlib
import sys
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]
EXAMPLES = TESTS.parent / "examples"
for _folder in ("record", "instrument"):  # their support modules, reused as they are
    if str(TESTS / _folder) not in sys.path:
        sys.path.append(str(TESTS / _folder))

from instrument_support import corpus_build, require_toolchain, run_mneme  # noqa: E402
from record_support import checklines, mneme_record  # noqa: E402
from script_modules import load_script  # noqa: E402

examples_build = load_script("examples/build.py")
PROGRAMS = examples_build.PROGRAMS

#: every __global__ kernel of each program, demangled as llvm-cxxfilt prints it
KERNELS = {
    "cg_solver": (
        "cg_init(CgState const*)",
        "cg_reduce(double const*, int, CgScalars*, ReduceOp)",
        "cg_update_p(CgState const*)",
        "cg_update_xr(CgState const*)",
        "dot_partial(Vector, Vector, double*)",
        "spmv_csr(CsrMatrix, Vector, Vector)",
    ),
    "stencil": (
        "heat_naive(float const*, float*, int, int, float)",
        "heat_tiled(float const*, float*, int, int, float)",
    ),
}

#: regions whose bytes are device pointers: their checksums depend on the run's addresses
POINTER_REGIONS = {"state"}

MAX_LAUNCHES = 300  # a default run stays small enough to ship its recording


__all__ = [
    "EXAMPLES",
    "KERNELS",
    "MAX_LAUNCHES",
    "POINTER_REGIONS",
    "PROGRAMS",
    "ChecksumCache",
    "checklines",
    "corpus_build",
    "examples_build",
    "launches",
    "mneme_record",
    "require_toolchain",
    "run_mneme",
]


def launches(stdout: str) -> dict[int, dict]:
    """launch index -> {"kernel", "before": [(label, size, checksum)], "after": [...]}."""
    result: dict[int, dict] = {}
    for c in checklines.parse_output(stdout):
        entry = result.setdefault(c.launch, {"kernel": c.kernel, "before": [], "after": []})
        assert entry["kernel"] == c.kernel, f"launch {c.launch} reports two kernels"
        entry[c.phase].append((c.label, c.size, c.checksum))
    return result


class ChecksumCache:
    """FNV-1a 64 of recorded regions as the programs print it (checklines.fnv1a64_hex), each
    distinct content hashed once: the pure-Python FNV is slow and most regions (the matrix,
    unchanged vectors) repeat across instances."""

    def __init__(self):
        self._by_digest: dict[bytes, str] = {}

    def fnv(self, data: bytes) -> str:
        key = hashlib.blake2b(data, digest_size=32).digest()
        if key not in self._by_digest:
            self._by_digest[key] = checklines.fnv1a64_hex(data)
        return self._by_digest[key]

    def sums(self, instance, side: str) -> set[tuple[int, str]]:
        """(size, checksum) of every heap region of an instance before or after its launch."""
        read = instance.prologue if side == "before" else instance.epilogue
        return {
            (r.size, self.fnv(read(r.name).tobytes())) for r in instance.regions if r.kind == "heap"
        }

    def matches(self, instance, launch: dict) -> bool:
        """Every region the program reported around this launch is one the instance recorded,
        with the same bytes, before and after."""
        return all(
            {(size, checksum) for _, size, checksum in launch[side]} <= self.sums(instance, side)
            for side in ("before", "after")
        )
