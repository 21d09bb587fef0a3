"""The recorder's numeric settings from the environment (issue 36: a malformed number used
to become 0 silently, atoi): a value that is not a number in range ends the recorded
process with one line naming the variable (status 2). Runs without a GPU: an instrumented
executable registers its kernels with the preloaded recorder before main, which reads its
settings then."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import mneme.runtime
import pytest
from record_support import executable

RECORDER = Path(mneme.runtime.__file__).with_name("libmneme_recorder.so")


@pytest.fixture(scope="module")
def program(tmp_path_factory):
    return executable("lut_kernels", tmp_path_factory.mktemp("env"))


@pytest.mark.parametrize(("name", "value", "says"), [
    ("MNEME_RECORD_MAX", "abc", "is not a whole number in [0, 2147483647]"),
    ("MNEME_RECORD_MAX", "-3", "is not a whole number in [0, 2147483647]"),
    ("MNEME_RECORD_VASS", "12G", "is not a whole number of bytes"),
    ("MNEME_RECORD_BASE", "-1", "is not a whole number of bytes"),
    ("MNEME_RECORD_THREADS", "8x", "is not a whole number in [0, 4096]"),
    ("MNEME_RECORD_ZSTD_LEVEL", "fast", "is not a whole number in [-131072, 22]"),
    ("MNEME_RECORD_CRASH_WAIT", "soon", "is not a number of seconds"),
])
def test_a_malformed_number_is_one_line_not_a_silent_zero(program, tmp_path, name, value, says):
    env = {**os.environ, "MNEME_RECORD_DB": str(tmp_path / "x.rdb"), name: value,
           "LD_PRELOAD": str(RECORDER)}
    done = subprocess.run([str(program)], capture_output=True, text=True, env=env, timeout=60)
    assert done.returncode == 2, done.stderr
    lines = [line for line in done.stderr.splitlines() if line.startswith("mneme record:")]
    assert lines == [f"mneme record: {name}={value} {says}; unset it or give one"]


def test_well_formed_numbers_pass_the_settings(program, tmp_path):
    """Hexadecimal bases, negative zstd levels: read; the run then stops at what a hand
    preload lacks (the kernel manifest), not at the numbers."""
    env = {**os.environ, "MNEME_RECORD_DB": str(tmp_path / "x.rdb"), "MNEME_RECORD_BASE": "0x200000000000",
           "MNEME_RECORD_ZSTD_LEVEL": "-5", "MNEME_RECORD_MAX": "3", "LD_PRELOAD": str(RECORDER)}
    done = subprocess.run([str(program)], capture_output=True, text=True, env=env, timeout=60)
    assert "is not a" not in done.stderr
    assert "kernel manifest" in done.stderr


# Every other kind of setting (mneme.runtime.native_settings): flags, choices, sizes,
# regular expressions, rank lists, and the MPI launchers' rank variables, read at the same
# moment, refused in the same one line.
@pytest.mark.parametrize(("name", "value", "says"), [
    ("MNEME_RECORD_STATS", "maybe", "is not a flag (1 or 0)"),
    ("MNEME_RECORD_DIGESTS", "2", "is not a flag (1 or 0)"),
    ("MNEME_RECORD_CAPTURE", "some", "is not one of all, reachable"),
    ("MNEME_RECORD_MANAGED", "heap", "is not one of placed, host, driver"),
    ("MNEME_RECORD_EPILOGUE", "zip", "is not one of diff, bytes, best"),
    ("MNEME_RECORD_TAGS", "none", "is not one of filtered, all, launches, 0"),
    ("MNEME_RECORD_HOST_MEMORY", "lots", "is not a size (bytes, or e.g. 512M, 8G)"),
    ("MNEME_RECORD_FILTER", "(", "is not a regular expression (ECMAScript)"),
    ("MNEME_RECORD_RANKS", "0,x", "is not all or a list of ranks (e.g. 0,2)"),
    ("SLURM_PROCID", "first", "is not a whole number in [0, 2147483647]"),
])
def test_a_malformed_setting_of_any_kind_is_one_line(program, tmp_path, name, value, says):
    env = {**os.environ, "MNEME_RECORD_DB": str(tmp_path / "x.rdb"), name: value,
           "LD_PRELOAD": str(RECORDER)}
    done = subprocess.run([str(program)], capture_output=True, text=True, env=env, timeout=60)
    assert done.returncode == 2, done.stderr
    lines = [line for line in done.stderr.splitlines() if line.startswith("mneme record:")]
    assert lines == [f"mneme record: {name}={value} {says}; unset it or give one"]


@pytest.mark.parametrize(("name", "value", "says"), [
    ("MNEME_APPLY_TIMING", "maybe", "is not a flag (1 or 0)"),
    ("MNEME_APPLY_MODE", "fast", "is not one of swap, measure"),
])
def test_the_launch_swapper_says_a_malformed_setting_in_one_line(program, name, value, says):
    """libmneme_apply.so reads its settings when the application registers its kernels."""
    swapper = RECORDER.with_name("libmneme_apply.so")
    env = {**os.environ, name: value, "LD_PRELOAD": str(swapper)}
    done = subprocess.run([str(program)], capture_output=True, text=True, env=env, timeout=60)
    assert done.returncode == 2, done.stderr
    lines = [line for line in done.stderr.splitlines() if line.startswith("mneme run:")]
    assert lines == [f"mneme run: {name}={value} {says}; unset it or give one"]


def test_mneme_record_says_the_recording_stopped_not_that_nothing_ran(program, tmp_path):
    """A recorder that stops the process (here a malformed setting; on the GPU host a
    write that failed) leaves its reason for `mneme record`'s summary, whose last line
    says the recording stopped and why, not that no kernel launch was seen."""
    import sys

    env = {**os.environ, "MNEME_RECORD_THREADS": "8x"}
    done = subprocess.run([sys.executable, "-m", "mneme.cli", "record", "-rdb", str(tmp_path / "s.rdb"), "--",
                           str(program)], capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 2, done.stderr
    last = done.stderr.strip().splitlines()[-1]
    assert last == ("mneme record: the recording stopped: MNEME_RECORD_THREADS=8x is not a whole number in "
                    "[0, 4096]; unset it or give one"), done.stderr
