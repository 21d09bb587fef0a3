"""CompileConfig: everything that decides how one kernel's IR becomes machine code."""

from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass, field, fields
from typing import Any

from .errors import JitConfigError

#: Named optimization levels and the pipelines clang and opt use for them.
OPT_LEVELS = ("O0", "O1", "O2", "O3", "Os", "Oz")

_NVIDIA_ARCH = re.compile(r"sm_\d+[af]?")
_AMD_ARCH = re.compile(r"gfx[0-9a-f]+")


def check_fields(cls, data: Any, what: str, error: type[Exception]) -> None:
    """``data`` is a JSON object naming only fields of dataclass ``cls``; else ``error``
    with one line naming the unknown fields and the known ones."""
    if not isinstance(data, dict):
        raise error(f"a {what} must be a JSON object")
    known = {f.name for f in fields(cls)}
    unknown = sorted(set(data) - known)
    if unknown:
        raise error(
            f"unknown {what} field(s) {', '.join(unknown)}; known: {', '.join(sorted(known))}"
        )


#: allocations the guarded variant's range table holds (engine/guarded_probe.py)
GUARD_RANGES = 64


@dataclass(frozen=True)
class CompileConfig:
    """How to compile a kernel: IR pipeline, specializations, bounds, target (checked
    when made).

    Attributes:
        pipeline: the LLVM pass pipeline (``default<O3>``,
            ``default<O2>,function(loop-unroll<O3>)``).
        arch: the target: an NVIDIA ``sm_XX`` or an AMD ``gfxNNN``.
        codegen_opt_level: LLVM code generation's optimization level, 0-3.
        specialize_args: argument index -> the argument's recorded bytes (little-endian,
            exactly the parameter's size), folded into the code.
        block_dim: the block ``(x, y, z)`` folded into the code; None leaves the IR's.
        grid_dim: the grid ``(x, y, z)`` folded into the code; None leaves the IR's.
        max_threads: the kernel's max-threads launch bound; None leaves the IR's.
        min_blocks: its min-blocks-per-multiprocessor bound; None leaves the IR's.
        max_registers: a register cap; None for none.
        ptx_features: PTX features for code generation (``+ptx80``); empty for the default.
        ptxas_opt_level: the assembler's optimization level, 0-3.
        link_libdevice: link libdevice where the module calls it.
        guard: the guarded probe variant: every memory access checked before it is made
            (engine/guarded_probe.py); never what a trial times.

    Raises:
        JitConfigError: a field of the wrong type or out of range, an unknown target, or
            the guarded variant for a target other than NVIDIA's.
    """

    pipeline: str = "default<O3>"
    arch: str = "sm_90"
    codegen_opt_level: int = 3
    specialize_args: dict[int, bytes] = field(default_factory=dict)
    block_dim: tuple[int, int, int] | None = None
    grid_dim: tuple[int, int, int] | None = None
    max_threads: int | None = None
    min_blocks: int | None = None
    max_registers: int | None = None
    ptx_features: str = ""
    ptxas_opt_level: int = 3
    link_libdevice: bool = True
    guard: bool = False

    def __post_init__(self) -> None:
        if not isinstance(self.pipeline, str) or not self.pipeline.strip():
            raise JitConfigError(
                "pipeline must be a non-empty pass pipeline string, e.g. 'default<O3>'"
            )
        if not isinstance(self.arch, str) or not (
            _NVIDIA_ARCH.fullmatch(self.arch) or _AMD_ARCH.fullmatch(self.arch)
        ):
            raise JitConfigError(
                f"arch {self.arch!r} is neither an NVIDIA 'sm_XX' nor an AMD 'gfxNNN' target"
            )
        for name in ("codegen_opt_level", "ptxas_opt_level"):
            value = getattr(self, name)
            if not _is_int(value) or not 0 <= value <= 3:
                raise JitConfigError(f"{name} must be 0, 1, 2 or 3, not {value!r}")
        for name in ("max_threads", "min_blocks", "max_registers"):
            value = getattr(self, name)
            if value is not None and (not _is_int(value) or value <= 0):
                raise JitConfigError(f"{name} must be a positive integer or None, not {value!r}")
        for name in ("block_dim", "grid_dim"):
            value = getattr(self, name)
            if value is None:
                continue
            if (
                not isinstance(value, (tuple, list))
                or len(value) != 3
                or not all(_is_int(v) and 0 < v < 2**32 for v in value)
            ):
                raise JitConfigError(
                    f"{name} must be three positive integers (x, y, z), not {value!r}"
                )
            object.__setattr__(self, name, tuple(int(v) for v in value))
        if not isinstance(self.guard, bool):
            raise JitConfigError(f"guard must be true or false, not {self.guard!r}")
        if self.guard and not self.arch.startswith("sm_"):
            raise JitConfigError("the guarded variant is built for NVIDIA targets only")
        if not isinstance(self.specialize_args, dict):
            raise JitConfigError("specialize_args must map argument indices to bytes")
        args = {}
        for index, raw in self.specialize_args.items():
            if not _is_int(index) or index < 0:
                raise JitConfigError(f"specialize_args key {index!r} is not an argument index")
            if not isinstance(raw, (bytes, bytearray, memoryview)) or len(raw) == 0:
                raise JitConfigError(f"specialize_args[{index}] must be the argument's recorded bytes")
            args[int(index)] = bytes(raw)
        object.__setattr__(self, "specialize_args", dict(sorted(args.items())))

    def __hash__(self) -> int:
        return hash(self.to_json())

    @classmethod
    def for_level(cls, level: str, **overrides: Any) -> CompileConfig:
        """The configuration of a named optimization level.

        Parameters:
            level: O0, O1, O2, O3, Os or Oz.
            **overrides: other fields of the configuration.

        Returns:
            The configuration with the ``default<level>`` pipeline.

        Raises:
            JitConfigError: an unknown level, or a bad override.
        """
        if level not in OPT_LEVELS:
            raise JitConfigError(
                f"unknown optimization level {level!r}; use one of {', '.join(OPT_LEVELS)}"
            )
        return cls(pipeline=f"default<{level}>", **overrides)

    @property
    def target(self) -> str:
        """'nvptx' or 'amdgpu'."""
        return "nvptx" if self.arch.startswith("sm_") else "amdgpu"

    @property
    def triple(self) -> str:
        return "nvptx64-nvidia-cuda" if self.target == "nvptx" else "amdgcn-amd-amdhsa"

    def check_pipeline(self) -> None:
        """Parse the pipeline with LLVM without compiling anything.

        Raises:
            UnknownPassError: a pass LLVM does not know (with LLVM's message).
        """
        from . import _llvm

        _llvm.check_pipeline(self.pipeline, self.triple)

    def to_dict(self) -> dict[str, Any]:
        """The configuration as plain JSON data: bytes as hex, tuples as lists.

        Returns:
            Its fields (``guard`` only when set).
        """
        out = asdict(self)
        if not out["guard"]:
            del out["guard"]  # (keys, caches and stored settings as before the field)
        out["specialize_args"] = {str(k): v.hex() for k, v in self.specialize_args.items()}
        for name in ("block_dim", "grid_dim"):
            if out[name] is not None:
                out[name] = list(out[name])
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> CompileConfig:
        """A configuration from the data :meth:`to_dict` writes.

        Parameters:
            data: the fields; absent ones keep their defaults.

        Returns:
            The configuration.

        Raises:
            JitConfigError: an unknown field or a bad value.
        """
        check_fields(cls, data, "compile configuration", JitConfigError)
        values = dict(data)
        if "specialize_args" in values:
            try:
                values["specialize_args"] = {
                    int(k): bytes.fromhex(v) for k, v in values["specialize_args"].items()
                }
            except (AttributeError, TypeError, ValueError) as error:
                raise JitConfigError(
                    "specialize_args must map argument indices to hex strings of their bytes"
                ) from error
        return cls(**values)

    def to_json(self) -> str:
        """The configuration as canonical JSON (sorted keys, no spaces): stable for
        hashing.

        Returns:
            The JSON text.
        """
        return json.dumps(self.to_dict(), sort_keys=True, separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str) -> CompileConfig:
        """A configuration from the JSON :meth:`to_json` writes.

        Parameters:
            text: the JSON text.

        Returns:
            The configuration.

        Raises:
            JitConfigError: the text is not JSON, or not a valid configuration.
        """
        try:
            data = json.loads(text)
        except json.JSONDecodeError as error:
            raise JitConfigError(f"compile configuration is not valid JSON: {error}") from error
        return cls.from_dict(data)


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)
