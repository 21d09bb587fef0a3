"""Shared helpers of the LLVM binding tests: compile test kernels with clang++-22 once per session."""

import shutil
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import early_builds
import pytest
from script_modules import load_script

KERNELS_DIR = Path(__file__).resolve().parent / "kernels"
MAX_JOBS = 2  # the machines have 2 cores shared with other work
CLANG = "clang++-22"
OPT = "opt-22"
LEVELS = ("O0", "O1", "O2", "O3", "Os", "Oz")

corpus_build = load_script("tests/corpus/build.py")

# Unoptimized device IR, as the mneme compiler wrapper records it.
DEVICE_IR_FLAGS = corpus_build.DEVICE_IR_FLAGS


def require_tools(*tools: str) -> None:
    missing = [t for t in tools if shutil.which(t) is None]
    if missing:
        pytest.skip(f"not installed: {', '.join(missing)}")


def cuda_device_ir_command(source: Path, output: Path, extra: list[str] = ()) -> list[str]:
    flags = corpus_build.cuda_compile_flags(corpus_build.find_cuda_root())
    return [CLANG, *flags, *extra, *DEVICE_IR_FLAGS, str(source), "-o", str(output)]


def hip_device_ir_command(source: Path, output: Path) -> list[str]:
    return [
        CLANG,
        *corpus_build.hip_compile_flags(),
        *DEVICE_IR_FLAGS,
        str(source),
        "-o",
        str(output),
    ]


def run_all(commands: list[list[str]]) -> None:
    def run(command):
        result = subprocess.run(command, capture_output=True, text=True)
        if result.returncode != 0:
            raise RuntimeError(f"{' '.join(command)} failed:\n{result.stderr}")

    with ThreadPoolExecutor(MAX_JOBS) as pool:
        list(pool.map(run, commands))


def build_test_kernels(out: Path) -> dict[str, Path]:
    """Bitcode of every tests/jit/kernels source; 'math_nolib' keeps __nv_* undefined."""
    require_tools(CLANG)
    outputs: dict[str, Path] = {}
    commands = []
    for source in sorted(KERNELS_DIR.glob("*.cu")):
        outputs[source.stem] = out / f"{source.stem}.bc"
        commands.append(cuda_device_ir_command(source, outputs[source.stem]))
    outputs["math_nolib"] = out / "math_nolib.bc"
    commands.append(
        cuda_device_ir_command(KERNELS_DIR / "math.cu", outputs["math_nolib"], ["-nocudalib"])
    )
    outputs["tiny_hip"] = out / "tiny_hip.bc"
    commands.append(hip_device_ir_command(KERNELS_DIR / "tiny.hip", outputs["tiny_hip"]))
    run_all(commands)
    return outputs


def build_corpus_ir(out: Path) -> dict[str, list[Path]]:
    """Device bitcode of every CUDA corpus translation unit, per program: the bitcode the
    corpus' kernel lists were read from where tests/early_builds.py made it, else compiled
    here with the same command."""
    require_tools(CLANG)
    made = early_builds.early("corpus_ir", early_builds.corpus_ir_meta())
    if made is not None:
        return {name: [Path(path) for path in paths] for name, paths in made.items()}
    outputs: dict[str, list[Path]] = {}
    commands = []
    cuda_root = corpus_build.find_cuda_root()
    for program in corpus_build.discover_programs("cuda"):
        for source in program.sources:
            target = out / program.name / (Path(source).stem + ".bc")
            target.parent.mkdir(parents=True, exist_ok=True)
            outputs.setdefault(program.name, []).append(target)
            commands.append(
                corpus_build.device_ir_command(program, source, target, CLANG, cuda_root)
            )
    run_all(commands)
    return outputs
