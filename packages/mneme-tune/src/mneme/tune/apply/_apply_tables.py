"""The tables `mneme run --apply` prints, from plain data (no GPU needed to render them).

Ids are printed whole at any width, piped or in a terminal (mneme.replay.tables): the
instance a kernel was tuned on is what ``mneme replay``/``tune`` take. Where a terminal is
too narrow, kernel names are shortened first and data columns dropped from the right,
with a note; piped output is never narrowed.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from mneme.replay.tables import Column, print_table
from rich.console import Console

#: the kernels to swap in: one row per best.json
LISTING_COLUMNS = (
    Column("kernel", role="name"),
    Column("tuned on", role="id"),
    Column("configuration"),
    Column("tuning verdict"),
)

#: the kernels' times in the application and in replay: one row per kernel of the
#: ``--json`` report's "kernels"
TIMES_COLUMNS = (
    Column("kernel", role="name"),
    Column("tuned on", role="id"),
    Column("launches", justify="right"),
    Column("swapped", justify="right"),
    Column("fidelity", justify="right"),
    Column("in app: first", justify="right"),
    Column("in app: original", justify="right"),
    Column("in app: tuned", justify="right"),
    Column("in app: speedup", justify="right"),
    Column("replay: recorded", justify="right"),
    Column("replay: tuned", justify="right"),
    Column("replay: speedup", justify="right"),
)


def milliseconds(value: float | None) -> str:
    """A time for a table.

    Parameters:
        value: milliseconds; None when not measured.

    Returns:
        Four significant digits, or ``-``.
    """
    return "-" if value is None else f"{value:.4g}"


def ratio(a: float | None, b: float | None) -> str:
    """A speedup for a table.

    Parameters:
        a: the time before.
        b: the time after.

    Returns:
        ``a / b`` as ``1.23x``, or ``-`` when either is missing or zero.
    """
    return "-" if not a or not b else f"{a / b:.2f}x"


def listing_row(kernel: Any) -> list[str]:
    """A tuned kernel as a row of the listing.

    Parameters:
        kernel: a TunedKernel (apply_plan).

    Returns:
        Its cells.
    """
    (_, block, shared), bound = kernel.tuned, f", bound {kernel.bound}" if kernel.bound else ""
    block_text = "x".join(str(int(v)) for v in block)
    return [kernel.demangled_name, kernel.instance_id,
            f"block {block_text}, shared {shared}, grid {kernel.grid_rule}{bound}", kernel.verdict or "-"]


def print_listing(console: Console, rows: Sequence[Sequence[str]]) -> None:
    """Print the listing of the tuned kernels to swap in.

    Parameters:
        console: the console.
        rows: the rows (:func:`listing_row`).
    """
    print_table(console, LISTING_COLUMNS, rows, title=f"tuned kernels to swap in ({len(rows)})")


def times_row(row: dict[str, Any]) -> list[str]:
    """One kernel of the report as a row of the times table.

    Parameters:
        row: the kernel's entry, as ``--json`` writes it.

    Returns:
        Its cells.
    """
    swapped = (f"{row['swapped']} ({row['refused']} refused)" if row.get("refused")
               else str(row.get("swapped", 0)))
    fidelity = row.get("fidelity")
    return [row["kernel"], row["instance"], str(row.get("launches", 0)), swapped,
            "-" if fidelity is None else f"{fidelity:.2f}",
            milliseconds(row.get("in_app_original_first_ms")),
            milliseconds(row.get("in_app_original_ms")), milliseconds(row.get("in_app_tuned_ms")),
            ratio(row.get("in_app_original_ms"), row.get("in_app_tuned_ms")),
            milliseconds(row.get("replay_recorded_ms")), milliseconds(row.get("replay_tuned_ms")),
            ratio(row.get("replay_recorded_ms"), row.get("replay_tuned_ms"))]


def print_kernel_times(console: Console, rows: Sequence[dict[str, Any]], in_app_method: str,
                       replay_method: str) -> None:
    """Print the tuned kernels' times inside the application and in replay, and how
    each was timed.

    Parameters:
        console: the console.
        rows: the kernels' entries, as ``--json`` writes them.
        in_app_method: how the in-app times were measured.
        replay_method: how the replayed times were.
    """
    print_table(console, TIMES_COLUMNS, [times_row(r) for r in rows],
                title="tuned kernels in the application and in replay (ms per launch)")
    console.print("medians, first launch apart; fidelity = replayed / in-app time of the recorded code; "
                  f"in app timed by {in_app_method}; replay timed by {replay_method}",
                  soft_wrap=True, markup=False)
