"""Reading a cubin (the CUDA ELF image: its kernels' symbols, sizes and parameter info)
and a PTX module's entries, for fatbin.py. Every size is checked against the bytes held:
a damaged image is one FatbinError line."""

from __future__ import annotations

import re
import struct

from .errors import FatbinError

STO_CUDA_ENTRY = 0x10  # st_other bit of a kernel's symbol in a cubin
EIATTR_FRAME_SIZE, EIATTR_REGCOUNT = 0x11, 0x2F
EIFMT_SVAL = 0x04

_ELF_HEADER = struct.Struct("<16sHHIQQQIHHHHHH")
_SECTION = struct.Struct("<IIQQQQIIQQ")
_SYMBOL = struct.Struct("<IBBHQQ")
SHT_SYMTAB = 2


def parse_cubin(elf: bytes) -> list[tuple[str, int, int | None, int | None]]:
    """The kernels of a 64-bit cubin: its FUNC symbols marked as entries
    (STO_CUDA_ENTRY), sized by their .text section; registers and frame from the cubin's
    .nv.info attributes.

    Parameters:
        elf: the cubin's bytes.

    Returns:
        ``(name, SASS bytes, registers, frame bytes)`` of each kernel (None where .nv.info
        does not say).

    Raises:
        FatbinError: not a 64-bit little-endian ELF, or a damaged one.
    """
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
    """The kernels (``.entry`` functions) of a PTX module.

    Parameters:
        ptx: the PTX text.

    Returns:
        ``(name, bytes of its text)`` of each; the text runs from the directive to the
        closing brace of its body.
    """
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


def cubin_arch(elf: bytes) -> str:
    """'sm_90' from a cubin's ELF header: e_flags bits 8-15 (ELF ABI version 8, CUDA 12+),
    bits 0-7 before."""
    if len(elf) < _ELF_HEADER.size:
        raise FatbinError("truncated cubin")
    flags = _ELF_HEADER.unpack_from(elf, 0)[7]
    sm = (flags >> 8) & 0xFF if elf[8] >= 8 else flags & 0xFF
    return f"sm_{sm}"
