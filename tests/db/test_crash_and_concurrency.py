"""A writer killed at any point leaves a readable database of complete instances; several
writer processes share one database."""

from __future__ import annotations

import random
import signal
import subprocess
import sys
import time
from pathlib import Path

from crash_writer import STATIC, make_instance
from mneme.replay.db import Database
from mneme.replay.db.integrity import abandoned_staging, check_database

WRITER = Path(__file__).with_name("crash_writer.py")
KILLS = 24


def verify_all(path: Path) -> int:
    """Every listed instance reads back exactly; returns how many there are."""
    db = Database.open(path)
    instances = db.kernel(STATIC).instances()
    for inst in instances:
        want = make_instance(int.from_bytes(inst.args, "little"))
        for before, after in zip(want.prologue, want.epilogue, strict=True):
            name = before.info().name
            assert inst.prologue(name).tobytes() == before.data.tobytes()
            assert inst.epilogue(name).tobytes() == after.data.tobytes()
    return len(instances)


def test_sigkill_at_random_points_never_exposes_partial_instances(tmp_path):
    path = tmp_path / "crash.rdb"
    rng = random.Random(1234)
    seen, start = 0, 0
    for _ in range(KILLS):
        proc = subprocess.Popen([sys.executable, str(WRITER), str(path), str(start)],
                                stdout=subprocess.PIPE, text=True)
        assert proc.stdout.readline().strip() == "ready"
        time.sleep(rng.uniform(0.0, 0.25))
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        count = verify_all(path)
        assert count >= seen  # nothing committed is ever lost
        seen = count
        start += 1000  # the next writer's instances are new ones
    assert seen > 0
    problems = [p for p in check_database(Database.open(path)) if p.fatal]
    assert problems == []
    # most kills land in the middle of a write: those left staging garbage, nothing else
    assert 1 <= len(abandoned_staging(Database.open(path))) <= KILLS


def test_concurrent_writers_share_one_database(tmp_path):
    path = tmp_path / "shared.rdb"
    # Four ranks; ranks 0/1 and 2/3 write the same instances (like repeated launches).
    procs = [subprocess.Popen([sys.executable, str(WRITER), str(path), str(start), "6"],
                              stdout=subprocess.DEVNULL)
             for start in (0, 0, 100, 100)]
    for proc in procs:
        assert proc.wait(timeout=120) == 0
    assert verify_all(path) == 12
    db = Database.open(path)
    assert sorted(i.occurrences for i in db.kernel(STATIC).instances()) == [2] * 12
    assert abandoned_staging(db) == []
