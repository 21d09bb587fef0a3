"""`python -m mneme.instrument`: inspect and config where mneme-cli is not installed, with
the `mneme` command's output and one-line user errors."""

import subprocess
import sys

from instrument_support import MNEME_CLANGXX, run_mneme


def run_module(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "mneme.instrument", *args], capture_output=True, text=True
    )


def test_config_as_the_mneme_command_prints_it():
    proc = run_module("config", "cxx")
    assert proc.returncode == 0 and proc.stdout.strip() == MNEME_CLANGXX
    assert run_module("config").stdout == run_mneme("config").stdout


def test_user_errors_are_one_line(tmp_path):
    plain = tmp_path / "plain.txt"
    plain.write_text("not an executable\n")
    for args in (["inspect", str(tmp_path / "missing")], ["inspect", str(plain)],
                 ["config", "nonsense"]):
        proc = run_module(*args)
        assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
        assert proc.stderr.startswith("mneme: error: ") and proc.stderr.count("\n") == 1
