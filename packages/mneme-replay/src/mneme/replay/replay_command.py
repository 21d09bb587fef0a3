"""`mneme replay`: recompile a recorded kernel instance under a pipeline, run it at its
recorded addresses, verify it against the recorded epilogue and report metrics.

Exit status: 0 verified (or not checked), 1 verification failed, 2 user error.
"""

from __future__ import annotations

import contextlib
import dataclasses
from pathlib import Path

import click
from rich.console import Console
from rich.progress import DownloadColumn, Progress, TransferSpeedColumn

from .engine import (
    ReplayError,
    ReplaySession,
    ReplaySettings,
    open_database,
    select_instance,
)
from .engine.config import check_config_arch, read_settings
from .engine.restore import restore_bytes
from .engine.session import derive_compile_config
from .files import writable_directory
from .identity import check_kernel, database_of, read_identity, record_id_of
from .jit import CompileCache, check_pipeline

VERIFY_FAILED_EXIT = 1

#: Dynamic shared memory a block can opt in to, per NVIDIA architecture (CUDA
#: programming guide, "Technical Specifications"); AMD GPUs have 64 KiB of LDS.
MAX_SHARED_MEM = {
    "sm_70": 96 << 10, "sm_72": 96 << 10, "sm_75": 64 << 10, "sm_80": 163 << 10,
    "sm_86": 99 << 10, "sm_87": 163 << 10, "sm_89": 99 << 10, "sm_90": 227 << 10,
    "sm_90a": 227 << 10, "sm_100": 227 << 10, "sm_120": 99 << 10,
}
#: Where the architecture is unknown: more than any GPU offers per block.
MAX_SHARED_MEM_ANY = 256 << 10


def preflight(instance, compile_config, replay_config, shared_mem: int) -> None:
    """Refuse, before any compilation, what cannot work: specializing a parameter that
    lies outside the recorded argument buffer, impossible shared-memory sizes."""
    from .engine import LaunchConfigError, ReplayConfigError

    params = instance.kernel.params
    args = instance.args
    if replay_config.specialize:
        for index, param in enumerate(params):
            if not param.is_pointer and param.offset + param.size > len(args):
                raise ReplayConfigError(
                    f"--specialize: parameter {index} (bytes {param.offset}..{param.offset + param.size}) "
                    f"lies outside the recorded argument buffer of {len(args)} bytes"
                )
    for index in compile_config.specialize_args:
        if not (isinstance(index, int) and 0 <= index < len(params)):
            raise ReplayConfigError(
                f"specialize_args names parameter {index!r}, the kernel has {len(params)}"
            )
    arch = replay_config.arch or compile_config.arch
    limit = MAX_SHARED_MEM.get(arch, 64 << 10 if arch.startswith("gfx") else MAX_SHARED_MEM_ANY)
    if shared_mem > limit:
        raise LaunchConfigError(
            f"{shared_mem} bytes of dynamic shared memory are more than a block can have on "
            f"{arch} ({limit} bytes)"
        )


def _dims(recorded, x, y, z):
    if x is None and y is None and z is None:
        return None
    base = list(recorded)
    for axis, value in enumerate((x, y, z)):
        if value is not None:
            base[axis] = value
    return tuple(base)


def _write_ll(session: ReplaySession, settings: ReplaySettings, path: Path) -> None:
    """The kernel's IR after specialization and the pipeline (what codegen sees)."""
    from .jit import parse_module, prepare_module

    instance = session.instance
    replay = settings.replay
    compile_only = replay.compile_only or not session.gpu
    grid, block, _ = session.launch_shape(replay)
    arch, _ = session.target_arch(replay, compile_only)
    config = derive_compile_config(
        settings.compile, session.kernel, instance, replay, grid, block, arch,
        multiprocessors=session.multiprocessors(compile_only),
    )
    module = parse_module(session.ir, session.kernel.static_hash)
    prepare_module(module, session.kernel.name, config)
    module.run_passes(config.pipeline, config.arch)
    try:
        path.write_text(str(module))
    except OSError as error:
        raise ReplayError(f"cannot write {path}: {error.strerror}") from None


#: instances this large restore for more than about two seconds: they show a bar
PROGRESS_FROM_BYTES = 2 << 30


@contextlib.contextmanager
def restore_progress(instance):
    """A transient bar on stderr (a terminal only) of the bytes restore moves to the device,
    for instances large enough to take seconds; None (no bar) for the others."""
    total = restore_bytes(instance)
    if total < PROGRESS_FROM_BYTES:
        yield None
        return
    columns = (*Progress.get_default_columns(), DownloadColumn(binary_units=True), TransferSpeedColumn())
    with Progress(*columns, transient=True, console=Console(stderr=True)) as bar:
        task = bar.add_task("restoring", total=total)
        yield lambda n: bar.advance(task, n)


@click.command("replay")
@click.option(
    "-rdb",
    "--record-db",
    "database",
    metavar="DB",
    help="Recording database (or DB/KERNEL to pick a kernel); with a --config written by "
    "mneme tune, default: the database it was tuned on.",
)
@click.option(
    "-rid",
    "--record-id",
    "record_id",
    metavar="INSTANCE",
    help="Instance to replay: its dynamic hash (or prefix) or KERNEL/INSTANCE; "
    "may be omitted when there is one, or with a --config written by mneme tune.",
)
@click.argument("pipeline", required=False)
@click.option("--grid-dim-x", type=click.IntRange(min=1))
@click.option("--grid-dim-y", type=click.IntRange(min=1))
@click.option("--grid-dim-z", type=click.IntRange(min=1))
@click.option("--block-dim-x", type=click.IntRange(min=1))
@click.option("--block-dim-y", type=click.IntRange(min=1))
@click.option("--block-dim-z", type=click.IntRange(min=1))
@click.option("--shared-mem", type=click.IntRange(min=0), help="Dynamic shared memory, bytes.")
@click.option(
    "--specialize",
    is_flag=True,
    default=None,
    help="Fold the recorded scalar arguments into the code.",
)
@click.option(
    "--specialize-dims", is_flag=True, default=None, help="Fold blockDim/gridDim into the code."
)
@click.option(
    "--set-launch-bounds",
    is_flag=True,
    default=None,
    help="Set the max-threads launch bound to the block size.",
)
@click.option(
    "--max-threads", type=click.IntRange(min=1), help="Launch bound: max threads per block."
)
@click.option(
    "--min-blocks-per-sm", type=click.IntRange(min=1), help="Launch bound: min blocks per SM."
)
@click.option("--max-registers", type=click.IntRange(min=1), help="Register cap (.maxnreg).")
@click.option("--codegen-opt", type=click.IntRange(0, 3), help="LLVM codegen optimization level.")
@click.option(
    "--output-ll",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Write the optimized IR here.",
)
@click.option("--iterations", type=click.IntRange(min=1), help="Timed iterations (default 5).")
@click.option("--warmup", type=click.IntRange(min=0), help="Untimed iterations first (default 1).")
@click.option(
    "--cache",
    type=click.Choice(["warm", "cold", "app", "auto"]),
    help="Cache state of each timed iteration: warm (the data of the last iteration in "
    "L2; default), cold (L2 flushed), app (L2 flushed, then the kernel's outputs "
    "restored, as the application's previous kernel leaves them), auto (per instance, the "
    "mode nearest the recorded in-app time).",
)
@click.option(
    "--flush-l2", is_flag=True, default=None, help="Flush the L2 cache before each iteration "
    "(--cache cold)."
)
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
@click.option("--no-verify", is_flag=True, help="Do not compare with the recorded epilogue.")
@click.option(
    "--code",
    type=click.Choice(["auto", "ptx", "cubin"]),
    default="auto",
    show_default=True,
    help="Kernels of nvcc builds: replay from the recorded PTX (through ptxas) or the "
    "recorded cubin as it is (auto: PTX when recorded).",
)
@click.option(
    "--determinism-runs",
    type=click.IntRange(0, 100),
    help="Runs of the unchanged kernel that decide which regions it reproduces, once per "
    "instance (default 3; 0: every region bit-exact).",
)
@click.option(
    "--compile-only", is_flag=True, help="Compile to a cubin and report static metrics only."
)
@click.option(
    "--config",
    "config_file",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Configuration saved by a previous run (--json output) or by tuning.",
)
@click.option(
    "--cache-dir",
    type=click.Path(file_okay=False, path_type=Path),
    help="On-disk compile cache (default: in memory only).",
)
@click.option(
    "--clock-control", default="base", show_default=True, metavar="base|none|MHZ",
    help="Lock the GPU's SM clock while measuring (base: its default applications clock, as "
    "Nsight Compute does; a number: that clock in MHz; none: as the driver sets it). Needs "
    "root; otherwise one line and the replay measures unlocked.",
)
def replay(
    database,
    record_id,
    pipeline,
    grid_dim_x,
    grid_dim_y,
    grid_dim_z,
    block_dim_x,
    block_dim_y,
    block_dim_z,
    shared_mem,
    specialize,
    specialize_dims,
    set_launch_bounds,
    max_threads,
    min_blocks_per_sm,
    max_registers,
    codegen_opt,
    output_ll,
    iterations,
    warmup,
    cache,
    flush_l2,
    as_json,
    no_verify,
    code,
    determinism_runs,
    compile_only,
    config_file,
    cache_dir,
    clock_control,
):
    """Replay a recorded kernel instance under PIPELINE (default: default<O3>)."""
    from mneme.runtime import DriverError
    from mneme.runtime.clock_control import held_clocks, parse_clock_policy

    clock_policy = parse_clock_policy(clock_control)

    settings, config_arch, identity = ReplaySettings(), None, None
    if config_file is not None:
        settings, config_arch = read_settings(config_file)
        identity = read_identity(config_file)
    if database is None:
        if config_file is None:
            raise click.UsageError("Missing option '-rdb' / '--record-db'.")
        database = database_of(identity, config_file)
    compile_changes = {}
    if pipeline is not None:
        compile_changes["pipeline"] = pipeline
    for name, value in (
        ("codegen_opt_level", codegen_opt),
        ("max_threads", max_threads),
        ("min_blocks", min_blocks_per_sm),
        ("max_registers", max_registers),
    ):
        if value is not None:
            compile_changes[name] = value
    compile_config = dataclasses.replace(settings.compile, **compile_changes)  # validated
    check_pipeline(compile_config.pipeline, compile_config.triple)

    db, kernel = open_database(database)
    if record_id is None and kernel is None:
        record_id = record_id_of(identity, db, config_file)  # the instance it was tuned on
    instance = select_instance(db, kernel, record_id)
    check_kernel(identity, instance, config_file)

    replay_changes = {}
    grid = _dims(settings.replay.grid or instance.grid, grid_dim_x, grid_dim_y, grid_dim_z)
    block = _dims(settings.replay.block or instance.block, block_dim_x, block_dim_y, block_dim_z)
    for name, value in (
        ("grid", grid),
        ("block", block),
        ("shared_mem", shared_mem),
        ("specialize", specialize),
        ("specialize_dims", specialize_dims),
        ("set_launch_bounds", set_launch_bounds),
        ("iterations", iterations),
        ("warmup", warmup),
        ("flush_l2", flush_l2),
        ("cache", cache),
        ("determinism_runs", determinism_runs),
    ):
        if value is not None:
            replay_changes[name] = value
    if no_verify:
        replay_changes["verify"] = False
    if compile_only:
        replay_changes["compile_only"] = True
    replay_config = dataclasses.replace(settings.replay, **replay_changes)
    settings = ReplaySettings(compile_config, replay_config)

    shared = instance.shared_mem if replay_config.shared_mem is None else replay_config.shared_mem
    preflight(instance, compile_config, replay_config, shared)

    cache = None
    if cache_dir is not None:  # checked now: the cache writes only after the first compile
        writable_directory(cache_dir, "use --cache-dir", ReplayError)
        cache = CompileCache(cache_dir)
    gpu = False if replay_config.compile_only else None
    measured = [] if replay_config.compile_only else [replay_config.device]
    try:
        with held_clocks(clock_policy, measured, lambda line: click.echo(line, err=True)) as clocks, \
                restore_progress(instance) as progress, \
                ReplaySession(instance, cache=cache, gpu=gpu, code=code, progress=progress) as session:
            target, _ = session.target_arch(replay_config, replay_config.compile_only or not session.gpu)
            check_config_arch(config_file, config_arch, target)
            if output_ll is not None:
                _write_ll(session, settings, output_ll)
            result = session.run(compile_config, replay_config)
            if session.gpu:
                result.clock_control = clocks.describe()
    except DriverError as error:
        raise ReplayError(f"device error: {error}") from None

    if as_json:
        click.echo(result.to_json(indent=2))
    else:
        click.echo(result.summary())
    if result.verified is False:
        raise SystemExit(VERIFY_FAILED_EXIT)
