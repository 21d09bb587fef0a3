"""A cooperative launch's co-residency (issue 35): every block of a grid that synchronises
must be resident at once, so the grid is at most the compiled code's occupancy (blocks per
multiprocessor for its block and dynamic shared memory) times the multiprocessors. A
candidate beyond it is refused before it launches, in one line that says why (a tuner
records it as the trial's failure, kind launch-refused)."""

from __future__ import annotations

import pytest
from mneme.replay.engine import LaunchConfigError
from mneme.replay.engine.errors import LAUNCH_REFUSED
from mneme.replay.engine.launch_limits import check_co_residency


def test_a_grid_within_occupancy_times_multiprocessors_passes():
    check_co_residency((1056, 1, 1), (256, 1, 1), 0, 8, 132)
    check_co_residency((66, 16, 1), (16, 16, 1), 4096, 8, 132)  # 1056 blocks in 2-D


def test_a_grid_beyond_it_is_refused_with_the_numbers():
    with pytest.raises(LaunchConfigError) as caught:
        check_co_residency((1057, 1, 1), (256, 1, 1), 1024, 8, 132)
    message = str(caught.value)
    assert "\n" not in message
    assert message.startswith("cooperative launch of 1057 blocks is not co-resident")
    assert "blocks of 256 threads and 1024 bytes of dynamic shared memory" in message
    assert "8 such blocks fit on one multiprocessor" in message and "at most 1056 blocks" in message
    assert caught.value.kind == LAUNCH_REFUSED


def test_code_that_fits_no_block_says_so():
    with pytest.raises(LaunchConfigError, match="no such block fits on a multiprocessor"):
        check_co_residency((1, 1, 1), (1024, 1, 1), 0, 0, 132)


def test_a_cooperative_instances_code_is_compiled_for_its_grid_to_be_resident():
    """Another assembler may spend more registers than the application's build did (48
    instead of 40: 5 blocks of 256 per multiprocessor instead of 6), and the recorded grid
    would no longer be co-resident: replay compiles with launch bounds that keep it so."""
    from types import SimpleNamespace

    from mneme.replay.engine import ReplayConfig, derive_compile_config
    from mneme.replay.jit import CompileConfig

    kernel = SimpleNamespace(params=[])
    cooperative = SimpleNamespace(cooperative=True, args=b"")
    grid, block = (792, 1, 1), (256, 1, 1)

    def derive(instance, base=None, multiprocessors=132):
        return derive_compile_config(base or CompileConfig(), kernel, instance, ReplayConfig(), grid, block,
                                     "sm_90", b"", multiprocessors)

    config = derive(cooperative)
    assert (config.max_threads, config.min_blocks) == (256, 6)
    assert derive(cooperative, multiprocessors=114).min_blocks == 7  # ceil(792 / 114)
    assert derive(cooperative, CompileConfig(min_blocks=8, max_threads=512)).min_blocks == 8
    assert derive(cooperative, CompileConfig(min_blocks=8, max_threads=512)).max_threads == 512
    # compile-only (no GPU to be resident on) and launches that are not cooperative: nothing
    assert derive(cooperative, multiprocessors=None).min_blocks is None
    plain = derive(SimpleNamespace(cooperative=False, args=b""))
    assert (plain.max_threads, plain.min_blocks) == (None, None)
