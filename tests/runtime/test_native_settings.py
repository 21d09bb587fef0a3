"""The environment variables the native libraries read have one definition
(mneme.runtime.native_settings): the C++ header is generated from it, the C++ parser reads
every setting as its kind says (a malformed value is one line), no native source spells a
name itself, the Python code that sets them uses the module's constants, and
docs/record.md's table lists the recorder's. CPU only: the parser is compiled apart."""

from __future__ import annotations

import ast
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from mneme.runtime import native_settings as ns

ROOT = Path(__file__).resolve().parents[2]
NATIVE = ROOT / "packages" / "mneme-runtime" / "native"
HEADER = NATIVE / "include" / "mneme" / "runtime" / "native_settings.hpp"

#: A malformed value of each kind that can be malformed.
MALFORMED = {
    "flag": "maybe",
    "integer": "12abc",
    "bytes": "-1",
    "size": "lots",
    "seconds": "soon",
    "choice": "none-of-them",
    "regex": "(",
    "ranks": "0,x",
}


def test_header_in_tree_is_generated_from_the_python_definition():
    assert HEADER.read_text() == ns.c_header(), (
        f"regenerate: python -m mneme.runtime.native_settings > {HEADER.relative_to(ROOT)}"
    )


def test_the_table_is_consistent():
    names = [s.name for s in ns.SETTINGS]
    assert len(names) == len(set(names))
    for key in ns.SECTIONS:
        fields = [s.field for s in ns.section(key)]
        assert len(fields) == len(set(fields)), key
    for s in ns.SETTINGS:
        assert s.section in ns.SECTIONS and s.kind in ns.KINDS, s
        assert re.fullmatch(r"[a-z_][a-z0-9_]*", s.field), s
        assert s.owned == s.name.startswith("MNEME_"), s
        if s.kind == "choice":
            assert s.default in s.choices, s
        if s.kind == "integer":
            assert s.low is not None and s.high is not None and s.low <= s.high, s
    constants = {v for k, v in vars(ns).items() if k.isupper() and isinstance(v, str) and v.startswith("MNEME_")}
    assert constants == {s.name for s in ns.SETTINGS if s.owned}


# --- the C++ parser, compiled apart ------------------------------------------------------

HARNESS = r"""
#include <cstdio>
#include <cstring>
#include <iostream>
#include "mneme/runtime/native_settings.hpp"
using namespace mneme::runtime::settings;

template <class T> void show(const char* name, const T& v) { std::cout << name << "=" << v << "\n"; }

template <class Section, class Print> int run(Print print) {
  std::string error;
  Section s = read<Section>(error);
  if (!error.empty()) {
    std::cout << "error " << error << "\n";
    return 2;
  }
  print(s);
  return 0;
}

int main(int argc, char** argv) {
  std::cout << std::boolalpha;
  std::string which = argc > 1 ? argv[1] : "";
@SECTIONS@
  return 1;
}
"""


def _harness_source() -> str:
    blocks = []
    for key, (struct, _) in ns.SECTIONS.items():
        prints = "".join(f'show("{s.name}", s.{s.field}); ' for s in ns.section(key))
        blocks.append(f'  if (which == "{key}") return run<{struct}>([](const {struct}& s) {{ {prints}}});')
    return HARNESS.replace("@SECTIONS@", "\n".join(blocks))


@pytest.fixture(scope="module")
def parser(tmp_path_factory) -> Path:
    compiler = shutil.which("clang++-22") or shutil.which("g++")
    if not compiler:
        pytest.skip("no C++ compiler")
    out = tmp_path_factory.mktemp("settings")
    (out / "harness.cpp").write_text(_harness_source())
    subprocess.run([compiler, "-std=c++20", "-O0", f"-I{NATIVE / 'include'}", "harness.cpp",
                    str(NATIVE / "src" / "settings_reader.cpp"), str(NATIVE / "src" / "name_pattern.cpp"),
                    "-o", "harness"], cwd=out, check=True)
    return out / "harness"


def _parse(parser: Path, section: str, **env: str) -> tuple[int, dict[str, str], str]:
    clean = {k: v for k, v in os.environ.items() if k not in ns.BY_NAME}
    done = subprocess.run([str(parser), section], capture_output=True, text=True, env={**clean, **env},
                          timeout=60)
    values, error = {}, ""
    for line in done.stdout.splitlines():
        if line.startswith("error "):
            error = line.removeprefix("error ")
        else:
            name, _, value = line.partition("=")
            values[name] = value
    return done.returncode, values, error


def _shown(s: ns.Setting, value) -> str:
    if s.kind == "flag":
        return "true" if value else "false"
    if s.kind == "seconds":
        return f"{float(value):g}"
    return str(value)


@pytest.mark.parametrize("section", list(ns.SECTIONS))
def test_unset_and_empty_values_are_the_defaults(parser, section):
    for env in ({}, {s.name: "" for s in ns.section(section)}):
        code, values, error = _parse(parser, section, **env)
        assert code == 0 and not error
        assert values == {s.name: _shown(s, s.default) for s in ns.section(section)}


@pytest.mark.parametrize("setting", [s for s in ns.SETTINGS if s.kind != "text"], ids=lambda s: s.name)
def test_a_malformed_value_of_any_setting_is_one_line(parser, setting):
    value = MALFORMED[setting.kind]
    code, _, error = _parse(parser, setting.section, **{setting.name: value})
    assert code == 2
    assert error == f"{setting.name}={value} is not {setting.expected()}; unset it or give one"


@pytest.mark.parametrize(("name", "value", "parsed"), [
    (ns.RECORD_MAX, "0x10", "16"),
    (ns.RECORD_ZSTD_LEVEL, "-5", "-5"),
    (ns.RECORD_BASE, "0x200000000000", str(0x200000000000)),
    (ns.RECORD_HOST_MEMORY, "512M", str(512 << 20)),
    (ns.RECORD_HOST_MEMORY, "1073741824", str(1 << 30)),
    (ns.RECORD_CRASH_WAIT, "2.5", "2.5"),
    (ns.RECORD_STATS, "1", "true"),
    (ns.RECORD_STATS, "yes", "true"),
    (ns.RECORD_DIGESTS, "0", "false"),
    (ns.RECORD_DIGESTS, "OFF", "false"),
    (ns.RECORD_RANKS, "all", "all"),
    (ns.RECORD_RANKS, "0,2,,5", "0,2,,5"),
    (ns.RECORD_FILTER, "^_Z.*saxpy", "^_Z.*saxpy"),
    (ns.RECORD_MANAGED, "host", "host"),
    (ns.RECORD_TAGS, "0", "0"),
    ("SLURM_PROCID", "3", "3"),
    (ns.APPLY_MODE, "measure", "measure"),
    (ns.APPLY_TIMING, "1", "true"),
    (ns.CUPTI_LIBRARY, "/opt/x/libcupti.so", "/opt/x/libcupti.so"),
])
def test_well_formed_values_are_read(parser, name, value, parsed):
    setting = ns.BY_NAME[name]
    code, values, error = _parse(parser, setting.section, **{name: value})
    assert code == 0 and not error
    assert values[name] == parsed


def test_the_first_malformed_value_is_the_one_said(parser):
    code, _, error = _parse(parser, "record", **{ns.RECORD_MAX: "x", ns.RECORD_STATS: "y"})
    assert code == 2 and error.startswith(f"{ns.RECORD_MAX}=x ")


# --- one definition: no other spelling of the names ---------------------------------------


def _native_sources():
    for folder in (NATIVE / "src", NATIVE / "include", NATIVE / "python"):
        for path in sorted(folder.rglob("*")):
            if path.suffix in (".cpp", ".hpp", ".h", ".cu", ".inc") and path != HEADER:
                yield path


def test_native_sources_take_every_name_from_the_generated_header():
    literal = re.compile(r'"(?:' + "|".join(re.escape(n) for n in ns.BY_NAME) + r')[="]')
    comment = re.compile(r"//[^\n]*|/\*.*?\*/", re.S)
    for path in _native_sources():
        text = comment.sub("", path.read_text())
        assert not literal.search(text), f"{path.relative_to(ROOT)} spells a setting's name: use MNEME_ENV_*"
        if path.name != "settings_reader.cpp":
            assert "getenv" not in text, f"{path.relative_to(ROOT)} reads the environment: use native_settings.hpp"


def test_python_code_that_sets_them_uses_the_constants():
    """No string literal (or keyword argument) in the packages' Python code is a native
    setting's name, except in the module that defines them."""
    owned = {s.name for s in ns.SETTINGS if s.owned}
    found = []
    for path in sorted((ROOT / "packages").glob("*/src/**/*.py")):
        if path.name == "native_settings.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Constant) and node.value in owned:
                found.append(f"{path.relative_to(ROOT)}:{node.lineno}: {node.value!r}")
            if isinstance(node, ast.keyword) and node.arg in owned:
                found.append(f"{path.relative_to(ROOT)}:{node.value.lineno}: {node.arg}=")
    assert not found, "use mneme.runtime.native_settings' constants:\n" + "\n".join(found)


def test_docs_list_every_setting_of_the_recorder():
    """docs/record.md's table of options and environment names each recorder setting, and
    no other MNEME_RECORD_* name."""
    text = (ROOT / "docs" / "record.md").read_text()
    table = text[text.index("## Options and environment"):]
    table = table[:table.index("\n## ", 1)]
    listed = set(re.findall(r"`(MNEME_RECORD_[A-Z_]+)", table))
    assert listed == {s.name for s in ns.section("record") if s.owned}
    for s in ns.section("record"):
        for choice in s.choices:
            if choice != "0":
                assert f"`{choice}`" in table, (s.name, choice)


def test_docs_list_every_setting_of_the_swapper():
    text = (ROOT / "docs" / "tune.md").read_text()
    table = text[text.index("**The swapper's environment.**"):]
    table = table[:table.index("\n## ")]
    listed = set(re.findall(r"`(MNEME_[A-Z_]+)", table))
    assert listed == {s.name for s in ns.section("apply")} | {ns.CUPTI_LIBRARY}
