"""Read the kernels that mneme-clang++ embedded in an executable, object or shared library.

Pure Python (stdlib only): the recorder and the replayer import this module, and it
never runs the file it reads.

    from mneme.instrument.section import read_kernels
    for k in read_kernels("./app"):
        k.name, k.demangled, k.static_hash, k.params, k.globals, k.ir  # ir: LLVM bitcode

The section (``.mneme.kernels``, not loaded at run time) is a concatenation of records;
docs/instrument.md specifies the layout. Each record is what the pass wrote for one
device compilation (one translation unit and GPU architecture) or for one link-time
resolution step (``-fgpu-rdc``):

    offset  size  field
    0       8     magic b"MNEMEKIR"
    8       4     format version (little-endian u32), currently 1
    12      4     header size in bytes (u32), currently 40
    16      8     JSON size (u64)
    24      8     data size (u64)
    32      8     FNV-1a 64 of JSON + data (u64)
    40      ...   JSON (UTF-8), then data (bitcode blobs), then zero padding to 8 bytes

Zero bytes between records (linker alignment padding) are skipped.
"""

from __future__ import annotations

import json
import os
import re
import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# the errors live in errors.py; imported here so `from .section import SectionError` works
from .errors import FatbinError, NoFatbinError, NotInstrumentedError, SectionError
from .section_format import FORMAT_VERSION, HEADER_SIZE, MAGIC, RECORD_ALIGNMENT, SECTION_NAME
from .section_format import fnv1a64 as fnv1a64

HEADER = struct.Struct("<8sIIQQQ")  # magic, version, header size, json size, data size, hash
assert HEADER.size == HEADER_SIZE

__all__ = [
    "FatbinError",
    "NoFatbinError",
    "FORMAT_VERSION",
    "MAGIC",
    "SECTION_NAME",
    "GlobalVar",
    "Kernel",
    "NotInstrumentedError",
    "Param",
    "Record",
    "SectionError",
    "encode_record",
    "find_kernel",
    "fnv1a64",
    "parse_section",
    "read_elf_section",
    "read_kernels",
    "read_records",
]


@dataclass(frozen=True)
class Param:
    """One kernel parameter as it lies in the launch argument buffer.

    Attributes:
        index: its position in the kernel's signature.
        size: its size in bytes.
        align: its alignment.
        offset: where it starts in the argument buffer.
        pointer: whether it is a pointer.
        byval: whether it is an aggregate passed by value.
        type: its LLVM type.
        address_space: a pointer's address space, when the IR says.
    """

    index: int
    size: int
    align: int
    offset: int
    pointer: bool
    byval: bool
    type: str
    address_space: int | None = None

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Param:
        """A parameter from the section's JSON.

        Parameters:
            d: its JSON object.

        Returns:
            The parameter.
        """
        return cls(
            index=int(d["index"]),
            size=int(d["size"]),
            align=int(d["align"]),
            offset=int(d["offset"]),
            pointer=bool(d["pointer"]),
            byval=bool(d["byval"]),
            type=str(d.get("type", "")),
            address_space=d.get("address_space"),
        )


@dataclass(frozen=True)
class GlobalVar:
    """A device global the kernel (or a function it calls) uses; `name` is the symbol
    ``__cudaRegisterVar`` receives as its device name.

    Attributes:
        name: the symbol ``__cudaRegisterVar`` receives as its device name.
        demangled: its demangled name.
        size: its size in bytes.
        align: its alignment.
        address_space: NVPTX: 1 global (__device__), 3 shared, 4 constant (__constant__)
        constant: whether it is constant.
        externally_initialized: whether the host may write it before a launch.
        defined: whether this module defines it.
    """

    name: str
    demangled: str
    size: int
    align: int
    address_space: int
    constant: bool
    externally_initialized: bool
    defined: bool

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> GlobalVar:
        """A global from the section's JSON.

        Parameters:
            d: its JSON object.

        Returns:
            The global.
        """
        return cls(
            name=str(d["name"]),
            demangled=str(d.get("demangled", d["name"])),
            size=int(d["size"]),
            align=int(d["align"]),
            address_space=int(d["address_space"]),
            constant=bool(d.get("constant", False)),
            externally_initialized=bool(d.get("externally_initialized", False)),
            defined=bool(d.get("defined", True)),
        )


@dataclass(frozen=True)
class Kernel:
    """One embedded kernel: its standalone module (bitcode) and metadata.

    Attributes:
        name: its mangled name: what ``__cudaRegisterFunction`` receives as deviceName.
        demangled: its demangled name.
        static_hash: 16 hex digits: FNV-1a 64 of ``ir``; None if extraction failed.
        ir: LLVM bitcode of the standalone module (empty if extraction failed).
        params: its parameters.
        globals: the device globals it (or a function it calls) uses.
        launch_bounds: its launch bounds (max threads, min blocks, ...).
        target: ``nvptx64-nvidia-cuda`` or ``amdgcn-amd-amdhsa``.
        arch: ``sm_90``, ``gfx90a``, ...
        source: its translation unit (the path clang was given), or ``<link>``.
        stage: ``compile``, or ``link`` for kernels resolved at link time (-fgpu-rdc).
        complete: False when it calls device code of another translation unit that was
            never linked in.
        unresolved: the device functions it calls that were never linked in.
        error: why extracting it failed; None when it did not.
        fatbin: ``{"size": n, "crc32": "8 hex"}`` of the translation unit's CUDA fatbinary
            (header and payload), which ``__cudaRegisterFatBinary`` receives; None where there
            is none per translation unit (HIP, the new offload driver).
    """

    name: str
    demangled: str
    static_hash: str | None
    ir: bytes
    params: tuple[Param, ...]
    globals: tuple[GlobalVar, ...]
    launch_bounds: dict[str, Any]
    target: str
    arch: str
    source: str
    stage: str
    complete: bool
    unresolved: tuple[str, ...] = ()
    error: str | None = None
    fatbin: dict[str, Any] | None = None

    @property
    def ir_size(self) -> int:
        return len(self.ir)

    def to_dict(self) -> dict[str, Any]:
        """The kernel as plain JSON data (what ``mneme inspect --json`` prints).

        Returns:
            Its description, without the IR itself.
        """
        return {
            "name": self.name,
            "demangled": self.demangled,
            "static_hash": self.static_hash,
            "ir_size": self.ir_size,
            "target": self.target,
            "arch": self.arch,
            "source": self.source,
            "stage": self.stage,
            "complete": self.complete,
            "unresolved": list(self.unresolved),
            "launch_bounds": self.launch_bounds,
            "fatbin": self.fatbin,
            "params": [p.__dict__ for p in self.params],
            "globals": [g.__dict__ for g in self.globals],
            **({"error": self.error} if self.error else {}),
        }


@dataclass(frozen=True)
class Record:
    """One record of the section: what one device compilation (or link step) embedded.

    Attributes:
        meta: its JSON metadata.
        data: its data (the blobs the metadata refers to).
        offset: of the record within the section
        kernels: the kernels it embeds.
    """

    meta: dict[str, Any]
    data: bytes
    offset: int
    kernels: tuple[Kernel, ...] = field(default=())

    @property
    def stage(self) -> str:
        return str(self.meta.get("stage", "compile"))

    @property
    def module(self) -> bytes | None:
        """Bitcode of the whole device module of an -fgpu-rdc translation unit."""
        ref = self.meta.get("module")
        return self._blob(ref) if ref else None

    def _blob(self, ref: dict[str, Any]) -> bytes:
        try:
            start, size = int(ref["offset"]), int(ref["size"])
        except (KeyError, TypeError, ValueError, OverflowError):
            raise SectionError(f"record at offset {self.offset}: malformed blob reference") from None
        if start < 0 or size < 0 or start + size > len(self.data):
            raise SectionError(f"record at offset {self.offset}: blob outside the record's data")
        return self.data[start : start + size]


def encode_record(meta: dict[str, Any], data: bytes = b"") -> bytes:
    """One record, exactly as the pass writes it (used by tests and link-time tools).

    Parameters:
        meta: its JSON metadata.
        data: its data.

    Returns:
        The record's bytes (header, padded JSON, data).
    """
    text = json.dumps(meta, separators=(",", ":")).encode()
    text += b" " * (-(HEADER.size + len(text)) % RECORD_ALIGNMENT)
    header = HEADER.pack(
        MAGIC, FORMAT_VERSION, HEADER.size, len(text), len(data), fnv1a64(text + data)
    )
    record = header + text + data
    return record + b"\0" * (-len(record) % RECORD_ALIGNMENT)


def _kernel_from_json(record: Record, d: dict[str, Any]) -> Kernel:
    ir_ref = d.get("ir")
    meta = record.meta
    return Kernel(
        name=str(d["name"]),
        demangled=str(d.get("demangled", d["name"])),
        static_hash=d.get("static_hash"),
        ir=record._blob(ir_ref) if ir_ref else b"",
        params=tuple(Param.from_json(p) for p in d.get("params", [])),
        globals=tuple(GlobalVar.from_json(g) for g in d.get("globals", [])),
        launch_bounds=dict(d.get("launch_bounds", {})),
        target=str(meta.get("target", "")),
        arch=str(meta.get("arch", "")),
        source=str(meta.get("source", "")),
        stage=record.stage,
        complete=bool(d.get("complete", True)),
        unresolved=tuple(d.get("unresolved", [])),
        error=d.get("error"),
        fatbin=meta.get("fatbin"),
    )


def parse_section(section: bytes, where: str = "section") -> list[Record]:
    """Split the bytes of a ``.mneme.kernels`` section into records, each validated.

    Parameters:
        section: the section's bytes.
        where: the file or section's name, for messages.

    Returns:
        The records, in order.

    Raises:
        SectionError: a truncated or corrupt record (bad magic, version, checksum or
            JSON).
    """
    records: list[Record] = []
    pos, end = 0, len(section)
    while pos < end:
        if section[pos] == 0:  # alignment padding between objects' contributions: skip it whole
            found = _NONZERO.search(section, pos)
            pos = found.start() if found else end
            continue
        if end - pos < HEADER.size:
            raise SectionError(f"{where}: truncated record header at offset {pos}")
        magic, version, header_size, json_size, data_size, checksum = HEADER.unpack_from(
            section, pos
        )
        if magic != MAGIC:
            raise SectionError(f"{where}: bad record magic at offset {pos}; the section is damaged")
        if version != FORMAT_VERSION:
            raise SectionError(
                f"{where}: record format {version} at offset {pos}, this reader knows "
                f"{FORMAT_VERSION}; upgrade mneme-instrument"
            )
        body = pos + header_size
        if header_size < HEADER.size or body + json_size + data_size > end:
            raise SectionError(f"{where}: record at offset {pos} runs past the section's end")
        payload = section[body : body + json_size + data_size]
        if fnv1a64(payload) != checksum:
            raise SectionError(f"{where}: checksum mismatch in the record at offset {pos}")
        try:
            meta = json.loads(payload[:json_size].decode())
        except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:
            raise SectionError(f"{where}: unreadable metadata at offset {pos} ({exc})") from None
        if not isinstance(meta, dict):
            raise SectionError(f"{where}: metadata at offset {pos} is not a JSON object")
        record = Record(meta=meta, data=payload[json_size:], offset=pos)
        try:
            kernels = tuple(_kernel_from_json(record, k) for k in meta.get("kernels", []))
        except (KeyError, TypeError, ValueError, AttributeError, OverflowError) as exc:
            raise SectionError(
                f"{where}: malformed kernel metadata in the record at offset {pos} ({exc!r})"
            ) from None
        records.append(Record(meta=meta, data=record.data, offset=pos, kernels=kernels))
        size = header_size + json_size + data_size
        pos += size + (-size % RECORD_ALIGNMENT)
    return records


_NONZERO = re.compile(rb"[^\x00]")

SHF_ALLOC = 0x2  # section flag: loaded into memory when the program runs
SHT_NOBITS = 8  # section type: occupies memory but no file bytes (.bss)


def elf_sections(path: Path, wanted=lambda name, flags: True) -> dict[str, tuple[int, bytes]]:
    """{name: (size, bytes)} of the sections `wanted(name, flags)` selects (bytes empty
    for SHT_NOBITS), in file order."""
    try:
        with open(path, "rb") as f:
            ident = f.read(16)
            if len(ident) < 16 or ident[:4] != b"\x7fELF":
                raise SectionError(
                    f"{path}: not an ELF file (executable, shared library or object)"
                )
            file_size = os.fstat(f.fileno()).st_size
            is64 = ident[4] == 2
            endian = "<" if ident[5] == 1 else ">"
            if is64:
                hdr = struct.Struct(endian + "HHIQQQIHHHHHH")
            else:
                hdr = struct.Struct(endian + "HHIIIIIHHHHHH")
            fields = hdr.unpack(f.read(hdr.size))
            shoff, shentsize, shnum, shstrndx = fields[5], fields[10], fields[11], fields[12]
            if shoff == 0:
                return {}
            shdr = struct.Struct(endian + ("IIQQQQIIQQ" if is64 else "IIIIIIIIII"))
            f.seek(shoff)
            first = shdr.unpack(f.read(shdr.size))
            if shnum == 0:  # more than 0xff00 sections: the count is in section 0
                shnum = first[5]
            if shstrndx == 0xFFFF:
                shstrndx = first[7]
            if shentsize < shdr.size or shoff + shentsize * shnum > file_size:
                raise SectionError(f"{path}: damaged ELF section table")
            f.seek(shoff)
            table = f.read(shentsize * shnum)
            headers = [shdr.unpack_from(table, i * shentsize) for i in range(shnum)]
            if not 0 <= shstrndx < shnum:
                raise SectionError(f"{path}: damaged ELF section table")
            for h in headers:  # a section's bytes must lie in the file (no forged sizes)
                if h[1] != SHT_NOBITS and h[1] != 0 and h[4] + h[5] > file_size:
                    raise SectionError(f"{path}: damaged ELF section table (a section runs past the end)")
            names_hdr = headers[shstrndx]
            f.seek(names_hdr[4])
            names = f.read(names_hdr[5])
            out: dict[str, tuple[int, bytes]] = {}
            for h in headers:
                nul = names.find(b"\0", h[0])
                name = names[h[0] : nul if nul >= 0 else None].decode(errors="replace")
                if not name or name in out or not wanted(name, h[2]):
                    continue  # (a repeated name: the first section of it counts)
                if h[1] == SHT_NOBITS:
                    out[name] = (h[5], b"")
                else:
                    f.seek(h[4])
                    out[name] = (h[5], f.read(h[5]))
            return out
    except FileNotFoundError:
        raise SectionError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise SectionError(f"{path}: is a directory, not an executable") from None
    except PermissionError:
        raise SectionError(f"{path}: permission denied") from None
    except struct.error:
        raise SectionError(f"{path}: truncated ELF file") from None


def read_elf_section(path: str | os.PathLike, name: str = SECTION_NAME) -> bytes | None:
    """One section of an ELF file.

    Parameters:
        path: the file.
        name: the section's name.

    Returns:
        Its bytes; None when the file has no such section.
    """
    found = elf_sections(Path(path), lambda n, _flags: n == name)
    return found[name][1] if name in found else None


def loaded_sections(path: str | os.PathLike) -> dict[str, tuple[int, bytes]]:
    """{name: (size, bytes)} of every section loaded when the program runs (SHF_ALLOC;
    bytes empty for .bss-like sections): what an executable runs, apart from its file."""
    return elf_sections(Path(path), lambda _name, flags: bool(flags & SHF_ALLOC))


def read_records(path: str | os.PathLike) -> list[Record]:
    """Every record of a file's mneme section.

    Parameters:
        path: an executable, shared object or object file.

    Returns:
        The records.

    Raises:
        NotInstrumentedError: the file has no mneme section (not built with
            mneme-clang++).
        SectionError: the section is corrupt.
    """
    section = read_elf_section(path)
    if section is None:
        raise NotInstrumentedError(
            f"{path}: no embedded kernel IR (no {SECTION_NAME} section); "
            "rebuild it with mneme-clang++ (or add_mneme() in CMake)"
        )
    return parse_section(section, str(path))


def kernels_of(records: list[Record]) -> list[Kernel]:
    """The kernels of parsed records; link-time ones replace their rdc compile-time copies."""
    linked = {(k.name, k.arch) for r in records if r.stage == "link" for k in r.kernels}
    out = []
    for r in records:
        for k in r.kernels:
            if r.stage != "link" and r.meta.get("rdc") and (k.name, k.arch) in linked:
                continue
            out.append(k)
    return out


def read_kernels(path: str | os.PathLike) -> list[Kernel]:
    """Every kernel embedded in `path`, in section order.

    A kernel defined in several translation units (file-``static`` kernels, or one
    source built for several architectures) appears once per copy; tell them apart by
    ``source``/``arch``/``static_hash``.

    Parameters:
        path: an executable, shared object or object file.

    Returns:
        The kernels (link-time ones in place of their -fgpu-rdc compile-time copies).

    Raises:
        NotInstrumentedError: a file that mneme-clang++ did not build (a SectionError).
    """
    return kernels_of(read_records(path))


def find_kernel(kernels: list[Kernel], key: str) -> list[Kernel]:
    """The kernels a user's key names.

    Parameters:
        kernels: the kernels to look in.
        key: a mangled name, demangled name, static hash or bare name.

    Returns:
        Those whose name or hash is ``key`` (bare names only when nothing else matches).
    """
    exact = [k for k in kernels if key in (k.name, k.demangled, k.static_hash)]
    if exact:
        return exact
    return [k for k in kernels if bare_name(k.demangled) == key]


def bare_name(demangled: str) -> str:
    """`void ns::f<int>(float*)` -> `ns::f`; `f(int)` -> `f`."""
    head = demangled.split("(", 1)[0].split("<", 1)[0]
    return head.split(" ")[-1]
