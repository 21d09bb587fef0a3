"""ReplaySession's code for the kernel: the target it compiles for, the compile
configuration a replay derives (specializations, launch bounds), compiling the recorded
LLVM IR (or an nvcc build's PTX or cubin) through the session's cache, and the compiled
modules it keeps loaded on the device.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from ..jit import CompileCache, CompileConfig, CompileResult, compile_kernel
from .config import ReplayConfig
from .cooperative import launch_bounds
from .launch_limits import product

if TYPE_CHECKING:
    from mneme.runtime import Device

    from ..db import Kernel, RecordingInfo

LOADED_MODULES = 8  # compiled modules kept loaded per session (LRU)


def arch_of(compute_capability: str | tuple[int, int]) -> str:
    """The NVPTX target of a compute capability.

    Parameters:
        compute_capability: ``"9.0"`` or ``(9, 0)``.

    Returns:
        ``"sm_90"``.
    """
    if isinstance(compute_capability, str):
        major, _, minor = compute_capability.partition(".")
        return f"sm_{int(major)}{int(minor or 0)}"
    major, minor = compute_capability  # type: ignore[assignment]
    return f"sm_{major}{minor}"


def derive_compile_config(
    base: CompileConfig,
    kernel,
    instance,
    replay: ReplayConfig,
    grid,
    block,
    arch: str,
    args: bytes | None = None,
    multiprocessors: int | None = None,
) -> CompileConfig:
    """The CompileConfig a replay uses: ``base`` plus the target arch and the
    specializations and bounds the replay configuration asks for.

    Parameters:
        base: the compile configuration asked for.
        kernel: the instance's kernel (its parameters).
        instance: the instance (its arguments, whether it is cooperative).
        replay: the replay configuration (``specialize``, ``specialize_dims``,
            ``set_launch_bounds``).
        grid: the grid launched.
        block: the block launched.
        arch: the target.
        args: the argument buffer to specialize on; None for the recorded one.
        multiprocessors: the replaying GPU's multiprocessors: a cooperative instance's
            code gets launch bounds that keep its grid resident there (None:
            compile-only; cooperative.launch_bounds).

    Returns:
        The configuration.
    """
    changes: dict[str, Any] = {"arch": arch}
    if replay.specialize:
        args = instance.args if args is None else args
        values = {}
        for index, param in enumerate(kernel.params):
            if param.is_pointer:
                continue
            raw = args[param.offset : param.offset + param.size]
            if len(raw) == param.size and param.size:
                values[index] = raw
        changes["specialize_args"] = {**values, **base.specialize_args}
    if replay.specialize_dims:
        changes["block_dim"] = base.block_dim or tuple(block)
        changes["grid_dim"] = base.grid_dim or tuple(grid)
    if replay.set_launch_bounds and base.max_threads is None:
        changes["max_threads"] = product(block)
    changes.update(launch_bounds(instance, replace(base, **changes), grid, block, multiprocessors))
    return replace(base, **changes)


class LoadedCode:
    """A compiled module loaded on the session's device, and its kernel."""

    def __init__(self, module, function):
        self.module = module
        self.function = function


class KernelCode:
    """The part of ReplaySession (session.py) that makes the kernel's code. It works on the
    session's kernel, recording, compile cache, device and loaded modules, which the
    session creates."""

    if TYPE_CHECKING:  # the session's, which the code uses
        kernel: Kernel
        info: RecordingInfo
        cache: CompileCache
        code: str
        _ir: bytes | None
        _code_images: list | None
        _loaded: OrderedDict[str, LoadedCode]

        @property
        def device(self) -> Device: ...

    @property
    def ir(self) -> bytes:
        if self._ir is None:
            self._ir = self.kernel.ir()
        return self._ir

    @property
    def recorded_arch(self) -> str | None:
        try:
            return arch_of(self.info.compute_capability) if self.info.compute_capability else None
        except ValueError:
            return None

    def target_arch(self, replay: ReplayConfig, compile_only: bool) -> tuple[str, list[str]]:
        """The target a replay compiles for: the configuration's, else the GPU present's,
        else (compile-only) the recorded GPU's.

        Parameters:
            replay: the replay configuration.
            compile_only: whether the replay launches nothing.

        Returns:
            The target and notes for the result (compiled for another GPU than
            recorded).
        """
        notes: list[str] = []
        if replay.arch:
            return replay.arch, notes
        if not compile_only:
            present = arch_of(self.device.compute_capability)
            recorded = self.recorded_arch
            if recorded and recorded != present:
                notes.append(
                    f"recorded on {self.info.gpu_name or 'a GPU'} ({recorded}); compiled for "
                    f"the present {self.device.name} ({present})"
                )
            return present, notes
        return self.recorded_arch or CompileConfig().arch, notes

    def compile(self, config: CompileConfig) -> tuple[CompileResult, float]:
        """Compile the instance's kernel (its IR, or an nvcc build's recorded PTX or
        cubin) through the session's cache.

        Parameters:
            config: the compile configuration (with its target).

        Returns:
            The compiled code and the seconds it took.
        """
        start = time.perf_counter()
        if self.kernel.has_ir:
            result = compile_kernel(
                self.ir, config, self.kernel.name, cache=self.cache, name=self.kernel.static_hash
            )
        else:
            result = self._compile_recorded_code(config)
        return result, time.perf_counter() - start

    def _compile_recorded_code(self, config: CompileConfig) -> CompileResult:
        """A kernel of an nvcc build: its PTX through ptxas (in process), or, with
        ``code="cubin"`` or no PTX, the recorded cubin for the target as it is."""
        from ..jit import JitConfigError, compile_ptx
        from ..jit.errors import JitError
        from ..jit.ptx import check_ptx_config

        if self._code_images is None:  # parsed once, not per trial
            self._code_images = self.kernel.code_images()
        images = self._code_images
        ptx = next((e for e in images if e.kind == "ptx"), None)
        cubin = next((e for e in images if e.kind == "cubin" and e.arch == config.arch), None)
        if ptx is not None and self.code != "cubin":
            try:
                return compile_ptx(ptx.text(), config, self.kernel.name, cache=self.cache)
            except JitError:
                # PTX newer than this assembler (a library built by a later toolkit): under
                # "auto", the recorded cubin for this GPU runs as the application ran it.
                if self.code != "auto" or cubin is None or config != CompileConfig(arch=config.arch):
                    raise
        check_ptx_config(config)
        if cubin is None:
            have = ", ".join(f"{e.kind} {e.arch}" for e in images) or "nothing"
            raise JitConfigError(
                f"kernel {self.kernel.demangled_name} has no cubin for {config.arch} "
                f"(the recording holds {have})"
            )
        if config != CompileConfig(arch=config.arch):
            raise JitConfigError(
                f"kernel {self.kernel.demangled_name} is replayed from its recorded cubin, "
                "which takes launch overrides only (its PTX takes ptxas options)"
            )
        return CompileResult(self.kernel.name, config, bytes(cubin.data))

    def _load(self, compiled: CompileResult) -> LoadedCode:
        key = compiled.key or str(id(compiled))
        if key in self._loaded:
            self._loaded.move_to_end(key)
            return self._loaded[key]
        module = self.device.load_module(compiled.binary)
        loaded = LoadedCode(module, module.function(compiled.kernel))
        self._loaded[key] = loaded
        while len(self._loaded) > LOADED_MODULES:
            self._loaded.popitem(last=False)
        return loaded

    def clear_compiled(self) -> None:
        """Forget compiled and loaded code (a fresh in-memory cache): the next run
        compiles and loads from scratch."""
        self.cache = CompileCache(None)
        self._loaded.clear()
