"""The published wheels install alone into a fresh virtual environment and work.

Slow (a fresh venv and the dependencies from the package index): run
`scripts/build_wheels.sh` first, then `python -m pytest -m slow tests/test_wheels.py`.
Skipped when dist/ holds no wheels."""

import os
import shutil
import subprocess
import sys
import venv
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DIST = Path(os.environ.get("MNEME_WHEEL_DIR", ROOT / "dist"))
GOLDEN = ROOT / "tests" / "data" / "golden.rdb"
NAMES = ["mneme_instrument", "mneme_runtime", "mneme_replay", "mneme_tune", "mneme_cli", "mneme-"]

pytestmark = pytest.mark.slow


def _wheels() -> list[Path]:
    found = sorted(DIST.glob("*.whl")) if DIST.is_dir() else []
    wanted = []
    for prefix in NAMES:
        match = [w for w in found if w.name.startswith(prefix)]
        if not match:
            pytest.skip(f"no {prefix.rstrip('-_')} wheel in {DIST}: run scripts/build_wheels.sh")
        wanted.append(max(match, key=lambda w: w.stat().st_mtime))
    return wanted


@pytest.fixture(scope="module")
def fresh(tmp_path_factory):
    wheels = _wheels()
    if sys.version_info < (3, 12):
        pytest.skip("the abi3 wheels need Python >= 3.12")
    env_dir = tmp_path_factory.mktemp("wheels") / "venv"
    venv.create(env_dir, with_pip=True, clear=True)
    pip = env_dir / "bin" / "pip"
    subprocess.run([str(pip), "install", "-q", *map(str, wheels)], check=True)
    return env_dir / "bin"


def _run(bindir: Path, *args: str, cwd: Path) -> subprocess.CompletedProcess:
    # no source tree, no development environment on the paths
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env["PATH"] = f"{bindir}:/usr/bin:/bin"
    return subprocess.run(
        [str(bindir / args[0]), *args[1:]], cwd=cwd, env=env, capture_output=True, text=True
    )


def test_installed_not_editable(fresh, tmp_path):
    proc = _run(
        fresh,
        "python",
        "-c",
        "import mneme.replay.jit, mneme.instrument, mneme.runtime; "
        "print(mneme.replay.jit.__file__, mneme.instrument.__file__)",
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr
    assert str(ROOT) not in proc.stdout and "site-packages" in proc.stdout


def test_version(fresh, tmp_path):
    proc = _run(fresh, "mneme", "--version", cwd=tmp_path)
    assert proc.returncode == 0 and "0.1" in proc.stdout, proc.stderr


def test_compile_only_replay_of_golden(fresh, tmp_path):
    db = tmp_path / "golden.rdb"
    shutil.copytree(GOLDEN, db)
    proc = _run(
        fresh, "mneme", "replay", "-rdb", str(db), "-rid", "1b78", "--compile-only", cwd=tmp_path
    )
    assert proc.returncode == 0, proc.stderr
    assert "register" in proc.stdout.lower()


def test_instrument_and_inspect(fresh, tmp_path):
    if not (
        shutil.which("clang++-22") and (shutil.which("nvcc") or Path("/usr/local/cuda").is_dir())
    ):
        pytest.skip("clang-22 or the CUDA toolkit not installed")
    (tmp_path / "app.cu").write_text(
        "__global__ void k(int *p) { p[threadIdx.x] = 1; }\nint main() { return 0; }\n"
    )
    env_path = os.environ.get("PATH", "")
    proc = subprocess.run(
        [str(fresh / "mneme-clang++"), "-O2", "app.cu", "-o", "app"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env={**os.environ, "PATH": f"{fresh}:{env_path}"},
    )
    assert proc.returncode == 0, proc.stderr
    proc = _run(fresh, "mneme", "inspect", "app", cwd=tmp_path)
    assert proc.returncode == 0 and "k(int*)" in proc.stdout, proc.stderr
