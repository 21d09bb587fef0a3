"""A package's door that costs nothing until a name is used: each exported name is
imported from its module on first use (PEP 562). The tuner's packages export this way
so that importing one (the workers' fork server imports ``workers._worker``) does not
pull in Optuna, SQLAlchemy or matplotlib."""

from __future__ import annotations

import importlib
from collections.abc import Callable

__all__ = ["lazy_exports"]


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

    return __getattr__, __dir__
