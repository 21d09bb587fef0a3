"""The verification kernels' cubin (verify_kernels.py's IR, compiled for one GPU target).

Every process that verifies on a GPU needs it: each tuner worker, spare and probe worker,
each `mneme replay`. Compiling it (the IR through ``default<O3>``, code generation, the
assembler) took 0.1-0.2 s of a fresh worker's first verified replay, on the path of a
tuning run's baseline, so it is kept on disk, in the compile cache's folder
(``jit.default_cache_dir``: ``$MNEME_COMPILE_CACHE``, else the user's cache), under a key
of the IR, the target and the toolchain's versions; a process finds it there, else
compiles it and leaves it for the next. A folder that cannot be written only costs the
compile.
"""

from __future__ import annotations

import contextlib
from pathlib import Path

from ..files import write_atomic
from .verify_kernels import verification_ir

__all__ = ["verification_cubin"]

_CUBINS: dict[str, bytes] = {}
#: an ELF file's first bytes: a cached file without them is not used
_ELF = b"\x7fELF"


def _cached_path(ir: str, arch: str) -> Path:
    from ..jit import CompileConfig, compile_key, default_cache_dir
    from ..jit.compiler import toolchain_id

    key = compile_key(ir.encode(), "mneme-verify", arch, toolchain_id(CompileConfig(arch=arch)))
    return default_cache_dir() / "verify" / f"{key}.cubin"


def verification_cubin(arch: str) -> bytes:
    """The verification kernels compiled for ``arch``: from this process's memory, else
    the disk cache, else compiled now (and kept in both).

    Parameters:
        arch: the target (``sm_90``).

    Returns:
        The cubin.
    """
    if arch in _CUBINS:
        return _CUBINS[arch]
    ir = verification_ir()
    try:
        path: Path | None = _cached_path(ir, arch)
    except (OSError, RuntimeError):  # (no home folder to find the cache in: compiled)
        path = None
    with contextlib.suppress(OSError):
        cubin = path.read_bytes() if path is not None else b""
        if cubin.startswith(_ELF):
            _CUBINS[arch] = cubin
            return cubin
    from ..jit import parse_module, run_ptxas

    module = parse_module(ir, "mneme-verify")
    module.run_passes("default<O3>", arch)
    ptx = module.emit_assembly(arch, "", 3)
    cubin = run_ptxas(ptx, arch).cubin
    _CUBINS[arch] = cubin
    if path is not None:
        with contextlib.suppress(OSError):  # (a read-only cache: the next process compiles too)
            path.parent.mkdir(parents=True, exist_ok=True)
            write_atomic(path, cubin)
    return cubin
