"""Loading IR into the binding's Module (one LLVMContext per Module)."""

from __future__ import annotations

import os
from pathlib import Path

from ._llvm import Module
from .errors import InvalidIRError, JitError


def parse_module(data: bytes | str, name: str = "<ir>", verify: bool = True) -> Module:
    """Bitcode (bytes) or textual IR (str or bytes) → Module; verified like opt does."""
    if isinstance(data, str):
        data = data.encode()
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise InvalidIRError(
            f"{name}: IR must be bitcode bytes or IR text, not {type(data).__name__}"
        )
    module = Module.parse(bytes(data), name)
    if verify:
        module.verify()
    return module


def load_module(path: str | os.PathLike, verify: bool = True) -> Module:
    """Read a .bc or .ll file."""
    path = Path(path)
    try:
        data = path.read_bytes()
    except OSError as error:
        raise JitError(f"cannot read IR file {path}: {error.strerror}") from error
    return parse_module(data, str(path), verify=verify)


def kernel_names(module: Module) -> list[str]:
    """Names of the kernels defined in the module."""
    return [f.name for f in module.functions if f.is_kernel and not f.is_declaration]


def needs_libdevice(module: Module) -> bool:
    """True when the module calls libdevice (__nv_*) functions it does not define."""
    return any(f.is_declaration and f.name.startswith("__nv_") for f in module.functions)
