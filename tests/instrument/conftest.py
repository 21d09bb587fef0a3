from concurrent.futures import ThreadPoolExecutor

import pytest
from corpus_linking import MAX_JOBS, build_corpus_program
from instrument_support import (
    CUDA_PROGRAMS,
    HIP_PROGRAMS,
    MNEME_CLANGXX,
    corpus_build,
    require_toolchain,
)


def _outcome(fn, *args, **kwargs):
    try:
        return fn(*args, **kwargs)
    except Exception as exc:  # reported by the test that looks at this program
        return exc


@pytest.fixture(scope="session")
def instrumented(tmp_path_factory):
    """program name -> BuildResult of the CUDA corpus built with mneme-clang++ (or the error)."""
    require_toolchain()
    root = tmp_path_factory.mktemp("instrumented")
    with ThreadPoolExecutor(MAX_JOBS) as pool:  # each build runs one compiler at a time
        builds = pool.map(
            lambda p: _outcome(build_corpus_program, p, root / p.name, MNEME_CLANGXX), CUDA_PROGRAMS
        )
        return dict(zip([p.name for p in CUDA_PROGRAMS], builds, strict=True))


@pytest.fixture(scope="session")
def instrumented_hip(tmp_path_factory):
    """program name -> BuildResult (objects only) of the HIP ports built with mneme-clang++."""
    require_toolchain()
    root = tmp_path_factory.mktemp("instrumented-hip")
    return {
        p.name: _outcome(
            corpus_build.build_program, p.directory, root / p.name, compiler=MNEME_CLANGXX
        )
        for p in HIP_PROGRAMS
    }
