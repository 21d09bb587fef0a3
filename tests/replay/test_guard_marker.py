"""The guarded probe's marker (issue 34's ten-kernel run on an H200): where the guarded
variant itself faults on the recorded launch shape, the worker that met it leaves a marker
beside the database, and every later worker (a fresh process, after the lost context)
reads it and probes that instance unguarded instead of faulting trial after trial."""

from __future__ import annotations

import shutil
from pathlib import Path

from mneme.replay.db import Database
from mneme.replay.engine import guarded_probe

EXAMPLES = Path(__file__).resolve().parents[1] / "data" / "examples.rdb"


def test_a_faulting_guard_is_remembered_across_processes(tmp_path):
    path = tmp_path / "app.rdb"
    shutil.copytree(EXAMPLES, path)
    first, second = list(Database.open(path).instances())[:2]
    assert guarded_probe._untrusted(first) is None
    guarded_probe._distrust(first, "the guarded variant faulted with the recorded launch shape (X)")
    # a fresh reader (another worker process opens the database anew)
    again = Database.open(path).instance(first.id)
    assert "faulted" in guarded_probe._untrusted(again)
    assert guarded_probe._untrusted(second) is None  # only that instance
    marker = path / ".mneme" / "guard" / first.kernel.static_hash / f"{first.dynamic_hash}.json"
    assert marker.is_file()
    marker.write_text("not json")  # damaged: ignored, the guard is tried again
    assert guarded_probe._untrusted(again) is None

