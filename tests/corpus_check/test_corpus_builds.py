"""Every corpus program builds with plain clang++-22; manifests match the device IR."""

import subprocess

import pytest
from corpus_linking import libcuda_linkable
from corpus_support import (
    CUDA_PROGRAMS,
    HIP_PROGRAMS,
    corpus_build,
    gpu_available,
    outcome,
)

ELF_MAGIC = b"\x7fELF"


@pytest.mark.parametrize("program", CUDA_PROGRAMS, ids=lambda p: p.name)
def test_cuda_program_builds_and_links(corpus_outputs, program):
    result = outcome(corpus_outputs, "build", "cuda", program.name)
    assert len(result.objects) == len(program.sources)
    assert result.executable.read_bytes()[:4] == ELF_MAGIC
    if program.is_rdc:  # the device link must run through the new offload driver
        assert "--offload-new-driver" in result.commands[-1]


@pytest.mark.parametrize("program", HIP_PROGRAMS, ids=lambda p: p.name)
def test_hip_program_compiles_to_objects(corpus_outputs, program):
    result = outcome(corpus_outputs, "build", "hip", program.name)
    assert result.executable is None
    for obj in result.objects:
        data = obj.read_bytes()
        assert data[:4] == ELF_MAGIC
        assert b"__CLANG_OFFLOAD_BUNDLE__" in data, f"{obj.name}: no embedded gfx90a code object"


@pytest.mark.parametrize(
    "program", CUDA_PROGRAMS + HIP_PROGRAMS, ids=lambda p: f"{p.language}-{p.name}"
)
def test_manifest_kernels_match_device_ir(corpus_outputs, program):
    assert outcome(corpus_outputs, "kernels", program.language, program.name) == list(
        program.kernels
    )


@pytest.mark.parametrize("program", CUDA_PROGRAMS, ids=lambda p: p.name)
def test_fails_cleanly_without_gpu(corpus_outputs, program):
    """Without a GPU the first CUDA call fails: exit 1 and one clear line, no checksums."""
    if gpu_available():
        pytest.skip("a GPU is present; test_corpus_gpu runs the programs for real")
    if "-lcuda" in program.link_flags and not libcuda_linkable(corpus_build.find_cuda_root()):
        pytest.skip("linked against a link-only libcuda; no driver library to load here")
    result = outcome(corpus_outputs, "build", "cuda", program.name)
    proc = subprocess.run(
        [str(result.executable), *program.args], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 1, proc.stderr
    assert proc.stderr.startswith("corpus: ") and " failed: " in proc.stderr
    assert "MNEME-CHECK" not in proc.stdout


@pytest.mark.parametrize("name", ["large_working_set", "atomic_pool"])
def test_sized_program_rejects_bad_size(corpus_outputs, name):
    result = outcome(corpus_outputs, "build", "cuda", name)
    proc = subprocess.run([str(result.executable), "0"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 64
    assert proc.stderr.startswith("usage: ")
