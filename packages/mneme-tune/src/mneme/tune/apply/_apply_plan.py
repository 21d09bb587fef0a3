"""What ``mneme run --apply`` swaps into an application.

Each ``best.json`` (``mneme tune --report``) names the database, kernel and instance it
was tuned on. Its configuration is compiled for the GPU here, and turned into a launch
rule that ``libmneme_apply.so`` follows for every launch of that kernel:

- code-only changes (pipeline, ptxas options, register cap, unrolling) hold for every
  launch, so every launch runs the tuned code with its own launch configuration;
- a tuned block replaces the recorded block only in launches that used the recorded
  block; the grid then follows as the launch space derived it (``cover``: the same
  threads per axis; ``keep``; ``fixed``: the tuned grid for the recorded grid only), and
  per-thread dynamic shared memory scales with the block;
- a compiled-in launch bound excludes larger blocks, specialised dimensions exclude any
  other launch shape, and specialised scalar arguments exclude launches with other values:
  those launches run the application's own code.

The plan is a line format (docs/tune.md) so the preloaded library needs no JSON parser.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mneme.replay.engine import ReplaySession, open_database, select_instance
from mneme.replay.engine.config import ReplaySettings, read_settings
from mneme.replay.engine.session import derive_compile_config
from mneme.replay.identity import check_kernel, database_of, read_identity, record_id_of

from ..errors import ApplyError

PLAN_HEADER = "mneme-apply-plan 1"


Dim3 = tuple[int, int, int]


@dataclass
class TunedKernel:
    """One tuned kernel, ready to be swapped in.

    Attributes:
        source: the best.json it comes from.
        instance: mneme.replay.db Instance it was tuned on (replayed for the fidelity
            column)
        name: the kernel's mangled name.
        demangled_name: its demangled name.
        settings: the tuned configuration.
        binary: the compiled code (a cubin).
        function: the kernel's name in it.
        recorded: the recorded grid, block and shared memory.
        tuned: the tuned grid, block and shared memory.
        grid_rule: how the tuned grid follows a launch's (keep, cover, fixed: grid_rule).
        shared_per_thread: dynamic shared memory per thread when it scales with the block; 0
            when it does not.
        bound: the compiled-in max-threads bound; 0 for none.
        dims_exact: whether launch dimensions are compiled in (only launches with them are
            swapped).
        specialized_args: argument index -> the value compiled in (only launches with it are
            swapped).
        globals: the device globals the swapper copies around a launch
            (application_globals).
        verdict: the report's verdict on it.
    """

    source: Path
    instance: Any
    name: str
    demangled_name: str
    settings: ReplaySettings
    binary: bytes
    function: str
    recorded: tuple[Dim3, Dim3, int]
    tuned: tuple[Dim3, Dim3, int]
    grid_rule: str
    shared_per_thread: int
    bound: int
    dims_exact: bool
    specialized_args: dict[int, bytes] = field(default_factory=dict)
    globals: list[tuple[str, int]] = field(default_factory=list)
    verdict: str = ""

    @property
    def instance_id(self) -> str:
        return self.instance.id

    def plan_lines(self, cubin: Path) -> list[str]:
        """The kernel's lines of the swapper's plan file.

        Parameters:
            cubin: where its cubin was written.

        Returns:
            The lines, ``kernel ...`` to ``end``.
        """

        def dims(d) -> str:
            return " ".join(str(int(v)) for v in d)

        (rg, rb, rs), (tg, tb, ts) = self.recorded, self.tuned
        lines = [f"kernel {self.name}", f"cubin {cubin}", f"function {self.function}",
                 f"recorded {dims(rg)} {dims(rb)} {rs}", f"tuned {dims(tg)} {dims(tb)} {ts}",
                 f"grid {self.grid_rule}", f"shared_per_thread {self.shared_per_thread}",
                 f"bound {self.bound}", f"dims {'exact' if self.dims_exact else 'any'}"]
        lines += [f"arg {i} {raw.hex()}" for i, raw in sorted(self.specialized_args.items())]
        lines += [f"global {name} {size}" for name, size in self.globals]
        return lines + ["end"]


def configs_in(path: Path) -> list[Path]:
    """The configurations a command line names.

    Parameters:
        path: a best.json, or a folder (a report folder, or a folder of them).

    Returns:
        The best.json files: the one given, or every one under the folder.

    Raises:
        ApplyError: no such path, or a folder without a best.json.
    """
    if path.is_file():
        return [path]
    if path.is_dir():
        found = sorted(path.rglob("best.json"))
        if found:
            return found
        raise ApplyError(f"{path} holds no best.json (write one with mneme tune --report DIR)")
    raise ApplyError(f"{path} does not exist (give a best.json or a folder of tuning reports)")


def _threads(d) -> int:
    return math.prod(int(v) for v in d)


def grid_rule(recorded_grid: Dim3, recorded_block: Dim3, block: Dim3, grid: Dim3) -> str:
    """How the tuned grid relates to the recorded launch (LaunchSpace's grid modes).

    Parameters:
        recorded_grid: the recorded grid.
        recorded_block: the recorded block.
        block: the tuned block.
        grid: the tuned grid.

    Returns:
        ``keep`` (the recorded grid), ``cover`` (the recorded threads covered) or
        ``fixed``.
    """
    cover = tuple(max(1, math.ceil(g * b / nb))
                  for g, b, nb in zip(recorded_grid, recorded_block, block, strict=True))
    if tuple(grid) == tuple(recorded_grid):
        return "keep"
    if tuple(grid) == cover:
        return "cover"
    return "fixed"


#: LLVM's NVPTX address space of __shared__ variables: per block, no application memory
SHARED_ADDRESS_SPACE = 3


def application_globals(kernel) -> list[tuple[str, int]]:
    """(name, size) of the device globals a kernel uses that live in the application's
    module (``__device__``, ``__constant__``): the swapper copies each into the tuned
    module and back around a swapped launch. A ``__shared__`` variable (a block's, as
    cooperative_groups reductions keep) is no memory of the application's: left out (the
    swapper would find it unregistered and keep the original code).

    Parameters:
        kernel: the recorded kernel.

    Returns:
        ``(name, size)`` of each.
    """
    return [(g.name, int(g.size)) for g in kernel.globals
            if int(getattr(g, "address_space", 1)) != SHARED_ADDRESS_SPACE]


def load_tuned(path: Path, arch: str | None = None) -> TunedKernel:
    """Compile a tuned configuration, to swap it into the application.

    Parameters:
        path: a best.json.
        arch: the target; None for this machine's GPU, else the recorded architecture.

    Returns:
        The tuned kernel.

    Raises:
        ApplyError: the best.json does not say which kernel it was tuned for.
    """
    settings, _ = read_settings(path)
    identity = read_identity(path)
    if identity is None:
        raise ApplyError(
            f"{path} does not say which kernel it was tuned for (no identity section): "
            "write it with mneme tune --report from this version")
    db, _ = open_database(database_of(identity, path))
    instance = select_instance(db, None, record_id_of(identity, db, path))
    check_kernel(identity, instance, path)
    kernel = instance.kernel
    replay = settings.replay
    rec_grid, rec_block = tuple(instance.grid), tuple(instance.block)
    rec_shared = int(instance.shared_mem)
    grid = tuple(replay.grid or rec_grid)
    block = tuple(replay.block or rec_block)
    shared = rec_shared if replay.shared_mem is None else int(replay.shared_mem)
    per_thread = 0
    if (rec_shared and shared != rec_shared and rec_shared % _threads(rec_block) == 0
            and shared == rec_shared // _threads(rec_block) * _threads(block)):
        per_thread = rec_shared // _threads(rec_block)
    with ReplaySession(instance, gpu=None) as session:
        compile_only = not session.gpu
        target, _ = session.target_arch(replay.with_(arch=arch) if arch else replay, compile_only)
        config = derive_compile_config(settings.compile, kernel, instance, replay, grid, block,
                                       target, session.args, session.multiprocessors(compile_only))
        compiled, _ = session.compile(config)
    return TunedKernel(
        source=path, instance=instance, name=kernel.name, demangled_name=kernel.demangled_name,
        settings=settings, binary=compiled.binary,
        function=compiled.kernel, recorded=(rec_grid, rec_block, rec_shared),
        tuned=(grid, block, shared), grid_rule=grid_rule(rec_grid, rec_block, block, grid),
        shared_per_thread=per_thread, bound=int(config.max_threads or 0),
        dims_exact=bool(config.block_dim or config.grid_dim),
        specialized_args={int(i): bytes(v) for i, v in config.specialize_args.items()},
        globals=application_globals(kernel),
        verdict=str(identity.get("verdict") or ""))


def write_plan(kernels: list[TunedKernel], directory: Path) -> Path:
    """Write the swapper's plan file and one cubin per kernel.

    Parameters:
        kernels: the tuned kernels.
        directory: the folder.

    Returns:
        The plan file.

    Raises:
        ApplyError: a kernel tuned twice (which of the two would be applied is not the
            user's intent).
    """
    seen: dict[str, Path] = {}
    for k in kernels:
        if k.name in seen:
            raise ApplyError(f"{k.demangled_name} is tuned by both {seen[k.name]} and {k.source}: "
                             "apply one of them")
        seen[k.name] = k.source
    lines = [PLAN_HEADER]
    for index, k in enumerate(kernels):
        cubin = directory / f"kernel{index}.cubin"
        cubin.write_bytes(k.binary)
        lines += k.plan_lines(cubin.resolve())
    plan = directory / "plan.txt"
    plan.write_text("\n".join(lines) + "\n")
    return plan


@dataclass
class KernelReport:
    """What one run with the swapper preloaded saw of one kernel. Times come from the GPU's
    own kernel timestamps (``method`` "cupti") or, where CUPTI could not time, from CUDA
    events around each launch ("events"); the first launch is kept apart (module load, cold
    caches) and the medians are over the launches after it.

    Attributes:
        launches: launches of the kernel the swapper saw.
        swapped: of them, those that ran the tuned code.
        refused: tuned launches the driver refused; the original code ran instead
        same_config: launches with the recorded launch shape (grid, block, shared memory).
        method: how they were timed: cupti or events.
        timed: launches timed.
        time_s: their total time in seconds.
        first_ms: the first launch's time (module load, cold caches).
        median_ms: the median of the launches after it.
        same_config_timed: timed launches with the recorded launch shape.
        same_config_time_s: their total time in seconds.
        same_config_median_ms: their median.
        other_dims: launches that ran the original code for other dimensions than the
            compiled-in ones (launch_swap.cpp).
        other_args: for another value of a specialised argument.
        over_bound: for a block over the compiled-in bound.
        attributes: for launch attributes.
        cupti_launches: launches of the kernel CUPTI saw (with timing): more than
            ``launches`` means the application launched it through a path the swapper does not
            intercept
        swapped_on: swapped launches per GPU ordinal (a multi-GPU application's kernel runs
            on several)
        load_error: why the tuned code did not load ("" when it did or was never tried)
    """

    launches: int = 0
    swapped: int = 0
    refused: int = 0
    same_config: int = 0
    method: str = ""
    timed: int = 0
    time_s: float = 0.0
    first_ms: float | None = None
    median_ms: float | None = None
    same_config_timed: int = 0
    same_config_time_s: float = 0.0
    same_config_median_ms: float | None = None
    other_dims: int = 0
    other_args: int = 0
    over_bound: int = 0
    attributes: int = 0
    cupti_launches: int = 0
    swapped_on: dict[int, int] = field(default_factory=dict)
    load_error: str = ""

    @property
    def mean_ms(self) -> float | None:
        return 1e3 * self.time_s / self.timed if self.timed else None

    @property
    def same_config_mean_ms(self) -> float | None:
        return 1e3 * self.same_config_time_s / self.same_config_timed if self.same_config_timed else None


@dataclass
class SwapReport:
    """The swapper's report of one run: per kernel (by name), and why CUPTI did not time
    (empty when it did).

    Attributes:
        kernels: kernel name -> what the swapper saw of it.
        fallback: why CUPTI did not time (empty when it did).
        total_ms: every kernel of the process summed by CUPTI (MNEME_APPLY_TOTAL): ms and
            launches
        total_launches: and launches.
        device_ms: the same per GPU ordinal: ms and launches
        device_launches: and launches.
    """

    kernels: dict[str, KernelReport] = field(default_factory=dict)
    fallback: str = ""
    total_ms: float | None = None
    total_launches: int = 0
    device_ms: dict[int, float] = field(default_factory=dict)
    device_launches: dict[int, int] = field(default_factory=dict)

    def get(self, name: str) -> KernelReport:
        """What the swapper saw of one kernel.

        Parameters:
            name: the kernel's mangled name.

        Returns:
            Its report (an empty one when the swapper saw none of it).
        """
        return self.kernels.get(name, KernelReport())


def read_report(path: Path) -> SwapReport:
    """Read the swapper's report of a run.

    Parameters:
        path: the report file.

    Returns:
        The report; empty when the application ended without reaching exit handlers.
    """
    out = SwapReport()
    if not path.is_file():
        return out
    lines = path.read_text().splitlines()
    errors: dict[str, str] = {}
    for line in lines[1:]:
        words = line.split()
        if len(words) >= 2 and words[0] == "fallback":
            out.fallback = line.split(None, 1)[1]
        if len(words) >= 5 and words[0] == "total":
            totals = dict(zip(words[1::2], words[2::2], strict=False))
            out.total_ms = float(totals.get("kernel_ms", 0))
            out.total_launches = int(totals.get("launches", 0))
        if len(words) >= 6 and words[0] == "total_device":
            totals = dict(zip(words[2::2], words[3::2], strict=False))
            out.device_ms[int(words[1])] = float(totals.get("kernel_ms", 0))
            out.device_launches[int(words[1])] = int(totals.get("launches", 0))
        if len(words) >= 3 and words[0] == "load_error":
            errors[words[1]] = line.split(None, 2)[2]
        if len(words) < 2 or words[0] != "kernel":
            continue
        values = dict(zip(words[2::2], words[3::2], strict=False))
        timed = int(values.get("timed", 0))
        same_timed = int(values.get("same_config_timed", 0))

        def ms(key: str, count: int, values: dict[str, str] = values) -> float | None:
            return float(values[key]) if count and key in values else None

        out.kernels[words[1]] = KernelReport(
            launches=int(values.get("launches", 0)), swapped=int(values.get("swapped", 0)),
            refused=int(values.get("refused", 0)), same_config=int(values.get("same_config", 0)),
            method=values.get("method", "events"), timed=timed, time_s=float(values.get("time_s", 0)),
            first_ms=ms("first_ms", timed), median_ms=ms("median_ms", timed),
            same_config_timed=same_timed, same_config_time_s=float(values.get("same_config_time_s", 0)),
            same_config_median_ms=ms("same_config_median_ms", same_timed),
            other_dims=int(values.get("other_dims", 0)), other_args=int(values.get("other_args", 0)),
            over_bound=int(values.get("over_bound", 0)), attributes=int(values.get("attributes", 0)),
            cupti_launches=int(values.get("cupti_launches", 0)),
            swapped_on={int(d): int(n) for d, n in (pair.split(":") for pair in
                                                    values.get("swapped_on", "").split(",") if pair)})
    for name, why in errors.items():
        if name in out.kernels:
            out.kernels[name].load_error = why
    return out
