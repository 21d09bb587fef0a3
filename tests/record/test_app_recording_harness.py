"""The GPU tests' replay harness (app_recording.replay_every_instance) on a machine without
a GPU: every instance gets one outcome from the worker process, in database order, with
its kernel's code and origin; compile-only replays are not counted as verified."""

from __future__ import annotations

from pathlib import Path

from app_recording import replay_every_instance
from mneme.replay.db import Database

GOLDEN = Path(__file__).resolve().parents[1] / "data" / "golden-v2.rdb"


def test_every_instance_gets_one_outcome_from_the_worker():
    outcomes = replay_every_instance(GOLDEN, timeout=300)
    ids = [inst.id for inst in Database.open(GOLDEN).instances()]
    assert [o.instance_id for o in outcomes] == ids
    assert all(o.code == "ir" and o.origin == "?" for o in outcomes)
    from mneme.runtime import driver_available

    if not driver_available():  # compile-only: nothing ran, nothing is verified
        assert all(not o.verified and "verified=None" in o.reason for o in outcomes)
