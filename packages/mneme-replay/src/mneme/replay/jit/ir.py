"""Loading IR into the binding's Module (one LLVMContext per Module)."""

from __future__ import annotations

import os
from pathlib import Path

from ._llvm import Module
from .errors import InvalidIRError, JitError


def parse_module(data: bytes | str, name: str = "<ir>", verify: bool = True) -> Module:
    """Parse IR into a Module of the binding (one LLVMContext each).

    Parameters:
        data: bitcode (bytes) or textual IR (str or bytes).
        name: the module's name in messages.
        verify: run LLVM's verifier, as opt does.

    Returns:
        The module.

    Raises:
        InvalidIRError: ``data`` is neither, does not parse, or does not verify.
    """
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
    """Read a .bc or .ll file.

    Parameters:
        path: the file.
        verify: run LLVM's verifier.

    Returns:
        The module.

    Raises:
        JitError: the file cannot be read (InvalidIRError: it does not parse).
    """
    path = Path(path)
    try:
        data = path.read_bytes()
    except OSError as error:
        raise JitError(f"cannot read IR file {path}: {error.strerror}") from error
    return parse_module(data, str(path), verify=verify)


def kernel_names(module: Module) -> list[str]:
    """The kernels a module defines.

    Parameters:
        module: the module.

    Returns:
        Their names.
    """
    return [f.name for f in module.functions if f.is_kernel and not f.is_declaration]


def needs_libdevice(module: Module) -> bool:
    """Whether a module calls libdevice (``__nv_*``) functions it does not define.

    Parameters:
        module: the module.

    Returns:
        True when it does.
    """
    return any(f.is_declaration and f.name.startswith("__nv_") for f in module.functions)
