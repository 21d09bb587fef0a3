"""The type stubs of mneme's two nanobind modules, generated from the built modules by
nanobind's stubgen and checked in beside them (PEP 561: the wheels carry them, and mypy
checks the Python code that calls the modules against them).

    python scripts/native_stubs.py          # rewrite both stubs from the built modules
    python scripts/native_stubs.py --check  # exit 1, naming the stale stub, if one differs

tests/test_types.py runs the check, so a binding changed without its stub fails there.
The LLVM version the binding was built against (`LLVM_VERSION`'s value) differs from one
machine to the next: the stub keeps its type only.
"""

from __future__ import annotations

import ast
import importlib
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
#: module -> its stub, relative to the repository root
STUBS = {
    "mneme.runtime._native": "packages/mneme-runtime/src/mneme/runtime/_native.pyi",
    "mneme.replay.jit._llvm": "packages/mneme-replay/src/mneme/replay/jit/_llvm.pyi",
}
#: module-level constants whose value depends on the build machine
_MACHINE_VALUES = re.compile(r"^(LLVM_VERSION: str) = .*$", re.MULTILINE)


def generate(module_name: str) -> str:
    """The stub of built module `module_name`, as stubgen writes it (values that depend on
    the build machine left out)."""
    from nanobind.stubgen import StubGen

    generator = StubGen(importlib.import_module(module_name), quiet=True)
    generator.put(generator.module)
    return _MACHINE_VALUES.sub(r"\1", generator.get())


def same_api(a: str, b: str) -> bool:
    """Whether two stubs declare the same names, signatures and docstrings (their syntax
    trees agree: layout and comments aside, which differ between nanobind releases)."""
    return ast.dump(ast.parse(a)) == ast.dump(ast.parse(b))


def main(argv: list[str]) -> int:
    check = argv == ["--check"]
    stale = []
    for module_name, relative in STUBS.items():
        stub = ROOT / relative
        text = generate(module_name)
        if check:
            if not stub.exists() or not same_api(stub.read_text(), text):
                stale.append(relative)
        else:
            stub.write_text(text)
    for relative in stale:
        print(f"{relative} differs from its built module: run python scripts/native_stubs.py")
    return 1 if stale else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
