"""Cooperative launches recorded and replayed on the GPU (issue 35).

cooperative_solver synchronises its whole grid with cooperative_groups::this_grid().sync():
Jacobi sweeps launched with cudaLaunchCooperativeKernel and a power iteration launched with
cudaLaunchKernelEx and the cooperative launch attribute, each grid sized by the occupancy.
Recorded as a user would (the plain run and the recorded run compute the same), every
instance is marked cooperative, `mneme ls` and `mneme check` accept the database, and every
instance replays verified, in a cooperative launch (a plain launch faults at the first grid
sync: the grid barrier's workspace is the cooperative launch's). A grid that cannot be
resident at once is refused before it launches, in one line.

On the GPU host (corpus prebuilt with mneme-clang++ under MNEME_RECORD_PREBUILT, or built
here where clang-22 is installed), from the project root:

    python3 -m pytest tests/record/test_cooperative_record_gpu.py -m gpu -q -s

The static-runtime (nvcc) build of the same program is recorded by
test_record_static_runtime_gpu.py (cuLaunchCooperativeKernel taken from cuGetProcAddress).
"""

from __future__ import annotations

import json
import math

import pytest
from app_recording import (
    assert_recorded_and_verified,
    corpus_results,
    mneme_cli,
    record_application,
)
from mneme.replay.db import Database
from mneme.replay.engine import LaunchConfigError, ReplayConfig, ReplaySession
from mneme.replay.jit import CompileConfig
from record_support import PROGRAMS, executable

pytestmark = pytest.mark.gpu

NAME = "cooperative_solver"
KERNELS = {"jacobi_solve", "power_iteration"}


def _bare(instance) -> str:
    return instance.kernel.demangled_name.split("(")[0]


@pytest.fixture(scope="module")
def recording(tmp_path_factory):
    from mneme.runtime import driver_available

    if not driver_available():
        pytest.skip("no usable CUDA driver")
    folder = tmp_path_factory.mktemp("cooperative")
    exe = executable(NAME, folder)
    app = record_application(NAME, [str(exe), *PROGRAMS[NAME].args], folder / "rec.rdb",
                             results=corpus_results)
    print("\n" + app.report(), flush=True)
    return app


def test_every_cooperative_launch_is_recorded_cooperative_and_replays_verified(recording):
    app = recording
    assert_recorded_and_verified(app)
    instances = list(Database.open(app.db).instances())
    assert {_bare(i) for i in instances} == KERNELS
    assert all(i.cooperative for i in instances), [(i.id, i.cooperative) for i in instances]
    # the grids were sized by the occupancy: more than one block per multiprocessor
    from mneme.runtime import Device

    sms = Device(0).properties.multiprocessor_count
    assert all(math.prod(i.grid) >= sms for i in instances)
    rows = json.loads(mneme_cli("ls", str(app.db), "--json").stdout)
    assert rows and all(row["cooperative"] is True for row in rows), rows
    assert "unrecorded" not in app.recorded.stderr


def test_a_replay_launches_cooperatively_with_the_recorded_grid(recording):
    for instance in Database.open(recording.db).instances():
        with ReplaySession(instance) as session:
            result = session.run(CompileConfig(), ReplayConfig(iterations=2))
        assert result.verified is True, [m.describe() for m in result.mismatches[:2]]
        assert result.launch["cooperative"] is True
        assert " cooperative" in result.summary()


def test_a_grid_that_cannot_be_resident_is_refused_in_one_line(recording):
    """Four times the recorded grid of 256-thread blocks needs more than the 2048 threads a
    multiprocessor holds: refused before the launch (launch-refused), the context intact
    (the recorded grid replays verified afterwards in the same session)."""
    instance = next(i for i in Database.open(recording.db).instances() if _bare(i) == "jacobi_solve")
    grid = (4 * instance.grid[0], instance.grid[1], instance.grid[2])
    with ReplaySession(instance) as session:
        with pytest.raises(LaunchConfigError) as refused:
            session.run(CompileConfig(), ReplayConfig(grid=grid, iterations=1))
        message = str(refused.value)
        assert "\n" not in message and "is not co-resident" in message, message
        assert refused.value.kind == "launch-refused"
        again = session.run(CompileConfig(), ReplayConfig(iterations=1))
        assert again.verified is True
