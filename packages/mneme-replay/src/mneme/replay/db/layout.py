"""Names, paths and constants of the on-disk layout (docs/format.md is the specification).

Every path inside a database is built here from names that were validated first, so no
name read from disk or given by a user can reach outside the database directory.
"""

from __future__ import annotations

import os
import re
import stat
from pathlib import Path

# The format's constants have one definition, shared with the C++ recorder.
from mneme.runtime.recording_format import (  # noqa: F401 (re-exported)
    ARGS,
    ATTRS_KEY,
    EPILOGUE,
    FORMAT_VERSION,
    IN_RANGE_KIND,
    INSTANCES,
    IR,
    KERNELS,
    PEER_KIND,
    PRIVATE_DIR,
    PROLOGUE,
    REGION_KINDS,
)

from .errors import CorruptDataError, InvalidNameError

STAGING_DIR = "staging"
LOCK_FILE = "lock"

EPILOGUE_FORMATS = ("diff", "bytes", "best")
#: what a kernel's ``ir`` array holds: LLVM bitcode (instrumented builds), the CUDA
#: fatbinary the kernel was registered from (nvcc builds: PTX and/or cubin inside), or the
#: PTX text or cubin of a module the application loaded itself (NVRTC output, say)
CODE_KINDS = ("llvm-bitcode", "cuda-fatbin", "ptx", "cubin")

_HASH_RE = re.compile(r"[0-9a-f]{16}")
_REGION_RE = re.compile(r"r-[0-9a-f]{16}")


def check_hash(value: str, what: str) -> str:
    """A static or dynamic hash: exactly 16 lowercase hex digits."""
    if not isinstance(value, str) or not _HASH_RE.fullmatch(value):
        raise InvalidNameError(f"invalid {what} {value!r}: expected 16 lowercase hex digits")
    return value


def region_name(address: int) -> str:
    """Regions are named after their device address, so the name is unique and sortable."""
    return f"r-{address:016x}"


def check_region_name(value: str) -> str:
    if not isinstance(value, str) or not _REGION_RE.fullmatch(value):
        raise InvalidNameError(f"invalid region name {value!r}: expected r-<16 hex digits>")
    return value


def kernel_dir(root: Path, static_hash: str) -> Path:
    return root / KERNELS / check_hash(static_hash, "static hash")


def instance_dir(root: Path, static_hash: str, dynamic_hash: str) -> Path:
    return kernel_dir(root, static_hash) / INSTANCES / check_hash(dynamic_hash, "dynamic hash")


def staging_root(root: Path) -> Path:
    return root / PRIVATE_DIR / STAGING_DIR


def no_symlinks(root: Path, path: Path) -> Path:
    """``path`` (inside ``root``) with no symbolic link on the way: nothing a database
    holds may lead a reader, ``copy`` or ``clean`` outside it."""
    current = root
    for part in path.relative_to(root).parts:
        current = current / part
        try:
            mode = os.lstat(current).st_mode
        except FileNotFoundError:
            return path
        except OSError as exc:
            raise CorruptDataError(f"cannot read {current}: {exc.strerror}") from None
        if stat.S_ISLNK(mode):
            raise CorruptDataError(f"{current} is a symbolic link (not allowed in a database)")
    return path
