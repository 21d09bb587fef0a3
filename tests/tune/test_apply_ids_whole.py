"""`mneme run --apply` prints the instance each kernel was tuned on whole (issue 21 on the
GPU host: `aa1ffe25207165b8…`, cut, with the other columns squeezed to `adv…`): piped with
COLUMNS=40 nothing is narrowed; in a narrow terminal names are shortened and data columns
dropped with a note, never an id. The tables render from the report's plain data."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys

import pytest
from mneme.tune.apply import TIMES_COLUMNS, print_kernel_times, print_listing
from rich.console import Console
from tune_support import SAXPY, compile_only_report

LONG_NAME = "void very::long_namespace::kernel<" + ", ".join(["float"] * 20) + ">(float const*, float*, int)"
OTHER_ID = "aa1ffe25207165b8/0123456789abcdef"


@pytest.fixture(scope="module")
def best(tmp_path_factory):
    report, _ = compile_only_report(tmp_path_factory.mktemp("apply-ids"), trials=2, seed=3)
    return report / "best.json"


def _report_rows() -> list[dict]:
    """Two kernels as `mneme run --apply --json` writes them under "kernels"."""
    return [
        {"kernel": "saxpy(float, float const*, float*, int)", "instance": SAXPY, "launches": 12,
         "swapped": 12, "refused": 0, "in_app_original_first_ms": 0.51, "in_app_original_ms": 0.101,
         "in_app_tuned_ms": 0.09, "replay_recorded_ms": 0.1, "replay_tuned_ms": 0.088, "fidelity": 0.99},
        {"kernel": LONG_NAME, "instance": OTHER_ID, "launches": 6, "swapped": 4, "refused": 2,
         "in_app_original_first_ms": None, "in_app_original_ms": None, "in_app_tuned_ms": None,
         "replay_recorded_ms": None, "replay_tuned_ms": None, "fidelity": None},
    ]


def test_dry_run_piped_at_40_columns_prints_the_tuned_on_id_whole(best):
    env = {**os.environ, "COLUMNS": "40"}
    run = subprocess.run([sys.executable, "-m", "mneme.cli", "run", "--apply", str(best), "--dry-run",
                          "--", "true"], capture_output=True, text=True, env=env, timeout=600, check=False)
    assert run.returncode == 0, run.stderr
    assert SAXPY in run.stderr
    assert "saxpy(float, float const*, float*, int)" in run.stderr  # piped: nothing shortened
    verdict = json.loads(best.read_text())["identity"]["verdict"]
    assert verdict in run.stderr and "too narrow" not in run.stderr


def test_times_table_piped_keeps_every_id_name_and_column():
    buffer = io.StringIO()
    console = Console(file=buffer, width=40, color_system=None)  # not a terminal: piped
    print_kernel_times(console, _report_rows(), "cupti", "cupti, cache app")
    text = buffer.getvalue()
    assert SAXPY in text and OTHER_ID in text and LONG_NAME in text
    assert "4 (2 refused)" in text and "0.99" in text and "1.12x" in text and "1.14x" in text
    assert "too narrow" not in text
    assert "in app timed by cupti; replay timed by cupti, cache app" in text


@pytest.mark.parametrize("width", [40, 70, 100, 160])
def test_times_table_in_a_narrow_terminal_keeps_ids_whole(width):
    console = Console(width=width, force_terminal=True, color_system=None, record=True)
    print_kernel_times(console, _report_rows(), "cupti", "cupti")
    text = console.export_text()
    assert SAXPY in text and OTHER_ID in text
    if width < 160:
        assert "too narrow for:" in text and "…" in text
    table_lines = [line for line in text.splitlines() if line.startswith(("┃", "│", "┏", "└"))]
    if width >= 33 + 16 + 7:  # an id, the shortest name and their borders fit
        assert max(map(len, table_lines)) <= width
    assert TIMES_COLUMNS[0].header in text


def test_listing_in_a_narrow_terminal_keeps_ids_whole():
    console = Console(width=50, force_terminal=True, color_system=None, record=True)
    print_listing(console, [[LONG_NAME, OTHER_ID, "block 512x1x1, shared 0, grid cover, bound 512",
                             "significant speedup: best (trial 7) 0.08 ms against 0.1 ms recorded"]])
    text = console.export_text()
    assert OTHER_ID in text and "too narrow for: configuration, tuning verdict" in text
