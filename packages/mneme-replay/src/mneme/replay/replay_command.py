"""`mneme replay`: recompile a recorded kernel instance under a pipeline, run it at its
recorded addresses, verify it against the recorded epilogue and report metrics.

Exit status: 0 verified (or not checked), 1 verification failed, 2 user error.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import click

from .engine import (
    ReplayError,
    ReplaySession,
    ReplaySettings,
    open_database,
    select_instance,
)
from .engine.session import derive_compile_config
from .jit import CompileCache, check_pipeline

VERIFY_FAILED_EXIT = 1


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
        settings.compile, session.kernel, instance, replay, grid, block, arch
    )
    module = parse_module(session.ir, session.kernel.static_hash)
    prepare_module(module, session.kernel.name, config)
    module.run_passes(config.pipeline, config.arch)
    try:
        path.write_text(str(module))
    except OSError as error:
        raise ReplayError(f"cannot write {path}: {error.strerror}") from None


@click.command("replay")
@click.option(
    "-rdb",
    "--record-db",
    "database",
    required=True,
    metavar="DB",
    help="Recording database (or DB/KERNEL to pick a kernel).",
)
@click.option(
    "-rid",
    "--record-id",
    "record_id",
    metavar="INSTANCE",
    help="Instance to replay: its dynamic hash (or prefix) or KERNEL/INSTANCE; "
    "may be omitted when there is one.",
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
    "--flush-l2", is_flag=True, default=None, help="Flush the L2 cache before each iteration."
)
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
@click.option("--no-verify", is_flag=True, help="Do not compare with the recorded epilogue.")
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
    flush_l2,
    as_json,
    no_verify,
    compile_only,
    config_file,
    cache_dir,
):
    """Replay a recorded kernel instance under PIPELINE (default: default<O3>)."""
    from mneme.runtime import DriverError

    settings = ReplaySettings()
    if config_file is not None:
        try:
            settings = ReplaySettings.from_json(config_file.read_text())
        except OSError as error:
            raise ReplayError(f"cannot read {config_file}: {error.strerror}") from None
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
    instance = select_instance(db, kernel, record_id)

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
    ):
        if value is not None:
            replay_changes[name] = value
    if no_verify:
        replay_changes["verify"] = False
    if compile_only:
        replay_changes["compile_only"] = True
    replay_config = dataclasses.replace(settings.replay, **replay_changes)
    settings = ReplaySettings(compile_config, replay_config)

    cache = CompileCache(cache_dir) if cache_dir is not None else None
    gpu = False if replay_config.compile_only else None
    try:
        with ReplaySession(instance, cache=cache, gpu=gpu) as session:
            if output_ll is not None:
                _write_ll(session, settings, output_ll)
            result = session.run(compile_config, replay_config)
    except DriverError as error:
        raise ReplayError(f"device error: {error}") from None

    if as_json:
        click.echo(result.to_json(indent=2))
    else:
        click.echo(result.summary())
    if result.verified is False:
        raise SystemExit(VERIFY_FAILED_EXIT)
