import pytest
from jit_support import build_corpus_ir, build_test_kernels


@pytest.fixture(scope="session")
def kernels(tmp_path_factory):
    """name -> bitcode bytes of the tests/jit/kernels sources (compiled once)."""
    paths = build_test_kernels(tmp_path_factory.mktemp("jit-kernels"))
    return {name: path.read_bytes() for name, path in paths.items()}


@pytest.fixture(scope="session")
def corpus_ir(tmp_path_factory):
    """program name -> [bitcode of each TU] for the CUDA instrumentation corpus."""
    return build_corpus_ir(tmp_path_factory.mktemp("jit-corpus"))
