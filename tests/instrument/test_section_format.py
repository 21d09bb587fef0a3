"""The kernel-section constants have one definition (mneme.instrument.section_format);
the C/C++ header the pass plugin includes is generated from it, and both sides agree."""

import subprocess
from pathlib import Path

import pytest
from mneme.instrument import section, section_format, toolchain, wrapper

HEADER = toolchain.INCLUDE_DIR / "mneme" / "kernel_section_format.h"

PRINTER = r"""
#include <cstdio>
#include "mneme/kernel_section_format.h"
int main() {
  const char magic[MNEME_KERNEL_SECTION_MAGIC_SIZE] = MNEME_KERNEL_SECTION_MAGIC;
  std::printf("%s\n%.*s\n%u\n%u\n%u\n%llx\n%llx\n%s\n%s\n%s\n%s\n", MNEME_KERNEL_SECTION_NAME,
              (int)sizeof magic, magic, MNEME_KERNEL_SECTION_FORMAT_VERSION,
              MNEME_KERNEL_SECTION_HEADER_SIZE, MNEME_KERNEL_SECTION_RECORD_ALIGNMENT,
              (unsigned long long)MNEME_FNV1A64_OFFSET, (unsigned long long)MNEME_FNV1A64_PRIME,
              MNEME_INSTRUMENT_ENV_OUT, MNEME_INSTRUMENT_ENV_STAGE, MNEME_INSTRUMENT_ENV_RDC,
              MNEME_INSTRUMENT_RECORD_SUFFIX);
}
"""


def test_header_in_tree_is_generated_from_the_python_definition():
    assert HEADER.read_text() == section_format.c_header(), (
        "regenerate: python -m mneme.instrument.section_format > " + str(HEADER)
    )


def test_cxx_sees_the_python_values(tmp_path):
    try:
        clangxx = toolchain.find_llvm().clangxx
    except toolchain.ToolchainError as exc:
        pytest.skip(str(exc))
    (tmp_path / "p.cpp").write_text(PRINTER)
    subprocess.run(
        [str(clangxx), f"-I{toolchain.INCLUDE_DIR}", "p.cpp", "-o", "p"],
        cwd=tmp_path,
        check=True,
        capture_output=True,
    )
    out = subprocess.run([str(tmp_path / "p")], capture_output=True, text=True, check=True)
    f = section_format
    assert out.stdout.splitlines() == [
        f.SECTION_NAME,
        f.MAGIC.decode(),
        str(f.FORMAT_VERSION),
        str(f.HEADER_SIZE),
        str(f.RECORD_ALIGNMENT),
        f"{f.FNV_OFFSET:x}",
        f"{f.FNV_PRIME:x}",
        f.ENV_OUT,
        f.ENV_STAGE,
        f.ENV_RDC,
        f.RECORD_SUFFIX,
    ]


def test_python_readers_take_the_one_definition():
    assert section.FORMAT_VERSION == section_format.FORMAT_VERSION
    assert (
        section.MAGIC == section_format.MAGIC and section.HEADER.size == section_format.HEADER_SIZE
    )
    assert wrapper.SECTION_NAME == section.SECTION_NAME == section_format.SECTION_NAME
    # FNV-1a 64 reference values
    assert section_format.fnv1a64(b"") == 0xCBF29CE484222325
    assert section_format.fnv1a64(b"a") == 0xAF63DC4C8601EC8C


def test_plugin_source_uses_the_header():
    """The pass plugin spells none of the constants itself."""
    source = Path(section_format.__file__).parents[3] / "native" / "MnemePass.cpp"
    if not source.is_file():
        pytest.skip("not a source checkout")
    text = source.read_text()
    assert '#include "mneme/kernel_section_format.h"' in text
    for literal in (
        "0xcbf29ce484222325",
        "0x100000001b3",
        "'M', 'N', 'E'",
        '"MNEME_INSTRUMENT_OUT"',
    ):
        assert literal not in text.lower() if literal.startswith("0x") else literal not in text
