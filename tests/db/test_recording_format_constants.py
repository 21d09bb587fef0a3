"""The recording database's constants have one definition
(mneme.runtime.recording_format): the Python reader/writer take them from there, the C/C++
header is generated from it, and the C++ recorder's sources agree with it."""

import re
import subprocess
from pathlib import Path

import pytest
from mneme.replay.db import chunks, hashing, layout
from mneme.runtime import recording_format as fmt

ROOT = Path(__file__).resolve().parents[2]
NATIVE = ROOT / "packages" / "mneme-runtime" / "native"
HEADER = NATIVE / "include" / "mneme" / "runtime" / "recording_format.h"


def test_header_in_tree_is_generated_from_the_python_definition():
    assert HEADER.read_text() == fmt.c_header(), (
        f"regenerate: python -m mneme.runtime.recording_format > {HEADER.relative_to(ROOT)}"
    )


def test_cxx_sees_the_python_values(tmp_path):
    clang = subprocess.run(["which", "clang++-22"], capture_output=True, text=True).stdout.strip()
    if not clang:
        pytest.skip("clang++-22 not installed")
    (tmp_path / "p.cpp").write_text(
        '#include <cstdio>\n#include "mneme/runtime/recording_format.h"\n'
        'int main() { std::printf("%d %s %s %s %llu %d %llx %llx\\n", '
        "MNEME_RECORDING_FORMAT_VERSION, MNEME_RECORDING_ATTRS_KEY, MNEME_RECORDING_KERNELS, "
        "MNEME_RECORDING_PRIVATE_DIR, (unsigned long long)MNEME_RECORDING_DEFAULT_CHUNK_SIZE, "
        "MNEME_RECORDING_DEFAULT_ZSTD_LEVEL, (unsigned long long)MNEME_RECORDING_FNV1A64_OFFSET, "
        "(unsigned long long)MNEME_RECORDING_FNV1A64_PRIME); }\n"
    )
    subprocess.run([clang, f"-I{NATIVE / 'include'}", "p.cpp", "-o", "p"], cwd=tmp_path, check=True)
    out = subprocess.run([str(tmp_path / "p")], capture_output=True, text=True, check=True)
    assert out.stdout.split() == [
        str(fmt.FORMAT_VERSION),
        fmt.ATTRS_KEY,
        fmt.KERNELS,
        fmt.PRIVATE_DIR,
        str(fmt.DEFAULT_CHUNK_SIZE),
        str(fmt.DEFAULT_ZSTD_LEVEL),
        f"{fmt.FNV_OFFSET:x}",
        f"{fmt.FNV_PRIME:x}",
    ]


def test_python_reader_and_writer_take_the_one_definition():
    assert layout.FORMAT_VERSION is fmt.FORMAT_VERSION
    assert (layout.ATTRS_KEY, layout.KERNELS, layout.INSTANCES, layout.PRIVATE_DIR) == (
        fmt.ATTRS_KEY,
        fmt.KERNELS,
        fmt.INSTANCES,
        fmt.PRIVATE_DIR,
    )
    assert (hashing.FNV_OFFSET, hashing.FNV_PRIME) == (fmt.FNV_OFFSET, fmt.FNV_PRIME)
    assert (chunks.DEFAULT_CHUNK_SIZE, chunks.DEFAULT_ZSTD_LEVEL) == (
        fmt.DEFAULT_CHUNK_SIZE,
        fmt.DEFAULT_ZSTD_LEVEL,
    )


def test_cpp_recorder_takes_the_generated_header():
    """The recorder's C++ writer includes recording_format.h and spells no constant itself."""
    hpp = (NATIVE / "include/mneme/runtime/recording_writer.hpp").read_text()
    cpp = (NATIVE / "src/recording_writer.cpp").read_text()
    assert '#include "mneme/runtime/recording_format.h"' in hpp
    assert re.search(r"kFormatVersion\s*=\s*MNEME_RECORDING_FORMAT_VERSION\s*;", hpp)
    assert "uint64_t chunk_size = MNEME_RECORDING_DEFAULT_CHUNK_SIZE" in hpp
    assert "MNEME_RECORDING_FNV1A64_OFFSET" in cpp and "MNEME_RECORDING_FNV1A64_PRIME" in cpp
    for literal in (f"{fmt.FNV_OFFSET:#x}", f"{fmt.FNV_PRIME:#x}"):
        assert literal not in cpp.lower(), literal
