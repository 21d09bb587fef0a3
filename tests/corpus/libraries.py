"""Build the vendor-library programs of the corpus (cuda/libraries/<program>/<program>.cu)
with nvcc (standard library only; build.py gives the toolkit lookups).

Usable as a module (load it by path, like build.py)::

    build_library_program("cublas_gemm", out_dir, cudart="static")   # -> the executable

and as a CLI::

    python tests/corpus/libraries.py [--cudart static|shared] [--out DIR] [-v] [PROGRAM ...]

The programs print ``CHECKSUM <name> <value>`` lines and ``RESULT ok`` (not the MNEME-CHECK
protocol: the launches they care about happen inside the libraries). cuBLAS is found in
CUBLAS_ROOT, the CUDA root, or the ``nvidia-cublas`` wheel (``nvidia/cu13``) of the running
Python; where none has it, find_cublas() is None and the tests skip.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import sys
from collections.abc import Sequence
from pathlib import Path

_HERE = Path(__file__).resolve().parent
LIBRARIES_DIR = _HERE / "cuda" / "libraries"


def _load_build():
    spec = importlib.util.spec_from_file_location("corpus_build_for_libraries", _HERE / "build.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # registered before it runs: dataclasses look it up
    spec.loader.exec_module(module)
    return module


corpus_build = sys.modules.get("corpus_build_for_libraries") or _load_build()
CorpusError = corpus_build.CorpusError

#: the libraries each program links, in link order (libcublas needs libcublasLt after it)
LINKS = {"cublas_gemm": ("cublasLt", "cublas")}


def library_programs() -> list[str]:
    """Names of the programs under cuda/libraries/, sorted."""
    return sorted(d.name for d in LIBRARIES_DIR.iterdir() if (d / f"{d.name}.cu").is_file())


def _lib_dir(root: Path, library: str) -> Path | None:
    for name in ("lib64", "lib"):
        if list((root / name).glob(f"lib{library}.so*")):
            return root / name
    return None


def find_cublas(cuda_root: Path | None = None) -> Path | None:
    """A folder with include/cublasLt.h and lib64/ or lib/ libcublasLt.so*: CUBLAS_ROOT, the
    CUDA root, or the nvidia-cublas wheel's nvidia/cu13 (if that is installed)."""
    candidates = [os.environ.get("CUBLAS_ROOT")]
    try:
        candidates.append(str(cuda_root or corpus_build.find_cuda_root()))
    except CorpusError:
        pass
    try:
        import nvidia  # namespace package of NVIDIA's wheels

        candidates += [str(Path(p) / "cu13") for p in nvidia.__path__]
    except ImportError:
        pass
    for candidate in filter(None, candidates):
        root = Path(candidate)
        if (root / "include" / "cublasLt.h").is_file() and _lib_dir(root, "cublasLt"):
            return root
    return None


def library_link_flags(libraries: Sequence[str], root: Path) -> list[str]:
    """-L/-l flags for ``libraries`` in ``root`` (a wheel ships only lib<name>.so.<major>,
    so that file is named), with an rpath so the executable finds them."""
    lib_dir = _lib_dir(root, libraries[0])
    flags = [f"-L{lib_dir}", f"-Xlinker=-rpath,{lib_dir}"]
    for library in libraries:
        if (lib_dir / f"lib{library}.so").exists():
            flags.append(f"-l{library}")
        else:
            versioned = sorted(lib_dir.glob(f"lib{library}.so.*"), key=lambda p: len(p.name))
            flags.append(f"-Xlinker=-l:{versioned[0].name}")
    return flags


def library_command(name: str, out_dir: Path, cuda_root: Path | None = None,
                    cudart: str = "static") -> list[str]:
    """The nvcc command line that builds ``name`` to out_dir/<name>."""
    root = cuda_root or corpus_build.find_cuda_root()
    cublas = find_cublas(root)
    if cublas is None:
        raise CorpusError(f"{name}: needs cuBLAS (include/cublasLt.h, libcublasLt.so); set CUBLAS_ROOT")
    include = [] if cublas == root else [f"-I{cublas / 'include'}"]
    source = LIBRARIES_DIR / name / f"{name}.cu"
    return [str(corpus_build.find_nvcc(root)), f"-arch={corpus_build.CUDA_ARCH}", "-O2", *include,
            str(source), "-o", str(out_dir / name), f"-cudart={cudart}",
            *library_link_flags(LINKS[name], cublas)]


def build_library_program(name: str, out_dir: str | os.PathLike, cuda_root: str | os.PathLike | None = None,
                          cudart: str = "static", verbose: bool = False) -> Path:
    """Build cuda/libraries/<name> into out_dir/<name> with nvcc; returns the executable."""
    if name not in LINKS:
        raise CorpusError(f"{name}: not a library program ({', '.join(sorted(LINKS))})")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    corpus_build._run(library_command(name, out, Path(cuda_root) if cuda_root else None, cudart), verbose)
    return out / name


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("programs", nargs="*", help="program names (default: all)")
    parser.add_argument("--out", default="build/corpus-libraries", help="output folder")
    parser.add_argument("--cudart", choices=("static", "shared"), default="static")
    parser.add_argument("-v", "--verbose", action="store_true")
    args = parser.parse_args(argv)
    try:
        for name in args.programs or library_programs():
            exe = build_library_program(name, Path(args.out) / name, cudart=args.cudart,
                                        verbose=args.verbose)
            print(exe)
    except CorpusError as exc:
        print(f"libraries.py: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
