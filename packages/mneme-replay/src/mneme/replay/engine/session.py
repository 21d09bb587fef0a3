"""ReplaySession: one recorded instance, restored once, replayed under many configurations.

    with ReplaySession(instance) as session:               # restores on first run
        result = session.run(CompileConfig.for_level("O3"), ReplayConfig(iterations=10))
        other = session.run(CompileConfig(), ReplayConfig(block=(128, 1, 1)))

Compile-only (``ReplayConfig(compile_only=True)``, or no GPU/driver on the machine): the
kernel is compiled to a cubin with ptxas's static metrics and nothing is launched.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable

import numpy as np

from ..jit import CompileCache, CompileConfig
from . import determinism as nd
from . import timing
from .config import ReplayConfig, ReplaySettings
from .cooperative import check_resident
from .epilogue_check import EpilogueChecks
from .errors import (
    CONTEXT_POISONED,
    ERROR,
    LAUNCH_REFUSED,
    RESTORE,
    DeviceError,
    KernelFailedError,
    LaunchConfigError,
    NoGpuError,
    ReplayConfigError,
    is_sticky,
)
from .kernel_code import KernelCode, LoadedCode, arch_of, derive_compile_config
from .launch_limits import DEFAULT_SHARED_LIMIT, check_clusters, check_launch, product
from .restore import DeviceImage
from .result import ReplayResult
from .verify import DeviceVerifier, Tolerance


class ReplaySession(KernelCode, EpilogueChecks):
    """Replays one recorded instance: restores its memory on the GPU at the recorded
    addresses (once, on the first run) and then serves any number of configurations.
    A context manager; :meth:`close` gives everything back.

    Parameters:
        instance: the instance (``mneme.replay.db`` Instance).
        device: a ``mneme.runtime.Device`` to use; None opens one on the first GPU replay.
        cache: a CompileCache; None for one in memory for this session.
        gpu: False forces compile-only; None uses the GPU when a driver is there.
        make_room: called with this session when its recorded address range is taken;
            returns True after freeing it (a pool of sessions releases the others'
            memory).
        code: which recorded code an nvcc-built kernel replays from: "auto" (its PTX
            when recorded, else its cubin), "ptx" or "cubin".
        progress: told each batch of bytes restore moves to the device (prologues and
            recorded epilogues: ``restore.restore_bytes`` in all), for a progress bar.
    """

    def __init__(self, instance, *, device=None, cache: CompileCache | None = None, gpu=None,
                 make_room: Callable[[ReplaySession], bool] | None = None, code: str = "auto",
                 progress: Callable[[int], None] | None = None):
        self.instance = instance
        self.progress = progress
        self.code = code
        self.kernel = instance.kernel
        self.info = self.kernel.db.info
        self.cache = cache if cache is not None else CompileCache(None)
        self._device = device
        if gpu is None:
            from mneme.runtime import driver_available

            gpu = device is not None or driver_available()
        self.gpu = bool(gpu)
        self._ir: bytes | None = None
        self._args: bytes | None = None
        self._image: DeviceImage | None = None
        self._verifier: DeviceVerifier | None = None
        self._loaded: OrderedDict[str, LoadedCode] = OrderedDict()
        self._stream = None
        self._clock: timing.KernelClock | None = None
        self._auto_mode: str | None = None  # cache auto: the mode chosen for this instance
        self.make_room = make_room
        self._profile: nd.DeterminismProfile | None = None
        self._expected_host: dict[str, np.ndarray] = {}
        self._expected_sorted: dict[str, np.ndarray] = {}  # order-class regions, on mismatch
        # multiset digests of the recorded epilogues: (region, element width) -> digest
        self._expected_digests: dict[tuple[str, int], tuple[int, int]] = {}
        self._code_images: list | None = None  # nvcc-built kernels: parsed once
        # the guarded probe (guarded_probe.py): trusted once the recorded shape passes it,
        # or why it is not used for this instance
        self.guard_note: str | None
        self.guard_trusted, self.guard_note = False, None

    # -- pieces ---------------------------------------------------------------------------

    @property
    def device(self):
        if self._device is None:
            if not self.gpu:
                raise NoGpuError("this replay needs a GPU; none is available (use --compile-only)")
            from mneme.runtime import Device

            self._device = Device(0)
        return self._device

    @property
    def args(self) -> bytes:
        """The recorded argument buffer (read once)."""
        if self._args is None:
            self._args = bytes(self.instance.args)
        return self._args

    def launch_shape(self, replay: ReplayConfig) -> tuple[tuple, tuple, int]:
        """The launch a replay makes: the configuration's overrides, else the recorded
        values.

        Parameters:
            replay: the replay configuration.

        Returns:
            Grid, block and dynamic shared memory.
        """
        grid = replay.grid or tuple(self.instance.grid)
        block = replay.block or tuple(self.instance.block)
        shared = self.instance.shared_mem if replay.shared_mem is None else replay.shared_mem
        return tuple(grid), tuple(block), int(shared)

    def image(self) -> DeviceImage:
        """The restored memory (created on first use, kept for the session). When its
        recorded range is taken (by another session of a recording at the same base),
        ``make_room`` may free it once.

        Returns:
            The image.
        """
        if self._image is None:
            from mneme.runtime import RangeUnavailableError

            try:
                self._image = DeviceImage(self.device, self.info, self.instance, verifier=self._device_verifier(),
                                          progress=self.progress)
            except RangeUnavailableError:
                if self.make_room is None or not self.make_room(self):
                    raise
                self._image = DeviceImage(self.device, self.info, self.instance, verifier=self._device_verifier(),
                                          progress=self.progress)
        return self._image

    def _device_verifier(self) -> DeviceVerifier:
        """The verification kernels on this session's device (compiled once per process)."""
        if self._verifier is None:
            self._verifier = DeviceVerifier(self.device, arch_of(self.device.compute_capability))
        return self._verifier

    def tolerances(self, replay: ReplayConfig) -> dict[str, Tolerance]:
        """How each region is compared: the recording's annotations, then the
        configuration's tolerances over them.

        Parameters:
            replay: the replay configuration.

        Returns:
            Region name -> tolerance (regions not named compare bit for bit).
        """
        out = {}
        for name, annotation in self.instance.annotations.items():
            out[name] = Tolerance.from_annotation(annotation)
        out.update(replay.tolerances)
        return out

    # -- one observation ----------------------------------------------------------------------

    def run(
        self, compile: CompileConfig | None = None, replay: ReplayConfig | None = None
    ) -> ReplayResult:
        """One observation: compile, and unless compile-only, launch, time and verify.

        Parameters:
            compile: the compile configuration; None for the default (``default<O3>``).
            replay: the replay configuration; None for the default.

        Returns:
            The result.

        Raises:
            JitError: the code does not compile (a JitConfigError for a bad value).
            LaunchConfigError: the launch cannot run (a limit of the device or kernel,
                or the driver refused it).
            KernelFailedError: the kernel faulted (the CUDA context is unusable
                afterwards) or the driver refused to launch it.
            RestoreError: the recorded memory cannot be recreated.
            NoGpuError: a GPU replay without a GPU.
            DeviceError: a driver call failed.
        """
        from mneme.runtime import DriverError

        try:
            return self._run(compile, replay)
        except DriverError as error:  # a driver call no step below names
            raise self._driver_failure(f"device error: {error}", error, ERROR) from None

    def prepare(self, compile: CompileConfig | None = None,
                replay: ReplayConfig | None = None) -> float:
        """Everything the first replay of these settings does before its first launch, done
        now and no kernel of the instance run: the code compiled and loaded, the memory
        restored (with its pristine copy on the device), the stream, the clock (CUPTI, NVML)
        and the stored determinism profile. A spare worker does this while it waits, so the
        trial it takes over pays only its launches (a different launch shape or code loads
        its own module then).

        Parameters:
            compile: the compile configuration; None for the default.
            replay: the replay configuration; None for the default.

        Returns:
            The seconds it spent compiling (0 when the code was cached).

        Raises:
            DeviceError: a driver call failed while preparing.
        """
        from mneme.runtime import DriverError

        base = compile or CompileConfig()
        replay = replay or ReplayConfig()
        if replay.compile_only or not self.gpu:
            return self._run(base, ReplayConfig(compile_only=True, verify=False,
                                                arch=replay.arch)).compile_time
        grid, block, _ = self.launch_shape(replay)
        arch, _ = self.target_arch(replay, False)
        config = derive_compile_config(base, self.kernel, self.instance, replay, grid, block,
                                       arch, self.args, self.multiprocessors(False))
        compiled, seconds = self.compile(config)
        try:
            image = self.image()
            if replay.verify and replay.determinism_runs and self._profile is None:
                self._profile = nd.load_profile(self.instance)  # (measuring it would run kernels)
            loaded = self._load(compiled)
            image.bind_module(loaded.module)
            _ = loaded.function.attributes  # (the driver loads a lazily loaded function now)
            if self._stream is None:
                self._stream = self.device.stream()
            if self._clock is None:
                self._clock = timing.KernelClock(self.device, replay.device)
        except DriverError as error:
            raise self._driver_failure(f"preparing the replay failed: {error}", error, ERROR) from None
        return 0.0 if compiled.from_cache else seconds

    def _run(self, compile: CompileConfig | None, replay: ReplayConfig | None) -> ReplayResult:
        base = compile or CompileConfig()
        replay = replay or ReplayConfig()
        compile_only = replay.compile_only or not self.gpu
        notes: list[str] = []
        if not replay.compile_only and not self.gpu:
            notes.append("no GPU driver on this machine: compile-only")
        grid, block, shared = self.launch_shape(replay)
        properties = None if compile_only else self.device.properties
        check_launch(grid, block, shared, properties)
        check_clusters(grid, self.instance.cluster)
        arch, arch_notes = self.target_arch(replay, compile_only)
        notes += arch_notes
        config = derive_compile_config(
            base, self.kernel, self.instance, replay, grid, block, arch, self.args,
            self.multiprocessors(compile_only),
        )
        if config.max_threads is not None and product(block) > config.max_threads:
            raise LaunchConfigError(
                f"block of {product(block)} threads exceeds the kernel's launch bound of "
                f"{config.max_threads} threads"
            )
        compiled, compile_seconds = self.compile(config)
        metrics = compiled.metrics.to_dict() if compiled.metrics else {}
        result = ReplayResult(
            kernel=self.kernel.demangled_name or self.kernel.name,
            instance=self.instance.id,
            configuration=ReplaySettings(config, replay),
            registers=metrics.get("registers", 0),
            spills=metrics.get("spill_store_bytes", 0) + metrics.get("spill_load_bytes", 0),
            binary_size=len(compiled.binary),
            compile_time=0.0 if compiled.from_cache else compile_seconds,
            compile_cached=compiled.from_cache,
            compile_only=compile_only,
            metrics=metrics,
            launch={"grid": list(grid), "block": list(block), "shared_mem": shared,
                    **({"cluster": list(self.instance.cluster)} if self.instance.cluster else {}),
                    **({"cooperative": True} if self.instance.cooperative else {})},
            arch=arch,
            notes=notes,
        )
        if compile_only:
            return result
        result.device = self.device.name
        self._restore(result)
        if replay.verify and replay.determinism_runs and self._profile is None:
            # Before any candidate is verified: what the unchanged kernel reproduces (its
            # runs restore nothing: the memory is on the device already).
            start = time.perf_counter()
            self.determinism(replay)
            result.timings["determinism"] = time.perf_counter() - start
        self._replay(compiled, replay, grid, block, shared, result)
        return result

    def _restore(self, result: ReplayResult) -> DeviceImage:
        """The restored memory; restored now, and timed as ``restore``, on the session's
        first replay."""
        from mneme.runtime import DriverError

        if self._image is not None:
            return self._image
        start = time.perf_counter()
        try:
            image = self.image()
        except DriverError as error:
            message = f"restoring the recorded memory failed: {error}"
            if getattr(error, "name", "") == "CUDA_ERROR_OUT_OF_MEMORY":
                message = self._out_of_memory(message)
            raise self._driver_failure(message, error, RESTORE) from None
        result.timings["restore"] = time.perf_counter() - start
        result.restore_path = image.restore_path
        if image.restore_note:
            result.notes.append(image.restore_note)
        return image

    def _out_of_memory(self, message: str) -> str:
        """The restore's device memory against what the GPU has free (nothing of the
        failed restore stays mapped: DeviceImage closed itself)."""
        from .restore import restore_bytes
        from .sparse_regions import region_parts

        gib = 1 << 30
        try:
            free, total = self.device.memory_info()
        except Exception:  # noqa: BLE001 - the message stands without the numbers
            return message
        # prologues at their addresses, their pristine copies and the recorded epilogues
        need = restore_bytes(self.instance) + sum(int(r.size) for r in self.instance.regions)
        for region in self.instance.regions:  # sparse regions: copies of their live ranges only
            parts = None if region.kind == "global" else region_parts(self.instance, region, 2 << 20)
            if parts is not None:
                need -= 2 * parts.zero_bytes
        return (f"not enough device memory to restore instance {self.instance.id}: it needs about "
                f"{need / gib:.2f} GiB, {free / gib:.2f} GiB of {total / gib:.2f} GiB are free on "
                f"{self.device.name}; free memory on the GPU (other processes) or replay on a larger one")

    def _driver_failure(self, message: str, error, kind: str,
                        cls: type[DeviceError] = DeviceError) -> DeviceError:
        """A driver error as this replay's failure of ``kind``, or ``context-poisoned``
        when it left the CUDA context unusable: a sticky error, or a context that no longer
        answers a synchronize afterwards."""
        lost = None if is_sticky(error) else self._context_lost()
        if is_sticky(error) or lost is not None:
            after = f"; checked afterwards: {lost}" if lost else ""
            return cls(f"{message} (the GPU context is unusable now{after}; replay in a fresh "
                       "process)", kind=CONTEXT_POISONED)
        return cls(message, kind=kind)

    def _context_lost(self) -> str | None:
        """None when the device's context still works, else why not."""
        try:
            self.device.synchronize()
            self.device.memory_info()
        except Exception as error:  # noqa: BLE001 - any failure here means a lost context
            return f"{type(error).__name__}: {error}"
        return None

    def _replay(self, compiled, replay, grid, block, shared, result: ReplayResult) -> None:
        from mneme.runtime import DriverError

        device = self.device
        image = self._restore(result)
        try:
            loaded = self._load(compiled)
            function = loaded.function
            missing = image.bind_module(loaded.module)
            attributes = function.attributes
            if shared > DEFAULT_SHARED_LIMIT:
                function.set_max_dynamic_shared_memory(shared)
        except DriverError as error:
            raise self._driver_failure(f"the driver refused the compiled kernel: {error}", error,
                                       LAUNCH_REFUSED, KernelFailedError) from None
        # The snapshot holds every global of the recorded module; one this kernel does not
        # use (another kernel's counter) is rightly absent from its compiled module.
        used = {g.name for g in self.instance.kernel.globals}
        for symbol in missing:
            if symbol in used:
                result.notes.append(f"global {symbol} is not in the compiled module (not reset)")
        result.registers = int(attributes.num_registers) or result.registers
        threads = product(block)
        if threads > int(attributes.max_threads_per_block):
            raise LaunchConfigError(
                f"block of {threads} threads exceeds what the compiled kernel allows "
                f"({attributes.max_threads_per_block} threads: launch bounds or registers)"
            )
        if self.instance.cooperative:
            check_resident(self, function, grid, block, shared)
        needed = max((p.offset + p.size for p in function.params), default=0)
        if len(self.args) < needed:
            raise ReplayConfigError(
                f"the recorded argument buffer has {len(self.args)} bytes, the kernel takes {needed}"
            )
        # CU_LAUNCH_PARAM_BUFFER_SIZE must be the kernel's parameter size exactly: a
        # recorded buffer with tail padding (e.g. rounded up to 8 bytes) is refused with
        # CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES.
        args = self.args[:needed]
        if self._stream is None:
            self._stream = device.stream()
        start = time.perf_counter()
        self._time(function, replay, grid, block, args, shared, image, result)
        result.timings["run"] = time.perf_counter() - start
        if replay.verify:
            start = time.perf_counter()
            result.mismatches = self.verify(replay)
            result.verified = not result.mismatches
            result.timings["verify"] = time.perf_counter() - start
            if self._profile is not None and replay.determinism_runs:
                result.determinism = self._profile.classes()
                for name, kind in result.determinism.items():
                    if kind == nd.ANY:
                        result.notes.append(
                            f"{name} not checked: the unchanged kernel does not reproduce it"
                        )

    def multiprocessors(self, compile_only: bool) -> int | None:
        """The replaying GPU's multiprocessors: a cooperative instance's code is compiled
        so that its grid is co-resident there (derive_compile_config).

        Parameters:
            compile_only: whether the replay launches nothing.

        Returns:
            Their number; None compile-only.
        """
        return None if compile_only else int(self.device.properties.multiprocessor_count)

    def _time(self, function, replay, grid, block, args, shared, image, result) -> None:
        """The timed iterations in the replay's cache mode (engine/timing.py); ``auto``
        measures each mode once per session and keeps the one nearest the in-app time."""
        from mneme.runtime import DriverError

        stream = self._stream
        if self._clock is None:
            self._clock = timing.KernelClock(self.device, replay.device)

        def launch():
            image.launched()
            try:
                function.launch(grid, block, args, shared, stream, cluster=self.instance.cluster,
                                cooperative=self.instance.cooperative)
            except DriverError as error:
                raise self._driver_failure(f"the launch was refused: {error}", error,
                                           LAUNCH_REFUSED, KernelFailedError) from None

        def synchronize():
            try:
                stream.synchronize()
            except DriverError as error:
                raise KernelFailedError(
                    f"the kernel failed on the device: {error} (the GPU context is unusable "
                    "now; replay in a fresh process)"
                ) from None

        def measure(mode):
            return self._clock.measure(launch, lambda: timing.prepare(image, stream, mode),
                                       stream, function.name, replay.warmup, replay.iterations,
                                       synchronize, setup=lambda: image.reset(stream))

        app = self.instance.app_time
        result.app_time_ms = app.median_ms if app is not None else None
        mode = replay.cache_mode
        if mode == timing.AUTO:
            mode, measured = self._auto_mode, None
            if mode is None:
                measured = {m: measure(m) for m in timing.MEASURED_MODES}
                result.mode_times = {m: timing.median(x.times) for m, x in measured.items()}
                if result.app_time_ms:
                    mode = timing.closest_mode(result.mode_times, result.app_time_ms)
                else:
                    mode = timing.WARM
                    result.notes.append("cache auto: the instance has no in-app time; warm")
                self._auto_mode = mode
            taken = measured[mode] if measured else measure(mode)
        else:
            taken = measure(mode)
        result.cache = mode
        result.times = taken.times
        result.timing_method = taken.method
        result.timing_note = taken.note
        result.sm_clock_mhz = taken.sm_clock_mhz
        result.energy_mj = taken.energy_mj
        if replay.energy_window_ms and taken.times:
            # Back to back launches change the data: the timed iterations' memory is
            # restored after (verification reads it), and their times are kept as measured.
            result.energy_mj = self._clock.energy(launch, lambda: image.reset(stream), replay.energy_window_ms,
                                                  timing.median(taken.times), synchronize)
            image.reset(stream)
            launch()
            synchronize()

    # -- lifetime ----------------------------------------------------------------------------

    @property
    def holds_memory(self) -> bool:
        """Whether the recorded memory is restored on the device now."""
        return self._image is not None

    def release_memory(self) -> None:
        """Gives the restored device memory back; the next replay restores it again.
        Compiled modules stay loaded."""
        if self._image is not None:
            if self._stream is not None:
                self._stream.synchronize()
            self._image.close()
            self._image = None

    def close(self) -> None:
        """Give the restored memory, loaded code and stream back; idempotent."""
        self.release_memory()
        self._loaded.clear()
        self._verifier = None
        self._clock = None
        if self._stream is not None:
            self._stream.synchronize()
            self._stream = None

    def __enter__(self) -> ReplaySession:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def replay(
    instance,
    compile: CompileConfig | None = None,
    replay: ReplayConfig | None = None,
    *,
    device=None,
    cache: CompileCache | None = None,
) -> ReplayResult:
    """Replay one instance once (a session of one observation).

    Parameters:
        instance: the instance.
        compile: the compile configuration; None for the default.
        replay: the replay configuration; None for the default.
        device: a ``mneme.runtime.Device``; None opens one when the replay needs a GPU.
        cache: a CompileCache; None for one in memory.

    Returns:
        The result (errors as :meth:`ReplaySession.run` raises them).
    """
    replay = replay or ReplayConfig()
    gpu = False if replay.compile_only else None
    with ReplaySession(instance, device=device, cache=cache, gpu=gpu) as session:
        return session.run(compile, replay)
