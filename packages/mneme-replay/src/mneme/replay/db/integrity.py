"""``mneme check``: read every node and every chunk of a database and list what is broken."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass

from . import layout
from .chunks import read_array_info, read_range
from .errors import DatabaseError
from .reader import Database, Instance, Kernel


@dataclass(frozen=True)
class Problem:
    where: str
    message: str
    fatal: bool = True

    def __str__(self) -> str:
        return f"{self.where}: {self.message}"


def abandoned_staging(db: Database) -> list[str]:
    """Staging folders left by writers that were killed (never visible to readers)."""
    try:
        return sorted(os.listdir(layout.staging_root(db.root)))
    except FileNotFoundError:
        return []


def _guard(problems: list[Problem], where: str, fn: Callable[[], object]) -> bool:
    try:
        fn()
        return True
    except DatabaseError as exc:
        problems.append(Problem(where, str(exc)))
        return False


def _check_array(problems, where: str, path, limit: int, missing_is_zero: bool) -> None:
    def run():
        info = read_array_info(path, limit)
        for index in range(info.chunk_count()):
            lo, hi = info.chunk_bounds(index)
            read_range(info, lo, hi, missing_is_zero=missing_is_zero)

    _guard(problems, where, run)


def _check_instance(problems: list[Problem], instance: Instance, limit: int) -> None:
    where = instance.id
    if not _guard(problems, where, lambda: (instance.grid, instance.block, instance.occurrences,
                                            instance.regions, instance.annotations, instance.args)):
        return
    for region in instance.regions:
        _check_array(problems, f"{where} prologue {region.name}",
                     instance.path / layout.PROLOGUE / region.name, limit, False)
        _check_array(problems, f"{where} epilogue {region.name}",
                     instance.path / layout.EPILOGUE / region.name, limit, True)
        _guard(problems, f"{where} region {region.name}",
               lambda r=region: (instance._array(layout.PROLOGUE, r.name),
                                 instance._epilogue_encoding(instance._array(layout.EPILOGUE, r.name)[0])))


def _check_kernel(problems: list[Problem], kernel: Kernel, limit: int, progress) -> None:
    where = kernel.static_hash
    if not _guard(problems, where, lambda: (kernel.name, kernel.demangled_name, kernel.params,
                                            kernel.globals, kernel.ir())):
        return
    base = kernel.path / layout.INSTANCES
    committed = set(kernel.instance_hashes())
    for name in sorted(os.listdir(base)) if base.is_dir() else []:
        if name == "zarr.json":
            continue
        if name not in committed:
            problems.append(Problem(f"{where}/{name}", "not a committed instance (unexpected entry)"))
    for instance in kernel.instances():
        _check_instance(problems, instance, limit)
        progress()


def check_database(db: Database, progress: Callable[[], None] = lambda: None) -> list[Problem]:
    """Every problem found; ``progress`` is called once per instance checked."""
    problems: list[Problem] = []
    limit = db.info.vas_size
    base = db.root / layout.KERNELS
    if not (base / "zarr.json").is_file():
        problems.append(Problem(str(db.root), "kernels group metadata is missing"))
    committed = set(db.kernel_hashes())
    for name in sorted(os.listdir(base)) if base.is_dir() else []:
        if name != "zarr.json" and name not in committed:
            problems.append(Problem(f"kernels/{name}", "not a committed kernel (unexpected entry)"))
    for kernel in db.kernels():
        _check_kernel(problems, kernel, limit, progress)
    leftovers = abandoned_staging(db)
    if leftovers:
        problems.append(Problem(
            str(db.root),
            f"{len(leftovers)} unfinished write(s) of interrupted writers in .mneme/staging "
            "(invisible to readers; mneme clean --staging removes them)",
            fatal=False,
        ))
    return problems
