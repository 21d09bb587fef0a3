"""Stand-alone scripts the tests import by path: tests/corpus and examples/ are not
packages (their build scripts run on their own, with the standard library only)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

REPO = Path(__file__).resolve().parents[1]


def load_script(relative: str) -> ModuleType:
    """The script at REPO/`relative` as a module, executed once per test session."""
    name = "mneme_tests_" + relative.removesuffix(".py").replace("/", "_")
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, REPO / relative)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module  # registered before it runs: dataclasses look it up
        spec.loader.exec_module(module)
    return sys.modules[name]
