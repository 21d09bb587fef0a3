"""The vendor-library programs (tests/corpus/cuda/libraries/) build with nvcc against cuBLAS,
with the static runtime (nvcc's default) and the shared one, and without a GPU end with
exit 1 and one line. Skipped where nvcc or cuBLAS is missing (CUBLAS_ROOT may point at a
folder with include/cublasLt.h and lib/libcublasLt.so*, e.g. the nvidia-cublas wheel's
nvidia/cu13). Their recording on a GPU: tests/record/test_record_frameworks_gpu.py."""

import subprocess

import pytest
from corpus_support import gpu_available
from script_modules import load_script

libraries = load_script("tests/corpus/libraries.py")


@pytest.fixture(scope="module")
def cublas():
    try:
        libraries.corpus_build.find_nvcc()
    except libraries.CorpusError as exc:
        pytest.skip(str(exc))
    root = libraries.find_cublas()
    if root is None:
        pytest.skip("no cuBLAS here (include/cublasLt.h + libcublasLt); set CUBLAS_ROOT")
    return root


def test_every_library_program_says_what_it_links():
    assert libraries.library_programs() == sorted(libraries.LINKS)


@pytest.mark.parametrize("cudart", ["static", "shared"])
@pytest.mark.parametrize("name", libraries.library_programs())
def test_builds_with_nvcc_and_fails_cleanly_without_gpu(cublas, tmp_path, name, cudart):
    exe = libraries.build_library_program(name, tmp_path, cudart=cudart)
    needed = subprocess.run(["readelf", "-d", str(exe)], capture_output=True, text=True,
                            check=True).stdout
    assert "libcublasLt.so" in needed and "libcublas.so" in needed
    assert ("libcudart.so" in needed) == (cudart == "shared")
    if gpu_available():
        return  # run and recorded by the GPU tests
    proc = subprocess.run([str(exe)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"{name}: ") and "failed" in lines[0]
    assert "CHECKSUM" not in proc.stdout
