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

import ctypes
import ctypes.util
import os
import re
import shutil
import struct
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .section import NotInstrumentedError, SectionError, elf_sections

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
STO_CUDA_ENTRY = 0x10  # st_other bit of a kernel's symbol in a cubin
EIATTR_FRAME_SIZE, EIATTR_REGCOUNT = 0x11, 0x2F
EIFMT_SVAL = 0x04


class FatbinError(SectionError):
    """The fatbinary is damaged, or an entry cannot be decompressed."""


class NoFatbinError(FatbinError, NotInstrumentedError):
    """The file holds no CUDA fatbinary (not nvcc-built, or host code only)."""


@dataclass(frozen=True)
class FatbinKernel:
    """One kernel in one code entry: its SASS (cubin) or its PTX."""

    name: str  # mangled, as __cudaRegisterFunction receives it
    demangled: str
    kind: str  # "sass" or "ptx"
    arch: str  # "sm_90" (SASS) or "compute_90" (PTX)
    size: int  # bytes of its .text section (SASS) or of its .entry text (PTX)
    entry: int  # index of its FatbinEntry
    registers: int | None = None  # SASS: from the cubin's .nv.info
    frame_bytes: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass(frozen=True)
class FatbinEntry:
    """One code entry of a fatbinary container."""

    index: int
    container: int  # index of its container in the section
    offset: int  # of its header within the section
    kind: str  # "ptx", "cubin", "ltoir" or "kind-<n>"
    arch: str  # "sm_90" for cubins, "compute_90" for PTX
    version: str  # PTX ISA ("9.0") or ELF ABI version
    flags: int
    compression: str | None  # "zstd", "lz4" or None
    stored_size: int  # payload bytes in the file
    size: int  # payload bytes once decompressed
    data: bytes | None  # the payload, decompressed; None where that failed
    error: str | None = None
    kernels: tuple[FatbinKernel, ...] = field(default=())

    @property
    def debug(self) -> bool:
        return bool(self.flags & 0x2)

    def text(self) -> str:
        """The PTX of a PTX entry (FatbinError otherwise)."""
        if self.kind != "ptx":
            raise FatbinError(f"entry {self.index} holds a {self.kind}, not PTX")
        if self.data is None:
            raise FatbinError(f"entry {self.index}: {self.error}")
        return self.data.rstrip(b"\0").decode(errors="replace").lstrip("\n")

    def to_dict(self) -> dict[str, Any]:
        out = {k: v for k, v in self.__dict__.items() if k not in ("data", "kernels")}
        out["kernels"] = [k.name for k in self.kernels]
        return out


# -- decompression ------------------------------------------------------------------


_LZ4_LIB: list = []


def _lz4(src: bytes, size: int) -> bytes:
    """One LZ4 block of ``size`` bytes: the system's liblz4 (Debian's liblz4-1, always
    installed) where it loads, else the decoder below (pure Python, slower)."""
    if not _LZ4_LIB:
        try:
            lib = ctypes.CDLL(ctypes.util.find_library("lz4") or "liblz4.so.1")
            lib.LZ4_decompress_safe.argtypes = [
                ctypes.c_char_p, ctypes.c_char_p, ctypes.c_int, ctypes.c_int
            ]
            lib.LZ4_decompress_safe.restype = ctypes.c_int
        except (OSError, AttributeError):
            lib = None
        _LZ4_LIB.append(lib)
    lib = _LZ4_LIB[0]
    if lib is None or len(src) >= 1 << 31:
        return _lz4_block(src, size)
    buffer = ctypes.create_string_buffer(max(size, 1))
    written = lib.LZ4_decompress_safe(src, buffer, len(src), size)
    if written < 0:
        raise ValueError("damaged LZ4 block")
    return _checked(buffer.raw[:written], size)


def _lz4_block(src: bytes, size: int) -> bytes:
    """Decode one LZ4 block whose output is exactly ``size`` bytes (pure Python)."""
    out = bytearray()
    pos, end = 0, len(src)
    while pos < end:
        token = src[pos]
        pos += 1
        literals = token >> 4
        if literals == 15:
            while True:
                if pos >= end:
                    raise ValueError("truncated literal length")
                extra = src[pos]
                pos += 1
                literals += extra
                if extra != 255:
                    break
        if pos + literals > end or len(out) + literals > size:
            raise ValueError("literals run past the block")
        out += src[pos : pos + literals]
        pos += literals
        if pos >= end:
            break  # the last sequence has literals only
        if pos + 2 > end:
            raise ValueError("truncated match offset")
        offset = src[pos] | src[pos + 1] << 8
        pos += 2
        if offset == 0 or offset > len(out):
            raise ValueError("match offset outside the output")
        length = token & 15
        if length == 15:
            while True:
                if pos >= end:
                    raise ValueError("truncated match length")
                extra = src[pos]
                pos += 1
                length += extra
                if extra != 255:
                    break
        length += 4
        if len(out) + length > size:
            raise ValueError("match runs past the declared size")
        start = len(out) - offset
        if length <= offset:
            out += out[start : start + length]
        else:  # overlapping copy: the pattern repeats
            pattern = bytes(out[start:])
            out += (pattern * (length // offset + 1))[:length]
    if len(out) != size:
        raise ValueError(f"{len(out)} bytes decoded, {size} declared")
    return bytes(out)


def _zstd_system():
    name = ctypes.util.find_library("zstd") or "libzstd.so.1"
    try:
        lib = ctypes.CDLL(name)
    except OSError:
        return None
    lib.ZSTD_decompress.argtypes = [ctypes.c_char_p, ctypes.c_size_t, ctypes.c_char_p, ctypes.c_size_t]
    lib.ZSTD_decompress.restype = ctypes.c_size_t
    lib.ZSTD_isError.argtypes = [ctypes.c_size_t]
    lib.ZSTD_isError.restype = ctypes.c_uint
    return lib


_ZSTD_LIB: list = []


def _zstd(src: bytes, size: int) -> bytes:
    """One zstd frame whose content is ``size`` bytes."""
    try:
        from compression import zstd  # Python >= 3.14

        return _checked(zstd.decompress(src), size)
    except ImportError:
        pass
    try:
        import zstandard  # optional

        return _checked(zstandard.ZstdDecompressor().decompress(src, max_output_size=size), size)
    except ImportError:
        pass
    if not _ZSTD_LIB:
        _ZSTD_LIB.append(_zstd_system())
    lib = _ZSTD_LIB[0]
    if lib is None:
        raise ModuleNotFoundError(
            "zstd-compressed entry: install libzstd1 (apt) or the zstandard module (pip)"
        )
    buffer = ctypes.create_string_buffer(max(size, 1))
    written = lib.ZSTD_decompress(buffer, size, src, len(src))
    if lib.ZSTD_isError(written):
        raise ValueError("damaged zstd frame")
    return _checked(buffer.raw[:written], size)


def _checked(data: bytes, size: int) -> bytes:
    if len(data) != size:
        raise ValueError(f"{len(data)} bytes decoded, {size} declared")
    return data


# -- fatbinary ----------------------------------------------------------------------


def parse_fatbin(section: bytes, where: str = "fatbinary") -> list[FatbinEntry]:
    """Every code entry of the containers in ``section`` (the bytes of .nv_fatbin),
    decompressed, with the kernels each defines (demangled with ``demangle``)."""
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
    entries = []
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
                decode = _zstd if compression == "zstd" else _lz4
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


# -- cubin (ELF) and PTX ------------------------------------------------------------

_ELF_HEADER = struct.Struct("<16sHHIQQQIHHHHHH")
_SECTION = struct.Struct("<IIQQQQIIQQ")
_SYMBOL = struct.Struct("<IBBHQQ")
SHT_SYMTAB = 2


def parse_cubin(elf: bytes) -> list[tuple[str, int, int | None, int | None]]:
    """(name, SASS bytes, registers, frame bytes) of each kernel of a 64-bit cubin: its
    FUNC symbols marked as entries (STO_CUDA_ENTRY), sized by their .text section;
    registers and frame from the cubin's .nv.info attributes."""
    try:
        if len(elf) < _ELF_HEADER.size or elf[:4] != b"\x7fELF" or elf[4] != 2 or elf[5] != 1:
            raise FatbinError("cubin entry is not a 64-bit little-endian ELF")
        header = _ELF_HEADER.unpack_from(elf, 0)
        shoff, shentsize, shnum, shstrndx = header[6], header[11], header[12], header[13]
        if shnum == 0 or shentsize < _SECTION.size or shoff + shnum * shentsize > len(elf):
            raise FatbinError("cubin section table runs past the entry")
        sections = [_SECTION.unpack_from(elf, shoff + i * shentsize) for i in range(shnum)]

        def data(i: int) -> bytes:
            if not 0 <= i < shnum:
                raise FatbinError(f"cubin refers to section {i} of {shnum}")
            s = sections[i]
            if s[1] == 8:  # SHT_NOBITS
                return b""
            if s[4] + s[5] > len(elf):
                raise FatbinError("a cubin section runs past the entry")
            return elf[s[4] : s[4] + s[5]]

        def string(table: bytes, offset: int) -> str:
            stop = table.find(b"\0", offset)
            return table[offset : stop if stop >= 0 else None].decode(errors="replace")

        names = data(shstrndx)
        section_names = [string(names, s[0]) for s in sections]
        text_sizes = {n: s[5] for n, s in zip(section_names, sections, strict=True)}
        kernels: list[tuple[str, int]] = []
        symbol_index: dict[int, str] = {}
        for i, s in enumerate(sections):
            if s[1] != SHT_SYMTAB:
                continue
            table, strings = data(i), data(s[6])
            step = s[9] or _SYMBOL.size
            if step < _SYMBOL.size:
                raise FatbinError("cubin symbol entries are too small")
            for n in range(len(table) // step):
                st_name, info, other, shndx, _value, _size = _SYMBOL.unpack_from(table, n * step)
                name = string(strings, st_name)
                symbol_index[n] = name
                if info & 0xF == 2 and other & STO_CUDA_ENTRY:  # STT_FUNC, kernel
                    kernels.append((name, text_sizes.get(f".text.{name}", _size)))
        registers, frames = _nv_info(
            data(section_names.index(".nv.info")) if ".nv.info" in section_names else b"",
            symbol_index,
        )
        return [(name, size, registers.get(name), frames.get(name)) for name, size in kernels]
    except struct.error:
        raise FatbinError("truncated cubin entry") from None


def _nv_info(info: bytes, symbols: dict[int, str]) -> tuple[dict[str, int], dict[str, int]]:
    """Register counts and frame sizes per function from .nv.info attribute records
    (u8 format, u8 attribute, then u16 size + value for EIFMT_SVAL, else a u16 value)."""
    registers: dict[str, int] = {}
    frames: dict[str, int] = {}
    pos = 0
    while pos + 4 <= len(info):
        fmt, attr, value = info[pos], info[pos + 1], int.from_bytes(info[pos + 2 : pos + 4], "little")
        if fmt != EIFMT_SVAL:
            pos += 4
            continue
        payload = info[pos + 4 : pos + 4 + value]
        pos += 4 + value
        if len(payload) == 8 and attr in (EIATTR_REGCOUNT, EIATTR_FRAME_SIZE):
            symbol, amount = struct.unpack("<II", payload)
            if symbol in symbols:
                (registers if attr == EIATTR_REGCOUNT else frames)[symbols[symbol]] = amount
    return registers, frames


_PTX_ENTRY = re.compile(r"^[ \t]*(?:\.(?:visible|weak|extern)[ \t]+)*\.entry[ \t]+([\w$.%]+)", re.M)


def ptx_entries(ptx: str) -> list[tuple[str, int]]:
    """(name, bytes of its text) of each ``.entry`` (kernel) of a PTX module; the text
    runs from the directive to the closing brace of its body."""
    found = []
    for match in _PTX_ENTRY.finditer(ptx):
        body = ptx.find("{", match.end())
        stop = len(ptx)
        if body >= 0:
            depth = 0
            for i in range(body, len(ptx)):
                c = ptx[i]
                if c == "{":
                    depth += 1
                elif c == "}":
                    depth -= 1
                    if depth == 0:
                        stop = i + 1
                        break
        found.append((match.group(1), len(ptx[match.start() : stop].encode())))
    return found


# -- files --------------------------------------------------------------------------


def read_fatbin(path: str | os.PathLike) -> list[FatbinEntry]:
    """Every code entry of the fatbinaries in an ELF file; NoFatbinError if it has none."""
    found = elf_sections(Path(path), lambda name, _flags: name in SECTIONS)
    for name in SECTIONS:
        if name in found and found[name][1]:
            return parse_fatbin(found[name][1], f"{path}: {name}")
    raise NoFatbinError(
        f"{path}: no CUDA fatbinary (no .nv_fatbin section): not built by nvcc with device code"
    )


EM_CUDA = 190
MAX_IMAGE_BYTES = 1 << 30


def cubin_arch(elf: bytes) -> str:
    """'sm_90' from a cubin's ELF header: e_flags bits 8-15 (ELF ABI version 8, CUDA 12+),
    bits 0-7 before."""
    if len(elf) < _ELF_HEADER.size:
        raise FatbinError("truncated cubin")
    flags = _ELF_HEADER.unpack_from(elf, 0)[7]
    sm = (flags >> 8) & 0xFF if elf[8] >= 8 else flags & 0xFF
    return f"sm_{sm}"


def image_kind(image: bytes) -> str | None:
    """"fatbin", "cubin", "ptx" or None: what a code image is, from its first bytes."""
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
    cubin (one SASS entry) or PTX text (one PTX entry, NUL-terminated or not)."""
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
        version = (int(found.group(1)), int(found.group(2)))
        image = text
    number = int(arch.split("_")[1])
    entry = _entry(0, 0, 0, kind, version[1], version[0], number, 0x11, image, 0, 0)
    entry = _replace(entry, arch=f"{prefix}_{number}")
    names = [k.name for k in entry.kernels]
    readable = dict(zip(names, demangle(names), strict=True))
    return [_replace(entry, kernels=tuple(_replace(k, demangled=readable[k.name], arch=entry.arch)
                                          for k in entry.kernels))]


def read_code_file(path: str | os.PathLike) -> list[FatbinEntry]:
    """Code entries of a file: an ELF executable/library/object with a fatbinary, or a
    .cubin, .fatbin or .ptx file (parse_code_image)."""
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
    """Every kernel of every entry, in entry order (one per code object it is in)."""
    return [k for e in entries for k in e.kernels]


def _demangler() -> list[str] | None:
    for tool in ("llvm-cxxfilt-22", "llvm-cxxfilt", "c++filt"):
        found = shutil.which(tool)
        if found:
            return [found]
    return None


def demangle(names: list[str]) -> list[str]:
    """Itanium-demangled names (llvm-cxxfilt or c++filt, one process for all); names
    it does not know, or all of them where no demangler is installed, stay as they are."""
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
