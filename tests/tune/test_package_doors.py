"""Each package of mneme.tune is a door: every name of its ``__all__`` resolves (imported
lazily from its module on first use), and ``from PACKAGE import *`` gives them all."""

from __future__ import annotations

import importlib

import pytest

PACKAGES = ["mneme.tune", "mneme.tune.study", "mneme.tune.workers", "mneme.tune.search",
            "mneme.tune.apply", "mneme.tune.report"]


@pytest.mark.parametrize("name", PACKAGES)
def test_every_exported_name_resolves(name):
    package = importlib.import_module(name)
    missing = [n for n in package.__all__ if not hasattr(package, n)]
    assert not missing, f"{name} exports names its modules lack: {missing}"
    namespace: dict = {}
    exec(f"from {name} import *", namespace)  # noqa: S102 - the star import users write
    assert set(package.__all__) <= set(namespace)
    with pytest.raises(AttributeError, match="has no attribute"):
        package.no_such_name  # noqa: B018
