"""The kernel records an object carries: bound to the object's CUDA fatbinary (so the
recorder tells which translation unit a registered fatbinary is), and embedded as the
object's ``.mneme.kernels`` section. Used by the compile wrapper (wrapper.py) and by the
``-fgpu-rdc`` link (rdc.py). Stdlib only, imported at every compile."""

from __future__ import annotations

import os
import subprocess

from . import section_format as fmt
from . import toolchain
from .errors import WrapperError

SECTION_NAME = fmt.SECTION_NAME

__all__ = ["WrapperError", "bind_fatbinary", "embed", "fatbinary_identity"]


def fatbinary_identity(obj: str) -> dict | None:
    """Size and CRC-32 of the CUDA fatbinary clang put in the object (`.nv_fatbin`).

    At run time ``__cudaRegisterFatBinary`` receives a wrapper whose ``data`` points at
    exactly these bytes (header + payload: ``headerSize + fatSize`` bytes), so the
    recorder can tell which translation unit's records a registered fatbinary
    belongs to, even when two TUs define a kernel of the same name.
    """
    import struct
    import zlib

    from .section import read_elf_section

    data = read_elf_section(obj, ".nv_fatbin")
    if not data or len(data) < 16:
        return None
    magic, _version, header_size, fat_size = struct.unpack_from("<IHHQ", data, 0)
    if magic != 0xBA55ED50 or header_size + fat_size > len(data):
        return None
    size = header_size + fat_size
    return {"size": size, "crc32": f"{zlib.crc32(data[:size]):08x}"}


def bind_fatbinary(obj: str, blobs: list[bytes]) -> bytes:
    """The records for `obj`, each with its fatbinary's identity added (non-rdc CUDA)."""
    identity = fatbinary_identity(obj)
    if identity is None:
        return b"".join(blobs)
    from .section import encode_record, parse_section

    out = []
    for blob in blobs:
        for record in parse_section(blob, obj):
            out.append(encode_record({**record.meta, "fatbin": identity}, record.data))
    return b"".join(out)


def embed(llvm: toolchain.Llvm, obj: str, blob: bytes, work: str | os.PathLike) -> None:
    """Append `blob` as the .mneme.kernels section of object `obj` (in place)."""
    blob_file = os.path.join(work, os.path.basename(obj) + ".section")
    with open(blob_file, "wb") as f:
        f.write(blob)
    cmd = [
        str(llvm.tool("llvm-objcopy")),
        f"--add-section={SECTION_NAME}={blob_file}",
        obj,
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        last = (proc.stderr.strip().splitlines() or ["llvm-objcopy failed"])[-1]
        raise WrapperError(f"could not add the {SECTION_NAME} section to {obj}: {last}")
