"""A package's door that costs nothing until a name is used: each exported name is
imported from its module on first use (PEP 562). The tuner's packages export this way
so that importing one (the workers' fork server imports ``workers._worker``, the ``mneme
tune`` command ``mneme.tune`` before it starts that server) pulls in neither the replay
engine nor Optuna, SQLAlchemy or matplotlib."""

from __future__ import annotations

import importlib
import sys
import types
from collections.abc import Callable

__all__ = ["lazy_exports"]


class _Door(types.ModuleType):
    """A lazy package whose exported names keep their values when a submodule of the same
    name is imported: importing ``mneme.tune.space`` would otherwise bind the package's
    ``space`` to that module, not to the decorator it exports (as the eager import did)."""

    def __setattr__(self, name: str, value: object) -> None:
        if isinstance(value, types.ModuleType) and name in self.__dict__.get("_LAZY", ()):
            # (the import system binding a submodule: the name stays the table's,
            # resolved on use; the module stays in sys.modules)
            if not isinstance(self.__dict__.get(name), types.ModuleType):
                return
        super().__setattr__(name, value)


def lazy_exports(package: str, namespace: dict, table: dict[str, str]
                 ) -> tuple[Callable[[str], object], Callable[[], list[str]]]:
    """The ``__getattr__`` and ``__dir__`` of package ``package`` (``namespace``: its
    ``globals()``), exporting each name of ``table`` from its module (relative to the
    package); a name once looked up is kept in the namespace."""

    def __getattr__(name: str):
        module = table.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module, package), name)
        namespace[name] = value  # (looked up here once)
        return value

    def __dir__() -> list[str]:
        return sorted({*namespace, *table})

    door = sys.modules.get(package)
    if door is not None and type(door) is types.ModuleType:
        door.__class__ = _Door
    return __getattr__, __dir__
