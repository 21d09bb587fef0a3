"""Parse the checksum lines corpus programs print (stdlib only; see README.md).

    MNEME-CHECK <launch-index> <kernel> <before|after> <label> <size-bytes> <fnv1a64-hex>

The kernel name is a demangled C++ name and may contain spaces, so a line is split as:
the first two fields, the last four fields, and the kernel name is everything between.
"""

import re
from dataclasses import dataclass

FNV_OFFSET = 0xCBF29CE484222325
FNV_PRIME = 0x100000001B3
_MASK = (1 << 64) - 1

CHECK_PREFIX = "MNEME-CHECK "
RESULT_OK = "MNEME-RESULT ok"
_HEX16 = re.compile(r"[0-9a-f]{16}")


def fnv1a64(data: bytes) -> int:
    value = FNV_OFFSET
    for byte in data:
        value = ((value ^ byte) * FNV_PRIME) & _MASK
    return value


def fnv1a64_hex(data: bytes) -> str:
    """The checksum as the programs print it: 16 lowercase hex digits."""
    return f"{fnv1a64(data):016x}"


@dataclass(frozen=True)
class CheckLine:
    launch: int
    kernel: str
    phase: str  # "before" or "after"
    label: str  # a device buffer label, or "global:<name>" for a device global
    size: int
    checksum: str  # 16 lowercase hex digits

    @property
    def is_global(self) -> bool:
        return self.label.startswith("global:")


class CheckLineError(ValueError):
    """A MNEME-CHECK line does not follow the protocol."""


def parse_line(line: str) -> CheckLine:
    fields = line.strip().split(" ")
    if len(fields) < 7 or fields[0] != "MNEME-CHECK":
        raise CheckLineError(f"not a MNEME-CHECK line: {line!r}")
    index, phase, label, size, checksum = fields[1], *fields[-4:]
    if not index.isdigit() or not size.isdigit():
        raise CheckLineError(f"launch index and size must be decimal: {line!r}")
    if phase not in ("before", "after"):
        raise CheckLineError(f"phase must be before or after: {line!r}")
    if not _HEX16.fullmatch(checksum):
        raise CheckLineError(f"checksum must be 16 lowercase hex digits: {line!r}")
    return CheckLine(int(index), " ".join(fields[2:-4]), phase, label, int(size), checksum)


def parse_output(stdout: str) -> list[CheckLine]:
    """Every MNEME-CHECK line of a program's stdout, in order (other lines are skipped)."""
    return [parse_line(line) for line in stdout.splitlines() if line.startswith(CHECK_PREFIX)]


def result_ok(stdout: str) -> bool:
    return RESULT_OK in stdout.splitlines()
