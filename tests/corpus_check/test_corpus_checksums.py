"""The checksum protocol: the C++ helper and the Python parser agree, byte for byte."""

import subprocess

import pytest
from corpus_support import checklines, corpus_build, require_tools

HELPER_PROGRAM = r"""
#include "corpus_check.h"
int main() {
  const unsigned char bytes[] = {0x00, 0x01, 0x7f, 0x80, 0xff, 'a', 'b', 'c'};
  const float floats[3] = {1.0f, -2.5f, 3.25f};
  corpus::print_check(0, "void scale<float>(float*, float, int)", "before", "x", bytes, sizeof(bytes));
  corpus::print_check(0, "void scale<float>(float*, float, int)", "after", "global:g_f", floats, sizeof(floats));
  corpus::print_check(1, "k()", "before", "empty", bytes, 0);
  corpus::print_check(2, "k()", "after", "foobar", "foobar", 6);
  return 0;
}
"""
EXPECTED_REGIONS = [
    bytes([0x00, 0x01, 0x7F, 0x80, 0xFF]) + b"abc",
    b"\x00\x00\x80\x3f" + b"\x00\x00\x20\xc0" + b"\x00\x00\x50\x40",
    b"",
    b"foobar",
]


def test_fnv1a64_reference_values():
    assert checklines.fnv1a64(b"") == 0xCBF29CE484222325
    assert checklines.fnv1a64(b"a") == 0xAF63DC4C8601EC8C
    assert checklines.fnv1a64_hex(b"foobar") == "85944171f73967e8"


def test_header_checksums_match_python(tmp_path):
    """Compile the host side of corpus_check.h, run it (no CUDA call), parse what it prints."""
    require_tools(corpus_build.DEFAULT_COMPILER)
    cuda_root = corpus_build.find_cuda_root()
    source = tmp_path / "helper.cu"
    source.write_text(HELPER_PROGRAM)
    exe = tmp_path / "helper"
    subprocess.run(
        [
            corpus_build.DEFAULT_COMPILER,
            *corpus_build.cuda_compile_flags(cuda_root),
            "--cuda-host-only",
            str(source),
            "-o",
            str(exe),
            *corpus_build.cuda_link_flags(
                corpus_build.load_program(corpus_build.CORPUS_DIR / "cuda" / "templates"), cuda_root
            ),
        ],
        check=True,
        capture_output=True,
    )
    stdout = subprocess.run([str(exe)], capture_output=True, text=True, check=True).stdout
    lines = checklines.parse_output(stdout)
    assert [(c.launch, c.kernel, c.phase, c.label) for c in lines] == [
        (0, "void scale<float>(float*, float, int)", "before", "x"),
        (0, "void scale<float>(float*, float, int)", "after", "global:g_f"),
        (1, "k()", "before", "empty"),
        (2, "k()", "after", "foobar"),
    ]
    assert [c.size for c in lines] == [len(r) for r in EXPECTED_REGIONS]
    assert [c.checksum for c in lines] == [checklines.fnv1a64_hex(r) for r in EXPECTED_REGIONS]
    assert lines[1].is_global and not lines[0].is_global


def test_parser_keeps_spaces_in_kernel_names():
    line = "MNEME-CHECK 12 void box_sum<float, 1>(float const*, float*, int) after out 4000 0123456789abcdef"
    check = checklines.parse_line(line)
    assert check == checklines.CheckLine(
        12,
        "void box_sum<float, 1>(float const*, float*, int)",
        "after",
        "out",
        4000,
        "0123456789abcdef",
    )


@pytest.mark.parametrize(
    "bad",
    [
        "MNEME-CHECK x k() before a 4 0123456789abcdef",
        "MNEME-CHECK 0 k() during a 4 0123456789abcdef",
        "MNEME-CHECK 0 k() before a 4 0123456789ABCDEF",
        "MNEME-CHECK 0 before a 4 0123456789abcdef",
    ],
)
def test_parser_rejects_malformed_lines(bad):
    with pytest.raises(checklines.CheckLineError):
        checklines.parse_line(bad)


def test_result_line():
    assert checklines.result_ok("MNEME-CHECK ...\nMNEME-RESULT ok\n")
    assert not checklines.result_ok("MNEME-RESULT fail x.cu:3: y\n")
