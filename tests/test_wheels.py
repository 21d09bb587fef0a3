"""The published wheels install alone into fresh virtual environments and work there.

Each environment gets one distribution with only what it requires (its mneme
dependencies as the wheels in dist/, the rest from the package index), never editable,
and runs outside the source tree's packages:

* mneme-replay (with mneme-runtime and mneme-instrument; no tune, cli, Optuna): the golden
  databases read back exactly and every instance compiles (compile-only replay), with
  the system LLVM and CUDA toolkit hidden in a private mount namespace;
* mneme-instrument alone: `mneme-clang++ app.cu -o app`, then `python -m mneme.instrument
  inspect` (the `mneme` command belongs to mneme-cli), and a CMake CUDA project with the
  wrapper as its CUDA compiler;
* mneme, the meta-package: the README's main job, scripts/demo.sh (without a GPU, its
  compile-only variant);
* the other ends of the supported range: under CPython 3.10 (the cp310 wheels) every
  distribution installs, every module imports and the golden database compiles; under
  3.13, mneme-replay's cp312-abi3 wheel does the same;
* dist/ itself: every distribution has a wheel for each supported CPython, none needs a
  glibc newer than 2.28 (scripts/wheel_tags.py, `auditwheel show` agrees), and glibc 2.28
  has every symbol version the native libraries ask for (scripts/glibc_symbols.py).

Each environment takes the wheel of each distribution that its Python installs.

Slow (fresh environments, dependencies from the package index): `scripts/build_wheels.sh`
first (`scripts/test.sh` does, for the full suite), then
`python -m pytest tests/test_wheels.py`. Skipped when dist/ lacks a wheel, unless
MNEME_REQUIRE_WHEELS=1 (CI), where that fails.
"""

import json
import os
import shutil
import subprocess
import sys
import time
import venv
from pathlib import Path

import pytest
from script_modules import load_script

ROOT = Path(__file__).resolve().parents[1]
DIST = Path(os.environ.get("MNEME_WHEEL_DIR", ROOT / "dist"))
DATA = ROOT / "tests" / "data"
CMAKE_CUDA_PROJECT = ROOT / "tests" / "instrument" / "sources" / "cmake_cuda"
#: distribution -> its wheels' file name prefix
PREFIXES = {
    "mneme-instrument": "mneme_instrument-",
    "mneme-runtime": "mneme_runtime-",
    "mneme-replay": "mneme_replay-",
    "mneme-tune": "mneme_tune-",
    "mneme-cli": "mneme_cli-",
    "mneme": "mneme-",
}
#: what each environment installs: a distribution and the mneme ones it requires
REPLAY = ["mneme-replay", "mneme-runtime", "mneme-instrument"]
INSTRUMENT = ["mneme-instrument"]
META = list(PREFIXES)

#: seconds to wait for scripts/test.sh's background wheel build (a cold one takes ~8 min)
WHEEL_BUILD_SECONDS = 1800
# the run's per-test timeout (pyproject) plus that wait: the first test waits for the build
pytestmark = [pytest.mark.slow, pytest.mark.timeout(WHEEL_BUILD_SECONDS + 900)]


def _await_wheel_build() -> None:
    """Where scripts/test.sh builds the wheels beside the test run (MNEME_WHEELS_PENDING
    names the file its exit status will be written to), wait for that build before looking
    at dist/: exit 0 makes a missing wheel fail (MNEME_REQUIRE_WHEELS), 2 (no Python 3.12)
    leaves the tests as without the build, anything else fails. A plain function, not a
    fixture: a fixture shared by these tests would keep them all on one xdist worker."""
    status = os.environ.get("MNEME_WHEELS_PENDING")
    if not status:
        return
    deadline = time.monotonic() + WHEEL_BUILD_SECONDS
    while not os.path.exists(status):  # written once, by a rename, when the build ends
        if time.monotonic() > deadline:
            pytest.fail(f"scripts/build_wheels.sh still running after {WHEEL_BUILD_SECONDS} s")
        time.sleep(1)
    rc = int(Path(status).read_text())
    if rc == 2:
        return  # no Python 3.12: nothing built, the tests skip on missing wheels as before
    if rc != 0:
        pytest.fail(f"scripts/build_wheels.sh failed (exit {rc}); its log is printed after the tests")
    os.environ["MNEME_REQUIRE_WHEELS"] = "1"  # as scripts/test.sh set it before the build ran beside


def _missing(reason: str):
    if os.environ.get("MNEME_REQUIRE_WHEELS") == "1":
        pytest.fail(reason)
    pytest.skip(reason)


def _wheel_tags():
    return load_script("scripts/wheel_tags.py")


def _wheel(distribution: str, python: tuple[int, int] = sys.version_info[:2]) -> Path:
    """The newest `distribution` wheel in dist/ that CPython `python` installs."""
    _await_wheel_build()
    found = [w for w in DIST.glob(f"{PREFIXES[distribution]}*.whl")
             if _wheel_tags().wheel_tags(w)[0] == distribution] if DIST.is_dir() else []
    fitting = [w for w in found if _wheel_tags().installs_on(w, python)]
    if not fitting:
        _missing(f"no {distribution} wheel for CPython {python[0]}.{python[1]} in {DIST}: "
                 "run scripts/build_wheels.sh")
    return max(fitting, key=lambda w: w.stat().st_mtime)


def _python(version: tuple[int, int]) -> str:
    """An interpreter of CPython `version` (the running one, python3.X or pyenv's)."""
    if sys.version_info[:2] == version:
        return sys.executable
    name = f"python{version[0]}.{version[1]}"
    candidates = [shutil.which(name),
                  *sorted(Path.home().glob(f".pyenv/versions/{version[0]}.{version[1]}.*/bin/{name}"))]
    for cand in filter(None, candidates):
        if subprocess.run([str(cand), "-c", "import venv, ensurepip"], capture_output=True).returncode == 0:
            return str(cand)
    _missing(f"no Python {version[0]}.{version[1]} here (pyenv install {version[0]}.{version[1]})")


def _fresh_env(tmp_path_factory, distributions: list[str],
               python: tuple[int, int] = sys.version_info[:2]) -> Path:
    wheels = [_wheel(d, python) for d in distributions]
    env = tmp_path_factory.mktemp("wheels") / "venv"
    if python == sys.version_info[:2]:
        venv.create(env, with_pip=False, clear=True)
    else:
        subprocess.run([_python(python), "-m", "venv", "--clear", "--without-pip", str(env)],
                       check=True)
    # the wheel files themselves: pip takes them for the mneme requirements they satisfy. This
    # Python's pip installs into the environment (--python runs it with the environment's
    # interpreter): nothing there needs a pip of its own, and bootstrapping one (ensurepip)
    # cost ~4 s of CPU per environment
    subprocess.run([sys.executable, "-m", "pip", "--python", str(env / "bin" / "python"),
                    "install", "-q", "--disable-pip-version-check", *map(str, wheels)], check=True)
    return env


@pytest.fixture(scope="module")
def replay_env(tmp_path_factory):
    return _fresh_env(tmp_path_factory, REPLAY)


@pytest.fixture(scope="module")
def instrument_env(tmp_path_factory):
    return _fresh_env(tmp_path_factory, INSTRUMENT)


@pytest.fixture(scope="module")
def meta_env(tmp_path_factory):
    return _fresh_env(tmp_path_factory, META)


def _environ(env: Path, extra_path: list[str] = ()) -> dict[str, str]:
    """The environment of a command run with `env` alone: its bin/ and the system's."""
    drop = {"PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV", "LD_LIBRARY_PATH", "MNEME_NVJITLINK"}
    out = {k: v for k, v in os.environ.items() if k not in drop}
    out["PATH"] = os.pathsep.join([str(env / "bin"), *extra_path, "/usr/bin", "/bin"])
    return out


def _run(env: Path, *args, cwd: Path, prefix: list[str] = (), extra_path: list[str] = (),
         environ: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    command = [*prefix, *map(str, args)]
    return subprocess.run(command, cwd=cwd, capture_output=True, text=True,
                          env={**_environ(env, extra_path), **(environ or {})})


def _tools_dir(tmp_path: Path) -> Path:
    """A folder holding only cmake and ninja (from the test's environment or PATH), for
    builds in an environment that has no build tools of its own."""
    tools = tmp_path / "tools"
    tools.mkdir()
    here = str(Path(sys.executable).parent)
    for name in ("cmake", "ninja"):
        found = shutil.which(name, path=os.pathsep.join([here, os.environ.get("PATH", "")]))
        if found is None:
            pytest.skip(f"{name} is not installed")
        (tools / name).symlink_to(found)
    return tools


def _installed_modules(env: Path, tmp_path: Path) -> dict[str, str | None]:
    """Module -> the file it imports from in `env` (None: not importable)."""
    names = ["mneme.instrument", "mneme.runtime", "mneme.replay", "mneme.tune", "mneme.cli",
             "optuna", "matplotlib"]
    script = (
        "import importlib, json, sys\n"
        "out = {}\n"
        f"for name in {names!r}:\n"
        "    try:\n"
        "        out[name] = importlib.import_module(name).__file__ or ''\n"
        "    except ImportError:\n"
        "        out[name] = None\n"
        "print(json.dumps(out))\n"
    )
    proc = _run(env, env / "bin" / "python", "-c", script, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


# -- hiding the system LLVM and CUDA toolkit -------------------------------------------------


def _system_toolchain_paths() -> tuple[list[Path], list[Path]]:
    """(folders, files) of the system LLVM 22 and CUDA toolkits, real paths."""
    folders, files = set(), set()
    for root in [Path("/usr/lib/llvm-22"), *Path("/usr/local").glob("cuda*"),
                 *(Path(os.environ[v]) for v in ("CUDA_PATH", "CUDA_HOME", "LLVM_INSTALL_PATH")
                   if os.environ.get(v))]:
        if root.is_dir():
            folders.add(root.resolve())
    for pattern in ("libLLVM*.so*", "libnvJitLink*.so*", "libnvptxcompiler*"):
        for lib in Path("/usr/lib").glob(f"*/{pattern}"):
            if lib.is_file():
                files.add(lib.resolve())
    for tool in ("ptxas", "nvcc", "clang-22", "clang++-22", "llc-22", "opt-22", "nvlink"):
        found = shutil.which(tool, path=os.environ.get("PATH", "") + ":/usr/local/bin:/usr/bin")
        if found and not any(Path(found).resolve().is_relative_to(f) for f in folders):
            files.add(Path(found).resolve())
    return sorted(folders), sorted(files)


def _hiding_prefix(tmp_path: Path) -> list[str] | None:
    """A command prefix that runs its command in a private mount namespace where the
    system LLVM and CUDA folders are empty and their libraries and tools are /dev/null;
    None where this machine allows no such namespace."""
    folders, files = _system_toolchain_paths()
    lines = ["set -e"]
    lines += [f"mount -t tmpfs -o ro,size=4k mneme-hidden '{f}'" for f in folders]
    lines += [f"mount --bind /dev/null '{f}'" for f in files]
    lines.append('exec "$@"')
    script = tmp_path / "hide.sh"
    script.write_text("\n".join(lines) + "\n")
    unshare = shutil.which("unshare")
    if unshare is None:
        return None
    # as root a mount namespace; otherwise also a user namespace that maps us to root
    for flags in (["--mount"], ["--mount", "--map-root-user"]):
        prefix = [unshare, *flags, "--propagation", "private", "sh", str(script)]
        if subprocess.run([*prefix, "true"], capture_output=True).returncode == 0:
            return prefix
    return None


REPLAY_ALONE = r"""
import ctypes, hashlib, json, re, shutil, sys
from pathlib import Path

from mneme.replay.db import Database
from mneme.replay.engine import ReplaySession
from mneme.replay.jit import JitToolchainError
from mneme.replay.jit.nvjitlink import load_nvjitlink
from mneme.replay.jit.toolchain import find_libdevice, find_ptxas

out = {"hidden": [], "instances": [], "mismatches": []}
# the system toolchains are out of reach: nothing of them loads or is found
for lib in ("libLLVM.so.22.1", "libLLVM-22.so", "libLLVM.so"):
    try:
        ctypes.CDLL(lib)
    except OSError:
        out["hidden"].append(lib)
for find in (find_ptxas, find_libdevice):
    try:
        find()
    except JitToolchainError:
        out["hidden"].append(find.__name__)
out["hidden"] += [t for t in ("clang-22", "ptxas", "nvcc") if shutil.which(t) is None]

sha = lambda data: hashlib.sha256(bytes(data)).hexdigest()
for db_path, expected_path in zip(sys.argv[1::2], sys.argv[2::2]):
    expected = json.loads(Path(expected_path).read_text())
    db = Database.open(db_path)
    for kernel in db.kernels():
        want = expected["kernels"][kernel.static_hash]
        if sha(kernel.ir()) != want["ir_sha256"]:
            out["mismatches"].append(f"{db_path} {kernel.static_hash} ir")
        for inst in kernel.instances():
            for name, region in want["instances"][inst.dynamic_hash]["regions"].items():
                if (sha(inst.prologue(name)), sha(inst.epilogue(name))) != (
                        region["prologue_sha256"], region["epilogue_sha256"]):
                    out["mismatches"].append(f"{db_path} {inst.id} {name}")
            with ReplaySession(inst, gpu=False) as session:
                result = session.run()
            registers = re.search(r"(\d+) registers", result.summary())
            out["instances"].append({"db": Path(db_path).name, "id": inst.id,
                                     "compile_only": result.compile_only, "arch": result.arch,
                                     "registers": int(registers.group(1)) if registers else 0})
out["nvjitlink"] = str(load_nvjitlink().path)
out["prefix"] = sys.prefix
out["maps"] = [line.split()[-1] for line in open("/proc/self/maps")
               if "libLLVM" in line or "/usr/local/cuda" in line or "llvm-22" in line]
print(json.dumps(out))
"""


# -- mneme-replay alone ----------------------------------------------------------------------


def test_replay_installs_alone(replay_env, tmp_path):
    modules = _installed_modules(replay_env, tmp_path)
    for name in ("mneme.replay", "mneme.runtime", "mneme.instrument"):
        assert modules[name] and "site-packages" in modules[name], (name, modules[name])
        assert not modules[name].startswith(str(ROOT / "packages")), modules[name]
    assert modules["mneme.tune"] is modules["mneme.cli"] is modules["optuna"] is None
    assert not (replay_env / "bin" / "mneme").exists()


def test_replay_alone_reads_and_compiles_golden_without_system_llvm_or_cuda(replay_env, tmp_path):
    prefix = _hiding_prefix(tmp_path)
    if prefix is None:
        _missing("no private mount namespace here (unshare refused): cannot hide LLVM and CUDA")
    goldens = []
    for db, doc in (("golden.rdb", "golden.json"), ("golden-v2.rdb", "golden-v2.json")):
        shutil.copytree(DATA / db, tmp_path / db)
        goldens += [tmp_path / db, DATA / doc]
    environ = {"CUDA_PATH": "", "CUDA_HOME": "", "LLVM_INSTALL_PATH": ""}
    proc = _run(replay_env, replay_env / "bin" / "python", "-c", REPLAY_ALONE, *goldens,
                cwd=tmp_path, prefix=prefix, environ=environ)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout)
    assert {"libLLVM.so.22.1", "find_ptxas", "find_libdevice", "clang-22", "ptxas"} <= set(
        out["hidden"]), out["hidden"]
    assert out["mismatches"] == []
    # two kernels, three instances in each golden database; every one compiled for sm_90
    assert len(out["instances"]) == 6
    assert all(i["compile_only"] and i["arch"] == "sm_90" and i["registers"] > 0
               for i in out["instances"]), out["instances"]
    # PTX -> cubin through the nvidia-nvjitlink wheel, LLVM linked into the module
    assert out["nvjitlink"].startswith(out["prefix"]), out["nvjitlink"]
    assert out["maps"] == []


@pytest.mark.gpu
def test_replay_alone_replays_golden_on_the_gpu(replay_env, tmp_path):
    script = (
        "import sys\n"
        "from mneme.runtime import driver_available\n"
        "if not driver_available(): sys.exit(77)\n"
        "from mneme.replay.db import Database\n"
        "from mneme.replay.engine import ReplaySession\n"
        "for inst in Database.open(sys.argv[1]).instances():\n"
        "    with ReplaySession(inst) as session:\n"
        "        result = session.run()\n"
        "    print(inst.id, result.verified)\n"
    )
    shutil.copytree(DATA / "golden-v2.rdb", tmp_path / "golden-v2.rdb")
    proc = _run(replay_env, replay_env / "bin" / "python", "-c", script,
                tmp_path / "golden-v2.rdb", cwd=tmp_path)
    if proc.returncode == 77:
        pytest.skip("no usable CUDA driver")
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = proc.stdout.splitlines()
    assert len(lines) == 3 and all(line.endswith(" True") for line in lines), proc.stdout


# -- mneme-instrument alone ------------------------------------------------------------------


def _require_clang_and_cuda():
    if not (shutil.which("clang++-22") and (shutil.which("nvcc") or Path("/usr/local/cuda").is_dir())):
        pytest.skip("clang-22 or the CUDA toolkit not installed")


def test_instrument_installs_alone(instrument_env, tmp_path):
    modules = _installed_modules(instrument_env, tmp_path)
    assert modules["mneme.instrument"] and "site-packages" in modules["mneme.instrument"]
    assert all(modules[n] is None for n in ("mneme.runtime", "mneme.replay", "mneme.tune",
                                            "mneme.cli")), modules
    assert (instrument_env / "bin" / "mneme-clang++").exists()
    assert not (instrument_env / "bin" / "mneme").exists()


def test_instrument_alone_builds_like_nvcc_and_inspects(instrument_env, tmp_path):
    _require_clang_and_cuda()
    (tmp_path / "app.cu").write_text(
        "__global__ void k(int *p) { p[threadIdx.x] = 1; }\n"
        "int main() { int *p; cudaMalloc(&p, 64); k<<<1, 16>>>(p); return 0; }\n"
    )
    proc = _run(instrument_env, "mneme-clang++", "-O2", "app.cu", "-o", "app", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    python = instrument_env / "bin" / "python"
    proc = _run(instrument_env, python, "-m", "mneme.instrument", "inspect", "app", cwd=tmp_path)
    assert proc.returncode == 0 and "k(int*)" in proc.stdout, proc.stderr
    proc = _run(instrument_env, python, "-m", "mneme.instrument", "inspect", "app", "--ir", "k",
                cwd=tmp_path)
    assert proc.returncode == 0 and "define" in proc.stdout and "@_Z1kPi" in proc.stdout, proc.stderr


def test_instrument_alone_is_a_cmake_cuda_compiler(instrument_env, tmp_path):
    _require_clang_and_cuda()
    tools = _tools_dir(tmp_path)
    python = instrument_env / "bin" / "python"
    cxx = _run(instrument_env, python, "-m", "mneme.instrument", "config", "cxx", cwd=tmp_path)
    assert cxx.returncode == 0 and cxx.stdout.strip().startswith(str(instrument_env)), cxx.stderr
    build = tmp_path / "build"
    for args in (["cmake", "-S", CMAKE_CUDA_PROJECT, "-B", build, "-G", "Ninja",
                  f"-DCMAKE_CUDA_COMPILER={cxx.stdout.strip()}"],
                 ["cmake", "--build", build]):
        proc = _run(instrument_env, *args, cwd=tmp_path, extra_path=[str(tools)])
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    proc = _run(instrument_env, python, "-m", "mneme.instrument", "inspect", build / "app",
                cwd=tmp_path)
    assert proc.returncode == 0 and "scale(float*, float, int)" in proc.stdout, proc.stderr


# -- the meta-package ------------------------------------------------------------------------


def test_meta_package_runs_the_readme_job(meta_env, tmp_path):
    _require_clang_and_cuda()
    modules = _installed_modules(meta_env, tmp_path)
    assert all(modules[n] and "site-packages" in modules[n]
               for n in ("mneme.instrument", "mneme.replay", "mneme.tune", "mneme.cli"))
    version = _run(meta_env, "mneme", "--version", cwd=tmp_path)
    assert version.returncode == 0 and "0.1" in version.stdout, version.stderr
    tools = _tools_dir(tmp_path)
    proc = _run(meta_env, "bash", ROOT / "scripts" / "demo.sh", cwd=tmp_path,
                extra_path=[str(tools)], environ={"MNEME_ENV": str(meta_env), "TMPDIR": str(tmp_path)})
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    assert "demo finished" in proc.stdout
    assert "$ mneme inspect" in proc.stdout and "spmv_csr" in proc.stdout
    assert "best: trial" in proc.stdout and "verified" in proc.stdout


# -- the supported range ---------------------------------------------------------------------


def test_every_supported_python_has_a_manylinux_2_28_wheel():
    _await_wheel_build()
    if not DIST.is_dir() or not any(DIST.glob("*.whl")):
        _missing(f"no wheels in {DIST}: run scripts/build_wheels.sh")
    auditwheel = (shutil.which("auditwheel", path=str(ROOT / "build" / "wheel-tools" / "bin"))
                  or shutil.which("auditwheel"))
    if auditwheel is None:
        _missing("auditwheel is not installed: run scripts/build_wheels.sh")
    assert _wheel_tags().problems(DIST, auditwheel) == []


def test_every_wheel_is_typed():
    """Each distribution's wheel carries its package's ``py.typed`` (PEP 561), and the
    native ones the stubs of their nanobind modules: type checkers read what users install."""
    import zipfile

    typed = {"mneme-instrument": ["mneme/instrument/py.typed"],
             "mneme-runtime": ["mneme/runtime/py.typed", "mneme/runtime/_native.pyi"],
             "mneme-replay": ["mneme/replay/py.typed", "mneme/replay/jit/_llvm.pyi"],
             "mneme-tune": ["mneme/tune/py.typed"],
             "mneme-cli": ["mneme/cli/py.typed"]}
    for distribution, files in typed.items():
        names = set(zipfile.ZipFile(_wheel(distribution)).namelist())
        assert not [f for f in files if f not in names], f"{distribution}: {files} not all in its wheel"


def test_glibc_2_28_has_every_symbol_the_native_wheels_need():
    _await_wheel_build()
    tools_python = ROOT / "build" / "wheel-tools" / "bin" / "python"
    if not tools_python.exists() or subprocess.run(
            [str(tools_python), "-c", "import ziglang"], capture_output=True).returncode != 0:
        _missing("no ziglang in build/wheel-tools: run scripts/build_wheels.sh")
    wheels = [w for w in DIST.glob("*.whl") if not w.name.endswith("-any.whl")]
    if not wheels:
        _missing(f"no native wheels in {DIST}: run scripts/build_wheels.sh")
    count, errors = load_script("scripts/glibc_symbols.py").missing(wheels, str(tools_python))
    assert errors == [] and count > 100, (count, errors)


SMOKE = r"""
import importlib, json, pkgutil, re, sys
import mneme

out = {"version": list(sys.version_info[:2]), "imported": [], "failed": {}, "instances": []}
for info in pkgutil.walk_packages(mneme.__path__, "mneme.",
                                  onerror=lambda name: out["failed"].setdefault(name, "walk")):
    if info.name.endswith("__main__") or info.name.rpartition(".")[2].startswith("libmneme_"):
        continue  # a command line; the libraries mneme record / run --apply preload
    try:
        module = importlib.import_module(info.name)
    except Exception as exc:
        out["failed"][info.name] = f"{type(exc).__name__}: {exc}"
    else:
        out["imported"].append(info.name)
        if info.name.endswith(("._llvm", "._native")):
            out[info.name] = module.__file__

from mneme.replay.db import Database
from mneme.replay.engine import ReplaySession
for inst in Database.open(sys.argv[1]).instances():
    with ReplaySession(inst, gpu=False) as session:
        result = session.run()
    registers = re.search(r"(\d+) registers", result.summary())
    out["instances"].append([inst.id, result.compile_only, int(registers.group(1)) if registers else 0])
print(json.dumps(out))
"""


@pytest.mark.parametrize(("python", "distributions", "suffix"), [
    ((3, 10), META, ".cpython-310-x86_64-linux-gnu.so"),
    ((3, 13), REPLAY, ".abi3.so"),
], ids=["cp310-every-distribution", "cp313-replay-abi3"])
def test_oldest_and_newest_python_install_import_and_compile(python, distributions, suffix,
                                                             tmp_path_factory, tmp_path):
    env = _fresh_env(tmp_path_factory, distributions, python)
    shutil.copytree(DATA / "golden-v2.rdb", tmp_path / "golden-v2.rdb")
    proc = _run(env, env / "bin" / "python", "-c", SMOKE, tmp_path / "golden-v2.rdb", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout)
    assert out["version"] == list(python)
    assert out["failed"] == {}, out["failed"]
    packages = [d.removeprefix("mneme-").replace("mneme", "") for d in distributions]
    assert {f"mneme.{p}" for p in packages if p} <= set(out["imported"]), out["imported"]
    # the per-version module under 3.10, the stable-ABI one under 3.13
    for module in ("mneme.runtime._native", "mneme.replay.jit._llvm"):
        assert out[module].endswith(suffix) and out[module].startswith(str(env)), out[module]
    assert len(out["instances"]) == 3, out["instances"]
    assert all(compile_only and registers > 0 for _, compile_only, registers in out["instances"])
