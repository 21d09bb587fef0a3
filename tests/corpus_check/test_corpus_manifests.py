"""Static checks of the corpus manifests and sources (no compiler needed)."""

import re

import pytest
from corpus_support import CUDA_PROGRAMS, HIP_PROGRAMS

# Coverage the corpus promises the other engineers (one tag at least once each).
REQUIRED_FEATURES = {
    "templates",
    "overloads",
    "multi-tu",
    "rdc",
    "cross-tu-device-call",
    "globals",
    "constant-memory",
    "struct-globals",
    "memcpy-to-symbol",
    "struct-params",
    "padding",
    "extended-lambdas",
    "static-shared-memory",
    "dynamic-shared-memory",
    "math",
    "atomics",
    "atomic-cas",
    "printf",
    "cooperative-groups",
    "function-pointer-launch",
    "cudaLaunchKernel",
    "launch-bounds",
    "many-instances",
    "pointers-in-memory",
    "malloc-async",
    "driver-api",
    "crash",
    "large-working-set",
}

_LAUNCH_NAME = re.compile(r'corpus::Launch\s+\w+\(\s*"([^"]+)"')
_STRING = re.compile(r'"((?:[^"\\\n]|\\.)*)"')


def _sources(program) -> str:
    return "\n".join((program.directory / s).read_text() for s in program.sources)


def test_corpus_size():
    assert len(CUDA_PROGRAMS) >= 16
    assert len(HIP_PROGRAMS) >= 4


def test_required_features_are_covered():
    covered = {tag for p in CUDA_PROGRAMS for tag in p.features}
    assert REQUIRED_FEATURES <= covered, f"missing: {sorted(REQUIRED_FEATURES - covered)}"


@pytest.mark.parametrize(
    "program", CUDA_PROGRAMS + HIP_PROGRAMS, ids=lambda p: f"{p.language}-{p.name}"
)
def test_manifest_is_well_formed(program):
    assert program.kernels, "a program without kernels tests nothing"
    assert list(program.kernels) == sorted(set(program.kernels)), "kernels: sorted, no duplicates"
    assert program.features
    assert all(" " not in f for f in program.flags + program.link_flags)


@pytest.mark.parametrize(
    "program", CUDA_PROGRAMS + HIP_PROGRAMS, ids=lambda p: f"{p.language}-{p.name}"
)
def test_checksum_lines_use_manifest_names(program):
    """Every kernel is reported under its exact manifest name, and only manifest names are."""
    text = _sources(program)
    literals = set(_STRING.findall(text))
    missing = [k for k in program.kernels if k not in literals]
    assert not missing, f"kernels never named in a MNEME-CHECK label: {missing}"
    unknown = [name for name in _LAUNCH_NAME.findall(text) if name not in program.kernels]
    assert not unknown, f"corpus::Launch names not in program.json: {unknown}"


@pytest.mark.parametrize("port", HIP_PROGRAMS, ids=lambda p: p.name)
def test_hip_port_mirrors_its_cuda_program(port):
    originals = {p.name: p for p in CUDA_PROGRAMS}
    assert port.name in originals, "a HIP port keeps the name of the CUDA program it ports"
    assert port.kernels == originals[port.name].kernels
