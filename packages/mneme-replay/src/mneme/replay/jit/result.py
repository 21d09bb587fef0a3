"""CompileResult: one compiled kernel (its binary, PTX, static metrics and stage
timings), as compiler.py makes it and cache.py keeps it."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .config import CompileConfig
from .ptxas import StaticMetrics

__all__ = ["CompileResult"]


@dataclass(frozen=True)
class CompileResult:
    """One compiled kernel.

    Attributes:
        kernel: the kernel's name.
        config: the configuration it was compiled with.
        binary: a cubin (NVPTX) or an ELF code object (AMDGPU).
        ptx: the PTX (NVPTX); None for AMDGPU.
        metrics: the static metrics (the assembler's report); None for AMDGPU.
        timings: seconds per stage: parse, prepare (libdevice, specialization), passes,
            codegen, ptxas, total
        key: its compile key (empty without a cache).
        from_cache: whether it came from the cache.
    """

    kernel: str
    config: CompileConfig
    binary: bytes
    ptx: str | None = None
    metrics: StaticMetrics | None = None
    timings: dict[str, float] = field(default_factory=dict)
    key: str = ""
    from_cache: bool = False

    def to_cache_entry(self) -> dict[str, Any]:
        """What the compile cache stores beside the binary.

        Returns:
            The JSON document.
        """
        return {
            "kernel": self.kernel,
            "config": self.config.to_dict(),
            "ptx": self.ptx,
            "metrics": self.metrics.to_dict() if self.metrics else None,
            "timings": self.timings,
            "key": self.key,
        }

    @classmethod
    def from_cache_entry(cls, entry: dict[str, Any], binary: bytes) -> CompileResult:
        """A compile as the cache stored it.

        Parameters:
            entry: the document :meth:`to_cache_entry` wrote.
            binary: the binary stored beside it.

        Returns:
            The compiled kernel.
        """
        metrics = entry["metrics"]
        return cls(
            kernel=entry["kernel"],
            config=CompileConfig.from_dict(entry["config"]),
            binary=binary,
            ptx=entry["ptx"],
            metrics=StaticMetrics.from_dict(metrics) if metrics else None,
            timings=dict(entry["timings"]),
            key=entry["key"],
        )
