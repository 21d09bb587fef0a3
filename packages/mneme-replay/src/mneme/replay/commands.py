"""The recording-database commands of the ``mneme`` CLI: ls, show, check, clean, copy, move.

Registered through the ``mneme.commands`` entry points of mneme-replay; user errors are
``DatabaseError``s, which the CLI prints as one line with a non-zero exit.
"""

from __future__ import annotations

import functools
import json
import warnings
from pathlib import Path, PurePosixPath

import click
from rich.console import Console
from rich.progress import DownloadColumn, Progress, TransferSpeedColumn

from . import tables
from .db import Database, DatabaseError, Kernel, content_store
from .db.chunks import Usage, tree_usage
from .db.integrity import abandoned_staging, check_database, region_bytes
from .db.layout import KERNELS
from .db.transfer import copy_kernel, open_destination, remove_kernel, remove_staging
from .engine.determinism import load_profile
from .tables import Column

DB_ARG = click.argument("db", type=click.Path(path_type=Path))


def os_errors(command):
    """A file-system failure (permissions, a full disk, a file where a folder belongs)
    becomes one line naming the path, not a traceback."""

    @functools.wraps(command)
    def wrapper(*args, **kwargs):
        try:
            return command(*args, **kwargs)
        except OSError as exc:
            where = f"{exc.filename}: " if exc.filename else ""
            raise DatabaseError(f"{where}{exc.strerror or exc}") from None

    return wrapper

# zarr-python warns about our private .mneme folder when listing a hierarchy; harmless.
warnings.filterwarnings("ignore", message="Object at .mneme is not recognized")


def human(n: int) -> str:
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if size < 1024 or unit == "TiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{n} B"


def _dims(d) -> str:
    return "x".join(str(v) for v in d)


def _grid(grid, cluster, cooperative=False) -> str:
    """The grid, the thread-block clusters it was launched in, and whether cooperatively."""
    return (_dims(grid) + (f" in {_dims(cluster)} clusters" if cluster else "")
            + (" cooperative" if cooperative else ""))


def _ratio(raw: int, stored: int) -> str:
    return f"{raw / stored:.1f}x" if stored else "-"


def _app_ms(inst) -> float | None:
    """The in-application median time (ms) recorded with the instance, if any."""
    app = inst.app_time
    return app.median_ms if app is not None else None


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.4f}"


def _origin_file(origin: str | None) -> str:
    """The origin's file name (libtorch_cuda.so, python3.12); the full path is in show and
    ls --json."""
    if not origin:
        return "-"
    return PurePosixPath(origin).name or origin


LS_COLUMNS = (
    Column("kernel", role="name"),
    Column("instance", role="id"),
    Column("origin"),
    *(Column(header, justify="right") for header in
      ("gpu", "grid", "block", "smem", "occ", "app ms", "regions", "raw", "stored", "unique", "ratio")),
)


def _gpu(device: int | None, peers: list[int]) -> str:
    """"1": ran on GPU 1 of the recorded process; "0+1": on GPU 0, reaching GPU 1's memory
    (replays on two GPUs); "-": recorded before recordings said (one GPU)."""
    if device is None:
        return "-"
    return "+".join(str(d) for d in (device, *peers))


def _ls_rows(database: Database, usage: Usage | None = None) -> tuple[list[dict], list[dict]]:
    """(rows of the readable instances, rows of the broken ones: kernel, id, reason). A
    kernel or instance whose metadata is damaged is named, never hides the others.
    ``usage``: the database's ``tree_usage`` (one stat of each file for every column)."""
    rows, broken = [], []
    if usage is None:
        usage = tree_usage(database.root / KERNELS)
    for kernel in database.kernels():
        problem = kernel.problem()
        if problem:
            broken.append({"kernel": kernel.display_name, "instance": kernel.static_hash, "broken": problem})
            continue
        for inst in kernel.instances():
            problem = inst.problem()
            if problem is None:
                try:
                    raw = inst.raw_bytes()
                    stored, unique = usage.nodes.get(inst.id, (0, 0))
                except DatabaseError as error:
                    problem = str(error)
            if problem:
                broken.append({"kernel": kernel.demangled_name, "instance": inst.id, "broken": problem})
                continue
            rows.append({
                "kernel": kernel.demangled_name,
                "instance": inst.id,
                "origin": kernel.origin,
                "device": inst.device,
                "peer_devices": list(inst.peer_devices),
                "grid": list(inst.grid),
                "block": list(inst.block),
                "cluster": list(inst.cluster) if inst.cluster else None,
                "cooperative": inst.cooperative,
                "shared_mem": inst.shared_mem,
                "occurrences": inst.occurrences,
                "app_ms": _app_ms(inst),
                "regions": len(inst.regions),
                "raw_bytes": raw,
                "stored_bytes": stored,
                "unique_bytes": unique,
            })
    return rows, broken


@click.command("ls")
@DB_ARG
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
@os_errors
def ls(db: Path, as_json: bool):
    """List the kernels and instances of a recording database.

    Instances (or kernels) whose metadata is damaged are listed as broken, with the
    reason; the others are listed as usual (mneme check verifies every chunk)."""
    database = Database.open(db)
    usage = tree_usage(database.root / KERNELS)
    rows, broken = _ls_rows(database, usage)
    if as_json:
        click.echo(json.dumps(rows + broken, indent=2))
        return
    info = database.info
    console = tables.console()
    console.print(
        f"[bold]{db}[/bold]  format {info.format_version}, {info.gpu_name or 'unknown GPU'} "
        f"(sm {info.compute_capability or '?'}), address range {info.vas_base:#x}+{human(info.vas_size)}",
        soft_wrap=True,
    )
    cells = [
        [r["kernel"], r["instance"], _origin_file(r["origin"]), _gpu(r["device"], r["peer_devices"]), _grid(r["grid"], r["cluster"], r["cooperative"]), _dims(r["block"]), str(r["shared_mem"]),
         str(r["occurrences"]), _ms(r["app_ms"]), str(r["regions"]), human(r["raw_bytes"]),
         human(r["stored_bytes"]), human(r["unique_bytes"]), _ratio(r["raw_bytes"], r["stored_bytes"])]
        for r in rows
    ]
    cells += [[b["kernel"], b["instance"], *["-"] * (len(LS_COLUMNS) - 3), "broken"] for b in broken]
    tables.print_table(console, LS_COLUMNS, cells)
    for b in broken:
        console.print(f"broken: {b['instance']} ({b['kernel']}): {b['broken']}", soft_wrap=True, markup=False)
    kernels = len({r["instance"].split("/")[0] for r in rows})
    console.print(f"{len(database.kernels())} kernels ({kernels} with instances), {len(rows)} instances"
                  + (f", {len(broken)} broken (mneme check lists every problem)" if broken else ""),
                  soft_wrap=True)
    # raw: the snapshots' bytes; stored: their chunk files; on disk: shared chunks once
    raw = sum(r["raw_bytes"] for r in rows)
    stored = sum(r["stored_bytes"] for r in rows)
    disk = usage.disk  # database.disk_bytes(), from the same walk
    console.print(f"raw {human(raw)}, stored {human(stored)}, on disk {human(disk)} "
                  f"({_ratio(raw, disk)} of raw; chunks shared between instances stored once)",
                  soft_wrap=True)


def _kernel_json(kernel) -> dict:
    return {
        "static_hash": kernel.static_hash,
        "name": kernel.name,
        "demangled_name": kernel.demangled_name,
        "origin": kernel.origin,  # the file the code came from; None in older databases
        "params": [p.__dict__ for p in kernel.params],
        "globals": [g.__dict__ for g in kernel.globals],
        "launch_bounds": kernel.launch_bounds,
        "ir_size": kernel.ir_size,
        "code": kernel.code_kinds,  # llvm-bc (instrumented) or ptx/cubin (nvcc build)
        "instances": kernel.instance_hashes(),
    }


@click.command("show")
@DB_ARG
@click.argument("target")
@click.option("--json", "as_json", is_flag=True, help="Print JSON for scripts.")
@os_errors
def show(db: Path, target: str, as_json: bool):
    """Everything about one kernel (KERNEL) or instance (KERNEL/INSTANCE).

    KERNEL is a static hash (or a unique prefix), a mangled or a demangled name."""
    database = Database.open(db)
    if "/" in target:
        inst = database.instance(target)
        doc = inst.describe()
        doc["origin"] = inst.kernel.origin
        doc["changes"] = [c.__dict__ for c in inst.changes()]
        app = inst.app_time  # the kernel's time inside the recorded application
        doc["app_time"] = (app.to_json() if as_json else app.describe()) if app else None
        before = inst.predecessor  # the launch before it on its stream (replay's app mode)
        doc["ran_after"] = (({"kernel": before.kernel, "writes": before.writes, "reads": before.reads}
                             if as_json else before.describe()) if before else None)
        # What the unchanged kernel reproduces (measured on its first GPU replay).
        profile = load_profile(inst)
        doc["reproduces"] = (
            profile.summary() if profile else "not measured yet (the first GPU replay measures it)"
        )
        if profile is not None:
            for region in doc.get("regions", []):
                region["class"] = profile.of(region["name"]).describe()
    else:
        doc = _kernel_json(database.kernel(target))
    if as_json:
        click.echo(json.dumps(doc, indent=2))
        return
    console = tables.console()
    # key, value lines rather than a table: a value (the id) is never wrapped or cut
    keys = [key for key in doc if key not in ("regions", "changes", "params", "globals")]
    width = max(map(len, keys), default=0)
    for key in keys:
        console.print(f"[bold]{key:<{width}}[/bold]  ", end="")
        console.print(str(doc[key]), soft_wrap=True, markup=False)
    for key in ("params", "globals", "regions", "changes"):
        items = doc.get(key)
        if not items:
            continue
        columns = [Column(col, role="id" if col == "name" else "data") for col in items[0]]
        rows = [[hex(v) if k == "address" else str(v) for k, v in item.items()] for item in items]
        tables.print_table(console, columns, rows, title=key)


@click.command("check")
@DB_ARG
@os_errors
def check(db: Path):
    """Verify a database: everything a reader gets (metadata, layout, every chunk, the
    dynamic hashes and, from format 2 on, the content checksums recorded at write time)."""
    database = Database.open(db)
    hashes = database.kernel_hashes()
    total = sum(len(Kernel(database, h).instance_hashes()) for h in hashes)
    columns = (*Progress.get_default_columns(), DownloadColumn(binary_units=True), TransferSpeedColumn())
    with Progress(*columns, transient=True, console=Console(stderr=True)) as progress:
        task = progress.add_task("checking", total=region_bytes(database))
        problems = check_database(database, lambda n: progress.advance(task, n))
    for problem in problems:
        click.echo(("broken: " if problem.fatal else "note: ") + str(problem))
    fatal = sum(p.fatal for p in problems)
    if fatal:
        raise click.exceptions.Exit(1)
    click.echo(f"ok: {len(hashes)} kernels, {total} instances, every chunk verified")


@click.command("clean")
@DB_ARG
@click.argument("kernels", nargs=-1)
@click.option("--staging", is_flag=True, help="Remove unfinished writes of interrupted writers.")
@os_errors
def clean(db: Path, kernels: tuple[str, ...], staging: bool):
    """Delete the recordings of the named kernels (and/or interrupted writes)."""
    database = Database.open(db)
    if not kernels and not staging:
        raise DatabaseError("name the kernels to delete (static hash or name), or pass --staging")
    # Resolve every name first (all or nothing), each kernel once, names read before deleting.
    targets: dict[str, tuple[Kernel, str]] = {}
    for key in kernels:
        kernel = database.kernel(key)
        targets.setdefault(kernel.static_hash, (kernel, _name_of(kernel)))
    for kernel, name in targets.values():
        remove_kernel(kernel)
        click.echo(f"removed {kernel.static_hash} ({name})")
    if staging:
        click.echo(f"removed {remove_staging(database)} unfinished write(s)")
    # Chunks no array links to any more (the deleted kernels', interrupted writers').
    files, freed = content_store.collect(database.root)
    if files:
        click.echo(f"removed {files} unused stored chunk(s), {human(freed)}")


def _name_of(kernel) -> str:
    try:
        return kernel.demangled_name
    except DatabaseError:
        return "damaged metadata"


def _transfer(src: Path, dst: Path, kernels: tuple[str, ...], move: bool, force: bool):
    source = Database.open(src)
    targets: dict[str, Kernel] = {}
    for kernel in [source.kernel(k) for k in kernels] if kernels else source.kernels():
        targets.setdefault(kernel.static_hash, kernel)
    destination = open_destination(source, dst)
    for kernel in targets.values():
        name = _name_of(kernel)
        copied = copy_kernel(kernel, destination, force=force)  # verified at the destination
        if move:
            remove_kernel(kernel)
        verb = "moved" if move else "copied"
        click.echo(f"{verb} {kernel.static_hash} ({name}): {copied} new instance(s)")


FORCE = click.option(
    "--force",
    is_flag=True,
    help="Replace destination nodes that differ from the source or are damaged.",
)


@click.command("copy")
@click.argument("src", type=click.Path(path_type=Path))
@click.argument("dst", type=click.Path(path_type=Path))
@click.argument("kernels", nargs=-1)
@FORCE
@os_errors
def copy(src: Path, dst: Path, kernels: tuple[str, ...], force: bool):
    """Copy kernels (all if none named) with their instances into another database.

    Every copy is compared with its source; an instance the destination already holds is
    compared too, and the copy is refused when it differs or is damaged (--force
    replaces it)."""
    _transfer(src, dst, kernels, move=False, force=force)


@click.command("move")
@click.argument("src", type=click.Path(path_type=Path))
@click.argument("dst", type=click.Path(path_type=Path))
@click.argument("kernels", nargs=-1)
@FORCE
@os_errors
def move(src: Path, dst: Path, kernels: tuple[str, ...], force: bool):
    """Move kernels (all if none named) with their instances into another database.

    A kernel is deleted from the source only after each of its instances checked out
    byte for byte at the destination."""
    _transfer(src, dst, kernels, move=True, force=force)


__all__ = ["abandoned_staging", "check", "clean", "copy", "ls", "move", "show"]
