"""The guarded probe variant (llvm_guard.cpp): every access to global and shared memory is
checked before it is made and sent to a sink when it would leave its object or the
recorded memory; PTX that reports through visible globals. (That it catches a launch that
would fault is tests/tune/test_guarded_probe_gpu.py.)"""

import pytest
from mneme.replay.engine.guarded_probe import REPORT_SYMBOL, TABLE_SYMBOL, describe, range_table
from mneme.replay.jit import (
    CompileConfig,
    JitConfigError,
    SpecializationError,
    compile_kernel,
    parse_module,
)
from mneme.replay.jit.config import GUARD_RANGES

SHARED_TILE = "_Z11shared_tilePKfPf"
DYNAMIC_SUM = "_Z11dynamic_sumPKfPfPj"
ACCESSES = ("load", "store", "atomicrmw", "cmpxchg")


def optimized(bitcode, kernel):
    module = parse_module(bitcode)
    module.keep_only_kernel(kernel)
    module.run_passes("default<O3>", "sm_90")
    return module


def accesses(module, kernel):
    return [i for b in module.function(kernel).blocks for i in b.instructions if i.opcode in ACCESSES]


@pytest.mark.parametrize("kernel", [SHARED_TILE, DYNAMIC_SUM])
def test_every_global_and_shared_access_goes_through_the_check(kernels, kernel):
    module = optimized(kernels["bounds"], kernel)
    before = accesses(module, kernel)
    assert len(before) >= 4
    guarded = module.guard_memory_accesses()
    module.verify()
    assert guarded == len(before)
    after = accesses(module, kernel)
    checks = [i for b in module.function(kernel).blocks for i in b.instructions
              if i.opcode == "call" and i.called_function == "__mneme_guard_check"]
    assert len(checks) == guarded
    # each access now takes its pointer from a select between it and a sink
    text = str(module.function(kernel))
    assert text.count("select i1") >= guarded
    assert "@__mneme_guard_sink" in text
    assert len(after) == len(before)


def test_an_access_into_a_known_array_is_bounded_by_that_array(kernels):
    module = optimized(kernels["bounds"], SHARED_TILE)
    module.guard_memory_accesses()
    text = str(module.function(SHARED_TILE))
    # tile: 128 floats, table: 128 floats; each bound is its own object's [begin, end)
    assert "_ZZ11shared_tilePKfPfE4tile" in text and "i64 512)" in text
    assert "@table" in text


def test_guarded_ptx_reports_through_visible_globals_and_sizes_extern_shared_at_launch(kernels):
    config = CompileConfig(guard=True)
    guarded = compile_kernel(kernels["bounds"], config, DYNAMIC_SUM)
    plain = compile_kernel(kernels["bounds"], CompileConfig(), DYNAMIC_SUM)
    assert f".visible .global .align 8 .b8 {REPORT_SYMBOL}[16]" in guarded.ptx
    assert f".visible .global .align 8 .b8 {TABLE_SYMBOL}[{8 * (1 + 2 * GUARD_RANGES)}]" in guarded.ptx
    assert "%dynamic_smem_size" in guarded.ptx
    assert guarded.binary and REPORT_SYMBOL not in plain.ptx
    assert guarded.ptx != plain.ptx


def test_a_module_is_guarded_once(kernels):
    module = optimized(kernels["bounds"], SHARED_TILE)
    module.guard_memory_accesses()
    with pytest.raises(SpecializationError, match="guarded already"):
        module.guard_memory_accesses()


def test_the_guard_is_part_of_the_configuration_only_when_asked_for():
    assert "guard" not in CompileConfig().to_dict()  # (stored settings and cache keys as before)
    assert CompileConfig.from_json(CompileConfig(guard=True).to_json()).guard is True
    with pytest.raises(JitConfigError, match="NVIDIA"):
        CompileConfig(arch="gfx90a", guard=True)
    with pytest.raises(JitConfigError, match="true or false"):
        CompileConfig(guard="yes")


def test_the_range_table_joins_overlaps_and_closes_the_smallest_gaps_to_fit():
    ranges = [(0x1000, 0x100), (0x1080, 0x100), (0x3000, 0x10), (0x3100, 0x10), (0x9000, 0x10)]
    assert range_table(ranges) == [(0x1000, 0x1180), (0x3000, 0x3010), (0x3100, 0x3110),
                                   (0x9000, 0x9010)]
    # two slots: the gap of 0xf0 closes first, then the one of 0x1e80
    assert range_table(ranges, 2) == [(0x1000, 0x3110), (0x9000, 0x9010)]
    assert range_table([(0x1000, 0)]) == []


def test_the_report_names_what_was_caught():
    assert describe([0, 0]) is None
    assert describe([1, 0x7F0000001000]) == "an access outside the array it indexes at 0x7f0000001000"
    assert "misaligned" in describe([3, 8])
