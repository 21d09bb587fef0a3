"""`mneme-clang++` typed the way nvcc is: `mneme-clang++ -O2 app.cu -o app` with no
`-x cuda`, no `--cuda-gpu-arch` and no CUDA runtime flags builds a recordable executable."""

import json
import os
import subprocess
from pathlib import Path

import pytest
from instrument_support import MNEME_CLANGXX, require_toolchain, run_mneme
from mneme.instrument import toolchain

APP = r"""
#include <cstdio>
__global__ void scale(float *a, float s, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) a[i] *= s;
}
int main() {
  float *d = nullptr;
  cudaError_t err = cudaMalloc(&d, 256 * sizeof(float));
  if (err == cudaSuccess) { scale<<<1, 256>>>(d, 2.0f, 256); cudaDeviceSynchronize(); }
  std::printf("ran\n");
  return 0;
}
"""
HOST_ONLY = "int main() { return 0; }\n"


@pytest.fixture(autouse=True)
def _toolchain():
    require_toolchain()


def _env(**extra: str) -> dict:
    env = {k: v for k, v in os.environ.items() if k != toolchain.CUDA_ARCH_ENV}
    env.update(extra)
    return env


def _wrap(*args: str, cwd: Path, **env: str) -> subprocess.CompletedProcess:
    proc = subprocess.run(
        [MNEME_CLANGXX, *args], cwd=cwd, env=_env(**env), capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stderr
    return proc


def _needed(binary: Path) -> list[str]:
    out = subprocess.run(
        ["readelf", "-d", str(binary)], capture_output=True, text=True, check=True
    ).stdout
    return [line.split("[", 1)[1].rstrip("]") for line in out.splitlines() if "(NEEDED)" in line]


def _arches(binary: Path) -> set[str]:
    listing = json.loads(run_mneme("inspect", str(binary), "--json", check=True).stdout)
    return {k["arch"] for k in listing["kernels"]}


def _expected_default_arch() -> str:
    return toolchain.local_gpu_arch() or toolchain.DEFAULT_CUDA_ARCH


@pytest.fixture()
def app(tmp_path):
    (tmp_path / "app.cu").write_text(APP)
    return tmp_path


def test_one_step_like_nvcc(app):
    _wrap("-O2", "app.cu", "-o", "app", cwd=app)
    exe = app / "app"
    assert any(n.startswith("libcudart.so") for n in _needed(exe))
    assert _arches(exe) == {_expected_default_arch()}
    # the runtime is found at run time without LD_LIBRARY_PATH (rpath); without a GPU
    # cudaMalloc fails and the program still finishes
    run = subprocess.run([str(exe)], capture_output=True, text=True, env=_env())
    assert run.returncode == 0 and run.stdout == "ran\n", run.stderr


def test_compile_then_link_objects(app):
    _wrap("-O2", "-c", "app.cu", "-o", "app.o", cwd=app)
    _wrap("app.o", "-o", "app", cwd=app)
    assert any(n.startswith("libcudart.so") for n in _needed(app / "app"))
    assert _arches(app / "app") == {_expected_default_arch()}


def test_link_of_plain_clang_cuda_object_gets_runtime(app):
    """Objects compiled elsewhere (plain clang++ here) count as CUDA by their fatbinary."""
    clang = str(toolchain.find_llvm().clangxx)
    subprocess.run(
        [
            clang,
            "-x",
            "cuda",
            "--cuda-gpu-arch=sm_90",
            "-Wno-unknown-cuda-version",
            *toolchain.cuda_compile_flags(toolchain.find_cuda()),
            "-c",
            "app.cu",
            "-o",
            "plain.o",
        ],
        cwd=app,
        check=True,
        capture_output=True,
    )
    _wrap("plain.o", "-o", "app", cwd=app)
    assert any(n.startswith("libcudart.so") for n in _needed(app / "app"))


def test_host_only_link_gets_no_runtime(tmp_path):
    (tmp_path / "main.cpp").write_text(HOST_ONLY)
    _wrap("main.cpp", "-o", "main", cwd=tmp_path)
    assert not any("cudart" in n for n in _needed(tmp_path / "main"))


def test_arch_from_environment_and_flag(app):
    _wrap("-c", "app.cu", "-o", "env.o", cwd=app, MNEME_CUDA_ARCH="80")
    assert _arches(app / "env.o") == {"sm_80"}
    # an explicit architecture wins over the environment
    _wrap("-c", "app.cu", "--cuda-gpu-arch=sm_89", "-o", "flag.o", cwd=app, MNEME_CUDA_ARCH="sm_80")
    assert _arches(app / "flag.o") == {"sm_89"}
    proc = subprocess.run(
        [str(Path(MNEME_CLANGXX).parent / "mneme"), "config", "cuda-arch"],
        env=_env(MNEME_CUDA_ARCH="sm_86"),
        capture_output=True,
        text=True,
        check=True,
    )
    assert proc.stdout.strip() == "sm_86"


def test_explicit_runtime_is_kept(app):
    """A command that names the runtime itself is linked as written (static one: warned)."""
    libdir = toolchain.cuda_libdir(toolchain.find_cuda())
    _wrap("app.cu", "-o", "app", f"-L{libdir}", "-lcudart", f"-Wl,-rpath,{libdir}", cwd=app)
    assert any(n.startswith("libcudart.so") for n in _needed(app / "app"))
    proc = _wrap(
        "app.cu",
        "-o",
        "static",
        f"-L{libdir}",
        "-lcudart_static",
        "-ldl",
        "-lrt",
        "-lpthread",
        cwd=app,
    )
    assert "static CUDA runtime" in proc.stderr
    assert not any("cudart" in n for n in _needed(app / "static"))


def test_inspect_ir_needs_only_llvm_dis(app, tmp_path):
    """`mneme inspect --ir` prints the IR through llvm-dis-22 (mneme-instrument imports
    nothing of mneme-replay); without llvm-dis it says in one line what to install."""
    _wrap("app.cu", "-o", "app", cwd=app)
    proc = run_mneme("inspect", str(app / "app"), "--ir", "scale", check=True)
    assert "define" in proc.stdout and "ptx_kernel" in proc.stdout
    fake = tmp_path / "llvm"
    (fake / "bin").mkdir(parents=True)
    for name in ("clang", "clang++"):
        (fake / "bin" / name).symlink_to(toolchain.find_llvm().clangxx)
    env = _env(LLVM_INSTALL_PATH=str(fake), PATH=str(Path(MNEME_CLANGXX).parent))
    proc = subprocess.run(
        [str(Path(MNEME_CLANGXX).parent / "mneme"), "inspect", str(app / "app"), "--ir", "scale"],
        env=env,
        capture_output=True,
        text=True,
    )
    assert proc.returncode != 0 and "Traceback" not in proc.stderr
    assert proc.stderr.strip().count("\n") == 0 and "llvm-dis-22" in proc.stderr
