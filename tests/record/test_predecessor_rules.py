"""What the recorder takes the launch before an instance to have written and read (its
pointer arguments' allocations from the pointer on; pointers to const are read;
stream_predecessors.cpp), checked without a GPU: a small program calls the recorder's own
functions. That recorded instances carry a "predecessor" is exercised by the GPU tests."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import mneme.runtime
import pytest

HERE = Path(__file__).with_name("predecessor")
NATIVE = Path(__file__).resolve().parents[2] / "packages" / "mneme-runtime" / "native"
STAND_IN_LIBCUDA = Path(__file__).with_name("entry_points") / "stand_in_libcuda.c"
RECORDER = Path(mneme.runtime.__file__).with_name("libmneme_recorder.so")
CC = shutil.which("clang-22") or shutil.which("cc")
CXX = shutil.which("clang++-22") or shutil.which("c++")


@pytest.fixture(scope="module")
def decided(tmp_path_factory) -> dict[str, str]:
    if CC is None or CXX is None:
        pytest.skip("no C/C++ compiler")
    if not RECORDER.is_file():
        pytest.skip(f"{RECORDER} not built")
    out = tmp_path_factory.mktemp("predecessor")
    subprocess.run([CC, "-shared", "-fPIC", "-w", str(STAND_IN_LIBCUDA), "-o", str(out / "libcuda.so.1")], check=True)
    subprocess.run([CXX, "-std=c++17", "-O1", "-w", f"-I{NATIVE / 'src'}", f"-I{NATIVE / 'include'}",
                    str(HERE / "predecessor_rules.cpp"), "-o", str(out / "rules"), str(RECORDER),
                    "-Wl,-rpath," + str(RECORDER.parent)], check=True)
    done = subprocess.run([str(out / "rules")], capture_output=True, text=True, timeout=60,
                          env={"LD_LIBRARY_PATH": str(out)})
    assert done.returncode == 0, done.stdout + done.stderr
    return {label: rest for label, _, rest in (line.partition(" ") for line in done.stdout.splitlines())}


def test_pointers_to_const_are_read_only(decided):
    assert decided["advect"] == "1 1 0 0"
    assert decided["restrict"] == "1 0 1"
    # a const pointer to non-const data is written through; nested parentheses and
    # template arguments do not split parameters
    assert decided["template"] == "1 0 0"


def test_signatures_that_cannot_be_split_give_no_flags(decided):
    assert decided["extern_c"] == "-"
    assert decided["no_params"] == "-"


def test_written_ranges_run_from_the_pointer_to_the_allocation_end(decided):
    # the const input is left out; the output and the pointer inside the by-value
    # structure (into managed memory) count; the integer 3 points nowhere
    assert decided["written"] == "0x1800+0x800 0x9010+0xf0"
    assert decided["unknown_signature"] == "0x1100+0xf00 0x9010+0xf0"


def test_pointers_to_const_are_what_the_launch_read(decided):
    # the const input, from its pointer to its allocation's end; nothing is read-only
    # without a signature
    assert decided["read"] == "0x1100+0xf00"
    assert decided["unknown_signature_read"] == ""
