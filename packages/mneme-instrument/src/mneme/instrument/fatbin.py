"""Read the CUDA fatbinary of an nvcc-built executable, shared library or object.

Pure Python (stdlib; zstd through ``compression.zstd``, the ``zstandard`` module or the
system's libzstd, whichever exists; LZ4 through the system's liblz4 or our own decoder),
and it never runs the file it reads::

    from mneme.instrument.fatbin import read_fatbin, fatbin_kernels
    entries = read_fatbin("./app")        # FatbinEntry: kind, arch, compression, data, ...
    for k in fatbin_kernels(entries):     # FatbinKernel: name, demangled, kind, arch, size
        ...

Layout (``.nv_fatbin``; ``__nv_relfatbin`` in -rdc objects), as nvcc 12/13 write it and
docs/instrument.md describes: the section is a concatenation of containers, each 8-byte
aligned (zero padding between them):

    container header (16 bytes): u32 magic 0xBA55ED50, u16 version 1, u16 header size,
                                 u64 size of the entries that follow
    entry header (>= 64 bytes):  u16 kind (1 PTX, 2 ELF cubin, 8 LTO-IR), u16 version,
        u32 header size, u64 payload size (padded), u32 compressed size, u32 reserved,
        u16 minor, u16 major (PTX ISA or ELF ABI version), u32 arch (90 = sm_90),
        u32 name offset, u32 name size, u64 flags, u64 reserved, u64 uncompressed size
    flags: 0x1 64-bit, 0x2 debug, 0x10 Linux host, 0x2000 LZ4 (block) compressed,
           0x8000 zstd (frame) compressed

By default nvcc 13 compresses the PTX entries with zstd and leaves cubins as they are
(``-Xfatbin=-compress-all`` compresses cubins too; ``--compress-mode=speed`` uses LZ4).

Every size is checked against what the file holds and against the limits below: a
damaged or hostile file gives one FatbinError line.
"""

from __future__ import annotations

import os
import re
import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ._cubin import cubin_arch, parse_cubin, ptx_entries
from ._decompress import lz4, zstd_frame
from .demangle import demangle
from .errors import FatbinError, NoFatbinError, SectionError
from .section import elf_sections

__all__ = [
    "FATBIN_MAGIC",
    "FatbinEntry",
    "FatbinError",
    "FatbinKernel",
    "NoFatbinError",
    "demangle",
    "fatbin_kernels",
    "image_kind",
    "parse_code_image",
    "parse_cubin",
    "parse_fatbin",
    "ptx_entries",
    "read_code_file",
    "read_fatbin",
]

FATBIN_MAGIC = 0xBA55ED50
SECTIONS = (".nv_fatbin", "__nv_relfatbin")
CONTAINER = struct.Struct("<IHHQ")
ENTRY = struct.Struct("<HHIQIIHHIIIQQQ")
KIND_PTX, KIND_ELF, KIND_LTOIR = 1, 2, 8
FLAG_LZ4 = 0x2000
FLAG_ZSTD = 0x8000
#: Largest uncompressed entry we decompress, and largest section we read.
MAX_ENTRY_BYTES = 256 << 20
MAX_ENTRIES = 100_000


@dataclass(frozen=True)
class FatbinKernel:
    """One kernel in one code entry: its SASS (cubin) or its PTX.

    Attributes:
        name: mangled, as __cudaRegisterFunction receives it
        demangled: its demangled name.
        kind: "sass" or "ptx"
        arch: "sm_90" (SASS) or "compute_90" (PTX)
        size: bytes of its .text section (SASS) or of its .entry text (PTX)
        entry: index of its FatbinEntry
        registers: SASS: from the cubin's .nv.info
        frame_bytes: SASS: its stack frame bytes, from the cubin's .nv.info.
    """

    name: str
    demangled: str
    kind: str
    arch: str
    size: int
    entry: int
    registers: int | None = None
    frame_bytes: int | None = None

    def to_dict(self) -> dict[str, Any]:
        """The kernel as plain JSON data.

        Returns:
            Its fields.
        """
        return dict(self.__dict__)


@dataclass(frozen=True)
class FatbinEntry:
    """One code entry of a fatbinary container.

    Attributes:
        index: its position among the section's entries.
        container: index of its container in the section
        offset: of its header within the section
        kind: "ptx", "cubin", "ltoir" or "kind-<n>"
        arch: "sm_90" for cubins, "compute_90" for PTX
        version: PTX ISA ("9.0") or ELF ABI version
        flags: the entry's flags (0x2: debug, compression).
        compression: "zstd", "lz4" or None
        stored_size: payload bytes in the file
        size: payload bytes once decompressed
        data: the payload, decompressed; None where that failed
        error: why its payload could not be decompressed; None when it was.
        kernels: the kernels it defines.
    """

    index: int
    container: int
    offset: int
    kind: str
    arch: str
    version: str
    flags: int
    compression: str | None
    stored_size: int
    size: int
    data: bytes | None
    error: str | None = None
    kernels: tuple[FatbinKernel, ...] = field(default=())

    @property
    def debug(self) -> bool:
        return bool(self.flags & 0x2)

    def text(self) -> str:
        """The PTX of a PTX entry.

        Returns:
            The PTX text.

        Raises:
            FatbinError: the entry holds something else, or could not be decompressed.
        """
        if self.kind != "ptx":
            raise FatbinError(f"entry {self.index} holds a {self.kind}, not PTX")
        if self.data is None:
            raise FatbinError(f"entry {self.index}: {self.error}")
        return self.data.rstrip(b"\0").decode(errors="replace").lstrip("\n")

    def to_dict(self) -> dict[str, Any]:
        """The entry as plain JSON data (its kernels by name, not its payload).

        Returns:
            Its fields.
        """
        out = {k: v for k, v in self.__dict__.items() if k not in ("data", "kernels")}
        out["kernels"] = [k.name for k in self.kernels]
        return out


# -- fatbinary ----------------------------------------------------------------------


def parse_fatbin(section: bytes, where: str = "fatbinary") -> list[FatbinEntry]:
    """Every code entry of a fatbinary section, decompressed, with the kernels each
    defines (demangled).

    Parameters:
        section: the bytes of ``.nv_fatbin`` (one or more containers).
        where: the file and section, for messages.

    Returns:
        The entries, in order.

    Raises:
        FatbinError: a truncated or damaged container, or too many entries.
    """
    raw: list[FatbinEntry] = []
    pos, end, container = 0, len(section), 0
    while pos < end:
        if section[pos] == 0:  # alignment padding between containers
            pos += 1
            continue
        if end - pos < CONTAINER.size:
            raise FatbinError(f"{where}: truncated fatbinary header at offset {pos}")
        magic, version, header_size, size = CONTAINER.unpack_from(section, pos)
        if magic != FATBIN_MAGIC:
            raise FatbinError(
                f"{where}: no fatbinary magic at offset {pos} (found {magic:#010x}); "
                "the section is damaged"
            )
        body = pos + header_size
        if header_size < CONTAINER.size or size > end - body:
            raise FatbinError(f"{where}: the fatbinary at offset {pos} runs past the section's end")
        raw += _entries(section, body, body + size, container, len(raw), where)
        if len(raw) > MAX_ENTRIES:
            raise FatbinError(f"{where}: more than {MAX_ENTRIES} code entries")
        pos = body + size
        container += 1
    names = sorted({k.name for e in raw for k in e.kernels})
    readable = dict(zip(names, demangle(names), strict=True))
    return [
        _replace(e, kernels=tuple(_replace(k, demangled=readable[k.name]) for k in e.kernels))
        for e in raw
    ]


def _replace(obj, **changes):
    values = dict(obj.__dict__)
    values.update(changes)
    return type(obj)(**values)


def _entries(
    section: bytes, pos: int, end: int, container: int, first: int, where: str
) -> list[FatbinEntry]:
    entries: list[FatbinEntry] = []
    while pos < end:
        if end - pos < ENTRY.size:
            raise FatbinError(f"{where}: truncated code entry header at offset {pos}")
        (
            kind,
            _version,
            header_size,
            payload_size,
            compressed_size,
            _reserved,
            minor,
            major,
            arch,
            _name_offset,
            _name_size,
            flags,
            _zero,
            uncompressed_size,
        ) = ENTRY.unpack_from(section, pos)
        start = pos + header_size
        if header_size < ENTRY.size or payload_size > end - start:
            raise FatbinError(f"{where}: code entry at offset {pos} runs past its fatbinary")
        payload = section[start : start + payload_size]
        index = first + len(entries)
        entries.append(
            _entry(index, container, pos, kind, minor, major, arch, flags, payload,
                   compressed_size, uncompressed_size)
        )
        pos = start + payload_size
    return entries


def _entry(
    index: int,
    container: int,
    offset: int,
    kind_code: int,
    minor: int,
    major: int,
    arch: int,
    flags: int,
    payload: bytes,
    compressed_size: int,
    uncompressed_size: int,
) -> FatbinEntry:
    kind = {KIND_PTX: "ptx", KIND_ELF: "cubin", KIND_LTOIR: "ltoir"}.get(kind_code, f"kind-{kind_code}")
    prefix = "compute" if kind in ("ptx", "ltoir") else "sm"
    compression = "zstd" if flags & FLAG_ZSTD else "lz4" if flags & FLAG_LZ4 else None
    data: bytes | None = payload
    error = None
    size = len(payload)
    if compression:
        size = uncompressed_size
        stored = payload[: compressed_size] if 0 < compressed_size <= len(payload) else payload
        if not 0 < uncompressed_size <= MAX_ENTRY_BYTES:
            data, error = None, (
                f"{compression}-compressed entry claims {uncompressed_size} bytes "
                f"(limit {MAX_ENTRY_BYTES})"
            )
        else:
            try:
                decode = zstd_frame if compression == "zstd" else lz4
                data = decode(stored, uncompressed_size)
            except ModuleNotFoundError as exc:
                data, error = None, str(exc)
            except Exception as exc:  # noqa: BLE001 - any decoder failure is one line
                data, error = None, f"{compression}-compressed entry does not decode ({exc})"
    kernels: tuple[FatbinKernel, ...] = ()
    arch_name = f"{prefix}_{arch}"
    if data is not None:
        try:
            if kind == "cubin":
                kernels = tuple(
                    FatbinKernel(name, name, "sass", arch_name, text, index, regs, frame)
                    for name, text, regs, frame in parse_cubin(data)
                )
            elif kind == "ptx":
                kernels = tuple(
                    FatbinKernel(name, name, "ptx", arch_name, text, index)
                    for name, text in ptx_entries(data.rstrip(b"\0").decode(errors="replace"))
                )
        except FatbinError as exc:
            error = str(exc)
    return FatbinEntry(
        index=index,
        container=container,
        offset=offset,
        kind=kind,
        arch=arch_name,
        version=f"{major}.{minor}",
        flags=flags,
        compression=compression,
        stored_size=len(payload),
        size=size,
        data=data,
        error=error,
        kernels=kernels,
    )


# -- files --------------------------------------------------------------------------


def read_fatbin(path: str | os.PathLike) -> list[FatbinEntry]:
    """Every code entry of the fatbinaries in an ELF file.

    Parameters:
        path: an executable, shared object or object file built by nvcc.

    Returns:
        The entries.

    Raises:
        NoFatbinError: the file has no fatbinary.
        FatbinError: it is damaged.
    """
    found = elf_sections(Path(path), lambda name, _flags: name in SECTIONS)
    for name in SECTIONS:
        if name in found and found[name][1]:
            return parse_fatbin(found[name][1], f"{path}: {name}")
    raise NoFatbinError(
        f"{path}: no CUDA fatbinary (no .nv_fatbin section): not built by nvcc with device code"
    )


EM_CUDA = 190
MAX_IMAGE_BYTES = 1 << 30


def image_kind(image: bytes) -> str | None:
    """What a code image is, from its first bytes.

    Parameters:
        image: the bytes.

    Returns:
        ``fatbin``, ``cubin``, ``ptx``, or None for anything else.
    """
    if len(image) >= CONTAINER.size and CONTAINER.unpack_from(image, 0)[0] == FATBIN_MAGIC:
        return "fatbin"
    if image[:4] == b"\x7fELF":
        return "cubin" if image[18:20] == EM_CUDA.to_bytes(2, "little") else None
    head = image[:4096].split(b"\0", 1)[0]
    if re.search(rb"^\s*\.version\s+\d+\.\d+", head, re.M):
        return "ptx"
    return None


def parse_code_image(
    image: bytes, where: str = "image", first_container_only: bool = True
) -> list[FatbinEntry]:
    """The code entries of what ``cuModuleLoadData``/``cuLibraryLoadData`` accept, or a
    fatbinary ``__cudaRegisterFatBinary`` registers: a fatbinary (its entries; of the first
    container only, as an image in memory is, unless ``first_container_only`` is False), a
    cubin (one SASS entry) or PTX text (one PTX entry, NUL-terminated or not).

    Parameters:
        image: the bytes.
        where: where they come from, for messages.
        first_container_only: of a fatbinary, read only the first container (as an
            image in memory is read).

    Returns:
        The code entries.

    Raises:
        FatbinError: neither a fatbinary, a cubin nor PTX text (or an ELF file for
            another machine).
    """
    if image_kind(image) == "fatbin":
        _, _, header_size, size = CONTAINER.unpack_from(image, 0)
        end = header_size + size if first_container_only else len(image)
        return parse_fatbin(image[: min(end, len(image))], where)
    if image[:4] == b"\x7fELF":
        if len(image) < 20 or int.from_bytes(image[18:20], "little") != EM_CUDA:
            raise FatbinError(f"{where}: an ELF file that is not a CUDA cubin (machine != EM_CUDA)")
        arch = cubin_arch(image)
        kind, prefix = KIND_ELF, "sm"
        version = (image[8], 0)
    else:
        text = image.split(b"\0", 1)[0]
        match = re.search(rb"^\s*\.target\s+sm_(\d+)", text, re.M)
        if not re.search(rb"^\s*\.version\s+\d+\.\d+", text, re.M) or match is None:
            raise FatbinError(f"{where}: neither a fatbinary, a cubin nor PTX text")
        arch, kind, prefix = f"sm_{int(match.group(1))}", KIND_PTX, "compute"
        found = re.search(rb"^\s*\.version\s+(\d+)\.(\d+)", text, re.M)
        version = (int(found.group(1)), int(found.group(2)))  # type: ignore[union-attr]
        image = text
    number = int(arch.split("_")[1])
    entry = _entry(0, 0, 0, kind, version[1], version[0], number, 0x11, image, 0, 0)
    entry = _replace(entry, arch=f"{prefix}_{number}")
    names = [k.name for k in entry.kernels]
    readable = dict(zip(names, demangle(names), strict=True))
    return [_replace(entry, kernels=tuple(_replace(k, demangled=readable[k.name], arch=entry.arch)
                                          for k in entry.kernels))]


def read_code_file(path: str | os.PathLike) -> list[FatbinEntry]:
    """The code entries of a file.

    Parameters:
        path: an ELF executable, library or object with a fatbinary, or a .cubin,
            .fatbin or .ptx file.

    Returns:
        The entries.

    Raises:
        SectionError: no such file, a folder, no permission, or a file that is none of
            these.
        FatbinError: a code image larger than ``MAX_IMAGE_BYTES``, or damaged.
        NoFatbinError: an ELF file without a fatbinary.
    """
    path = Path(path)
    try:
        with open(path, "rb") as f:
            head = f.read(20)
    except FileNotFoundError:
        raise SectionError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise SectionError(f"{path}: is a directory, not an executable") from None
    except PermissionError:
        raise SectionError(f"{path}: permission denied") from None
    if head[:4] == b"\x7fELF" and int.from_bytes(head[18:20], "little") != EM_CUDA:
        return read_fatbin(path)
    if path.stat().st_size > MAX_IMAGE_BYTES:
        raise FatbinError(f"{path}: larger than {MAX_IMAGE_BYTES} bytes; not a code image")
    try:
        return parse_code_image(path.read_bytes(), str(path), first_container_only=False)
    except FatbinError as error:
        if head[:4] == b"\x7fELF":
            raise
        raise SectionError(
            f"{path}: not an ELF file (executable, shared library or object), cubin, "
            "fatbinary or PTX"
        ) from error


def fatbin_kernels(entries: list[FatbinEntry]) -> list[FatbinKernel]:
    """Every kernel of every entry.

    Parameters:
        entries: the entries.

    Returns:
        The kernels in entry order (one per code object it is in).
    """
    return [k for e in entries for k in e.kernels]
