"""Specialization of arguments and launch dimensions, launch bounds: visible in IR and PTX."""

import struct

import pytest
from mneme.replay.jit import (
    CompileConfig,
    JitConfigError,
    SpecializationError,
    compile_kernel,
    parse_module,
)

SAXPY = "_Z5saxpyfPKfPfi"
ROW_SUM = "_Z7row_sumPKfPfi"
USE_PARAMS = "_Z10use_params6ParamsPKf"


def ptx_of(bitcode, kernel, pipeline="default<O3>", **config):
    return compile_kernel(bitcode, CompileConfig(pipeline=pipeline, **config), kernel).ptx


def test_scalar_arguments_fold_into_the_ptx(kernels):
    plain = ptx_of(kernels["saxpy"], SAXPY)
    assert f"[{SAXPY}_param_3]" in plain and f"[{SAXPY}_param_0]" in plain
    special = ptx_of(
        kernels["saxpy"],
        SAXPY,
        specialize_args={0: struct.pack("<f", 2.5), 3: struct.pack("<i", 1000)},
    )
    # the parameters stay in the signature (same launch ABI) but are never loaded
    assert f".param .u32 {SAXPY}_param_3" in special
    assert f"[{SAXPY}_param_3]" not in special and f"[{SAXPY}_param_0]" not in special
    assert "999" in special or "1000" in special  # i < 1000
    assert "0f40200000" in special  # 2.5f


def test_pointer_argument_becomes_the_recorded_address(kernels):
    module = parse_module(kernels["saxpy"])
    address = 0x7F0000001000
    module.specialize_arguments(SAXPY, {1: address.to_bytes(8, "little")})
    assert f"inttoptr (i64 {address} to ptr)" in str(module)
    special = ptx_of(kernels["saxpy"], SAXPY, specialize_args={1: address.to_bytes(8, "little")})
    assert str(address) in special and f"[{SAXPY}_param_1]" not in special


def test_trip_count_specialization_unrolls_the_loop(kernels):
    def loops_after_o3(args):
        module = parse_module(kernels["saxpy"])
        module.keep_only_kernel(ROW_SUM)
        if args:
            module.specialize_arguments(ROW_SUM, args)
        module.run_passes("default<O3>", "sm_90")
        return module.function(ROW_SUM).loop_count

    assert loops_after_o3({}) >= 1
    assert loops_after_o3({2: struct.pack("<i", 4)}) == 0


def test_by_value_struct_argument_folds(kernels):
    recorded = struct.pack("<ifQ", 64, 3.0, 0x7F0000002000)
    special = ptx_of(kernels["structs"], USE_PARAMS, specialize_args={0: recorded})
    assert f"[{USE_PARAMS}_param_0" not in special
    assert "0f40400000" in special  # scale 3.0 folded
    assert str(0x7F0000002000) in special  # out pointer folded
    plain = ptx_of(kernels["structs"], USE_PARAMS)
    assert f"[{USE_PARAMS}_param_0" in plain


def test_launch_dims_become_constants(kernels):
    plain = ptx_of(kernels["saxpy"], SAXPY)
    assert "%ntid.x" in plain
    special = ptx_of(kernels["saxpy"], SAXPY, block_dim=(128, 1, 1), grid_dim=(8, 1, 1))
    assert "%ntid" not in special and "%nctaid" not in special
    assert "shl.b32" in special  # blockIdx.x * 128
    # tid.x < 128 is known as a range on the remaining intrinsic call
    module = parse_module(kernels["structs"])
    module.specialize_launch_dims(USE_PARAMS, block=(8, 4, 2))
    text = str(module)
    assert "range(i32 0, 8) i32 @llvm.nvvm.read.ptx.sreg.tid.x()" in text
    assert (
        "@llvm.nvvm.read.ptx.sreg.ntid.y()"
        not in text.split(f"@{USE_PARAMS}(")[1].split("\n}\n")[0]
    )
    three_d = ptx_of(kernels["structs"], USE_PARAMS, block_dim=(8, 4, 2))
    assert "%ntid" not in three_d


def test_launch_bounds_and_register_cap_reach_the_ptx(kernels):
    result = compile_kernel(
        kernels["saxpy"],
        CompileConfig(max_threads=256, min_blocks=2, max_registers=32),
        SAXPY,
    )
    assert ".maxntid 256" in result.ptx
    assert ".minnctapersm 2" in result.ptx
    assert ".maxnreg 32" in result.ptx
    assert result.metrics.registers <= 32
    plain = ptx_of(kernels["saxpy"], SAXPY)
    assert ".maxntid" not in plain and ".maxnreg" not in plain


def test_clangs_launch_bounds_use_the_same_attributes(kernels):
    module = parse_module(kernels["structs"])
    attributes = module.function("_Z7boundedPf").attributes
    assert attributes["nvvm.maxntid"] == "128" and attributes["nvvm.minctasm"] == "4"
    ptx = ptx_of(kernels["structs"], "_Z7boundedPf")
    assert ".maxntid 128" in ptx and ".minnctapersm 4" in ptx
    # overriding replaces clang's values
    ptx = ptx_of(kernels["structs"], "_Z7boundedPf", max_threads=64)
    assert ".maxntid 64" in ptx and ".maxntid 128" not in ptx


def test_specialization_errors_are_clear(kernels):
    module = parse_module(kernels["saxpy"])
    with pytest.raises(
        SpecializationError, match=r"argument 3 has type i32 \(4 bytes\) but 8 bytes"
    ):
        module.specialize_arguments(SAXPY, {3: bytes(8)})
    with pytest.raises(SpecializationError, match="has 4 arguments; there is no argument 9"):
        module.specialize_arguments(SAXPY, {9: bytes(4)})
    with pytest.raises(SpecializationError, match="no kernel named 'nope'"):
        module.specialize_arguments("nope", {})
    with pytest.raises(SpecializationError, match="max_threads must be a positive integer, not -1"):
        module.set_launch_bounds(SAXPY, max_threads=-1)
    with pytest.raises(SpecializationError, match="at least 1"):
        module.specialize_launch_dims(SAXPY, block=(0, 1, 1))
    with pytest.raises(JitConfigError, match="max_threads must be a positive integer or None, not -5"):
        CompileConfig(max_threads=-5)
    with pytest.raises(JitConfigError, match="block_dim must be three positive integers"):
        CompileConfig(block_dim=(32, 0, 1))
    with pytest.raises(SpecializationError, match="defines: "):
        compile_kernel(kernels["saxpy"], CompileConfig(), "missing_kernel")
    with pytest.raises(SpecializationError, match="defines 2 kernels"):
        compile_kernel(kernels["saxpy"], CompileConfig())
