"""Build the mneme instrumentation corpus (stdlib only).

Usable as a module (load it by path, e.g. with importlib, under a name of your choice)::

    build_program(program_dir, out_dir, compiler="clang++-22", extra_flags=[...])
    device_kernels(program_dir, compiler="clang++-22")

and as a CLI::

    python tests/corpus/build.py [--compiler CMD] [--out DIR] [--list-kernels] [PROGRAM_DIR ...]

The compiler is only ever assumed to behave like clang++ (the mneme wrapper is passed in
its place later). See tests/corpus/README.md for the exact command lines this produces.
"""

import argparse
import json
import os
import re
import shlex
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

CORPUS_DIR = Path(__file__).resolve().parent
CUDA_COMMON_DIR = CORPUS_DIR / "cuda" / "common"
# Holds an empty curand_mtgp32_kernel.h: clang's CUDA wrapper includes it unconditionally,
# and minimal CUDA installs ship no curand.
CUDA_COMPAT_DIR = CUDA_COMMON_DIR / "compat"
HIP_INCLUDE_DIR = CORPUS_DIR / "hip"

DEFAULT_COMPILER = "clang++-22"
DEFAULT_CXXFILT = "llvm-cxxfilt-22"
DEFAULT_LLVM_DIS = "llvm-dis-22"
# Device bitcode of a TU as the mneme compiler wrapper records it (unoptimized): the kernel
# lists are read from it, and the LLVM binding's tests compile it (one compile for both).
DEVICE_IR_FLAGS = ["--cuda-device-only", "-emit-llvm", "-c", "-Xclang", "-disable-llvm-passes"]
CUDA_ARCH = "sm_90"
HIP_ARCH = "gfx90a"

# Program flags that change how objects must be linked, so the link line repeats them.
LINK_RELEVANT_FLAGS = ("-fgpu-rdc", "--offload-new-driver")

MANIFEST_KEYS = {
    "sources": list,
    "flags": list,
    "link_flags": list,
    "args": list,
    "kernels": list,
    "expect_exit": int,
    "features": list,
}


class CorpusError(Exception):
    """A corpus program could not be loaded or built; the message says why."""


@dataclass(frozen=True)
class Program:
    name: str
    directory: Path
    language: str  # "cuda" or "hip"
    sources: tuple[str, ...]
    flags: tuple[str, ...]
    link_flags: tuple[str, ...]
    args: tuple[str, ...]
    kernels: tuple[str, ...]
    expect_exit: int
    features: tuple[str, ...]
    nvcc: dict = field(default_factory=dict)
    # nvcc programs: kernels a program compiles at run time (NVRTC), not in its fatbinary
    runtime_kernels: tuple[str, ...] = ()
    # nvcc programs: what the build needs beyond nvcc ("nvrtc")
    requires: tuple[str, ...] = ()

    @property
    def is_rdc(self) -> bool:
        return "-fgpu-rdc" in self.flags

    @property
    def compiler(self) -> str:
        """"nvcc" for the nvcc-only programs under cuda/nvcc/, else "clang"."""
        return "nvcc" if self.directory.parent.name == "nvcc" else "clang"


@dataclass
class BuildResult:
    program: Program
    objects: list[Path]
    executable: Path | None  # None for HIP programs (compile-only)
    commands: list[list[str]]


def load_program(program_dir: str | os.PathLike) -> Program:
    directory = Path(program_dir).resolve()
    manifest_path = directory / "program.json"
    if not manifest_path.is_file():
        raise CorpusError(f"{directory}: no program.json here; pass a corpus program directory")
    try:
        manifest = json.loads(manifest_path.read_text())
    except json.JSONDecodeError as exc:
        raise CorpusError(f"{manifest_path}: invalid JSON ({exc}); fix the manifest") from None
    for key, kind in MANIFEST_KEYS.items():
        if not isinstance(manifest.get(key), kind):
            raise CorpusError(f"{manifest_path}: key {key!r} must be a {kind.__name__}")
    for source in manifest["sources"]:
        if not (directory / source).is_file():
            raise CorpusError(f"{manifest_path}: source {source!r} does not exist")
    language = directory.parent.name
    if language == "nvcc" and directory.parent.parent.name == "cuda":
        language = "cuda"  # nvcc-only programs: corpus/cuda/nvcc/<program>
    if language not in ("cuda", "hip"):
        raise CorpusError(f"{directory}: programs live under corpus/cuda/ or corpus/hip/")
    return Program(
        name=directory.name,
        directory=directory,
        language=language,
        sources=tuple(manifest["sources"]),
        flags=tuple(manifest["flags"]),
        link_flags=tuple(manifest["link_flags"]),
        args=tuple(str(a) for a in manifest["args"]),
        kernels=tuple(manifest["kernels"]),
        expect_exit=manifest["expect_exit"],
        features=tuple(manifest["features"]),
        nvcc=dict(manifest.get("nvcc", {})),
        runtime_kernels=tuple(manifest.get("runtime_kernels", [])),
        requires=tuple(manifest.get("requires", [])),
    )


def discover_programs(language: str | None = None, root: Path = CORPUS_DIR) -> list[Program]:
    """All programs of the corpus (optionally of one language), sorted by name."""
    languages = [language] if language else ["cuda", "hip"]
    programs = []
    for lang in languages:
        for manifest in sorted((root / lang).glob("*/program.json")):
            programs.append(load_program(manifest.parent))
    return programs


NVCC_DIR = CORPUS_DIR / "cuda" / "nvcc"


def discover_nvcc_programs(root: Path = NVCC_DIR) -> list[Program]:
    """The nvcc-only programs (corpus/cuda/nvcc/<program>), sorted by name. They use what
    clang cannot compile (``__nv_atomic_*``) or nvcc's build model (``-rdc=true`` device
    link, NVRTC), so discover_programs("cuda") leaves them out."""
    return [load_program(m.parent) for m in sorted(root.glob("*/program.json"))]


def find_nvcc(cuda_root: Path | None = None) -> Path:
    root = cuda_root or find_cuda_root()
    if (root / "bin" / "nvcc").is_file():
        return root / "bin" / "nvcc"
    raise CorpusError(f"{root}: no bin/nvcc; the nvcc programs need the CUDA toolkit's nvcc")


def find_nvrtc(cuda_root: Path | None = None) -> Path | None:
    """A folder with include/nvrtc.h and lib/ or lib64/ libnvrtc.so: NVRTC_ROOT, the CUDA
    root, or the nvidia-cuda-nvrtc wheel's nvidia/cu13 (if that is installed)."""
    candidates = [os.environ.get("NVRTC_ROOT"), str(cuda_root or find_cuda_root())]
    try:
        import nvidia  # namespace package of NVIDIA's wheels

        candidates += [str(Path(p) / "cu13") for p in nvidia.__path__]
    except ImportError:
        pass
    for candidate in candidates:
        if not candidate:
            continue
        root = Path(candidate)
        libs = [d for d in ("lib64", "lib") if list((root / d).glob("libnvrtc.so*"))]
        if (root / "include" / "nvrtc.h").is_file() and libs:
            return root
    return None


def nvcc_commands(
    program: Program,
    out_dir: Path,
    cuda_root: Path | None = None,
    cudart: str = "static",
) -> tuple[list[tuple[list[str], Path]], list[str]]:
    """(compile command, object) per TU and the link command of an nvcc program.

    ``cudart``: "static" (nvcc's default, what users get) or "shared"."""
    root = cuda_root or find_cuda_root()
    nvcc = str(find_nvcc(root))
    flags = [f"-arch={CUDA_ARCH}", "-O2", f"-I{CUDA_COMMON_DIR}", *program.flags]
    link_flags = list(program.link_flags)
    if "nvrtc" in program.requires:
        nvrtc = find_nvrtc(root)
        if nvrtc is None:
            raise CorpusError(
                f"{program.name}: needs NVRTC (include/nvrtc.h, libnvrtc.so); set NVRTC_ROOT"
            )
        lib = next(d for d in ("lib64", "lib") if list((nvrtc / d).glob("libnvrtc.so*")))
        flags.append(f"-I{nvrtc / 'include'}")
        link_flags = [f"-L{nvrtc / lib}", f"-Xlinker=-rpath,{nvrtc / lib}", *link_flags]
        if not (nvrtc / lib / "libnvrtc.so").exists():  # the wheel ships only .so.13
            link_flags = [f"-Xlinker=-l:{sorted((nvrtc / lib).glob('libnvrtc.so.*'))[0].name}"
                          if f == "-lnvrtc" else f for f in link_flags]
    compiles = []
    for source in program.sources:
        obj = out_dir / (Path(source).stem + ".o")
        compiles.append(([nvcc, *flags, "-c", str(program.directory / source), "-o", str(obj)], obj))
    link = [nvcc, f"-arch={CUDA_ARCH}", *[f for f in program.flags if f.startswith("-rdc")]]
    link += [str(obj) for _, obj in compiles] + ["-o", str(out_dir / program.name)]
    link += [f"-cudart={cudart}", *link_flags]
    if "-lcuda" in link_flags and (cuda_library_dir(root) / "stubs" / "libcuda.so").exists():
        link.append(f"-L{cuda_library_dir(root) / 'stubs'}")
    return compiles, link


def build_nvcc_program(
    program_dir: str | os.PathLike,
    out_dir: str | os.PathLike,
    cuda_root: str | os.PathLike | None = None,
    cudart: str = "static",
    extra_link_flags: Sequence[str] = (),
    verbose: bool = False,
) -> BuildResult:
    """Build an nvcc program (corpus/cuda/nvcc/<program>) to out_dir/<name> with nvcc."""
    program = load_program(program_dir)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    compiles, link = nvcc_commands(program, out, Path(cuda_root) if cuda_root else None, cudart)
    executed = []
    for cmd, _ in compiles:
        _run(cmd, verbose)
        executed.append(cmd)
    link += list(extra_link_flags)
    _run(link, verbose)
    executed.append(link)
    return BuildResult(program, [obj for _, obj in compiles], out / program.name, executed)


def find_cuda_root() -> Path:
    for candidate in (os.environ.get("CUDA_PATH"), os.environ.get("CUDA_HOME"), "/usr/local/cuda"):
        if candidate and (Path(candidate) / "include" / "cuda_runtime.h").is_file():
            return Path(candidate)
    raise CorpusError(
        "no CUDA toolkit found: set CUDA_PATH to the CUDA root (the folder with include/cuda_runtime.h)"
    )


def cuda_library_dir(cuda_root: Path) -> Path:
    for name in ("lib64", "lib"):
        if (cuda_root / name / "libcudart.so").exists():
            return cuda_root / name
    raise CorpusError(f"{cuda_root}: no lib64/libcudart.so; is this a complete CUDA toolkit?")


def cuda_compile_flags(cuda_root: Path) -> list[str]:
    """Flags every CUDA translation unit gets from clang++-22 (before the program's own)."""
    flags = [
        "-x",
        "cuda",
        f"--cuda-gpu-arch={CUDA_ARCH}",
        f"--cuda-path={cuda_root}",
        "-Wno-unknown-cuda-version",
        "-O2",
        f"-I{CUDA_COMMON_DIR}",
    ]
    cccl = cuda_root / "include" / "cccl"
    if (
        cccl.is_dir()
    ):  # CUDA 13 keeps cuda/std (needed by cooperative_groups) here; nvcc adds it itself
        flags.append(f"-I{cccl}")
    if not (cuda_root / "include" / "curand_mtgp32_kernel.h").exists():
        flags.append(f"-I{CUDA_COMPAT_DIR}")
    return flags


def hip_compile_flags() -> list[str]:
    return [
        "-x",
        "hip",
        f"--offload-arch={HIP_ARCH}",
        "-nogpulib",
        "-nogpuinc",
        "-O2",
        f"-I{HIP_INCLUDE_DIR}",
    ]


def cuda_link_flags(program: Program, cuda_root: Path) -> list[str]:
    libdir = cuda_library_dir(cuda_root)
    flags = [f for f in program.flags if f in LINK_RELEVANT_FLAGS]
    if program.is_rdc:
        flags.append(
            f"--cuda-path={cuda_root}"
        )  # the device link runs nvlink and fatbinary from here
    flags += [f"-L{libdir}", "-lcudart", f"-Wl,-rpath,{libdir}"]
    if "-lcuda" in program.link_flags and (libdir / "stubs" / "libcuda.so").exists():
        flags.append(
            f"-L{libdir / 'stubs'}"
        )  # the real libcuda.so.1 comes from the driver at run time
    return flags + list(program.link_flags)


def _compiler_argv(compiler: str | Sequence[str]) -> list[str]:
    return shlex.split(compiler) if isinstance(compiler, str) else list(compiler)


def _run(cmd: list[str], verbose: bool) -> None:
    if verbose:
        print(shlex.join(cmd), file=sys.stderr)
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise CorpusError(
            f"command failed (exit {proc.returncode}): {shlex.join(cmd)}\n{proc.stderr.strip()}"
        )


def compile_commands(
    program: Program,
    out_dir: Path,
    compiler: str | Sequence[str] = DEFAULT_COMPILER,
    extra_flags: Sequence[str] = (),
    cuda_root: Path | None = None,
) -> list[tuple[list[str], Path]]:
    """(command, object path) for each translation unit of the program."""
    base = _compiler_argv(compiler)
    lang_flags = (
        hip_compile_flags()
        if program.language == "hip"
        else cuda_compile_flags(cuda_root or find_cuda_root())
    )
    commands = []
    for source in program.sources:
        obj = out_dir / (Path(source).stem + ".o")
        cmd = (
            base
            + lang_flags
            + list(program.flags)
            + list(extra_flags)
            + ["-c", str(program.directory / source), "-o", str(obj)]
        )
        commands.append((cmd, obj))
    return commands


def build_program(
    program_dir: str | os.PathLike,
    out_dir: str | os.PathLike,
    compiler: str | Sequence[str] = DEFAULT_COMPILER,
    extra_flags: Sequence[str] = (),
    extra_link_flags: Sequence[str] = (),
    cuda_root: str | os.PathLike | None = None,
    verbose: bool = False,
) -> BuildResult:
    """Compile every TU to an object in out_dir; CUDA programs are then linked to out_dir/<name>."""
    program = load_program(program_dir)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    root = (
        Path(cuda_root) if cuda_root else (find_cuda_root() if program.language == "cuda" else None)
    )
    executed: list[list[str]] = []
    objects = []
    for cmd, obj in compile_commands(program, out, compiler, extra_flags, root):
        _run(cmd, verbose)
        executed.append(cmd)
        objects.append(obj)
    if program.language == "hip":
        return BuildResult(program, objects, None, executed)
    exe = out / program.name
    link = _compiler_argv(compiler) + [str(o) for o in objects] + ["-o", str(exe)]
    link += cuda_link_flags(program, root) + list(extra_link_flags)
    _run(link, verbose)
    executed.append(link)
    return BuildResult(program, objects, exe, executed)


_KERNEL_DEFINE = re.compile(
    r'^define\b[^@]*\b(?:ptx_kernel|amdgpu_kernel)\b[^@]*@("(?:[^"\\]|\\.)*"|[\w.$]+)\(', re.M
)


def kernels_in_ir(ir_text: str) -> list[str]:
    """Mangled names of the functions defined with a kernel calling convention."""
    return [m.group(1).strip('"') for m in _KERNEL_DEFINE.finditer(ir_text)]


def demangle(names: Sequence[str], cxxfilt: str = DEFAULT_CXXFILT) -> list[str]:
    if not names:
        return []
    proc = subprocess.run(
        [cxxfilt], input="\n".join(names) + "\n", capture_output=True, text=True, check=True
    )
    return proc.stdout.splitlines()


def device_ir_command(
    program: Program,
    source: str,
    output: str | os.PathLike,
    compiler: str | Sequence[str] = DEFAULT_COMPILER,
    cuda_root: Path | None = None,
) -> list[str]:
    """The compile of one TU's device bitcode (DEVICE_IR_FLAGS) to `output`."""
    lang_flags = (
        hip_compile_flags()
        if program.language == "hip"
        else cuda_compile_flags(cuda_root or find_cuda_root())
    )
    return (
        _compiler_argv(compiler)
        + lang_flags
        + list(program.flags)
        + DEVICE_IR_FLAGS
        + [str(program.directory / source), "-o", str(output)]
    )


def device_kernels(
    program_dir: str | os.PathLike,
    compiler: str | Sequence[str] = DEFAULT_COMPILER,
    cuda_root: str | os.PathLike | None = None,
    cxxfilt: str = DEFAULT_CXXFILT,
    ir_dir: str | os.PathLike | None = None,
    llvm_dis: str = DEFAULT_LLVM_DIS,
) -> list[str]:
    """Sorted demangled names of every kernel in the program's device IR (all TUs).

    The bitcode of each TU is left in ir_dir as <tu stem>.bc (default: a temporary folder)."""
    program = load_program(program_dir)
    root = Path(cuda_root) if cuda_root else None
    with tempfile.TemporaryDirectory() as scratch:
        out = Path(ir_dir or scratch)
        out.mkdir(parents=True, exist_ok=True)
        mangled: set[str] = set()
        for source in program.sources:
            bitcode = out / (Path(source).stem + ".bc")
            cmd = device_ir_command(program, source, bitcode, compiler, root)
            proc = subprocess.run(cmd, capture_output=True, text=True)
            if proc.returncode != 0:
                raise CorpusError(
                    f"device IR failed (exit {proc.returncode}): {shlex.join(cmd)}\n"
                    f"{proc.stderr.strip()}"
                )
            ir = subprocess.run(
                [llvm_dis, str(bitcode), "-o", "-"], capture_output=True, text=True, check=True
            )
            mangled.update(kernels_in_ir(ir.stdout))
    return sorted(demangle(sorted(mangled), cxxfilt))


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description="Build mneme corpus programs with a clang++-like compiler."
    )
    parser.add_argument(
        "programs", nargs="*", help="program directories (default: the whole corpus)"
    )
    parser.add_argument(
        "--compiler", default=DEFAULT_COMPILER, help="compiler command (default: %(default)s)"
    )
    parser.add_argument(
        "--out", default="build/corpus", help="output folder; each program gets a subfolder"
    )
    parser.add_argument(
        "--flag", action="append", default=[], help="extra compile flag (repeatable)"
    )
    parser.add_argument(
        "--list-kernels", action="store_true", help="print the device kernels instead of building"
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="print each command")
    parser.add_argument(
        "--nvcc", action="store_true",
        help="build the nvcc-only programs (corpus/cuda/nvcc/) with nvcc instead",
    )
    parser.add_argument(
        "--cudart", choices=("static", "shared"), default="static",
        help="with --nvcc: the CUDA runtime nvcc links (default: %(default)s, nvcc's own)",
    )
    args = parser.parse_args(argv)
    try:
        if args.nvcc:
            dirs = [Path(p) for p in args.programs] or [p.directory for p in discover_nvcc_programs()]
            for directory in dirs:
                program = load_program(directory)
                if "nvrtc" in program.requires and find_nvrtc() is None:
                    print(f"{program.name}: skipped (needs NVRTC; set NVRTC_ROOT)")
                    continue
                result = build_nvcc_program(directory, Path(args.out) / directory.name,
                                            cudart=args.cudart, verbose=args.verbose)
                print(f"{result.program.name}: {result.executable}")
            return 0
        dirs = [Path(p) for p in args.programs] or [p.directory for p in discover_programs()]
        for directory in dirs:
            if args.list_kernels:
                for kernel in device_kernels(directory, args.compiler):
                    print(f"{directory.name}: {kernel}")
                continue
            result = build_program(
                directory,
                Path(args.out) / directory.name,
                args.compiler,
                args.flag,
                verbose=args.verbose,
            )
            print(
                f"{result.program.name}: {result.executable or ', '.join(map(str, result.objects))}"
            )
    except CorpusError as exc:
        print(f"build.py: error: {exc}", file=sys.stderr)
        return 1
    except FileNotFoundError as exc:
        print(
            f"build.py: error: {exc.filename} not found; pass --compiler or install it",
            file=sys.stderr,
        )
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
