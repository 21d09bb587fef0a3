"""Itanium C++ names demangled with the toolchain's own tool (llvm-cxxfilt or c++filt),
one process for a whole list."""

from __future__ import annotations

import shutil
import subprocess

__all__ = ["demangle"]


def _demangler() -> list[str] | None:
    for tool in ("llvm-cxxfilt-22", "llvm-cxxfilt", "c++filt"):
        found = shutil.which(tool)
        if found:
            return [found]
    return None


def demangle(names: list[str]) -> list[str]:
    """Demangle Itanium C++ names (llvm-cxxfilt or c++filt, one process for all).

    Parameters:
        names: the mangled names.

    Returns:
        Their demangled names, in order; names it does not know, or all of them where no
        demangler is installed, stay as they are.
    """
    tool = _demangler()
    if not names or tool is None or any("\n" in n for n in names):
        return list(names)
    try:
        result = subprocess.run(
            tool, input="\n".join(names) + "\n", capture_output=True, text=True, timeout=60
        )
    except (OSError, subprocess.TimeoutExpired):
        return list(names)
    lines = result.stdout.splitlines()
    if result.returncode != 0 or len(lines) != len(names):
        return list(names)
    return lines
