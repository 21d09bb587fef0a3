"""`mneme record` refuses bad input with one line before the application runs, or at the
first call it cannot record (no GPU needed for either)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from mneme.runtime import driver_available
from record_support import executable, mneme_record


def one_line(result) -> str:
    assert result.returncode == 2, result.stderr
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
    return lines[0]


def test_any_command_runs_and_says_why_nothing_was_recorded(tmp_path):
    """No up-front refusal: python (or a script, a launcher) runs under the recorder, its
    output and exit status pass through, and at exit one line says why nothing was recorded."""
    result = subprocess.run(
        [sys.executable, "-m", "mneme.cli", "record", "-rdb", str(tmp_path / "db"), "--",
         sys.executable, "-c", "import sys; print('hello from python'); sys.exit(3)"],
        capture_output=True, text=True, timeout=120)
    assert result.returncode == 3, result.stderr
    assert result.stdout == "hello from python\n"
    assert "Traceback" not in result.stderr
    assert "learned as the process registers or loads them" in result.stderr
    last = result.stderr.splitlines()[-1]
    if driver_available():
        assert "nothing recorded: no kernel launch was seen" in last
    else:  # this machine: the line says why no CUDA code could run, and what to do
        assert last.startswith("mneme record: nothing recorded: no CUDA driver: cannot load libcuda.so.1")
        assert "install the NVIDIA driver or run on a machine with a GPU" in last


def test_no_driver_is_said_in_one_line_with_a_failing_exit(tmp_path):
    """An application that exits 0 without a GPU recorded nothing: mneme record fails."""
    if driver_available():
        pytest.skip("this machine has a CUDA driver")
    result = mneme_record(tmp_path / "db", Path(shutil.which("true")), args=[])
    assert result.returncode == 1
    lines = result.stderr.strip().splitlines()
    assert "Traceback" not in result.stderr
    assert lines[-1].startswith("mneme record: nothing recorded: no CUDA driver"), result.stderr


def test_shell_script_that_starts_the_application_is_accepted(tmp_path):
    script = tmp_path / "run.sh"
    script.write_text(f"#!/bin/sh\nexec {sys.executable} -c 'print(42)'\n")
    script.chmod(0o755)
    result = mneme_record(tmp_path / "db", script, args=[])
    assert result.returncode == (0 if driver_available() else 1), result.stderr  # 1: no GPU here
    assert result.stdout == "42\n", result.stderr
    assert "nothing recorded" in result.stderr


def test_plain_clang_build_is_recorded_from_its_fatbinary(tmp_path):
    """Not instrumented, but with device code and the shared CUDA runtime: accepted (its
    kernels are recorded with their PTX/cubin); without a GPU the recorder then stops."""
    plain = executable("atomics", tmp_path, compiler="clang++-22")
    result = mneme_record(tmp_path / "db", plain)
    assert "learned as the process registers or loads them" in result.stderr


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
