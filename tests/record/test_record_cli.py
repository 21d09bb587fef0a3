"""`mneme record` refuses bad input with one line before the application runs, or at the
first call it cannot record (no GPU needed for either)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from record_support import executable, mneme_record


def one_line(result) -> str:
    assert result.returncode == 2, result.stderr
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
    return lines[0]


def test_executable_without_device_code_names_the_wrapper(tmp_path):
    host_only = Path(sys.executable).resolve()  # no .mneme.kernels, no .nv_fatbin
    line = one_line(mneme_record(tmp_path / "db", host_only))
    assert "mneme-clang++" in line and "nvcc" in line
    assert not (tmp_path / "db").exists()  # nothing written for a refused run


def test_plain_clang_build_is_recorded_from_its_fatbinary(tmp_path):
    """Not instrumented, but with device code and the shared CUDA runtime: accepted (its
    kernels are recorded with their PTX/cubin); without a GPU the recorder then stops."""
    plain = executable("atomics", tmp_path, compiler="clang++-22")
    result = mneme_record(tmp_path / "db", plain)
    assert "recordable kernels" in result.stderr and "mneme-clang++" not in result.stderr


def test_missing_executable_and_bad_options(tmp_path):
    assert "no such executable" in one_line(mneme_record(tmp_path / "db", tmp_path / "nope"))
    exe = sys.executable
    result = subprocess.run([exe, "-m", "mneme.cli", "record", "-rdb", str(tmp_path / "db"),
                             "--kernel", "(", "--", exe], capture_output=True, text=True)
    assert "regular expression" in one_line(result)
    result = subprocess.run([exe, "-m", "mneme.cli", "record", "-rdb", str(tmp_path / "db"),
                             "-rr", "first", "--", exe], capture_output=True, text=True)
    assert "record-ranks" in one_line(result)
    result = subprocess.run([exe, "-m", "mneme.cli", "record", "-rdb", str(tmp_path / "db"),
                             "--host-memory", "0", "--", exe], capture_output=True, text=True)
    assert "--host-memory" in one_line(result)


def test_database_directory_of_another_kind_is_refused(tmp_path):
    exe = executable("atomics", tmp_path)
    other = tmp_path / "photos"
    other.mkdir()
    (other / "cat.jpg").write_bytes(b"\xff\xd8")
    assert "not empty and not a mneme database" in one_line(mneme_record(other, exe))
