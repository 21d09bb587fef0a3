"""Kernels launched from Python frameworks and vendor libraries, recorded with `mneme record
-- ANY COMMAND` and replayed verified (issue 21).

On the GPU host (PyTorch, Triton, CuPy, JAX, nvcc and cuBLAS installed), from the project root:

    source .gpu/setup.sh && source .probe/gpu_env.sh
    python3 -m pytest tests/record/test_record_frameworks_gpu.py -m gpu -q -s
    python3 -m pytest tests/record/test_record_frameworks_gpu.py -m gpu -q -s -k torch_train_step

Each case runs its program plainly and under `mneme record -rdb DB -mr 1 -- python3 SCRIPT`
(the scripts are tests/corpus/python/*.py; the C++ cuBLAS/cuBLASLt program is
tests/corpus/cuda/libraries/cublas_gemm, built here with nvcc, static and shared runtime),
compares the CHECKSUM lines of both runs, runs `mneme ls` and `mneme check`, replays every
instance (Python API) and one per kernel origin (`mneme replay`), and prints per case: the
kernels recorded, instances, how many verified, instances per origin and code, the failures
and why, and the recorder's own lines. Each case takes from ~20 s (CuPy) to a few minutes
(torch.compile under record); split the run with -k where 10 minutes is the limit.
"""

from __future__ import annotations

import importlib.util
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from app_recording import GEMM_NAME, assert_recorded_and_verified, record_application
from script_modules import load_script

pytestmark = pytest.mark.gpu

SCRIPTS = Path(__file__).resolve().parents[1] / "corpus" / "python"
libraries = load_script("tests/corpus/libraries.py")


@dataclass(frozen=True)
class Case:
    """One application: how to start it, what it needs, and which kernels (label -> regex
    over demangled names) its recording must hold."""

    program: str  # a script in tests/corpus/python, or a program in cuda/libraries
    needs: tuple[str, ...] = ()  # Python modules
    env: dict[str, str] = field(default_factory=dict)
    expect: dict[str, str] = field(default_factory=dict)
    options: tuple[str, ...] = ("-mr", "1")  # one instance per kernel keeps snapshots few
    rel_tol: float = 1e-4  # float reductions whose order may change between runs
    cudart: str = "static"  # C++ programs: nvcc's -cudart


TORCH_TRAINING = {
    "GEMM (cuBLAS/cuBLASLt)": GEMM_NAME.pattern,
    "layer norm": r"(?i)layer_?norm",
    "softmax": r"(?i)softmax",
    "GELU": r"(?i)gelu",
    "dropout": r"(?i)dropout",
    "AdamW (foreach)": r"(?i)multi_tensor_apply|adam",
}
CASES = {
    "torch_train_step": Case("torch_train_step.py", ("torch",), expect=TORCH_TRAINING),
    # PyTorch's allocator over cuMemCreate/cuMemMap, and over cudaMallocAsync pools
    "torch_train_step-expandable_segments": Case(
        "torch_train_step.py", ("torch",), {"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"},
        TORCH_TRAINING),
    "torch_train_step-cudaMallocAsync": Case(
        "torch_train_step.py", ("torch",), {"PYTORCH_CUDA_ALLOC_CONF": "backend:cudaMallocAsync"},
        TORCH_TRAINING),
    # about twenty launches over a 2 GiB working set, every launch recorded (issue 22)
    "torch_large_activations": Case("torch_large_activations.py", ("torch",), options=(), expect={
        "GEMM (cuBLAS/cuBLASLt)": GEMM_NAME.pattern,
        "softmax": r"(?i)softmax",
        "reduction": r"(?i)reduce",
    }),
    "torch_compile_fn": Case("torch_compile_fn.py", ("torch", "triton"), expect={
        "Triton kernels of Inductor": r"^triton_",
        "GEMM (cuBLAS)": GEMM_NAME.pattern,
    }),
    # two GPUs, model split by hand, activations and gradients moved by peer copies (issue 25)
    "torch_two_gpus": Case("torch_two_gpus.py", ("torch",), expect={
        "GEMM (cuBLAS/cuBLASLt)": GEMM_NAME.pattern,
        "SGD / elementwise": r"(?i)elementwise|vectorized|foreach|sgd",
    }),
    "triton_direct": Case("triton_direct.py", ("torch", "triton"), expect={
        "@triton.jit softmax": r"^mneme_softmax_rows$",
        "@triton.jit scaled add": r"^mneme_add_scaled$",
    }),
    "cupy_kernels": Case("cupy_kernels.py", ("cupy",), expect={
        "RawKernel saxpy": r"^mneme_saxpy$",
        "RawKernel block sum": r"^mneme_block_sum$",
        "ElementwiseKernel": r"mneme_scaled_diff",
        "ReductionKernel": r"mneme_l2_norm",
        "matmul (cuBLAS)": GEMM_NAME.pattern,
    }),
    # a preallocated pool of 75 % of the GPU that every array is carved from (as JAX's):
    # one region the replay maps whole but restores and verifies by its live chunks
    "cupy_pool_arena": Case("cupy_pool_arena.py", ("cupy",), expect={
        "RawKernel on the pool": r"^mneme_laplacian$",
        "ElementwiseKernel on the pool": r"mneme_arena_axpy",
        "reductions (CUB)": r"cub::",
    }),
    # an inference server's paged KV cache (vLLM's layout): one torch.zeros of 60 % of the
    # free memory carved into blocks handed out across all of it; gathers through block
    # tables can reach the whole pool
    "torch_paged_kv_cache": Case("torch_paged_kv_cache.py", ("torch",), expect={
        "GEMM (cuBLAS/cuBLASLt)": GEMM_NAME.pattern,
        "cache writes and gathers (index_copy_, indexing)": r"(?i)index",
        "softmax": r"(?i)softmax",
    }),
    # JAX's BFC pools grown on demand, and the platform allocator (one driver call per buffer)
    "jax_jit_mlp-default": Case("jax_jit_mlp.py", ("jax",), {"XLA_PYTHON_CLIENT_ALLOCATOR": "default"},
                            {"GEMM (cuBLAS or XLA's Triton GEMM)": r"(?i)gemm|nvjet|xmma|cutlass|dot"}),
    "jax_jit_mlp-platform": Case(
        "jax_jit_mlp.py", ("jax",), {"XLA_PYTHON_CLIENT_ALLOCATOR": "platform"},
        {"GEMM (cuBLAS or XLA's Triton GEMM)": r"(?i)gemm|nvjet|xmma|cutlass|dot"}),
    # JAX's defaults: a pool of 75 % of the GPU, GEMM fusions autotuned while XLA compiles
    # (candidates timed behind XLA's delay kernel, which the recorder does not run); bf16
    # GEMMs whose autotuned winner may differ under recording, hence the tolerance
    "jax_transformer_block": Case("jax_transformer_block.py", ("jax",), rel_tol=2e-2, expect={
        "GEMM (cuBLAS or XLA's Triton GEMM)": r"(?i)gemm|nvjet|xmma|cutlass|dot",
        "softmax / reductions": r"(?i)reduc|softmax",
    }),
    # C++: kernels of its own and cuBLAS/cuBLASLt's SASS-only kernels; every launch recorded
    **{f"cublas_gemm-{cudart}": Case("cublas_gemm", options=(), cudart=cudart, expect={
        "own fill kernel": r"fill_pattern",
        "own bf16 conversion": r"to_bf16",
        "GEMM (cuBLAS/cuBLASLt)": GEMM_NAME.pattern,
        "dot (cuBLAS level 1)": r"(?i)dot",
    }) for cudart in ("static", "shared")},
}


def _command(case: Case, out: Path) -> list[str]:
    if case.program.endswith(".py"):
        for module in case.needs:
            if importlib.util.find_spec(module) is None:
                pytest.skip(f"{module} is not installed for {sys.executable}")
        return [sys.executable, str(SCRIPTS / case.program)]
    try:
        libraries.corpus_build.find_nvcc()
    except libraries.CorpusError as exc:
        pytest.skip(str(exc))
    if libraries.find_cublas() is None:
        pytest.skip("no cuBLAS here (include/cublasLt.h + libcublasLt); set CUBLAS_ROOT")
    return [str(libraries.build_library_program(case.program, out / case.cudart, cudart=case.cudart))]


@pytest.fixture(scope="module")
def recording(tmp_path_factory):
    """name -> AppRecording, recorded once per module (each test of a case shares it)."""
    from mneme.runtime import driver_available

    if not driver_available():
        pytest.skip("no usable CUDA driver")
    cache = {}

    def get(name: str):
        if name not in cache:
            case = CASES[name]
            out = tmp_path_factory.mktemp(name)
            argv = _command(case, out)
            app = record_application(name, argv, out / "rec.rdb", options=case.options,
                                     env=case.env, rel_tol=case.rel_tol)
            print("\n" + app.report(), flush=True)
            cache[name] = app
        app = cache[name]
        if app.plain.returncode == 77:  # corpus_report.SKIP_EXIT
            pytest.skip(app.plain.stdout.strip().splitlines()[-1])
        return app

    return get


@pytest.mark.parametrize("name", CASES)
def test_records_and_every_instance_replays_verified(recording, name):
    assert_recorded_and_verified(recording(name))


@pytest.mark.parametrize("name", CASES)
def test_the_recording_holds_the_kernels_the_application_launches(recording, name):
    app = recording(name)
    missing = [label for label, pattern in CASES[name].expect.items()
               if not app.kernels_matching(pattern)]
    assert missing == [], f"no kernel recorded for {missing}; recorded: {app.kernels}"
    if name.startswith("torch_compile"):
        triton = app.kernels_matching(r"^triton_")
        print(f"\n{name}: {len(triton)} Triton kernels: {triton}")
        assert len(triton) >= 2, "forward and backward each compile Triton kernels"
