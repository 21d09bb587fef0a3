"""Building corpus programs that link `-lcuda` on machines without a driver library: the
toolkit here has no stubs/ folder, so a link-only libcuda.so stands in for the link (the
real libcuda.so.1 comes with the driver wherever the program runs)."""

from __future__ import annotations

import ctypes.util
import subprocess
from pathlib import Path

from script_modules import load_script

corpus_build = load_script("tests/corpus/build.py")
#: programs built at once by the session fixtures that build the whole corpus (the
#: machines have 2 cores shared with other work)
MAX_JOBS = 2


def libcuda_linkable(cuda_root: Path) -> bool:
    """Whether `-lcuda` resolves: a toolkit stub or an installed driver library."""
    stubs = corpus_build.cuda_library_dir(cuda_root) / "stubs" / "libcuda.so"
    return stubs.exists() or ctypes.util.find_library("cuda") is not None


def make_link_only_libcuda(objects: list[Path], out_dir: Path) -> Path:
    """A libcuda.so defining exactly the cu* symbols the objects use; every function traps
    if called."""
    undefined = subprocess.run(
        ["nm", "-u", *map(str, objects)], capture_output=True, text=True, check=True
    ).stdout.split()
    symbols = sorted({s for s in undefined if s.startswith("cu") and s[2:3].isupper()})
    out_dir.mkdir(parents=True, exist_ok=True)
    source = out_dir / "libcuda_link_only.c"
    source.write_text("".join(f"void {s}(void) {{ __builtin_trap(); }}\n" for s in symbols))
    c_compiler = corpus_build.DEFAULT_COMPILER.replace("++", "")
    subprocess.run([c_compiler, "-shared", "-fPIC", "-x", "c", str(source),
                    "-Wl,-soname,libcuda.so.1", "-o", str(out_dir / "libcuda.so")], check=True)
    return out_dir


def build_corpus_program(program, out: Path, compiler: str = corpus_build.DEFAULT_COMPILER,
                         cuda_root: Path | None = None):
    """corpus_build.build_program, with a link-only libcuda where `-lcuda` cannot resolve
    (the program's objects are compiled once first to learn which symbols it needs)."""
    cuda_root = cuda_root or corpus_build.find_cuda_root()
    link_extra = []
    if "-lcuda" in program.link_flags and not libcuda_linkable(cuda_root):
        objects = []
        for cmd, obj in corpus_build.compile_commands(program, out / "probe", cuda_root=cuda_root):
            obj.parent.mkdir(parents=True, exist_ok=True)
            subprocess.run(cmd, check=True, capture_output=True)
            objects.append(obj)
        link_extra = [f"-L{make_link_only_libcuda(objects, out / 'libcuda')}"]
    return corpus_build.build_program(
        program.directory, out, compiler=compiler, extra_link_flags=link_extra, cuda_root=cuda_root
    )


def build_nvcc_corpus_program(program, out: Path, cuda_root: Path | None = None,
                              cudart: str = "static"):
    """corpus_build.build_nvcc_program, with a link-only libcuda where `-lcuda` cannot
    resolve (nvcc compiles the objects once first to learn which symbols they use)."""
    cuda_root = cuda_root or corpus_build.find_cuda_root()
    link_extra = []
    if "-lcuda" in program.link_flags and not libcuda_linkable(cuda_root):
        compiles, _ = corpus_build.nvcc_commands(program, out / "probe", cuda_root, cudart)
        objects = []
        for cmd, obj in compiles:
            obj.parent.mkdir(parents=True, exist_ok=True)
            subprocess.run(cmd, check=True, capture_output=True)
            objects.append(obj)
        link_extra = [f"-L{make_link_only_libcuda(objects, out / 'libcuda')}"]
    return corpus_build.build_nvcc_program(
        program.directory, out, cuda_root=cuda_root, cudart=cudart, extra_link_flags=link_extra
    )
