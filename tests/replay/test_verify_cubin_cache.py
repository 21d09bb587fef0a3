"""The verification kernels' cubin is kept on disk: a fresh process finds it there and
compiles nothing (verify_cubin.py)."""

from __future__ import annotations

import os
import subprocess
import sys

#: a fresh interpreter that fails if it compiles: the cubin must come from the disk cache
LOAD_ONLY = """
import mneme.replay.jit as jit
def refuse(*args, **kwargs):
    raise SystemExit("compiled: the disk cache was not used")
jit.run_ptxas = refuse
jit.parse_module = refuse
from mneme.replay.engine.verify import verification_cubin
print(len(verification_cubin("sm_90")))
"""


def test_a_fresh_process_loads_the_cubin_from_the_disk_cache(tmp_path):
    from mneme.replay.engine import verify_cubin

    env = {**os.environ, "MNEME_COMPILE_CACHE": str(tmp_path / "cache")}
    first = subprocess.run([sys.executable, "-c", LOAD_ONLY.replace("jit.run_ptxas = refuse\n", "")
                            .replace("jit.parse_module = refuse\n", "")],
                           env=env, capture_output=True, text=True, timeout=300)
    assert first.returncode == 0, first.stderr
    files = list((tmp_path / "cache" / "verify").glob("*.cubin"))
    assert len(files) == 1 and files[0].read_bytes()[:4] == b"\x7fELF"
    second = subprocess.run([sys.executable, "-c", LOAD_ONLY], env=env, capture_output=True,
                            text=True, timeout=300)
    assert second.returncode == 0, second.stderr + second.stdout
    assert second.stdout.strip() == first.stdout.strip() == str(files[0].stat().st_size)
    # A damaged file is not used: the process compiles
    files[0].write_bytes(b"not a cubin")
    third = subprocess.run([sys.executable, "-c", LOAD_ONLY], env=env, capture_output=True,
                           text=True, timeout=300)
    assert third.returncode != 0 and "compiled" in third.stderr
    assert verify_cubin.__doc__  # (the module that keeps it)


def test_an_unwritable_cache_only_costs_the_compile(tmp_path):
    blocked = tmp_path / "file"
    blocked.write_text("")  # a file where the cache folder would be: mkdir fails
    env = {**os.environ, "MNEME_COMPILE_CACHE": str(blocked)}
    done = subprocess.run([sys.executable, "-c", "from mneme.replay.engine.verify import "
                           "verification_cubin; print(verification_cubin('sm_90')[:4])"],
                          env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and "ELF" in done.stdout, done.stderr


def test_no_home_folder_only_costs_the_compile(tmp_path):
    env = {k: v for k, v in os.environ.items()
           if k not in ("HOME", "XDG_CACHE_HOME", "MNEME_COMPILE_CACHE")}
    code = ("import pathlib\n"
            "def nowhere(): raise RuntimeError('Could not determine home directory.')\n"
            "pathlib.Path.home = staticmethod(nowhere)\n"
            "from mneme.replay.engine.verify import verification_cubin\n"
            "print(verification_cubin('sm_90')[:4])")
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                          timeout=300, cwd=tmp_path)
    assert done.returncode == 0 and "ELF" in done.stdout, done.stderr
