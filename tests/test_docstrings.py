"""The API reference (docs/reference/, mkdocstrings) is the docstrings: every function and
class a documented package exports has a Google-style docstring with

* ``Parameters:`` naming each parameter of its signature (a class: of its constructor),
* ``Returns:`` (or ``Yields:``) when it returns a value (a return annotation other than
  None, or a ``return <value>`` in its body),
* ``Raises:`` when its body raises an exception itself (``raise X``; a bare ``raise`` or
  what a callee raises is not counted),

and, where the package is checked with its methods, so does every public method of its
exported classes (properties are attributes: a description is enough). The docs build
(mkdocs --strict) fails on a documented parameter that does not exist.

    python tests/test_docstrings.py mneme.replay.db   # what a package still lacks
"""

from __future__ import annotations

import ast
import importlib.util
import sys
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PATHS = [str(ROOT / "packages" / p / "src") for p in
         ("mneme-instrument", "mneme-runtime", "mneme-replay", "mneme-tune", "mneme-cli")]

#: package -> whether the public methods of its exported classes are checked too
CHECKED = {
    "mneme.instrument.section": True,
    "mneme.instrument.fatbin": True,
    "mneme.instrument.demangle": True,
    "mneme.instrument.errors": True,
    "mneme.replay.errors": True,
    "mneme.runtime": True,
    "mneme.runtime.errors": True,
    "mneme.replay.db": True,
    "mneme.replay.engine": True,
    "mneme.replay.jit": True,
    "mneme.tune": True,
    "mneme.tune.errors": True,
    "mneme.tune.space": True,
    "mneme.tune.app": True,
    # the tuner's own packages: their exports (their classes' methods are internal)
    "mneme.tune.study": False,
    "mneme.tune.workers": False,
    "mneme.tune.report": False,
    "mneme.tune.search": False,
    "mneme.tune.apply": False,
}
#: exported by the packages but documented by their owners (the standard library), or
#: defined by a nanobind module, whose docstrings (in its generated stub) are its C++
#: bindings' (the LLVM binding's classes: docs/jit.md)
FOREIGN = ("concurrent.", "builtins.", "mneme.replay.jit._llvm.", "mneme.runtime._native.")


@cache
def _modules():
    import griffe

    spec = importlib.util.spec_from_file_location("griffe_lazy", ROOT / "scripts" / "griffe_lazy.py")
    lazy = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(lazy)
    loader = griffe.GriffeLoader(search_paths=PATHS, docstring_parser=griffe.Parser.google,
                                 docstring_options={"warn_missing_types": False},
                                 extensions=griffe.load_extensions(lazy.LazyExports()))
    for package in ("mneme.instrument", "mneme.runtime", "mneme.replay", "mneme.tune"):
        loader.load(package)
    loader.resolve_aliases(external=False, implicit=False)
    return loader.modules_collection


def _body(obj) -> list[ast.stmt]:
    """The statements of a function's body, from its source (nested definitions left out)."""
    if obj.lineno is None or obj.endlineno is None:
        return []  # made by griffe (a dataclass's __init__): no source
    lines = Path(obj.filepath).read_text().splitlines()[obj.lineno - 1: obj.endlineno]
    if not any(line.strip() for line in lines):
        return []
    first = min(len(line) - len(line.lstrip()) for line in lines if line.strip())
    tree = ast.parse("\n".join(line[first:] for line in lines))
    definition = next(n for n in tree.body if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef))
    return definition.body


def _walk(statements):
    """Every node of ``statements`` outside nested functions, classes and lambdas."""
    stack = list(statements)
    while stack:
        node = stack.pop()
        yield node
        for child in ast.iter_child_nodes(node):
            if not isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef | ast.Lambda):
                stack.append(child)


def _sections(docstring) -> dict[str, list]:
    import griffe

    out: dict[str, list] = {}
    for section in docstring.parse(griffe.Parser.google) if docstring else ():
        out.setdefault(section.kind.value, []).extend(
            section.value if isinstance(section.value, list) else [section.value])
    return out


def _parameter_names(obj) -> list[str]:
    names = []
    for p in obj.parameters:
        if p.name in ("self", "cls"):
            continue
        names.append({"variadic positional": f"*{p.name}",
                      "variadic keyword": f"**{p.name}"}.get(p.kind.value, p.name))
    return names


def _documented(sections) -> set[str]:
    """The names a docstring documents: its parameters, and a class's attributes (a
    dataclass's fields are its constructor's parameters)."""
    return {getattr(p, "name", "").lstrip("*")
            for p in (*sections.get("parameters", []), *sections.get("attributes", []))}


def problems_of_function(func, where: str) -> list[str]:
    out = []
    sections = _sections(func.docstring)
    if func.docstring is None:
        return [f"{where}: no docstring"]
    missing = [n for n in _parameter_names(func) if n.lstrip("*") not in _documented(sections)]
    if missing:
        out.append(f"{where}: Parameters lacks {', '.join(missing)}")
    body = _body(func)
    nodes = list(_walk(body))
    returns = func.returns is not None and str(func.returns) not in ("None", "NoReturn", "Never")
    returns = returns or (func.returns is None and any(
        isinstance(n, ast.Return) and n.value is not None for n in nodes))
    yields = any(isinstance(n, ast.Yield | ast.YieldFrom) for n in nodes)
    if (returns or yields) and not ({"returns", "yields"} & set(sections)):
        out.append(f"{where}: no Returns")
    if any(isinstance(n, ast.Raise) and n.exc is not None for n in nodes) and "raises" not in sections:
        out.append(f"{where}: no Raises")
    return out


def problems_of_class(cls, where: str, methods: bool) -> list[str]:
    if cls.docstring is None:
        return [f"{where}: no docstring"]
    out = []
    init = cls.members.get("__init__")
    documented = _documented(_sections(cls.docstring))
    if init is not None and not init.is_alias and init.docstring is not None:
        documented |= _documented(_sections(init.docstring))
    dataclass = any(d.callable_path.rsplit(".", 1)[-1] == "dataclass" for d in cls.decorators)
    own = init is not None or dataclass  # (else the base that defines it documents it)
    missing = [n for n in _parameter_names(cls) if n.lstrip("*") not in documented] if own else []
    if missing:
        out.append(f"{where}: Parameters lacks {', '.join(missing)}")
    if init is not None and not init.is_alias:
        body = _body(init)
        if (any(isinstance(n, ast.Raise) and n.exc is not None for n in _walk(body))
                and "raises" not in _sections(cls.docstring)
                and "raises" not in _sections(init.docstring)):
            out.append(f"{where}: no Raises (its constructor raises)")
    if methods:
        for name, member in cls.members.items():
            if name.startswith("_") or member.is_alias or not member.is_function:
                continue
            if _documented_in_base(cls, name):  # an override: its base's docstring says it
                continue
            if "property" in member.labels or "cached_property" in {
                    d.callable_path.rsplit(".", 1)[-1] for d in member.decorators}:
                continue
            out += problems_of_function(member, f"{where}.{name}")
    return out


def _documented_in_base(cls, name: str) -> bool:
    """Whether a base class of ``cls`` (one of the packages') documents method ``name``."""
    for base in cls.resolved_bases:
        member = base.all_members.get(name)
        if member is not None and member.docstring is not None:
            return True
    return False


def problems(package: str, methods: bool) -> list[str]:
    module = _modules().get_member(package)
    names = module.exports if module.exports is not None else [  # (no __all__: its own)
        n for n, m in module.members.items() if not n.startswith("_") and not m.is_alias]
    out = []
    for name in sorted(names):
        import griffe

        obj = module[name]
        try:
            target = obj.final_target if obj.is_alias else obj
        except griffe.AliasResolutionError:  # outside the packages loaded: not ours
            continue
        if target.path.startswith(FOREIGN) or not (target.is_function or target.is_class):
            continue
        where = f"{package}.{name}"
        if target.is_function:
            out += problems_of_function(target, where)
        else:
            out += problems_of_class(target, where, methods)
    return out


@pytest.fixture(scope="module")
def loaded():
    """The packages as griffe reads them (~5 s), once for every test here: a fixture wider
    than a function keeps them on one xdist worker (tests/parallel_runs.py)."""
    pytest.importorskip("griffe")
    return _modules()


@pytest.mark.slow
@pytest.mark.parametrize("package", sorted(CHECKED))
def test_exports_document_parameters_returns_and_raises(loaded, package):
    found = problems(package, CHECKED[package])
    assert not found, "\n".join(found)


if __name__ == "__main__":
    for package in sys.argv[1:]:
        for line in problems(package, CHECKED.get(package, True)):
            print(line)
