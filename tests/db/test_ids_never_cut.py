"""Ids are printed whole (issue 21: piped or in a narrow terminal, `mneme ls` cut them to
`8594061e0fb038f9/ad8838ef4107aa…`, which cannot be pasted into replay or tune). Kernel
names may be shortened and other columns dropped, never an id."""

from __future__ import annotations

import pytest
from db_support import INFO, STATIC, kernel_record, mneme_piped, simple_instance
from mneme.replay import tables
from mneme.replay.commands import LS_COLUMNS
from mneme.replay.db import DatabaseWriter, KernelRecord
from rich.console import Console

LONG_NAME = "void very::long_namespace::kernel<" + ", ".join(["float"] * 30) + ">(float const*, float*, int)"
OTHER = "0123456789abcdef"


@pytest.fixture(scope="module")
def long_named_db(tmp_path_factory):
    """Two kernels, one with a 200-character name, three instances."""
    path = tmp_path_factory.mktemp("ids") / "db"
    ids = []
    with DatabaseWriter.create(path, INFO) as writer:
        writer.add_kernel(kernel_record())
        base = kernel_record()
        writer.add_kernel(KernelRecord(OTHER, "_Zlong", base.ir, LONG_NAME, base.params))
        for static, seed in ((STATIC, 1), (OTHER, 2), (OTHER, 3)):
            dyn, _ = writer.add_instance(static, simple_instance(seed))
            ids.append(f"{static}/{dyn}")
    return path, ids


@pytest.mark.parametrize("columns", [40, 80, 300])
def test_ls_piped_prints_every_full_id_and_every_column(long_named_db, columns):
    path, ids = long_named_db
    out = mneme_piped("ls", path, columns=columns)
    for instance_id in ids:
        assert instance_id in out
    assert LONG_NAME in out  # piped: nothing is squeezed
    assert "ratio" in out and "too narrow" not in out


@pytest.mark.parametrize("width", [40, 60, 100, 140])
def test_ls_table_in_a_narrow_terminal_keeps_ids_whole(long_named_db, width):
    path, ids = long_named_db
    from mneme.replay.commands import _ls_rows
    from mneme.replay.db import Database

    rows, _ = _ls_rows(Database.open(path))
    cells = [[r["kernel"], r["instance"], *["x"] * (len(LS_COLUMNS) - 2)] for r in rows]
    console = Console(width=width, force_terminal=True, color_system=None, record=True)
    tables.print_table(console, LS_COLUMNS, cells)
    text = console.export_text()
    for instance_id in ids:
        assert instance_id in text
    table_lines = [line for line in text.splitlines() if line.startswith(("┃", "│", "┏", "└"))]
    id_and_shortest_name = 33 + tables.MIN_NAME_WIDTH + 7
    if width >= id_and_shortest_name:
        assert max(map(len, table_lines)) <= width  # fits: names shortened, columns dropped
    assert "…" in text  # the 200-character name was shortened, not the ids


def test_show_prints_the_full_id_piped(long_named_db):
    path, ids = long_named_db
    out = mneme_piped("show", path, ids[1], columns=40)
    assert any(line.split() == ["id", ids[1]] for line in out.splitlines())
    assert ids[1].split("/")[0] in out


def test_fit_drops_data_columns_before_shortening_names_below_their_short_width():
    columns = [tables.Column("kernel", role="name"), tables.Column("id", role="id"),
               tables.Column("a"), tables.Column("b")]
    rows = [["k" * 80, "i" * 33, "1" * 10, "2" * 10]]
    keep, widths = tables.fit(columns, rows, 100)
    assert keep == [0, 1, 2, 3] and widths[0] == tables.SHORT_NAME_WIDTH + 100 - (
        tables.SHORT_NAME_WIDTH + 33 + 20 + 13)
    keep, widths = tables.fit(columns, rows, 70)
    assert keep == [0, 1] and widths == [70 - 33 - 7, 33]
    keep, widths = tables.fit(columns, rows, 20)
    assert keep == [0, 1] and widths == [tables.MIN_NAME_WIDTH, 33]  # wider than asked: ids whole
