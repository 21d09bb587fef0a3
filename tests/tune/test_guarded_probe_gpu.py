"""The guarded probe on the GPU (issue 23): a launch shape that would index past a shared
array is caught by the kernel's guarded variant, one launch, and the CUDA context lives on;
a shape that stays inside passes, and the recorded shape still replays verified after."""

import pytest
from mneme.replay.db import Database
from mneme.replay.engine import ReplayConfig, ReplaySession
from mneme.replay.engine.guarded_probe import OutOfBoundsError, check
from tune_support import instance_of, recorded_on_gpu

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def recording(tmp_path_factory):
    return recorded_on_gpu(tmp_path_factory, "launch_assumptions", "guarded-probe")[0]


def session_of(recording, kernel):
    return ReplaySession(Database.open(recording).instance(instance_of(recording, kernel)))


def test_a_block_wider_than_the_shared_tile_is_caught_without_a_fault(recording):
    with session_of(recording, "tile_stencil") as session:
        recorded = tuple(session.instance.block)
        assert recorded == (256, 1, 1)
        with pytest.raises(OutOfBoundsError, match="outside the array it indexes") as caught:
            check(session, None, ReplayConfig(block=(512, 1, 1)))
        assert caught.value.kind == "out-of-bounds"
        assert session.guard_trusted and session.guard_note is None
        check(session, None, ReplayConfig(block=(128, 1, 1)))  # inside the tile: passes
        # the context is whole: the recorded shape replays and verifies after both
        result = session.run(None, ReplayConfig(iterations=3))
        assert result.verified is True, result.mismatches


def test_a_tile_taller_than_its_threads_assume_is_caught(recording):
    with session_of(recording, "tile_transpose") as session:
        with pytest.raises(OutOfBoundsError):
            check(session, None, ReplayConfig(block=(16, 32, 1)))
        assert session.run(None, ReplayConfig(iterations=3)).verified is True
