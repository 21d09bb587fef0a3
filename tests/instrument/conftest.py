from concurrent.futures import ThreadPoolExecutor

import pytest
from cmake_corpus import CMakeCorpus, build_cmake_corpus
from corpus_linking import MAX_JOBS, build_corpus_program
from instrument_support import (
    CUDA_PROGRAMS,
    HIP_PROGRAMS,
    MNEME_CLANGXX,
    corpus_build,
    require_toolchain,
)


class CorpusBuildError(Exception):
    """A corpus program that did not build (its tests fail with this message)."""


def _outcome(fn, *args, **kwargs):
    try:
        return fn(*args, **kwargs)
    except Exception as exc:  # reported by the test that looks at this program
        return exc


@pytest.fixture(scope="session")
def cmake_corpus(tmp_path_factory) -> CMakeCorpus | None:
    """The CUDA corpus built once as one CMake project through add_mneme()
    (cmake_corpus.py), for the CMake package's test and every instrumented-program test;
    None where CMake is not installed."""
    require_toolchain()
    return build_cmake_corpus(tmp_path_factory.mktemp("cmake-corpus"))


@pytest.fixture(scope="session")
def instrumented(tmp_path_factory, cmake_corpus):
    """program name -> BuildResult of the CUDA corpus built with mneme-clang++ (or the error):
    the CMake corpus's targets (mneme-clang++ their compiler launcher), and a program the
    project leaves out (`-lcuda` with no stub library here) built with mneme-clang++ as the
    compiler, against a link-only libcuda; every program so where CMake is missing."""
    require_toolchain()
    in_project = {p.name for p in cmake_corpus.programs} if cmake_corpus is not None else set()
    root = tmp_path_factory.mktemp("instrumented")
    others = [p for p in CUDA_PROGRAMS if p.name not in in_project]
    with ThreadPoolExecutor(MAX_JOBS) as pool:  # each build runs one compiler at a time
        built = dict(zip([p.name for p in others], pool.map(
            lambda p: _outcome(build_corpus_program, p, root / p.name, MNEME_CLANGXX), others), strict=True))
    for program in CUDA_PROGRAMS:
        if program.name in built or cmake_corpus is None:
            continue
        executable = cmake_corpus.executable(program.name)
        objects = cmake_corpus.objects(program)
        if executable.is_file() and len(objects) == len(program.sources):
            built[program.name] = corpus_build.BuildResult(program, objects, executable, [])
        else:
            built[program.name] = CorpusBuildError(
                f"{program.name} did not build through the CMake package:\n{cmake_corpus.failure}")
    return built


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
