"""The application's own time of every recorded instance (format revision app_time):
recording a program that launches one kernel many times stores its in-app median (CUPTI),
and replay prints its fidelity."""

from __future__ import annotations

import pytest
from mneme.replay.db import Database
from mneme.replay.engine import ReplayConfig, ReplaySession
from mneme.replay.jit import CompileConfig
from mneme.runtime import driver_available
from record_support import executable, mneme_record

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module", autouse=True)
def _gpu():
    if not driver_available():
        pytest.skip("no usable CUDA driver")


def test_recorded_instance_carries_app_time_and_replay_prints_fidelity(tmp_path):
    exe = executable("fidelity_jacobi", tmp_path)
    db_path = tmp_path / "rec.rdb"
    run = mneme_record(db_path, exe)
    assert run.returncode == 0, run.stderr
    assert "in-app kernel times not measured" not in run.stderr
    instances = Database.open(db_path).instances()
    assert instances
    timed = [i for i in instances if i.app_time is not None]
    assert timed, [i.id for i in instances]
    app = timed[0].app_time
    print(timed[0].id, app.describe())
    assert app.method == "cupti" and app.launches >= 10 and app.snapshotted >= 1
    assert 0 < app.p25_ms <= app.median_ms <= app.p75_ms
    lines = []
    with ReplaySession(timed[0]) as session:
        for mode in ("warm", "app", "cold", "auto"):
            result = session.run(CompileConfig(), ReplayConfig(iterations=20, cache=mode))
            assert result.timing_method == "cupti" and result.fidelity is not None
            lines.append(f"{mode}: {result.time:.4f} ms {result.timing_line()}")
    print("\n".join(lines))
    assert "fidelity" in result.summary()


def test_each_instance_knows_the_launch_before_it_and_what_that_launch_touched(tmp_path):
    """fidelity_app_timings launches advect(c, v, next) then damp(next) on one stream: damp's
    predecessor is advect, which may have written `next` (its one non-const pointer) and
    read c and v; replay's app mode replays exactly that traffic before each iteration."""
    exe = executable("fidelity_app_timings", tmp_path)
    db_path = tmp_path / "rec.rdb"
    run = mneme_record(db_path, exe)
    assert run.returncode == 0, run.stderr
    kernels = {k.demangled_name.split("(")[0]: k for k in Database.open(db_path).kernels()}
    damp = next(i for i in kernels["damp"].instances() if i.predecessor is not None)
    before = damp.predecessor
    print(damp.id, "ran after", before.describe())
    assert before.kernel.startswith("advect(") and before.writes is not None
    assert len(before.writes) == 1  # next only: c and v are pointers to const
    written, size = before.writes[0]
    next_buffer = next(r for r in damp.regions if r.address == written)
    assert size == next_buffer.size
    assert before.reads is not None and len(before.reads) == 2
    assert all(n == size for _, n in before.reads)  # c and v: buffers of next's size
    with ReplaySession(damp) as session:
        image = session.image()
        traffic = image.predecessor
        # next in place, written; c and v read, in place where damp's memory holds them
        # (the recorder keeps the application's allocations around it), else on scratch
        assert [s for s in traffic.in_place if s[2]] == [(written, size, True)]
        assert not any(w for _, _, w in traffic.elsewhere)
        read = [n for _, n, w in traffic.in_place if not w] + [n for _, n, _ in traffic.elsewhere]
        assert sorted(read) == [size, size]
        result = session.run(CompileConfig(), ReplayConfig(iterations=20, cache="app"))
    assert result.verified and result.cache == "app"
    print(result.timing_line())
