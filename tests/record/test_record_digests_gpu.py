"""Epilogue chunks the kernel did not change are not copied: the recorder digests every
chunk on the device before and after the kernel. The recording must be the same as with
every chunk copied (MNEME_RECORD_DIGESTS=0): the same instances, the same region
checksums, every instance replaying verified."""

import re

import pytest
from mneme.replay.db import Database
from mneme.replay.engine import ReplaySession
from record_support import executable, mneme_record

pytestmark = pytest.mark.gpu
STATS = re.compile(r"mneme record: stats (.*)")


@pytest.fixture(scope="module")
def gpu():
    from mneme.runtime import driver_available

    if not driver_available():
        pytest.skip("no GPU driver")


def _record(tmp_path, exe, digests):
    db = tmp_path / f"digests-{digests}.rdb"
    run = mneme_record(db, exe, "--stats", env={"MNEME_RECORD_DIGESTS": digests})
    assert run.returncode == 0, run.stderr
    stats = dict(kv.split("=") for kv in STATS.search(run.stderr).group(1).split())
    return Database.open(db), stats


@pytest.mark.parametrize("program", ["many_launches", "device_globals", "managed_solver"])
def test_skipping_unchanged_chunks_records_the_same(gpu, tmp_path, program):
    exe = executable(program, tmp_path)
    copied, copied_stats = _record(tmp_path, exe, "0")
    skipped, skipped_stats = _record(tmp_path, exe, "1")
    assert int(copied_stats["unchanged_bytes"]) == 0
    assert int(skipped_stats["unchanged_bytes"]) > 0, "some region is left alone by some kernel"
    assert copied_stats["snapshot_bytes"] == skipped_stats["snapshot_bytes"]
    ids = sorted(i.id for i in copied.instances())
    assert ids == sorted(i.id for i in skipped.instances())
    def checksums(instance):
        # heap and managed regions sit at the recorded fixed addresses; a device global
        # wherever the driver put its module in that run: keyed by its symbol
        return {(r.kind, r.symbol if r.kind == "global" else r.address): instance.region_checksums(r.name)
                for r in instance.regions}

    for rid in ids:
        a, b = copied.instance(rid), skipped.instance(rid)
        assert checksums(a) == checksums(b), rid
        with ReplaySession(b) as session:
            assert session.run().verified, rid
