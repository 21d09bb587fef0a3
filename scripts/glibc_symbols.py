"""Check that glibc 2.28 has every C library symbol the native wheels ask for.

    python scripts/glibc_symbols.py --zig ZIG_PYTHON dist/*.whl

auditwheel compares version names only (GLIBC_2.28 is not newer than 2.28). This links a
program that refers to each `symbol@GLIBC_x` the wheels' libraries need, with zig's
stubs of glibc 2.28 (libc, libm, libpthread, libdl: the libraries our modules name), so
a symbol 2.28 lacks in any of them is an undefined-symbol error. ZIG_PYTHON is a Python
with the `ziglang` package (scripts/build_wheels.sh installs it in its tool environment).
Prints one line per missing symbol and exits 1 if there is any.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

GLIBC = "2.28"
UNDEFINED = re.compile(r"\*UND\*\s+\S+\s+\(?(GLIBC_[0-9.]+)\)?\s+(\S+)$")


def glibc_references(library: Path) -> set[tuple[str, str]]:
    """(symbol, version) of every versioned glibc symbol `library` leaves undefined."""
    out = subprocess.run(["objdump", "-T", str(library)], capture_output=True, text=True,
                         check=True).stdout
    return {(m.group(2), m.group(1)) for m in map(UNDEFINED.search, out.splitlines()) if m}


def program(references: set[tuple[str, str]]) -> str:
    """C source that takes the address of each reference (bound to its exact version)."""
    lines = []
    for i, (symbol, version) in enumerate(sorted(references)):
        lines += [f'__asm__(".symver ref{i}, {symbol}@{version}");', f"extern char ref{i};"]
    lines.append("void *table[] = {" + ", ".join(f"&ref{i}" for i in range(len(references)))
                 + "};")
    lines.append("int main(void) { return table[0] == 0; }")
    return "\n".join(lines) + "\n"


def missing(wheels: list[Path], zig_python: str) -> tuple[int, list[str]]:
    """(how many references were checked, the linker's lines about those glibc lacks)."""
    references: set[tuple[str, str]] = set()
    with tempfile.TemporaryDirectory() as tmp:
        for wheel in wheels:
            with zipfile.ZipFile(wheel) as zf:
                for name in zf.namelist():
                    if re.search(r"\.so(\.\d+)*$", name):
                        references |= glibc_references(Path(zf.extract(name, tmp)))
        if not references:
            return 0, []
        source = Path(tmp) / "references.c"
        source.write_text(program(references))
        proc = subprocess.run(
            # -O2 and no sanitizers: in its default debug mode zig cc also builds its UBSan
            # runtime, three quarters of a cold cache's 30 s of CPU (a fresh CI machine's)
            [zig_python, "-m", "ziglang", "cc", "-O2", "-fno-sanitize=all",
             "-target", f"x86_64-linux-gnu.{GLIBC}",
             "-Wl,--no-undefined", str(source), "-lm", "-lpthread", "-ldl",
             "-o", str(Path(tmp) / "references")],
            capture_output=True, text=True)
        errors = [line for line in proc.stderr.splitlines() if "error:" in line]
        if proc.returncode != 0 and not errors:
            errors = [f"zig cc failed: {proc.stderr.strip()[-300:]}"]
        return len(references), errors


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--zig", required=True, help="a Python with the ziglang package")
    parser.add_argument("wheels", nargs="+", type=Path)
    args = parser.parse_args(argv)
    count, errors = missing(args.wheels, args.zig)
    for line in errors:
        print(f"glibc_symbols: {line.strip()}", file=sys.stderr)
    if not errors:
        print(f"glibc_symbols: glibc {GLIBC} has all {count} symbol versions the "
              f"{len(args.wheels)} wheels' libraries need")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
