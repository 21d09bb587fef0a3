"""Dependencies point one way: cli -> tune -> replay -> runtime -> instrument.

A package imports only packages below it (at module level or inside functions), so each
one installs and imports without those above it (mneme-instrument alone in a build
system, mneme-replay alone on an analysis machine)."""

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
ORDER = ["instrument", "runtime", "replay", "tune", "cli"]  # lowest first


def _mneme_imports(path: Path) -> list[tuple[int, str]]:
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
        else:
            continue
        for name in names:
            parts = name.split(".")
            if parts[0] == "mneme" and len(parts) > 1 and parts[1] in ORDER:
                found.append((node.lineno, parts[1]))
    return found


@pytest.mark.parametrize("package", ORDER)
def test_imports_only_packages_below(package):
    src = ROOT / "packages" / f"mneme-{package}" / "src" / "mneme" / package
    assert src.is_dir()
    allowed = set(ORDER[: ORDER.index(package) + 1])
    bad = [
        f"{path.relative_to(ROOT)}:{line} imports mneme.{other}"
        for path in sorted(src.rglob("*.py"))
        for line, other in _mneme_imports(path)
        if other not in allowed
    ]
    assert not bad, "\n".join(bad)


def test_declared_dependencies_follow_the_order():
    import tomllib

    for package in ORDER:
        meta = tomllib.loads((ROOT / "packages" / f"mneme-{package}" / "pyproject.toml").read_text())
        deps = [d.split(";")[0].strip() for d in meta["project"]["dependencies"]]
        for dep in deps:
            name = dep.split(">")[0].split("=")[0].split("<")[0].split("~")[0].strip()
            if name.startswith("mneme-"):
                other = name.removeprefix("mneme-")
                assert ORDER.index(other) < ORDER.index(package), f"mneme-{package} -> {name}"
