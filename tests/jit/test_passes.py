"""Pass pipelines: same output as `opt-22 -passes=`, LLVM's message for bad pipelines."""

import re
import subprocess

import pytest
from jit_support import OPT, require_tools
from mneme.replay.jit import (
    CompileConfig,
    PipelineError,
    UnknownPassError,
    check_pipeline,
    parse_module,
)

PIPELINES = [
    "default<O0>",
    "default<O1>",
    "default<O3>",
    "default<Os>",
    "default<Oz>",
    "function(instcombine,gvn),loop-unroll",
    "function(sroa,early-cse<memssa>,simplifycfg),cgscc(inline),globaldce",
    "function(loop-mssa(licm),loop(loop-rotate,indvars)),function(loop-unroll<O3>)",
]


def _without_module_id(text: str) -> str:
    return "\n".join(line for line in text.splitlines() if not line.startswith("; ModuleID"))


@pytest.mark.parametrize("pipeline", PIPELINES)
@pytest.mark.parametrize("source", ["saxpy", "loops", "math"])
def test_pipeline_matches_opt(kernels, tmp_path, source, pipeline):
    require_tools(OPT)
    text = str(parse_module(kernels[source]))
    (tmp_path / "in.ll").write_text(text)
    opt = subprocess.run(
        [OPT, f"-passes={pipeline}", "-S", str(tmp_path / "in.ll"), "-o", "-"],
        capture_output=True,
        text=True,
    )
    module = parse_module(text)
    if opt.returncode != 0:
        # opt stops with LLVM's fatal error; the binding raises it instead of exiting
        message = opt.stderr.split("LLVM ERROR: ", 1)[1].split(".")[0]
        with pytest.raises(PipelineError, match=re.escape(message)):
            module.run_passes(pipeline)
        with pytest.raises(PipelineError, match="parse it again"):
            str(module)
        return
    module.run_passes(pipeline)
    assert _without_module_id(str(module)) == _without_module_id(opt.stdout)
    if pipeline != "default<O0>":
        assert str(module) != text  # the pipeline did something


def test_unknown_pass_carries_llvms_message(kernels):
    module = parse_module(kernels["saxpy"])
    before = str(module)
    with pytest.raises(UnknownPassError, match="unknown function pass 'no-such-pass'"):
        module.run_passes("function(instcombine,no-such-pass)")
    with pytest.raises(UnknownPassError, match="invalid optimization level 'O7'"):
        module.run_passes("default<O7>")
    with pytest.raises(UnknownPassError, match="unknown pass name 'gvnn'"):
        check_pipeline("gvnn")
    assert str(module) == before  # nothing ran
    with pytest.raises(UnknownPassError, match="unknown"):
        CompileConfig(pipeline="function(nope)").check_pipeline()
    check_pipeline("default<O2>")
    # opt's error for the same string, for comparison
    require_tools(OPT)
    opt = subprocess.run(
        [OPT, "-passes=gvnn", "-disable-output", "/dev/null"], capture_output=True, text=True
    )
    assert "unknown pass name 'gvnn'" in opt.stderr


def test_target_specific_passes_are_known(kernels):
    module = parse_module(kernels["saxpy"])
    module.run_passes("nvvm-reflect", "sm_90")
    check_pipeline("nvvm-reflect,function(nvptx-lower-args)", "nvptx64-nvidia-cuda")
    check_pipeline("amdgpu-lower-kernel-arguments", "amdgcn-amd-amdhsa")
    with pytest.raises(UnknownPassError):
        check_pipeline("amdgpu-lower-kernel-arguments", "nvptx64-nvidia-cuda")
