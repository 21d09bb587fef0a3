"""The fatbinary reader and `mneme inspect` on nvcc-built executables (nvcc, no GPU)."""

import json
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from instrument_support import run_mneme
from mneme.instrument._decompress import lz4, lz4_block
from mneme.instrument.fatbin import (
    ENTRY,
    FatbinError,
    NoFatbinError,
    image_kind,
    parse_code_image,
    parse_fatbin,
    read_code_file,
    read_fatbin,
)
from mneme.instrument.section import NotInstrumentedError, read_elf_section

SOURCE = Path(__file__).resolve().parent / "sources" / "fatbin_kernels.cu"
KERNELS = {
    "_ZN2ns5scaleIfEEvPT_S1_i": "void ns::scale<float>(float*, float, int)",
    "_ZN2ns5scaleIdEEvPT_S1_i": "void ns::scale<double>(double*, double, int)",
    "plain_c": "plain_c",
    "_Z11uses_helperPf": "uses_helper(float*)",
}
# nvcc's fatbinary compression: default (zstd PTX, plain cubins), everything zstd,
# everything LZ4, nothing
MODES = {
    "default": [],
    "zstd-all": ["-Xfatbin=-compress-all"],
    "lz4-all": ["-Xfatbin=-compress-all", "-Xfatbin=--compress-mode=speed"],
    "none": ["-Xfatbin=--compress-mode=none"],
}


def _nvcc() -> str:
    found = shutil.which("nvcc") or (
        "/usr/local/cuda/bin/nvcc" if Path("/usr/local/cuda/bin/nvcc").exists() else None
    )
    if found is None:
        pytest.skip("nvcc not installed")
    return found


def _normalized(ptx: str) -> list[str]:
    """PTX lines without comments, blank lines and indentation (fatbinary drops them)."""
    lines = (" ".join(line.split()) for line in ptx.splitlines())
    return [line for line in lines if line and not line.startswith("//")]


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """mode -> executable; plus nvcc's own -cubin and -ptx output of the same source."""
    nvcc = _nvcc()
    out = tmp_path_factory.mktemp("fatbin")
    commands = {
        mode: [nvcc, "-arch=sm_90", *flags, str(SOURCE), "-o", str(out / mode)]
        for mode, flags in MODES.items()
    }
    commands["cubin"] = [nvcc, "-arch=sm_90", "-cubin", str(SOURCE), "-o", str(out / "k.cubin")]
    commands["ptx"] = [nvcc, "-arch=sm_90", "-ptx", str(SOURCE), "-o", str(out / "k.ptx")]
    commands["sm_80"] = [nvcc, "-arch=sm_80", "-cubin", str(SOURCE), "-o", str(out / "k80.cubin")]
    for command in commands.values():
        subprocess.run(command, check=True, capture_output=True)
    return out


def _code_entries(entries):
    return [e for e in entries if e.kernels]


@pytest.mark.parametrize("mode", list(MODES))
def test_entries_match_nvccs_own_cubin_and_ptx(built, mode):
    entries = read_fatbin(built / mode)
    code = _code_entries(entries)
    assert [(e.kind, e.arch) for e in code] == [("cubin", "sm_90"), ("ptx", "compute_90")]
    cubin, ptx = code
    expected = {
        "default": (None, "zstd"),
        "zstd-all": ("zstd", "zstd"),
        "lz4-all": ("lz4", "lz4"),
        "none": (None, None),
    }[mode]
    assert (cubin.compression, ptx.compression) == expected
    assert all(e.error is None for e in entries)
    # decompressed, the entries are exactly what nvcc -cubin / -ptx write
    assert cubin.data == (built / "k.cubin").read_bytes()
    assert _normalized(ptx.text()) == _normalized((built / "k.ptx").read_text())
    assert ptx.version == "9.0" and ptx.text().startswith(".version 9.0")
    if ptx.compression:
        assert ptx.stored_size < ptx.size


def test_kernels_names_registers_and_sizes(built):
    entries = read_fatbin(built / "default")
    cubin, ptx = _code_entries(entries)
    sass = {k.name: k for k in cubin.kernels}
    assert {k.name: k.demangled for k in cubin.kernels} == KERNELS
    assert {k.name: k.demangled for k in ptx.kernels} == KERNELS
    # the device function is not a kernel
    assert not any("helper" in k.name and "uses" not in k.name for k in cubin.kernels)
    # registers from the cubin's .nv.info, as ptxas reports them
    report = subprocess.run(
        [str(Path(_nvcc()).parent / "ptxas"), "-arch=sm_90", "-v", str(built / "k.ptx"),
         "-o", "/dev/null"],
        capture_output=True, text=True, check=True,
    ).stderr
    for name, kernel in sass.items():
        assert f"Compiling entry function '{name}'" in report
        used = report.split(f"Function properties for {name}")[1].split("Used ")[1]
        assert kernel.registers == int(used.split()[0]), name
        assert kernel.size > 0 and kernel.size % 128 == 0  # SASS: 16-byte instructions
    for kernel in ptx.kernels:
        assert 0 < kernel.size < len(ptx.text())
        assert f".entry {kernel.name}(" in ptx.text()


def test_inspect_lists_an_nvcc_executable(built):
    proc = run_mneme("inspect", str(built / "default"), check=True)
    assert proc.stdout.startswith(f"{built / 'default'}: 4 kernels in a CUDA fatbinary")
    for name, demangled in KERNELS.items():
        assert f"\n{demangled}\n  name            {name}\n" in proc.stdout
    assert "compute_90 PTX 9.0" in proc.stdout and "(zstd, " in proc.stdout
    assert "SASS sm_90" in proc.stdout and " registers" in proc.stdout

    data = json.loads(run_mneme("inspect", str(built / "lz4-all"), "--json", check=True).stdout)
    assert data["source"] == "fatbinary"
    assert {k["name"]: k["demangled"] for k in data["kernels"]} == KERNELS
    for kernel in data["kernels"]:
        assert sorted(c["kind"] for c in kernel["code"]) == ["ptx", "sass"]
        assert {c["arch"] for c in kernel["code"]} == {"sm_90", "compute_90"}
    assert {e["compression"] for e in data["entries"] if e["kernels"]} == {"lz4"}


def test_inspect_ptx_by_any_name(built):
    expected = _normalized((built / "k.ptx").read_text())
    for key in ("_Z11uses_helperPf", "uses_helper(float*)", "uses_helper"):
        text = run_mneme("inspect", str(built / "default"), "--ptx", key, check=True).stdout
        assert _normalized(text) == expected
    data = json.loads(
        run_mneme("inspect", str(built / "none"), "--ptx", "plain_c", "--json", check=True).stdout
    )
    assert data["kernel"] == "plain_c" and ".maxntid 128, 1, 1" in data["entries"][0]["ptx"]


def _one_line(proc) -> str:
    assert proc.returncode != 0
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("mneme: error:"), proc.stderr
    return lines[0]


def test_inspect_errors_on_nvcc_executables(built):
    exe = str(built / "default")
    assert "--ptx scale" in _one_line(run_mneme("inspect", exe, "--ir", "scale"))
    assert "matches 2 kernels" in _one_line(run_mneme("inspect", exe, "--ptx", "ns::scale"))
    assert "no kernel 'nope'" in _one_line(run_mneme("inspect", exe, "--ptx", "nope"))


def test_code_images_as_the_driver_takes_them(built, section):
    """cuModuleLoadData's inputs: a cubin, PTX (NUL-terminated), a fatbinary in memory."""
    cubin = (built / "k.cubin").read_bytes()
    ptx = (built / "k.ptx").read_bytes()
    assert [image_kind(x) for x in (cubin, ptx, section, b"garbage")] == [
        "cubin", "ptx", "fatbin", None
    ]
    (entry,) = parse_code_image(cubin)
    assert (entry.kind, entry.arch, entry.data) == ("cubin", "sm_90", cubin)
    assert {k.name: k.demangled for k in entry.kernels} == KERNELS
    (entry,) = parse_code_image(ptx + b"\0")
    assert (entry.kind, entry.arch, entry.version) == ("ptx", "compute_90", "9.0")
    assert {k.name: k.demangled for k in entry.kernels} == KERNELS
    (old,) = parse_code_image((built / "k80.cubin").read_bytes())
    assert old.arch == "sm_80" and len(old.kernels) == 4
    # a registered fatbinary is one container; what follows it in memory is not read
    first = parse_fatbin(section)[0]
    end = 16 + struct.unpack_from("<Q", section, 8)[0]
    assert [e.to_dict() for e in parse_code_image(section[:end] + b"\xff" * 64)] == [
        first.to_dict()
    ]
    with pytest.raises(FatbinError, match="neither a fatbinary, a cubin nor PTX"):
        parse_code_image(b"hello")
    # files: inspect reads .cubin and .ptx files as they are
    for name, kind in (("k.cubin", "a cubin"), ("k.ptx", "PTX")):
        assert len(read_code_file(built / name)) == 1
        listing = run_mneme("inspect", str(built / name), check=True).stdout
        assert listing.startswith(f"{built / name}: 4 kernels in {kind} ")
    source = _one_line(run_mneme("inspect", str(SOURCE)))
    assert "not an ELF file" in source and "PTX" in source


def test_files_without_a_fatbinary(tmp_path):
    host_only = Path(sys.executable).resolve()
    with pytest.raises(NoFatbinError, match="no CUDA fatbinary"):
        read_fatbin(host_only)
    line = _one_line(run_mneme("inspect", str(host_only)))
    assert "no CUDA fatbinary" in line and "mneme-clang++" in line and "nvcc" in line
    with pytest.raises(NotInstrumentedError):  # what `mneme record` catches
        read_fatbin(host_only)


def test_lz4_block_decoder():
    # literals only; a match that overlaps its own output (run-length); a long literal run
    assert lz4_block(b"\x50hello", 5) == b"hello"
    assert lz4_block(b"\x1fa\x01\x00\x0b\x00", 31) == b"a" * 31
    data = bytes(range(256)) * 2
    block = bytes([0xF0, 255, 512 - 15 - 255]) + data  # 15 + 255 + 242 literals
    assert lz4_block(block, 512) == data
    for bad in (b"\x1fa\x05\x00", b"\x1fa\x01", b"\xf0", b"\x50hel"):
        with pytest.raises(ValueError):
            lz4_block(bad, 31)


@pytest.fixture(scope="module")
def section(built):
    return read_elf_section(built / "lz4-all", ".nv_fatbin")


def test_both_lz4_decoders_agree_on_nvccs_entries(section):
    entries = [e for e in parse_fatbin(section) if e.compression == "lz4"]
    assert len(entries) == 3
    for e in entries:
        header = ENTRY.unpack_from(section, e.offset)
        stored = section[e.offset + header[2] :][: header[4]]  # compressed size
        assert lz4_block(stored, e.size) == lz4(stored, e.size) == e.data


def test_damaged_sizes_are_one_line(section):
    assert len(parse_fatbin(section)) == 3
    # a container that claims more than the section holds
    grown = bytearray(section)
    struct.pack_into("<Q", grown, 8, len(section) * 4)
    with pytest.raises(FatbinError, match="runs past the section's end"):
        parse_fatbin(bytes(grown))
    # an entry claiming 1 TiB uncompressed: that entry reports it, the others still read
    entries = parse_fatbin(section)
    first = next(e for e in entries if e.kernels)
    huge = bytearray(section)
    struct.pack_into("<Q", huge, first.offset + 56, 1 << 40)
    damaged = parse_fatbin(bytes(huge))
    assert damaged[first.index].data is None and "limit" in damaged[first.index].error
    assert [e.kernels for e in damaged if e.index != first.index] == [
        e.kernels for e in entries if e.index != first.index
    ]
    with pytest.raises(FatbinError, match="no fatbinary magic"):
        parse_fatbin(b"\x01" + section)
    with pytest.raises(FatbinError, match="truncated"):
        parse_fatbin(section[:8])


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_mutated_fatbinaries_never_escape(section, data):
    """Random byte changes, truncation and insertion: a result or one FatbinError."""
    damaged = bytearray(section)
    for _ in range(data.draw(st.integers(1, 8))):
        at = data.draw(st.integers(0, len(damaged) - 1))
        damaged[at] = data.draw(st.integers(0, 255))
    cut = data.draw(st.integers(0, len(damaged)))
    damaged = damaged[:cut] if data.draw(st.booleans()) else damaged
    try:
        entries = parse_fatbin(bytes(damaged))
    except FatbinError as error:
        assert "\n" not in str(error)
        return
    for e in entries:
        assert e.error is None or "\n" not in e.error
        assert e.data is None or len(e.data) <= 256 << 20
