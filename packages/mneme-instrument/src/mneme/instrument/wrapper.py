"""`mneme-clang` / `mneme-clang++`: drop-in clang-22 that makes CUDA/HIP objects recordable.

What a compile of a CUDA or HIP source to an object (``-c``) does:

1. runs clang-22 with the user's arguments plus ``-fpass-plugin=<mneme plugin>`` (and, for
   CUDA, ``--cuda-path`` and the include folders a minimal toolkit needs), with
   ``MNEME_INSTRUMENT_OUT`` naming a private temporary folder: in every device
   compilation the pass writes one record (kernel IR + metadata) there;
2. appends the records of each translation unit to its object as the non-allocated ELF
   section ``.mneme.kernels`` (``llvm-objcopy --add-section``), which the linker
   concatenates into the executable.

Everything else (host-only C++, preprocessing, ``-S``, device-only output, links) runs
clang-22 unchanged, except an ``-fgpu-rdc`` link, where kernels that call device code of
other translation units are resolved (see ``rdc.py``), and a one-step compile-and-link
of GPU sources, which is split into compiles (as above) and a link.

``mneme-clang++ --mneme-launcher <compiler> <args...>`` is the same with an explicit
compiler (CMake's ``<LANG>_COMPILER_LAUNCHER``, used by ``add_mneme``).

Stdlib only, imported at every compile: keep it light.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from . import section_format as fmt
from . import toolchain
from .errors import is_user_error
from .object_records import bind_fatbinary, embed

SECTION_NAME = fmt.SECTION_NAME

GPU_EXTENSIONS = {".cu": "cuda", ".hip": "hip"}
SOURCE_EXTENSIONS = {
    ".c",
    ".cc",
    ".cp",
    ".cpp",
    ".cxx",
    ".c++",
    ".C",
    ".cu",
    ".hip",
    ".m",
    ".mm",
    ".i",
    ".ii",
    ".s",
    ".S",
    ".sx",
}
# clang options whose value is the next argument
SEPARATE_VALUE = {
    "-o",
    "-I",
    "-D",
    "-U",
    "-include",
    "-imacros",
    "-isystem",
    "-idirafter",
    "-iquote",
    "-iprefix",
    "-iwithprefix",
    "-iwithprefixbefore",
    "-isysroot",
    "-x",
    "-Xclang",
    "-Xlinker",
    "-Xpreprocessor",
    "-Xassembler",
    "-mllvm",
    "-Xarch_device",
    "-Xarch_host",
    "-Xcuda-ptxas",
    "-Xcuda-fatbinary",
    "-Xoffload-linker",
    "-MF",
    "-MT",
    "-MQ",
    "-L",
    "-T",
    "-z",
    "-u",
    "-e",
    "-target",
    "-arch",
    "--sysroot",
    "-Xopenmp-target",
    "-install_name",
    "-dependency-file",
    "-working-directory",
    "--serialize-diagnostics",
    "-ivfsoverlay",
    "-F",
    "-l",
    "-Xanalyzer",
    "--gcc-toolchain",
    "-aux-info",
    "-B",
}
# any of these names the GPU architecture(s) of a CUDA compile
ARCH_OPTIONS = {"--cuda-gpu-arch", "--offload-arch", "--no-cuda-gpu-arch", "--no-offload-arch"}
NO_OBJECT_MODES = {"-S", "-E", "-fsyntax-only", "-M", "-MM", "--precompile", "-###"}
EXIT_ERROR = 2


class Invocation:
    """What a clang command line does, as far as the wrapper cares."""

    def __init__(self, args: list[str]) -> None:
        self.args = args
        self.compile_only = False  # -c
        self.no_object = False  # -S / -E / -fsyntax-only / ...
        self.output: str | None = None
        # (index in args, path, language: "cuda" / "hip" / "source" / "object")
        self.inputs: list[tuple[int, str, str]] = []
        self.x_indices: list[int] = []  # indices of "-x" options
        self.has: set[str] = set()
        self.rdc = False
        self.lto = False  # host -flto: objects become LLVM bitcode

    @property
    def gpu_inputs(self) -> list[tuple[int, str, str]]:
        return [i for i in self.inputs if i[2] in ("cuda", "hip")]


def parse_args(args: list[str]) -> Invocation:
    inv = Invocation(list(args))
    lang: str | None = None
    i = 0
    while i < len(args):
        a = args[i]
        if a in SEPARATE_VALUE and i + 1 < len(args):
            value = args[i + 1]
            if a == "-o":
                inv.output = value
            elif a == "-x":
                lang = None if value == "none" else value
                inv.x_indices.append(i)
            elif a in ("-Xclang", "-mllvm", "-Xarch_device", "-Xarch_host"):
                inv.has.add(value)
            i += 2
            continue
        if a.startswith("-"):
            if a == "-c":
                inv.compile_only = True
            elif a in NO_OBJECT_MODES:
                inv.no_object = True
            elif a.startswith("-o") and len(a) > 2:
                inv.output = a[2:]
            elif a.startswith("-x") and len(a) > 2:
                lang = None if a[2:] == "none" else a[2:]
                inv.x_indices.append(i)
            elif a == "-flto" or a.startswith("-flto="):
                inv.lto = True
            elif a == "-fno-lto":
                inv.lto = False
            elif a == "-fgpu-rdc":
                inv.rdc = True
            elif a == "-fno-gpu-rdc":
                inv.rdc = False
            inv.has.add(a.split("=", 1)[0] if a.startswith("--") else a)
            i += 1
            continue
        suffix = Path(a).suffix
        if lang is not None:
            kind = lang
        elif suffix in GPU_EXTENSIONS:
            kind = GPU_EXTENSIONS[suffix]
        elif suffix in SOURCE_EXTENSIONS:
            kind = "source"
        else:
            kind = "object"
        inv.inputs.append((i, a, kind))
        i += 1
    return inv


def _fail(prog: str, message: str) -> int:
    print(f"{prog}: error: {message}", file=sys.stderr)
    return EXIT_ERROR


def _default_object(source: str) -> str:
    return Path(source).with_suffix(".o").name


def _records_for(records_dir: str, source: str | None) -> list[bytes]:
    """The records the pass wrote for `source` (one per GPU architecture; None: all).

    The pass names each file <FNV-1a 64 of the module's source file name>-<arch>.mneme,
    and the source file name is the path exactly as clang was given it.
    """
    prefix = "" if source is None else f"{fmt.fnv1a64(os.fsencode(source)):016x}-"
    blobs = []
    for name in sorted(os.listdir(records_dir)):
        if name.startswith(prefix) and name.endswith(fmt.RECORD_SUFFIX):
            with open(os.path.join(records_dir, name), "rb") as f:
                blobs.append(f.read())
    return blobs


def _cuda_extra(inv: Invocation) -> list[str]:
    root = None
    for a in inv.args:
        if a.startswith("--cuda-path="):
            root = Path(a.split("=", 1)[1])
    extra = []
    if root is None:
        root = toolchain.find_cuda()
        extra.append(f"--cuda-path={root}")
    extra += [f for f in toolchain.cuda_compile_flags(root) if not f.startswith("--cuda-path=")]
    if not (ARCH_OPTIONS & inv.has):
        # like nvcc: a GPU architecture without being told (clang's sm_52 fails with CUDA 13)
        extra.append(f"--cuda-gpu-arch={toolchain.default_cuda_arch()[0]}")
    if "-Wunknown-cuda-version" not in inv.has:
        extra.append("-Wno-unknown-cuda-version")
    return extra


def _links_cudart(args: list[str]) -> bool:
    """Whether the command already names a CUDA runtime (or opts out of default libraries)."""
    for j, a in enumerate(args):
        if a.startswith("-lcudart") or "libcudart" in Path(a).name:
            return True
        if a == "-l" and j + 1 < len(args) and args[j + 1].startswith("cudart"):
            return True
        if a in ("-nostdlib", "-nodefaultlibs", "-r"):
            return True
    return False


def _has_cuda_code(inv: Invocation) -> bool:
    """Whether a link's object inputs hold CUDA device code (clang's or nvcc's fatbinary)."""
    from .errors import SectionError
    from .section import read_elf_section

    for _, path, kind in inv.inputs:
        if kind != "object" or Path(path).suffix not in (".o", ".obj", ".lo"):
            continue
        if not os.path.isfile(path):
            continue
        try:
            if read_elf_section(path, ".nv_fatbin") is not None:
                return True
            if read_elf_section(path, "__nv_relfatbin") is not None:
                return True
        except (SectionError, OSError):
            continue
    return False


def cudart_link_flags(inv: Invocation, cuda_inputs: bool = False) -> list[str]:
    """What a link step needs added to run CUDA code: the shared CUDA runtime (as nvcc
    links it, but shared: `mneme record` intercepts libcudart.so), unless the command
    names a runtime already or links nothing of CUDA."""
    if inv.compile_only or inv.no_object or _links_cudart(inv.args):
        return []
    if not (cuda_inputs or _has_cuda_code(inv)):
        return []
    root = None
    for a in inv.args:
        if a.startswith("--cuda-path="):
            root = Path(a.split("=", 1)[1])
    return toolchain.cuda_link_flags(root or toolchain.find_cuda())


def compile_gpu(compiler: list[str], inv: Invocation, llvm: toolchain.Llvm) -> int:
    """Compile with the pass, then embed each TU's records in its object."""
    languages = {lang for _, _, lang in inv.gpu_inputs}
    extra = [f"-fpass-plugin={toolchain.plugin_path()}"]
    if "cuda" in languages:
        extra += _cuda_extra(inv)
    import tempfile

    with tempfile.TemporaryDirectory(prefix="mneme-cc-") as work:
        records_dir = os.path.join(work, "records")
        os.mkdir(records_dir)
        env = dict(os.environ)
        env[fmt.ENV_OUT] = records_dir
        env[fmt.ENV_STAGE] = "compile"
        env[fmt.ENV_RDC] = "1" if inv.rdc else "0"
        proc = subprocess.run(compiler + inv.args + extra, env=env)
        if proc.returncode != 0:
            return proc.returncode
        gpu_inputs = inv.gpu_inputs
        for _, source, _ in gpu_inputs:
            obj = inv.output if (inv.output and len(inv.inputs) == 1) else _default_object(source)
            blobs = _records_for(records_dir, source)
            if not blobs and len(gpu_inputs) == 1:
                # the device compile saw another file name (-save-temps preprocesses first)
                blobs = _records_for(records_dir, None)
            if not blobs or not os.path.isfile(obj):
                continue  # no kernels in this TU (or -o /dev/null): nothing to embed
            embed(llvm, obj, bind_fatbinary(obj, blobs), work)
    return 0


def _drop_x(args: list[str], inv: Invocation) -> list[str]:
    drop = set()
    for i in inv.x_indices:
        drop.add(i)
        if args[i] == "-x":
            drop.add(i + 1)
    return [a for j, a in enumerate(args) if j not in drop]


def compile_and_link(compiler: list[str], inv: Invocation, llvm: toolchain.Llvm) -> int:
    """`mneme-clang++ a.cu b.o -o app`: compile each GPU source with the pass, then link."""
    import tempfile

    with tempfile.TemporaryDirectory(prefix="mneme-cl-") as tmp:
        replaced: dict[int, str] = {}
        input_indices = {i for i, _, _ in inv.inputs}
        output_index = None
        for j, a in enumerate(inv.args):
            if a == "-o":
                output_index = j
        for n, (index, source, _lang) in enumerate(inv.gpu_inputs):
            obj = str(Path(tmp) / f"{n}-{Path(source).stem}.o")
            args = [
                a
                for j, a in enumerate(inv.args)
                if (j not in input_indices or j == index)
                and j != output_index
                and (output_index is None or j != output_index + 1)
                and not (a.startswith("-o") and len(a) > 2)
            ]
            # link-only arguments (-l, -L, -Wl) are unused here; the link step gets them
            sub = parse_args(args + ["-Wno-unused-command-line-argument", "-c", "-o", obj])
            rc = compile_gpu(compiler, sub, llvm)
            if rc != 0:
                return rc
            replaced[index] = obj
        link_args = [replaced.get(j, a) for j, a in enumerate(inv.args)]
        link_inv = parse_args(link_args)
        link_args = _drop_x(link_args, link_inv) if inv.x_indices else link_args
        cuda = any(lang == "cuda" for _, _, lang in inv.gpu_inputs)
        return link(compiler, parse_args(link_args), llvm, cuda_inputs=cuda)


STATIC_CUDART_WARNING = (
    "warning: linking the static CUDA runtime (cudart_static): `mneme record` intercepts "
    "libcudart.so and cannot record this executable; link -lcudart instead "
    "(CMake: -DCMAKE_CUDA_RUNTIME_LIBRARY=Shared, or add_mneme(), which sets it)"
)


def link(
    compiler: list[str], inv: Invocation, llvm: toolchain.Llvm, cuda_inputs: bool = False
) -> int:
    if any(a == "-lcudart_static" or a.endswith("libcudart_static.a") for a in inv.args):
        print(f"mneme-clang++: {STATIC_CUDART_WARNING}", file=sys.stderr)
    runtime = cudart_link_flags(inv, cuda_inputs)
    if runtime:
        inv = parse_args(inv.args + runtime)
    if inv.rdc:
        from . import rdc

        return rdc.link_with_resolution(compiler, inv, llvm)
    return subprocess.run(compiler + inv.args).returncode


def check_flags(inv: Invocation) -> str | None:
    """One-line reason why this combination cannot produce a recordable result."""
    gpu = bool(inv.gpu_inputs)
    if gpu and "--cuda-host-only" in inv.has and not inv.no_object:
        return (
            "--cuda-host-only compiles no device code, so there is no kernel IR to embed; "
            "drop it (mneme-clang++ compiles host and device together)"
        )
    if gpu and ("--offload-host-only" in inv.has) and not inv.no_object:
        return "--offload-host-only compiles no device code, so there is no kernel IR to embed; drop it"
    if (
        gpu
        and "-disable-llvm-passes" in inv.has
        and not inv.no_object
        and "-emit-llvm" not in inv.has
    ):
        return (
            "-Xclang -disable-llvm-passes also disables the mneme pass, so no kernel IR would be "
            "embedded; drop it (mneme keeps unoptimised kernel IR anyway)"
        )
    if gpu and inv.lto and not inv.no_object:
        return (
            "-flto makes host objects LLVM bitcode, which cannot carry the kernel section; "
            "drop -flto for CUDA/HIP sources (-foffload-lto, device-side LTO, is fine)"
        )
    if "-emit-llvm" in inv.has and not inv.compile_only and not inv.no_object:
        return "-emit-llvm cannot be combined with linking an executable; add -c or -S, or drop -emit-llvm"
    return None


def expand_response_files(args: list[str], depth: int = 0) -> list[str]:
    """Inline `@file` arguments (as clang reads them) so the wrapper sees every input."""
    out: list[str] = []
    for a in args:
        if a.startswith("@") and len(a) > 1 and depth < 8 and os.path.isfile(a[1:]):
            import shlex

            with open(a[1:]) as f:
                out += expand_response_files(shlex.split(f.read()), depth + 1)
        else:
            out.append(a)
    return out


def run(argv: list[str], cxx: bool) -> int:
    prog = "mneme-clang++" if cxx else "mneme-clang"
    args = list(argv)
    compiler: list[str] | None = None
    if args and args[0] == "--mneme-launcher":
        if len(args) < 2:
            return _fail(prog, "--mneme-launcher needs the compiler command after it")
        compiler = [args[1]]
        args = args[2:]
        name = Path(compiler[0]).name
        if name.startswith("mneme-clang"):  # the project already compiles with the wrapper
            os.execvp(compiler[0], compiler + args)
        cxx = "++" in name or name.endswith("c++")
    try:
        llvm = toolchain.find_llvm()
        if compiler is None:
            compiler = [str(llvm.clangxx if cxx else llvm.clang)]
        args = expand_response_files(args)
        inv = parse_args(args)
        if not args or "--version" in inv.has or "-v" in inv.has and not inv.inputs:
            return subprocess.run(compiler + args).returncode
        problem = check_flags(inv)
        if problem:
            return _fail(prog, problem)
        if not inv.gpu_inputs:
            if not inv.compile_only and not inv.no_object and inv.inputs:
                return link(compiler, inv, llvm)
            return subprocess.run(compiler + args).returncode
        if (
            inv.no_object
            or "--cuda-device-only" in inv.has
            or "--offload-device-only" in inv.has
            or "-emit-llvm" in inv.has  # -c -emit-llvm: host bitcode, no object to carry a section
        ):
            # no host object to carry the section; the same CUDA set-up as an instrumented compile
            cuda = any(lang == "cuda" for _, _, lang in inv.gpu_inputs)
            return subprocess.run(compiler + args + (_cuda_extra(inv) if cuda else [])).returncode
        if inv.compile_only:
            return compile_gpu(compiler, inv, llvm)
        return compile_and_link(compiler, inv, llvm)
    except FileNotFoundError as exc:
        return _fail(prog, f"{exc.filename}: not found")
    except KeyboardInterrupt:
        return 130
    except Exception as exc:
        if is_user_error(exc):  # ToolchainError, SectionError, ...
            return _fail(prog, str(exc))
        raise


def main_cxx() -> None:
    sys.exit(run(sys.argv[1:], cxx=True))


def main_c() -> None:
    sys.exit(run(sys.argv[1:], cxx=False))


def which_wrapper(cxx: bool = True) -> str:
    """Absolute path of the installed wrapper script (for `mneme config cc/cxx`)."""
    name = "mneme-clang++" if cxx else "mneme-clang"
    here = Path(sys.executable).parent / name
    if here.exists():
        return str(here)
    import shutil

    found = shutil.which(name)
    return found or name
