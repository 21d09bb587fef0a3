"""`mneme inspect`, `mneme config`, and one-line errors for bad input (wrappers and CLI)."""

import json
import os
import subprocess
from pathlib import Path

import pytest
from instrument_support import MNEME_CLANG, MNEME_CLANGXX, corpus_build, outcome, run_mneme
from mneme.instrument.section import (
    NotInstrumentedError,
    SectionError,
    encode_record,
    parse_section,
    read_kernels,
)

CUDA = ["-x", "cuda", "--cuda-gpu-arch=sm_90"]


def one_line_error(proc: subprocess.CompletedProcess, prefix: str) -> str:
    assert proc.returncode != 0
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith(prefix), lines[0]
    return lines[0]


def wrapper(*args, cwd=None, env=None, cxx=True):
    return subprocess.run(
        [MNEME_CLANGXX if cxx else MNEME_CLANG, *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        env=env,
    )


@pytest.fixture(scope="module")
def templates_exe(instrumented):
    return outcome(instrumented["templates"]).executable


def test_inspect_lists_kernels(templates_exe):
    proc = run_mneme("inspect", str(templates_exe), check=True)
    assert proc.stdout.startswith(f"{templates_exe}: 9 kernels")
    for k in read_kernels(templates_exe):
        assert k.demangled in proc.stdout and k.name in proc.stdout and k.static_hash in proc.stdout
    assert "params" in proc.stdout and "IR " in proc.stdout


def test_inspect_json(templates_exe):
    data = json.loads(run_mneme("inspect", str(templates_exe), "--json", check=True).stdout)
    kernels = read_kernels(templates_exe)
    assert [k["name"] for k in data["kernels"]] == [k.name for k in kernels]
    first = data["kernels"][0]
    assert {"name", "demangled", "static_hash", "params", "globals", "ir_size"} <= set(first)
    assert first["params"][0]["pointer"] is True and first["params"][0]["size"] == 8


def test_inspect_ir_by_any_name(templates_exe):
    kernel = next(k for k in read_kernels(templates_exe) if k.demangled.startswith("void box_sum"))
    for key in (kernel.name, kernel.demangled, kernel.static_hash):
        text = run_mneme("inspect", str(templates_exe), "--ir", key, check=True).stdout
        assert f"@{kernel.name}(" in text and "ptx_kernel" in text
        assert 'target triple = "nvptx64-nvidia-cuda"' in text
    data = json.loads(
        run_mneme("inspect", str(templates_exe), "--ir", kernel.name, "--json", check=True).stdout
    )
    assert data["static_hash"] == kernel.static_hash and "define" in data["ir"]


def test_inspect_ambiguous_and_unknown_kernel(templates_exe):
    one_line_error(
        run_mneme("inspect", str(templates_exe), "--ir", "fill"), "mneme: error: 'fill' matches 3"
    )
    one_line_error(run_mneme("inspect", str(templates_exe), "--ir", "nope"), "mneme: error:")


def test_inspect_not_instrumented(tmp_path, instrumented):
    program = corpus_build.load_program(corpus_build.CORPUS_DIR / "cuda" / "atomics")
    plain = corpus_build.build_program(program.directory, tmp_path / "plain")
    # plain clang++ embeds a fatbinary (SASS only): inspect lists its kernels, without IR
    listing = run_mneme("inspect", str(plain.executable), check=True).stdout
    assert "kernels in a CUDA fatbinary" in listing and "no mneme IR" in listing
    for kernel in program.kernels:
        assert f"\n{kernel}\n" in listing
    line = one_line_error(
        run_mneme("inspect", str(plain.executable), "--ir", "drain"), "mneme: error:"
    )
    assert "mneme-clang++" in line
    with pytest.raises(NotInstrumentedError):
        read_kernels(plain.executable)


@pytest.mark.parametrize("content", [None, b"not an elf file at all", b"\x7fELF\x02\x01"])
def test_inspect_bad_files(tmp_path, content):
    path = tmp_path / "thing"
    if content is not None:
        path.write_bytes(content)
    one_line_error(run_mneme("inspect", str(path)), "mneme: error:")
    one_line_error(run_mneme("inspect", str(tmp_path)), "mneme: error:")


def test_section_parser_validates_records():
    record = encode_record({"format": 1, "kernels": [], "stage": "compile"}, b"abc")
    assert len(record) % 8 == 0
    records = parse_section(b"\0" * 8 + record + record)  # padding and concatenation
    assert len(records) == 2 and records[0].data == b"abc"
    with pytest.raises(SectionError, match="checksum"):
        parse_section(record[:-8] + b"x" + record[-7:])
    with pytest.raises(SectionError, match="magic"):
        parse_section(b"garbage!" + record)
    with pytest.raises(SectionError, match="runs past"):
        parse_section(record[:48])
    future = bytearray(record)
    future[8] = 99
    with pytest.raises(SectionError, match="format 99"):
        parse_section(bytes(future))


def test_config_keys():
    values = {}
    for key in (
        "cc", "cxx", "prefix", "libdir", "includedir", "cmakedir", "cflags", "ldflags", "cuda-arch"
    ):
        proc = run_mneme("config", key, check=True)
        values[key] = proc.stdout.strip()
        assert values[key] and "\n" not in values[key]
    assert Path(values["cxx"]).name == "mneme-clang++" and os.access(values["cxx"], os.X_OK)
    assert Path(values["cc"]).name == "mneme-clang"
    assert (Path(values["libdir"]) / "libMnemeInstrument.so").is_file()
    assert (Path(values["cmakedir"]) / "mnemeConfig.cmake").is_file()
    assert (Path(values["includedir"]) / "compat" / "curand_mtgp32_kernel.h").is_file()
    assert "-fpass-plugin=" in values["cflags"] and "--cuda-path=" in values["cflags"]
    assert "-lcudart" in values["ldflags"]
    assert values["cuda-arch"].startswith("sm_")
    one_line_error(run_mneme("config", "nope"), "mneme: error: unknown key 'nope'")
    listing = run_mneme("config", check=True).stdout.splitlines()
    assert listing == [f"{key}: {value}" for key, value in values.items()]


def test_source_without_kernels_compiles_and_embeds_nothing(tmp_path):
    src = tmp_path / "nokernel.cu"
    src.write_text("__device__ int twice(int x) { return 2 * x; }\nint host(int x) { return x; }\n")
    proc = wrapper(*CUDA, "-c", str(src), "-o", str(tmp_path / "nokernel.o"))
    assert proc.returncode == 0, proc.stderr
    with pytest.raises(NotInstrumentedError):
        read_kernels(tmp_path / "nokernel.o")


def test_plain_cxx_passes_through(tmp_path):
    src = tmp_path / "plain.c"
    src.write_text("int main(void) { return 3; }\n")
    proc = wrapper(str(src), "-o", str(tmp_path / "plain"), cxx=False)
    assert proc.returncode == 0, proc.stderr
    assert subprocess.run([str(tmp_path / "plain")]).returncode == 3


def test_one_step_compile_and_link(tmp_path):
    corpus = corpus_build.CORPUS_DIR / "cuda"
    exe = tmp_path / "templates"
    cuda = corpus_build.find_cuda_root()
    proc = wrapper(
        *CUDA,
        "-O0",
        "-g",
        f"-I{corpus / 'common'}",
        str(corpus / "templates" / "templates.cu"),
        "-o",
        str(exe),
        f"-L{cuda}/lib64",
        "-lcudart",
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""
    kernels = read_kernels(exe)
    assert len(kernels) == 9
    jit = pytest.importorskip("mneme.replay.jit")
    for k in kernels[:3]:  # -O0 -g: optnone and debug info are dropped so replay can optimise
        text = str(jit.parse_module(k.ir, k.name))
        assert "optnone" not in text and "!dbg" not in text and "DICompileUnit" not in text
        jit.compile_kernel(k.ir, jit.CompileConfig.for_level("O3", arch="sm_90"), k.name)


@pytest.mark.parametrize(
    "args, fragment",
    [
        (["--cuda-host-only", "-c"], "--cuda-host-only"),
        (["-Xclang", "-disable-llvm-passes", "-c"], "-disable-llvm-passes"),
        (["-emit-llvm"], "-emit-llvm"),
        (["-flto", "-c"], "-flto"),
    ],
)
def test_unsupported_flag_combinations(tmp_path, args, fragment):
    src = tmp_path / "k.cu"
    src.write_text("__global__ void k(int *p) { *p = 1; }\n")
    line = one_line_error(wrapper(*CUDA, *args, str(src), cwd=tmp_path), "mneme-clang++: error:")
    assert fragment in line


def test_missing_clang_and_cuda(tmp_path):
    src = tmp_path / "k.cu"
    src.write_text("__global__ void k(int *p) { *p = 1; }\n")
    env = dict(os.environ, LLVM_INSTALL_PATH=str(tmp_path))
    line = one_line_error(
        wrapper(*CUDA, "-c", str(src), cwd=tmp_path, env=env), "mneme-clang++: error:"
    )
    assert "LLVM_INSTALL_PATH" in line
    env = dict(os.environ, CUDA_PATH=str(tmp_path))
    line = one_line_error(
        wrapper(*CUDA, "-c", str(src), cwd=tmp_path, env=env), "mneme-clang++: error:"
    )
    assert "CUDA_PATH" in line and "CUDA toolkit" in line
    env = dict(os.environ, CUDA_PATH=str(tmp_path))
    one_line_error(run_mneme_env(env, "config", "cflags"), "mneme: error:")


def run_mneme_env(env, *args):
    from instrument_support import MNEME

    return subprocess.run([MNEME, *args], capture_output=True, text=True, env=env)


def test_several_sources_and_architectures_in_one_command(tmp_path):
    (tmp_path / "one.cu").write_text("__global__ void k1(int *p) { *p = 1; }\n")
    (tmp_path / "two.cu").write_text("__global__ void k2(float *p) { *p = 2; }\n")
    rsp = tmp_path / "flags.rsp"  # response files are read like clang reads them
    rsp.write_text("-x cuda --cuda-gpu-arch=sm_80 --cuda-gpu-arch=sm_90\n")
    proc = wrapper(f"@{rsp}", "-c", "one.cu", "two.cu", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    for obj, name in (("one.o", "k1(int*)"), ("two.o", "k2(float*)")):
        kernels = read_kernels(tmp_path / obj)
        assert [(k.demangled, k.arch) for k in kernels] == [(name, "sm_80"), (name, "sm_90")]
        assert all(k.source == obj.replace(".o", ".cu") for k in kernels)


def test_non_object_outputs_pass_through_with_the_cuda_setup(tmp_path):
    """-S/-fsyntax-only/--cuda-device-only embed nothing but get the same CUDA set-up
    (--cuda-path, CCCL and compat include folders) as instrumented compiles."""
    src = tmp_path / "k.cu"
    src.write_text("__global__ void k(int *p) { *p = 1; }\n")
    proc = wrapper(*CUDA, "--cuda-device-only", "-S", str(src), "-o", str(tmp_path / "k.ptx"))
    assert proc.returncode == 0, proc.stderr
    assert ".entry _Z1kPi" in (tmp_path / "k.ptx").read_text()
    assert wrapper(*CUDA, "-fsyntax-only", str(src)).returncode == 0
    proc = wrapper(*CUDA, "-c", str(src), "-o", os.devnull)
    assert proc.returncode == 0, proc.stderr


def test_static_cudart_link_warns(tmp_path, instrumented):
    """The recorder interposes libcudart.so: linking cudart_static works but says so."""
    objects = [str(o) for o in outcome(instrumented["atomics"]).objects]
    cuda = corpus_build.find_cuda_root()
    proc = wrapper(
        *objects,
        "-o",
        str(tmp_path / "app"),
        f"-L{cuda}/lib64",
        "-lcudart_static",
        "-ldl",
        "-lrt",
        "-lpthread",
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.count("\n") == 1 and "cudart_static" in proc.stderr
    assert proc.stderr.startswith("mneme-clang++: warning:")
    assert read_kernels(tmp_path / "app")
