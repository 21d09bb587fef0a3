"""Every CUDA corpus program builds with mneme-clang++, and its executable carries, for every
kernel of the manifest, a standalone module that compiles to PTX and assembles for sm_90."""

import json
import subprocess

import pytest
from instrument_support import CUDA_PROGRAMS, corpus_build, outcome
from mneme.instrument.section import (
    SECTION_NAME,
    fnv1a64,
    loaded_sections,
    parse_section,
    read_elf_section,
    read_kernels,
    read_records,
)

NAMES = [p.name for p in CUDA_PROGRAMS]
PROGRAMS = {p.name: p for p in CUDA_PROGRAMS}


def kernels_of(instrumented, name):
    return read_kernels(outcome(instrumented[name]).executable)


@pytest.mark.parametrize("name", NAMES)
def test_builds_and_lists_manifest_kernels(instrumented, name):
    build = outcome(instrumented[name])
    assert build.executable.is_file()
    kernels = read_kernels(build.executable)
    assert sorted({k.demangled for k in kernels}) == list(PROGRAMS[name].kernels)
    for k in kernels:
        assert k.target == "nvptx64-nvidia-cuda" and k.arch == "sm_90"
        assert k.complete and not k.unresolved and k.error is None
        assert len(k.static_hash) == 16 and int(k.static_hash, 16) == fnv1a64(k.ir)
        assert k.ir[:4] == b"BC\xc0\xde"  # raw LLVM bitcode


@pytest.mark.parametrize("name", NAMES)
def test_every_kernel_module_compiles_alone_to_sm90(instrumented, name):
    jit = pytest.importorskip("mneme.replay.jit")
    for k in kernels_of(instrumented, name):
        module = jit.parse_module(k.ir, k.name)
        module.verify()
        assert jit.kernel_names(module) == [k.name]  # exactly one kernel per module
        result = jit.compile_kernel(k.ir, jit.CompileConfig.for_level("O3", arch="sm_90"), k.name)
        assert f".entry {k.name}" in result.ptx
        assert result.binary[:4] == b"\x7fELF"  # ptxas produced a cubin


def test_objects_carry_one_section_each(instrumented):
    build = outcome(instrumented["multi_tu"])
    per_object = [read_records(obj) for obj in build.objects]
    assert all(len(records) == 1 for records in per_object)
    sources = {records[0].meta["source"] for records in per_object}
    assert len(sources) == len(build.objects)
    # the executable's section is the concatenation of the objects' sections
    exe_records = read_records(build.executable)
    assert sorted(r.meta["source"] for r in exe_records) == sorted(sources)
    section = read_elf_section(build.executable, SECTION_NAME)
    assert sum(len(read_elf_section(o)) for o in build.objects) <= len(section)


def test_file_static_kernels_of_two_tus_are_both_listed(instrumented):
    kernels = kernels_of(instrumented, "multi_tu")
    by_name = {}
    for k in kernels:
        by_name.setdefault(k.name, []).append(k)
    twice = [ks for ks in by_name.values() if len(ks) > 1]
    assert twice, "multi_tu defines a file-static kernel of the same name in two TUs"
    for ks in twice:
        assert len({k.source for k in ks}) == len(ks)


def test_struct_by_value_parameters(instrumented):
    kernels = {k.name: k for k in kernels_of(instrumented, "struct_by_value")}
    aligned = next(k for k in kernels.values() if k.demangled.startswith("aligned_kernel"))
    first = aligned.params[0]
    assert first.byval and not first.pointer and first.align == 16 and first.size % 16 == 0
    assert aligned.params[1].pointer and aligned.params[1].offset == first.size
    big = next(k for k in kernels.values() if k.demangled.startswith("weigh"))
    assert big.params[0].byval and big.params[0].size == 128
    for k in kernels.values():  # offsets follow the CUDA parameter buffer layout
        offset = 0
        for p in k.params:
            offset = (offset + p.align - 1) // p.align * p.align
            assert p.offset == offset
            offset += p.size


def test_launch_bounds_metadata(instrumented):
    bounds = {
        k.demangled.split("(")[0]: k.launch_bounds
        for k in kernels_of(instrumented, "launch_bounds")
    }
    assert bounds["smooth"]["max_threads"] == 256 and "min_blocks" not in bounds["smooth"]
    assert bounds["polynomial"]["max_threads"] == 128 and bounds["polynomial"]["min_blocks"] == 4
    assert bounds["count_bits"] == {
        "max_threads": 64,
        "min_blocks": 2,
        "max_blocks_per_cluster": 1,
        "attributes": {"nvvm.maxntid": "64", "nvvm.minctasm": "2", "nvvm.maxclusterrank": "1"},
    }


def test_device_globals_metadata(instrumented):
    kernels = {k.demangled.split("(")[0]: k for k in kernels_of(instrumented, "device_globals")}
    coeffs = {g.name: g for g in kernels["apply_coeffs"].globals}
    assert coeffs["c_coeffs"].address_space == 4 and coeffs["c_coeffs"].size == 32
    assert coeffs["g_table"].address_space == 1 and coeffs["g_table"].size == 16
    counting = {g.name for g in kernels["count_and_bin"].globals}
    assert counting == {"g_counter", "g_hist"}
    # each module carries only what its kernel uses, with the names the host registers
    jit = pytest.importorskip("mneme.replay.jit")
    text = str(jit.parse_module(kernels["count_and_bin"].ir, "m"))
    assert "@g_counter = " in text and "@c_coeffs" not in text


def test_math_functions_keep_libdevice_calls_as_declarations(instrumented):
    jit = pytest.importorskip("mneme.replay.jit")
    for k in kernels_of(instrumented, "math_functions"):
        module = jit.parse_module(k.ir, k.name)
        assert jit.needs_libdevice(module)
        text = str(module)
        assert "declare" in text and "@__nv_expf" in text or "@__nv_exp" in text
        assert "define internal float @__nv_" not in text


def test_rdc_kernel_calling_another_tu_is_resolved_at_link(instrumented):
    build = outcome(instrumented["rdc_device_call"])
    compile_records = [r for o in build.objects for r in read_records(o)]
    assert any(not k.complete for r in compile_records for k in r.kernels)
    assert all(r.module for r in compile_records)  # whole TU modules for the link step
    kernels = read_kernels(build.executable)
    assert sorted(k.demangled for k in kernels) == list(PROGRAMS["rdc_device_call"].kernels)
    assert all(k.stage == "link" and k.complete for k in kernels)
    globals_used = {g.name for k in kernels for g in k.globals}
    assert {"g_lib_calls", "c_lib_gain"} <= globals_used


def test_executable_is_unchanged_apart_from_the_section(tmp_path):
    """The loaded part of an instrumented executable is a plain clang++-22 build's: the
    same commands, mneme-clang++ in place of clang++-22 (both built here: the session's
    instrumented corpus is linked by CMake, whose link line orders the dynamic symbols
    its own way)."""
    from instrument_support import MNEME_CLANGXX

    program = PROGRAMS["templates"]
    plain = corpus_build.build_program(program.directory, tmp_path / "plain")
    inst = corpus_build.build_program(program.directory, tmp_path / "inst", compiler=MNEME_CLANGXX).executable

    plain_image, inst_image = loaded_sections(plain.executable), loaded_sections(inst)
    assert {n: size for n, (size, _) in plain_image.items()} == {
        n: size for n, (size, _) in inst_image.items()}
    # byte-identical code and data: launches run exactly what a plain build runs (only
    # the build-id note differs, as it hashes the whole file)
    differing = [n for n in plain_image if plain_image[n] != inst_image[n]]
    assert differing in ([], [".note.gnu.build-id"])
    assert read_elf_section(plain.executable) is None
    section = read_elf_section(inst)
    assert parse_section(section) and section[:8] == b"MNEMEKIR"
    out = subprocess.run(["readelf", "-SW", str(inst)], capture_output=True, text=True).stdout
    line = next(row for row in out.splitlines() if SECTION_NAME in row)
    assert " A " not in line  # not allocated: costs nothing at run time


def test_manifest_names_json_roundtrip(instrumented):
    kernels = kernels_of(instrumented, "lambda_kernel")
    for k in kernels:
        d = json.loads(json.dumps(k.to_dict()))
        assert d["name"] == k.name and d["ir_size"] == len(k.ir)


def test_records_identify_their_fatbinary(instrumented):
    """Two TUs define a kernel of the same name: the recorder tells them apart by the
    fatbinary __cudaRegisterFatBinary receives (size + CRC-32 of header and payload)."""
    import struct
    import zlib

    build = outcome(instrumented["multi_tu"])
    identities = set()
    for obj in build.objects:
        data = read_elf_section(obj, ".nv_fatbin")
        magic, _, header_size, fat_size = struct.unpack_from("<IHHQ", data)
        assert magic == 0xBA55ED50
        size = header_size + fat_size
        expected = {"size": size, "crc32": f"{zlib.crc32(data[:size]):08x}"}
        for k in read_kernels(obj):
            assert k.fatbin == expected
        identities.add((size, expected["crc32"]))
    assert len(identities) == len(build.objects)
    exe_kernels = read_kernels(build.executable)
    assert all(k.fatbin for k in exe_kernels)
    # rdc with the new offload driver has one fatbinary for the whole program, made at link
    assert all(k.fatbin is None for k in kernels_of(instrumented, "rdc_device_call"))


def test_static_hash_is_reproducible(instrumented, tmp_path):
    """The same TU compiled again elsewhere, even with -g, gives the same static hashes."""
    from instrument_support import MNEME_CLANGXX

    program = PROGRAMS["struct_by_value"]
    ((cmd, obj),) = corpus_build.compile_commands(
        program, tmp_path, compiler=MNEME_CLANGXX, extra_flags=["-g"]
    )
    subprocess.run(cmd, check=True, cwd=tmp_path)
    again = {k.name: k.static_hash for k in read_kernels(obj)}
    first = {k.name: k.static_hash for k in kernels_of(instrumented, "struct_by_value")}
    assert again == first


def test_section_survives_strip(instrumented, tmp_path):
    exe = outcome(instrumented["atomics"]).executable
    stripped = tmp_path / "stripped"
    subprocess.run(["strip", "-o", str(stripped), str(exe)], check=True)
    assert [k.static_hash for k in read_kernels(stripped)] == [
        k.static_hash for k in read_kernels(exe)
    ]


def test_thrust_and_cub_kernels_extract_and_compile(tmp_path):
    """Library-heavy code (CCCL: thrust sort/reduce/transform, cub): every kernel's module
    is complete and compiles alone for sm_90."""
    from pathlib import Path

    from instrument_support import MNEME_CLANGXX

    cuda = corpus_build.find_cuda_root()
    if (
        not (cuda / "include" / "cccl" / "thrust").is_dir()
        and not (cuda / "include" / "thrust").is_dir()
    ):
        pytest.skip("this CUDA toolkit has no thrust/cub (CCCL)")
    src = Path(__file__).parent / "sources" / "thrust_cub.cu"
    obj = tmp_path / "thrust_cub.o"
    proc = subprocess.run(
        [
            MNEME_CLANGXX,
            "-x",
            "cuda",
            "--cuda-gpu-arch=sm_90",
            "-O2",
            "-std=c++17",
            "-w",
            "-c",
            str(src),
            "-o",
            str(obj),
        ],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    kernels = read_kernels(obj)
    assert len(kernels) >= 10
    assert any("DeviceRadixSort" in k.demangled for k in kernels)
    assert any(k.launch_bounds.get("max_threads") for k in kernels)
    jit = pytest.importorskip("mneme.replay.jit")
    for k in kernels:
        assert k.complete and k.error is None
        jit.compile_kernel(k.ir, jit.CompileConfig.for_level("O3", arch="sm_90"), k.name)


def test_rdc_build_of_multi_tu_keeps_file_static_kernels_apart(tmp_path):
    """With -fgpu-rdc clang makes file-static kernels unique (`__intern__<cuid>`): both stay
    listed, demangled with that suffix, and every module is complete."""
    from instrument_support import MNEME_CLANGXX

    cuda = corpus_build.find_cuda_root()
    rdc = ["-fgpu-rdc", "--offload-new-driver"]
    build = corpus_build.build_program(
        PROGRAMS["multi_tu"].directory,
        tmp_path,
        compiler=MNEME_CLANGXX,
        extra_flags=rdc,
        extra_link_flags=[*rdc, f"--cuda-path={cuda}"],
    )
    kernels = read_kernels(build.executable)
    interned = [k for k in kernels if "__intern__" in k.name]
    assert len(interned) == 2 and len({k.name for k in interned}) == 2
    for k in interned:
        assert k.demangled.startswith("local_scale(float*, int) (.__intern__")
    plain = {k.demangled.split(" (.__intern__")[0] for k in kernels}
    assert sorted(plain) == list(PROGRAMS["multi_tu"].kernels)
    assert all(k.complete for k in kernels)
