"""`mneme inspect` and `mneme config` (registered through mneme-instrument's entry points)."""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
from pathlib import Path

import click

from . import toolchain
from .errors import (
    ConfigError,
    InspectError,
    NoFatbinError,
    NotInstrumentedError,
    SectionError,
    ToolchainError,
)
from .fatbin import FatbinEntry, FatbinKernel, image_kind, read_code_file
from .section import Kernel, bare_name, find_kernel, read_kernels

CONFIG_KEYS = (
    "cc",
    "cxx",
    "prefix",
    "libdir",
    "includedir",
    "cmakedir",
    "cflags",
    "ldflags",
    "cuda-arch",
)


def _size(n: int) -> str:
    return f"{n} B" if n < 1024 else f"{n / 1024:.1f} KiB"


def _param_text(k: Kernel) -> str:
    if not k.params:
        return "(none)"
    parts = []
    for p in k.params:
        kind = "byval " if p.byval else ""
        parts.append(f"[{p.index}] {kind}{p.type} size={p.size} align={p.align} offset={p.offset}")
    return "\n".join(parts)


def _bounds_text(k: Kernel) -> str:
    keys = ("max_threads", "min_blocks", "max_blocks_per_cluster")
    items = [f"{key}={k.launch_bounds[key]}" for key in keys if key in k.launch_bounds]
    return ", ".join(items)


def _print_kernel(k: Kernel) -> None:
    click.echo(k.demangled)
    rows = [
        ("name", k.name),
        ("static hash", k.static_hash or "-"),
        ("target", f"{k.target} {k.arch}"),
        ("source", f"{k.source} ({k.stage})"),
        ("IR", _size(k.ir_size)),
    ]
    if k.fatbin:
        rows.append(("fatbinary", f"{k.fatbin['size']} B, crc32 {k.fatbin['crc32']}"))
    if not k.complete:
        rows.append(
            ("incomplete", "calls " + ", ".join(k.unresolved) + " (link with mneme-clang++)")
        )
    if k.error:
        rows.append(("error", k.error))
    bounds = _bounds_text(k)
    if bounds:
        rows.append(("launch bounds", bounds))
    rows.append(("params", _param_text(k)))
    globals_text = "\n".join(
        f"{g.name} size={g.size} addrspace={g.address_space}" + (" constant" if g.constant else "")
        for g in k.globals
    )
    rows.append(("globals", globals_text or "(none)"))
    for label, value in rows:
        lines = value.splitlines() or [""]
        click.echo(f"  {label:<14}{lines[0]}")
        for line in lines[1:]:
            click.echo(f"  {'':<14}{line}")


def ir_text(bitcode: bytes) -> str:
    """Textual IR of embedded bitcode, through llvm-dis-22 (mneme-instrument imports
    nothing of the other mneme packages)."""
    try:
        dis = toolchain.find_llvm().tool("llvm-dis")
    except ToolchainError:
        raise InspectError(
            "printing IR needs llvm-dis-22 (apt-get install llvm-22, or set LLVM_INSTALL_PATH "
            "to an LLVM 22 root)"
        ) from None
    proc = subprocess.run([str(dis), "-", "-o", "-"], input=bitcode, capture_output=True)
    if proc.returncode != 0:
        last = (proc.stderr.decode(errors="replace").strip().splitlines() or ["failed"])[-1]
        raise InspectError(f"llvm-dis-22 could not print the kernel's IR: {last}")
    return proc.stdout.decode()


@click.command("inspect")
@click.argument("binary", type=click.Path(path_type=Path))
@click.option(
    "--ir",
    "ir_kernel",
    metavar="KERNEL",
    help="print the IR of KERNEL (mangled or demangled name, bare name or static hash)",
)
@click.option(
    "--ptx",
    "ptx_kernel",
    metavar="KERNEL",
    help="print the PTX module of the fatbinary that defines KERNEL (mangled, demangled or bare name)",
)
@click.option(
    "--fatbin",
    "force_fatbin",
    is_flag=True,
    help="list the CUDA fatbinary's kernels even where mneme-clang++ embedded IR",
)
@click.option("--json", "as_json", is_flag=True, help="machine-readable output")
def inspect(
    binary: Path, ir_kernel: str | None, ptx_kernel: str | None, force_fatbin: bool, as_json: bool
) -> None:
    """List the kernels of BINARY: the IR + metadata that mneme-clang++ embedded, or, in
    an executable built by nvcc (or plain clang++), the kernels of its CUDA fatbinary
    (SASS and PTX per architecture)."""
    if ptx_kernel is not None or force_fatbin:
        _inspect_fatbin(binary, *_fatbin_or_error(binary), ptx_kernel, as_json)
        return
    try:
        kernels = read_kernels(binary)
    except NotInstrumentedError:
        kernels = None
    except SectionError as error:
        if "not an ELF file" not in str(error):
            raise
        kernels = None  # perhaps a .fatbin or .ptx file
    if kernels is None:
        entries, source = _fatbin_or_error(binary)
        if ir_kernel is not None:
            raise InspectError(
                f"{binary}: no embedded IR (built without mneme-clang++); its fatbinary's "
                f"PTX: `mneme inspect {binary} --ptx {ir_kernel}`"
            )
        _inspect_fatbin(binary, entries, source, None, as_json)
        return
    if ir_kernel is not None:
        matches = find_kernel(kernels, ir_kernel)
        if not matches:
            raise InspectError(
                f"{binary}: no kernel {ir_kernel!r}; `mneme inspect {binary}` lists them"
            )
        hashes = {k.static_hash for k in matches}
        if len(hashes) > 1:
            raise InspectError(
                f"{ir_kernel!r} matches {len(matches)} different kernels; name one by its static hash "
                f"({', '.join(sorted(h or '-' for h in hashes))})"
            )
        if not matches[0].ir:
            raise InspectError(f"{ir_kernel!r}: no IR was embedded ({matches[0].error})")
        text = ir_text(matches[0].ir)
        if as_json:
            click.echo(json.dumps({**matches[0].to_dict(), "ir": text}, indent=2))
        else:
            sys.stdout.write(text)
        return
    if as_json:
        click.echo(
            json.dumps({"binary": str(binary), "kernels": [k.to_dict() for k in kernels]}, indent=2)
        )
        return
    click.echo(f"{binary}: {len(kernels)} kernel{'s' if len(kernels) != 1 else ''}")
    for k in kernels:
        _print_kernel(k)


def _fatbin_or_error(binary: Path) -> tuple[list[FatbinEntry], str]:
    """The fatbinary's entries of an ELF file, or those of a .cubin/.fatbin/.ptx file, and
    which of these it is ("fatbinary", "cubin" or "ptx")."""
    try:
        entries = read_code_file(binary)
        with open(binary, "rb") as f:
            kind = image_kind(f.read(4096))
        return entries, kind if kind in ("cubin", "ptx") else "fatbinary"
    except NoFatbinError:
        raise NotInstrumentedError(
            f"{binary}: no embedded kernel IR (no .mneme.kernels section) and no CUDA "
            "fatbinary; rebuild it with mneme-clang++ (or add_mneme() in CMake), or nvcc"
        ) from None


_SOURCE_TEXT = {"fatbinary": "a CUDA fatbinary", "cubin": "a cubin", "ptx": "PTX"}


def _fatbin_groups(entries: list[FatbinEntry]) -> dict[str, list[FatbinKernel]]:
    """Mangled name -> the kernel in each code entry that has it, in entry order."""
    groups: dict[str, list[FatbinKernel]] = {}
    for e in entries:
        for k in e.kernels:
            groups.setdefault(k.name, []).append(k)
    return groups


def _code_text(k: FatbinKernel) -> str:
    text = f"{_size(k.size)}"
    if k.registers is not None:
        text += f", {k.registers} registers"
    if k.frame_bytes:
        text += f", {k.frame_bytes} B stack frame"
    return f"{text}  (entry {k.entry})"


def _entry_text(e: FatbinEntry) -> str:
    kind = {"ptx": f"PTX {e.version}", "cubin": "SASS (cubin)"}.get(e.kind, e.kind)
    text = f"[{e.index}] {e.arch} {kind}, {_size(e.size)}"
    if e.compression:
        text += f" ({e.compression}, {_size(e.stored_size)} in the file)"
    if e.debug:
        text += ", debug"
    text += f", {len(e.kernels)} kernel{'s' if len(e.kernels) != 1 else ''}"
    if e.error:
        text += f"; {e.error}"
    return text


def _inspect_fatbin(
    binary: Path, entries: list[FatbinEntry], source: str, ptx_kernel: str | None, as_json: bool
) -> None:
    groups = _fatbin_groups(entries)
    if ptx_kernel is not None:
        names = [
            name
            for name, code in groups.items()
            if ptx_kernel in (name, code[0].demangled) or bare_name(code[0].demangled) == ptx_kernel
        ]
        if not names:
            raise InspectError(
                f"{binary}: no kernel {ptx_kernel!r} in the fatbinary; `mneme inspect {binary}` lists them"
            )
        if len(names) > 1:
            raise InspectError(
                f"{ptx_kernel!r} matches {len(names)} kernels; name one by its mangled name "
                f"({', '.join(names)})"
            )
        ptx = [e for e in entries if e.kind == "ptx" and any(k.name == names[0] for k in e.kernels)]
        if not ptx:
            raise InspectError(
                f"{names[0]}: the fatbinary holds no PTX for it, only SASS "
                "(build with -gencode ...,code=compute_XX to embed PTX)"
            )
        if as_json:
            click.echo(
                json.dumps(
                    {"kernel": names[0], "entries": [{**e.to_dict(), "ptx": e.text()} for e in ptx]},
                    indent=2,
                )
            )
        else:
            for e in ptx:
                sys.stdout.write(e.text())
        return
    if as_json:
        kernels = [
            {"name": name, "demangled": code[0].demangled, "code": [k.to_dict() for k in code]}
            for name, code in groups.items()
        ]
        click.echo(
            json.dumps(
                {
                    "binary": str(binary),
                    "source": source,
                    "entries": [e.to_dict() for e in entries],
                    "kernels": kernels,
                },
                indent=2,
            )
        )
        return
    n = len(groups)
    click.echo(
        f"{binary}: {n} kernel{'s' if n != 1 else ''} in {_SOURCE_TEXT[source]} "
        f"({len(entries)} code entr{'ies' if len(entries) != 1 else 'y'}; no mneme IR)"
    )
    click.echo("  " + "\n  ".join(_entry_text(e) for e in entries))
    for name, code in groups.items():
        click.echo(code[0].demangled)
        rows = [("name", name)]
        rows += [(f"{'SASS' if k.kind == 'sass' else 'PTX'} {k.arch}", _code_text(k)) for k in code]
        for label, value in rows:
            click.echo(f"  {label:<16}{value}")


def config_value(key: str) -> str:
    from .wrapper import which_wrapper

    if key == "cc":
        return which_wrapper(cxx=False)
    if key == "cxx":
        return which_wrapper(cxx=True)
    if key == "prefix":
        return str(toolchain.PACKAGE_DIR)
    if key == "libdir":
        return str(toolchain.LIB_DIR)
    if key == "includedir":
        return str(toolchain.INCLUDE_DIR)
    if key == "cmakedir":
        return str(toolchain.CMAKE_DIR)
    if key == "cflags":
        flags = [f"-fpass-plugin={toolchain.plugin_path()}"]
        flags += toolchain.cuda_compile_flags(toolchain.find_cuda()) + ["-Wno-unknown-cuda-version"]
        return shlex.join(flags)
    if key == "ldflags":
        return shlex.join(toolchain.cuda_link_flags(toolchain.find_cuda()))
    if key == "cuda-arch":
        # what a CUDA compile that names no --cuda-gpu-arch gets
        return toolchain.default_cuda_arch()[0]
    raise ConfigError(f"unknown key {key!r}; use one of: {', '.join(CONFIG_KEYS)}")


@click.command("config")
@click.argument("key", required=False)
def config(key: str | None) -> None:
    """Print a value for build systems: cc, cxx, prefix, libdir, includedir, cmakedir, cflags,
    ldflags, cuda-arch.

    Without KEY, print every key with its value.
    """
    if key is not None:
        click.echo(config_value(key))
        return
    for k in CONFIG_KEYS:
        try:
            click.echo(f"{k}: {config_value(k)}")
        except (ToolchainError, ConfigError) as exc:
            click.echo(f"{k}: (unavailable: {exc})")
