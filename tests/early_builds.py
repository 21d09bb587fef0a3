"""Builds of session fixtures that need only the system's compilers (clang++-22, nvcc), made
before the test run by scripts/test.sh (standard library only: it runs with the setup's
Python, before the development environment exists).

    python tests/early_builds.py DIR

runs, at the setup's idle moments (pip's downloads and installs; scripts/test.sh starts it
niced, before setup.sh), what the fixtures below would run at their setup, with the same
functions: `corpus_outputs` (tests/corpus_check/corpus_support.py: every corpus program
built with clang++-22 and its device kernels listed), `corpus_ir` (tests/jit/conftest.py:
the device bitcode of every CUDA corpus TU, the files those kernel lists were read from:
one device compile for both) and `nvcc_errors` (tests/corpus_check/test_corpus_nvcc.py:
every CUDA corpus TU compiled with nvcc). Each
result is written whole to DIR/<fixture>.json (a rename) once made; DIR/done appears when
the script has ended, however it ended (scripts/test.sh writes it). The fixture, where
MNEME_EARLY_BUILDS names DIR, waits for its file and takes it, or builds as before where
the script made none (a tool missing, an exception): the tests see the same results, and
look at the same files, as if their fixture had built them.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import traceback
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # run as a script: tests/ modules

from corpus_linking import MAX_JOBS, build_corpus_program  # noqa: E402
from script_modules import load_script  # noqa: E402

corpus_build = load_script("tests/corpus/build.py")

#: the folder scripts/test.sh has this script write to (unset: the fixtures build themselves)
ENV = "MNEME_EARLY_BUILDS"
#: at most this long a fixture waits for its early build (it then builds itself, within
#: the run's per-test timeout), and the script for clang++-22 to be installed
WAIT_SECONDS = 600


def _outcome(fn, *args, **kwargs):
    try:
        return fn(*args, **kwargs)
    except Exception as exc:  # reported by the test that looks at this program
        return exc


# -- what the fixtures build ----------------------------------------------------------------


def build_corpus_outputs(out_root: Path, ir_done=None) -> dict:
    """corpus_outputs' value: (kind, language, name) -> BuildResult / kernel names, or the
    exception building raised. The kernel lists are read from each TU's device bitcode,
    left in out_root/ir/<language>/<name>/; ir_done(value of corpus_ir), if given, is
    called once every CUDA program's is made (before the builds), or with None where one
    failed (the JIT tests then compile it themselves)."""
    cuda_programs = corpus_build.discover_programs("cuda")
    hip_programs = corpus_build.discover_programs("hip")
    cuda_root = corpus_build.find_cuda_root()
    jobs = {}
    with ThreadPoolExecutor(max_workers=MAX_JOBS) as pool:
        # the device IR first: the JIT tests wait for it, and nothing else needs it
        for program in cuda_programs + hip_programs:
            jobs["kernels", program.language, program.name] = pool.submit(
                _outcome, corpus_build.device_kernels, program.directory, cuda_root=cuda_root,
                ir_dir=out_root / "ir" / program.language / program.name,
            )
        for program in cuda_programs:
            jobs["build", "cuda", program.name] = pool.submit(
                _outcome, build_corpus_program, program, out_root / "cuda" / program.name,
                corpus_build.DEFAULT_COMPILER, cuda_root,
            )
        for program in hip_programs:
            jobs["build", "hip", program.name] = pool.submit(
                _outcome,
                corpus_build.build_program,
                program.directory,
                out_root / "hip" / program.name,
            )
        if ir_done is not None:
            listings = [jobs["kernels", "cuda", p.name].result() for p in cuda_programs]
            ir_done(None if any(isinstance(k, Exception) for k in listings) else {
                p.name: [str(out_root / "ir" / "cuda" / p.name / (Path(s).stem + ".bc"))
                         for s in p.sources]
                for p in cuda_programs})
        return {key: future.result() for key, future in jobs.items()}


def find_nvcc() -> str | None:
    """The nvcc that nvcc_errors compiles with (None: not installed)."""
    return shutil.which("nvcc") or shutil.which(str(corpus_build.find_cuda_root() / "bin" / "nvcc"))


def _nvcc_compile(nvcc, program, out_dir):
    """None when every TU compiles, else nvcc's error output."""
    for source in program.sources:
        cmd = [
            nvcc,
            "-arch=sm_90",
            f"-I{corpus_build.CUDA_COMMON_DIR}",
            *program.nvcc.get("flags", []),
            "-c",
            str(program.directory / source),
            "-o",
            str(out_dir / (program.name + "." + source + ".o")),
        ]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            return f"{' '.join(cmd)}\n{proc.stderr}"
    return None


def build_nvcc_errors(nvcc: str, out_dir: Path) -> dict:
    """nvcc_errors' value: program name -> None (every TU compiles) or nvcc's errors."""
    todo = [p for p in corpus_build.discover_programs("cuda") if "skip" not in p.nvcc]
    with ThreadPoolExecutor(max_workers=MAX_JOBS) as pool:
        return dict(
            zip(
                [p.name for p in todo],
                pool.map(lambda p: _nvcc_compile(nvcc, p, out_dir), todo),
                strict=True,
            )
        )


# -- the files between this script and the fixtures -----------------------------------------


def _encode(value):
    if isinstance(value, Exception):
        return {"error": str(value)}
    if isinstance(value, corpus_build.BuildResult):
        return {"program": str(value.program.directory),
                "objects": [str(o) for o in value.objects],
                "executable": None if value.executable is None else str(value.executable),
                "commands": value.commands}
    return {"value": value}


def _decode(data):
    if "error" in data:
        return corpus_build.CorpusError(data["error"])
    if "program" in data:
        return corpus_build.BuildResult(
            corpus_build.load_program(data["program"]), [Path(o) for o in data["objects"]],
            None if data["executable"] is None else Path(data["executable"]), data["commands"])
    return data["value"]


def _write(folder: Path, name: str, meta: dict, value: dict) -> None:
    doc = {"meta": meta, "items": [[list(k) if isinstance(k, tuple) else k, _encode(v)]
                                   for k, v in value.items()]}
    staged = folder / f"{name}.json.tmp"
    staged.write_text(json.dumps(doc))
    staged.replace(folder / f"{name}.json")


def early(name: str, meta: dict) -> dict | None:
    """The value the early build made for fixture `name`, if scripts/test.sh runs one
    (MNEME_EARLY_BUILDS) and it made one with the same `meta` (the tools it used); waits
    for it. None: the fixture builds as usual."""
    folder = os.environ.get(ENV)
    if not folder:
        return None
    folder = Path(folder)
    path, done = folder / f"{name}.json", folder / "done"
    deadline = time.monotonic() + WAIT_SECONDS
    while not path.exists() and not done.exists() and time.monotonic() < deadline:
        time.sleep(0.5)
    if not path.exists():
        return None
    doc = json.loads(path.read_text())
    if doc["meta"] != meta:
        return None
    return {tuple(k) if isinstance(k, list) else k: _decode(v) for k, v in doc["items"]}


def corpus_outputs_meta() -> dict:
    return {"compiler": shutil.which(corpus_build.DEFAULT_COMPILER),
            "cxxfilt": shutil.which(corpus_build.DEFAULT_CXXFILT),
            "llvm-dis": shutil.which(corpus_build.DEFAULT_LLVM_DIS)}


def corpus_ir_meta() -> dict:
    return {"compiler": shutil.which(corpus_build.DEFAULT_COMPILER)}


def main(argv: list[str]) -> int:
    folder = Path(argv[1]).resolve()
    folder.mkdir(parents=True, exist_ok=True)
    try:
        nvcc = find_nvcc()
        if nvcc:
            out = folder / "nvcc"
            out.mkdir(exist_ok=True)
            _write(folder, "nvcc_errors", {"nvcc": nvcc}, build_nvcc_errors(nvcc, out))
    except Exception:  # the fixture builds itself, and reports what went wrong
        traceback.print_exc()
    # clang++-22 comes with setup.sh's apt-get, which may still be running
    deadline = time.monotonic() + WAIT_SECONDS
    while not all(corpus_outputs_meta().values()) and time.monotonic() < deadline:
        time.sleep(2)
    meta = corpus_outputs_meta()
    try:
        if all(meta.values()):
            def ir_done(value):
                if value is not None:
                    _write(folder, "corpus_ir", corpus_ir_meta(), value)

            _write(folder, "corpus_outputs", meta, build_corpus_outputs(folder / "corpus", ir_done))
    except Exception:
        traceback.print_exc()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
