"""`mneme profile DB`: where the recorded application's GPU time goes, kernel by kernel
and launch shape by shape, with what tuning can change and the Amdahl bound."""

from __future__ import annotations

import json
from pathlib import Path

import click
from mneme.replay.engine import open_database
from mneme.replay.tables import Column, console, print_table

from .profile import TUNABLE, Ranking, rank

__all__ = ["profile"]

COLUMNS = (
    Column("#", justify="right"), Column("kernel", role="name"), Column("grid / block / smem"),
    Column("launches", justify="right"), Column("total ms", justify="right"),
    Column("share", justify="right"), Column("cumul.", justify="right"),
    Column("tunable"), Column("app if 2x", justify="right"), Column("instances", role="id"),
)


def _rows(ranking: Ranking, top: int | None) -> list[list[str]]:
    out = []
    shown = ranking.rows if top is None else ranking.rows[:top]
    for index, row in enumerate(shown):
        e = row.entry
        instances = row.instances[0] if len(row.instances) == 1 else (
            f"{row.instances[0]} +{len(row.instances) - 1}" if row.instances else "-")
        out.append([str(index + 1), row.display_name, e.shape, str(e.launches), f"{e.total_ms:.3f}",
                    f"{100 * row.share:.1f}%", f"{100 * row.cumulative:.1f}%", row.tunable,
                    f"{ranking.kernel_ms / row.bound_2x:.3f}x" if row.bound_2x > 0 else "-", instances])
    return out


@click.command("profile")
@click.argument("database", metavar="DB")
@click.option("--top", type=click.IntRange(min=1), default=None,
              help="Rows to print (default: every launch shape).")
@click.option("--json", "as_json", is_flag=True, help="Print everything as JSON.")
@click.option("--plot", "plot_path", type=click.Path(dir_okay=False, path_type=Path),
              help="Write the Pareto plot (PNG) here.")
def profile(database: str, top: int | None, as_json: bool, plot_path: Path | None):
    """Rank the recorded application's kernels by their share of its GPU kernel time:
    every launch (recorded or not) as the recorder timed it with CUPTI."""
    db, _ = open_database(database)
    ranking = rank(db)
    if plot_path is not None:
        from .pareto import write_pareto

        write_pareto(ranking, plot_path)
    if as_json:
        click.echo(json.dumps(ranking.to_json(), indent=2))
        return
    out = console()
    p = ranking.profile
    print_table(out, COLUMNS, _rows(ranking, top),
                title=f"{db.root}: {p.kernel_ms:.3f} ms of kernel time in {p.launches} launches "
                      f"of {len(ranking.rows)} kernel shapes ({p.method})")
    recorded = sum(r.share for r in ranking.rows if r.instances)
    tunable = sum(r.share for r in ranking.rows if r.instances and r.tunable != "none")
    out.print(f"recorded instances cover {100 * recorded:.1f}% of the kernel time; "
              f"tunable ({', '.join(sorted({r.tunable for r in ranking.rows if r.instances}))}): "
              f"{100 * tunable:.1f}%", soft_wrap=True)
    for key in sorted({r.tunable for r in ranking.rows}):
        out.print(f"  {key}: {TUNABLE[key]}", soft_wrap=True)
    if p.dropped:
        out.print(f"CUPTI dropped {p.dropped} kernel records while recording: shares are of the "
                  "launches it kept", soft_wrap=True)
    if not p.instances_tagged:
        out.print("launches were not tagged by instance (CUPTI too old): in-app times of "
                  "instances are their kernel and shape's", soft_wrap=True)
    if plot_path is not None:
        out.print(f"plot: {plot_path}", soft_wrap=True)
