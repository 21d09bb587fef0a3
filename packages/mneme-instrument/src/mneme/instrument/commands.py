"""`mneme inspect` and `mneme config` (registered through mneme-instrument's entry points)."""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
from pathlib import Path

import click

from . import toolchain
from .section import Kernel, SectionError, find_kernel, read_kernels

CONFIG_KEYS = ("cc", "cxx", "prefix", "libdir", "includedir", "cmakedir", "cflags", "ldflags")


class InspectError(SectionError):
    """A bad `mneme inspect` request (unknown kernel, ...)."""


class ConfigError(Exception):
    mneme_user_error = True


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
    """Textual IR of embedded bitcode (llvm-dis-22, or mneme-replay's binding if installed)."""
    try:
        dis = toolchain.find_llvm().tool("llvm-dis")
    except toolchain.ToolchainError:
        dis = None
    if dis is not None:
        proc = subprocess.run([str(dis), "-", "-o", "-"], input=bitcode, capture_output=True)
        if proc.returncode == 0:
            return proc.stdout.decode()
    try:
        from mneme.replay.jit import parse_module  # optional: not a dependency
    except ImportError:
        raise InspectError(
            "printing IR needs llvm-dis-22 (apt-get install llvm-22) or mneme-replay"
        ) from None
    return str(parse_module(bitcode, "<embedded>"))


@click.command("inspect")
@click.argument("binary", type=click.Path(path_type=Path))
@click.option(
    "--ir",
    "ir_kernel",
    metavar="KERNEL",
    help="print the IR of KERNEL (mangled or demangled name, bare name or static hash)",
)
@click.option("--json", "as_json", is_flag=True, help="machine-readable output")
def inspect(binary: Path, ir_kernel: str | None, as_json: bool) -> None:
    """List the kernels (IR + metadata) that mneme-clang++ embedded in BINARY."""
    kernels = read_kernels(binary)
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
    raise ConfigError(f"unknown key {key!r}; use one of: {', '.join(CONFIG_KEYS)}")


@click.command("config")
@click.argument("key", required=False)
def config(key: str | None) -> None:
    """Print a value for build systems: cc, cxx, prefix, libdir, includedir, cmakedir, cflags, ldflags.

    Without KEY, print every key with its value.
    """
    if key is not None:
        click.echo(config_value(key))
        return
    for k in CONFIG_KEYS:
        try:
            click.echo(f"{k}: {config_value(k)}")
        except (toolchain.ToolchainError, ConfigError) as exc:
            click.echo(f"{k}: (unavailable: {exc})")
