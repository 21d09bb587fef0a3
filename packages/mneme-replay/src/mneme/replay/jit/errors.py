"""Errors of the LLVM binding and the compile pipeline.

Every class is a user error for the `mneme` CLI (one line, exit 2): the message
carries LLVM's, ptxas's or the validator's own words. The names say ``Jit`` where
mneme.instrument.errors has the same word (ConfigError, ToolchainError).
"""

from mneme.instrument.errors import MnemeError


class JitError(MnemeError):
    """Base of every compile-side error of mneme.replay.jit."""

    mneme_user_error = True
    #: the failure kind of a tuning trial that raised it (mneme.replay.engine.errors)
    kind = "compile"


class InvalidIRError(JitError):
    """The IR does not parse or does not verify (LLVM's diagnostic follows)."""


class UnknownPassError(JitError):
    """A pass pipeline string names an unknown pass or is malformed."""


class PipelineError(JitError):
    """A pass of the pipeline reported an error while running."""


class CodegenError(JitError):
    """The target could not generate code for the module."""


class SpecializationError(JitError):
    """A specialization or launch bound does not fit the kernel."""


class LinkError(JitError):
    """libdevice (or another bitcode library) could not be linked."""


class StaleHandleError(JitError):
    """A Function/BasicBlock/Instruction handle outlived a transformation of its module."""


class JitConfigError(JitError):
    """A CompileConfig field has a bad value."""


class JitToolchainError(JitError):
    """A CUDA tool or file (ptxas, libdevice) was not found."""


class PtxasError(JitError):
    """ptxas rejected the PTX."""
