"""Tables of the commands that print ids (ls, show; tune's reports): an id is printed
whole, never cut or folded, however narrow the terminal, so that it can be pasted into
``mneme replay``/``tune``. Where the width is short, optional columns go first, then
names are shortened; piped output is never squeezed.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from rich.console import Console, JustifyMethod
from rich.table import Table

#: A name column is shortened to this before any data column is dropped...
SHORT_NAME_WIDTH = 32
#: ...and to this at the narrowest ("saxpy(float, f…").
MIN_NAME_WIDTH = 16


@dataclass(frozen=True)
class Column:
    header: str
    #: "id": printed whole, always; "name": may be shortened with an ellipsis; "data":
    #: printed whole, but dropped first when the width is short
    role: str = "data"
    justify: JustifyMethod = "left"


def console(stderr: bool = False) -> Console:
    """A console for tables: on a terminal its width; piped, as wide as the output needs
    (``print_table`` widens it), whatever COLUMNS says."""
    return Console(highlight=False, stderr=stderr)


def _natural_widths(columns: Sequence[Column], rows: Sequence[Sequence[str]]) -> list[int]:
    return [max([len(c.header), *(len(r[i]) for r in rows)]) for i, c in enumerate(columns)]


def _table_width(widths: Sequence[int]) -> int:
    # rich's default box: a border before each column and at the end, one space of
    # padding on each side of every cell
    return sum(widths) + 3 * len(widths) + 1


def fit(columns: Sequence[Column], rows: Sequence[Sequence[str]], width: int | None) -> tuple[list[int], list[int]]:
    """(indices of the columns kept, their widths) for a table at most ``width`` wide
    (None: no limit). Names shrink to SHORT_NAME_WIDTH, then data columns go from the
    right, then names shrink to MIN_NAME_WIDTH; id columns always keep their full width, so the result may still be
    wider than ``width``."""
    keep = list(range(len(columns)))
    widths = dict(enumerate(_natural_widths(columns, rows)))
    if width is None:
        return keep, [widths[i] for i in keep]

    def total() -> int:
        return _table_width([widths[i] for i in keep])

    def shorten_names(floor: int) -> None:
        for index in keep:
            excess = total() - width
            if excess > 0 and columns[index].role == "name":
                widths[index] = max(min(floor, widths[index]), widths[index] - excess)

    shorten_names(SHORT_NAME_WIDTH)
    for index in reversed(range(len(columns))):
        if total() <= width:
            break
        if columns[index].role == "data":
            keep.remove(index)
    shorten_names(MIN_NAME_WIDTH)
    return keep, [widths[i] for i in keep]


def print_table(out: Console, columns: Sequence[Column], rows: Sequence[Sequence[str]],
                title: str | None = None) -> None:
    """Print ``rows`` (cells as strings) under ``columns`` with every id whole."""
    limit = out.width if out.is_terminal else None
    keep, widths = fit(columns, rows, limit)
    table = Table(title=title, title_justify="left")
    for index, width in zip(keep, widths, strict=True):
        column = columns[index]
        table.add_column(column.header, justify=column.justify, no_wrap=True,
                         min_width=width, max_width=width,
                         overflow="ellipsis" if column.role == "name" else "ignore")
    for row in rows:
        table.add_row(*(row[i] for i in keep))
    needed = _table_width(widths)
    if needed > out.width or not out.is_terminal:
        # wider than the terminal only when the ids alone need it: the terminal then
        # wraps the line, but the id's characters stay together and paste whole
        out.width = max(needed, len(title or ""))
    out.print(table, soft_wrap=False)
    dropped = [columns[i].header for i in range(len(columns)) if i not in keep]
    if dropped:
        out.print(f"(too narrow for: {', '.join(dropped)}; --json prints everything)", soft_wrap=True)
