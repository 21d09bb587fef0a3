"""Cross-check: every CUDA corpus TU also compiles with nvcc -arch=sm_90 (compile only).

Programs whose manifest has "nvcc": {"flags": [...]} get those flags (e.g. --extended-lambda
for clang-style device lambdas, -rdc=true for relocatable device code); "nvcc": {"skip": why}
opts a program out.
"""

import early_builds
import pytest
from corpus_support import CUDA_PROGRAMS

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def nvcc_errors(tmp_path_factory):
    """Program name -> None (every TU compiles) or nvcc's errors; under scripts/test.sh
    compiled before the run (tests/early_builds.py)."""
    nvcc = early_builds.find_nvcc()
    if nvcc is None:
        pytest.skip("nvcc not installed")
    made = early_builds.early("nvcc_errors", {"nvcc": nvcc})
    if made is not None:
        return made
    return early_builds.build_nvcc_errors(nvcc, tmp_path_factory.mktemp("nvcc"))


@pytest.mark.parametrize("program", CUDA_PROGRAMS, ids=lambda p: p.name)
def test_compiles_with_nvcc(nvcc_errors, program):
    if "skip" in program.nvcc:
        pytest.skip(program.nvcc["skip"])
    assert nvcc_errors[program.name] is None, nvcc_errors[program.name]
