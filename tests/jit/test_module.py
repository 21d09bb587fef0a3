"""Module: parse, print, verify, clone and inspection from Python."""

import threading

import pytest
from mneme.replay.jit import (
    InvalidIRError,
    JitError,
    Module,
    StaleHandleError,
    instruction_mix,
    kernel_names,
    load_module,
    parse_module,
)

SAXPY = "_Z5saxpyfPKfPfi"


def test_parse_bitcode_and_text_round_trip(kernels):
    module = parse_module(kernels["saxpy"])
    assert module.triple == "nvptx64-nvidia-cuda"
    text = str(module)
    again = parse_module(text)
    assert str(again) == text
    # bitcode written by the binding reads back to the same module
    assert str(parse_module(module.bitcode())) == text
    assert sorted(kernel_names(module)) == sorted([SAXPY, "_Z7row_sumPKfPfi"])


def test_kernels_use_the_ptx_kernel_calling_convention(kernels):
    module = parse_module(kernels["saxpy"])
    saxpy = module.function(SAXPY)
    assert saxpy.is_kernel and not saxpy.is_declaration
    assert "define dso_local ptx_kernel void @_Z5saxpyfPKfPfi" in str(saxpy)
    helpers = [f for f in module.functions if not f.is_kernel]
    assert helpers and not any(f.is_kernel for f in helpers)


def test_invalid_ir_raises_with_llvms_message():
    with pytest.raises(
        InvalidIRError, match=r"^<ir>:2:7: error: value doesn't match function result type"
    ):
        parse_module("define void @f() {\n  ret i32 0\n}\n")
    with pytest.raises(InvalidIRError, match="expected top-level entity"):
        parse_module(b"this is not IR")
    # verify() catches what the parser lets through
    unverified = parse_module(
        "define i32 @g(i32 %a) {\n  %b = add i32 %a, %c\n  %c = add i32 %a, 1\n  ret i32 %b\n}\n",
        verify=False,
    )
    with pytest.raises(InvalidIRError, match="Instruction does not dominate all uses"):
        unverified.verify()
    assert issubclass(InvalidIRError, JitError) and InvalidIRError.mneme_user_error


def test_load_module_reports_a_missing_file(tmp_path):
    with pytest.raises(JitError, match="cannot read IR file .*missing.bc"):
        load_module(tmp_path / "missing.bc")
    (tmp_path / "k.ll").write_text("define void @k() {\n  ret void\n}\n")
    assert [f.name for f in load_module(tmp_path / "k.ll").functions] == ["k"]


def test_clone_is_independent(kernels):
    module = parse_module(kernels["saxpy"])
    copy = module.clone()
    before = str(module)
    copy.run_passes("default<O3>")
    assert str(module) == before
    assert str(copy) != before


def test_iterate_functions_blocks_instructions(kernels):
    module = parse_module(kernels["saxpy"])
    module.run_passes("default<O2>")
    saxpy = module.function(SAXPY)
    blocks = saxpy.blocks
    assert len(blocks) >= 2
    instructions = [inst for block in blocks for inst in block.instructions]
    assert len(instructions) == saxpy.instruction_count
    opcodes = {inst.opcode for inst in instructions}
    assert {"fmul", "load", "store", "icmp", "br", "ret"} <= opcodes or {
        "load",
        "store",
        "br",
        "ret",
    } <= opcodes
    store = next(inst for inst in instructions if inst.opcode == "store")
    assert store.type == "void"
    assert len(store.operands) == 2 and store.operands[1].startswith("ptr")
    load = next(inst for inst in instructions if inst.opcode == "load")
    assert set(load.metadata) == {"tbaa"} and load.metadata["tbaa"].startswith("!")
    calls = [inst.called_function for inst in instructions if inst.opcode == "call"]
    assert "llvm.nvvm.read.ptx.sreg.tid.x" in calls
    branch = blocks[0].instructions[-1]
    assert branch.opcode == "br"
    assert {b.name for b in blocks[0].successors} <= {b.name for b in blocks}
    mix = instruction_mix(saxpy)
    assert mix["call:llvm.nvvm.read.ptx.sreg.tid.x"] == 1
    assert sum(mix.values()) == saxpy.instruction_count


def test_loop_count(kernels):
    module = parse_module(kernels["loops"])
    module.run_passes("function(sroa,loop-simplify)")
    loops = module.function("_Z5loopsPfiii")
    assert loops.loop_count == 3
    assert loops.max_loop_depth == 2
    assert module.function("_Z5loopsPfiii").arguments[1].type == "i32"


def test_argument_layout_matches_cuda(kernels):
    module = parse_module(kernels["structs"])
    params = module.function("_Z10use_params6ParamsPKf").arguments
    assert [(a.offset, a.size, a.byval) for a in params] == [(0, 16, True), (16, 8, False)]
    assert params[0].type.startswith("%struct.Params")
    saxpy = parse_module(kernels["saxpy"]).function(SAXPY).arguments
    assert [(a.offset, a.size) for a in saxpy] == [(0, 4), (8, 8), (16, 8), (24, 4)]


def test_handles_go_stale_after_a_transformation(kernels):
    module = parse_module(kernels["saxpy"])
    function = module.function(SAXPY)
    block = function.blocks[0]
    module.run_passes("instcombine")
    with pytest.raises(StaleHandleError, match="read module.functions again"):
        _ = block.instructions
    with pytest.raises(StaleHandleError):
        _ = function.name
    assert module.function(SAXPY).name == SAXPY


def test_function_lookup_error(kernels):
    module = parse_module(kernels["saxpy"])
    with pytest.raises(IndexError, match="no function named 'nope'"):
        module.function("nope")


def test_modules_compile_in_parallel_threads(kernels):
    """Each Module has its own context and the GIL is released: threads do not interfere."""
    texts = {}

    def work(index):
        module = Module.parse(kernels["saxpy"], f"m{index}")
        module.run_passes("default<O3>", "sm_90")
        texts[index] = module.emit_assembly("sm_90", "", 3)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(texts) == 4 and len(set(texts.values())) == 1
    assert ".entry _Z5saxpyfPKfPfi" in texts[0]
