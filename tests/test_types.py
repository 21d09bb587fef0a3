"""The public packages type-check, and the stubs of the native modules are what their
built modules declare.

mypy runs with the configuration in pyproject.toml ([tool.mypy]): every module of the
five packages' src/ folders, against the stubs of the two nanobind modules checked in
beside them (scripts/native_stubs.py writes them). A test rather than a step of
scripts/test.sh: it runs beside the other tests under pytest-xdist (one worker for
~20 s of CPU on the CI machine, less with the cache in build/mypy_cache), fails the run
like any test, and `hatch run test tests/test_types.py` runs it alone.
"""

import ast
import importlib
import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest
from script_modules import load_script

ROOT = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.slow


def test_public_packages_type_check():
    if importlib.util.find_spec("mypy") is None:
        pytest.skip("mypy is not installed (it is in the development environment)")
    proc = subprocess.run([sys.executable, "-m", "mypy"], cwd=ROOT, capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.mark.parametrize("module", sorted(load_script("scripts/native_stubs.py").STUBS))
def test_native_stub_is_generated_from_the_built_module(module):
    stubs = load_script("scripts/native_stubs.py")
    if importlib.util.find_spec("nanobind") is None:
        pytest.skip("nanobind is not installed (it is in the development environment)")
    try:
        generated = stubs.generate(module)
    except ImportError as error:
        pytest.skip(f"{module} is not built: {error}")
    stub = ROOT / stubs.STUBS[module]
    assert stubs.same_api(stub.read_text(), generated), (
        f"{stubs.STUBS[module]} differs from the built {module}: run python scripts/native_stubs.py")


#: the packages whose names are imported when first used (mneme.tune._lazy)
LAZY_PACKAGES = ["mneme.tune", "mneme.tune.study", "mneme.tune.workers", "mneme.tune.search",
                 "mneme.tune.apply", "mneme.tune.report"]


@pytest.mark.parametrize("name", LAZY_PACKAGES)
def test_lazy_names_are_imported_for_type_checkers(name):
    """A lazy package's ``if TYPE_CHECKING:`` block imports every name of its table from
    the table's module, as ``name as name`` (what mypy, pyright and the API reference
    read: the table itself is invisible to them)."""
    package = importlib.import_module(name)
    tree = ast.parse(Path(package.__file__).read_text())
    imported = {}
    for node in tree.body:
        if isinstance(node, ast.If) and getattr(node.test, "id", None) == "TYPE_CHECKING":
            for stmt in node.body:
                assert isinstance(stmt, ast.ImportFrom), ast.dump(stmt)
                for alias in stmt.names:
                    assert alias.asname == alias.name, f"{alias.name}: import it as itself"
                    imported[alias.name] = "." * stmt.level + (stmt.module or "")
    assert imported == package._LAZY
