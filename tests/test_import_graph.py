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


# -- the library never imports the CLI ------------------------------------------------------


def _cli_modules() -> set[str]:
    """The click command modules: those each package's ``mneme.commands`` entry points
    name (the ``mneme`` command's own package and ``__main__`` modules: _is_cli)."""
    import tomllib

    modules = set()
    for pyproject in (ROOT / "packages").glob("mneme-*/pyproject.toml"):
        meta = tomllib.loads(pyproject.read_text())
        commands = meta["project"].get("entry-points", {}).get("mneme.commands", {})
        modules |= {target.split(":")[0] for target in commands.values()}
    return modules


def _modules() -> dict[str, Path]:
    """Every module of every package, by dotted name."""
    found = {}
    for src in (ROOT / "packages").glob("mneme-*/src"):
        for path in src.rglob("*.py"):
            parts = path.relative_to(src).with_suffix("").parts
            found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def _imported(name: str, path: Path) -> list[tuple[int, str, str | None]]:
    """(line, module, name) of every import in module ``name``, relative ones resolved:
    ``import a.b`` gives (a.b, None), ``from a import b`` (a, b), b being a name or a
    submodule of a."""
    package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, a.name, None) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(package[: len(package) - node.level + 1] + ([base] if base else []))
            found += [(node.lineno, base, a.name) for a in node.names]
    return found


def _is_cli(module: str, cli: set[str]) -> bool:
    return module in cli or module.endswith(".__main__") or module.split(".")[:2] == ["mneme", "cli"]


def test_no_library_module_imports_a_cli_module():
    """What library code needs lives in library modules; the click command modules (and
    ``python -m`` entry points) only import it. So mneme-replay works without its
    commands, and moving a command never breaks the library."""
    cli = _cli_modules()
    modules = _modules()
    assert {"mneme.replay.replay_command", "mneme.tune.apply._apply_command"} <= cli <= set(modules)
    bad = {
        f"{path.relative_to(ROOT)}:{line} imports {target}"
        for name, path in modules.items() if not _is_cli(name, cli)
        for line, module, taken in _imported(name, path)
        for target in (module, f"{module}.{taken}") if target in cli
    }
    assert not bad, "\n".join(sorted(bad))


def _private(part: str) -> bool:
    return part.startswith("_") and not part.startswith("__")


def test_no_module_takes_another_modules_private_names():
    """An underscore name is its module's own: another module that needs it gets a public
    name. A package's underscore modules (its native extensions) are imported by that
    package only; other packages go through its public modules."""
    modules = _modules()
    bad = []
    for name, path in sorted(modules.items()):
        where = f"{path.relative_to(ROOT)}"
        for line, module, taken in _imported(name, path):
            if module.split(".")[0] != "mneme":
                continue  # another project's private names are its own business
            # from a package, a name is perhaps one of its modules (a native extension,
            # not built here, among them): judged as a module
            is_package = modules.get(module, ROOT).name == "__init__.py"
            dotted = f"{module}.{taken}" if taken and is_package else module
            if dotted.split(".")[:2] != name.split(".")[:2] and any(map(_private, dotted.split("."))):
                bad.append(f"{where}:{line} imports {dotted}, private to its package")
            if taken and not is_package and _private(taken):
                bad.append(f"{where}:{line} takes {taken} from {module}")
    assert not bad, "\n".join(bad)
