"""Cooperative launches (issue 35) in the launch space: a grid that synchronises must stay
co-resident, so shapes whose blocks cannot all be resident even at the device's thread and
block limits per multiprocessor violate a constraint (a clear reason, never a trial); the
exact bound, the compiled candidate's occupancy, is checked when it replays
(tests/replay/test_cooperative_limits.py)."""

from __future__ import annotations

import math
from types import SimpleNamespace

from mneme.replay.engine import ReplaySettings
from mneme.tune import BoundSpace, SpaceContext, resolve_spaces

#: recorded as real solvers size it: occupancy (8 blocks of 256) x 132 multiprocessors
CTX = SpaceContext(grid=(1056, 1, 1), block=(256, 1, 1), cooperative=True, multiprocessor_count=132,
                   max_threads_per_multiprocessor=2048, max_blocks_per_multiprocessor=32)
REASON = "a cooperative grid fits on the GPU at once"


def bound(ctx=CTX, grid_mode="cover"):
    return BoundSpace(resolve_spaces("launch", grid_mode), ctx)


def test_covering_grids_that_cannot_be_resident_violate_a_constraint():
    space = bound()
    # 64 threads: 4224 blocks, 32 resident per multiprocessor (the block limit): fits exactly
    assert space.violated({"block_x": 64}) is None
    assert space.apply({"block_x": 64}, ReplaySettings()).replay.grid == (4224, 1, 1)
    # 32 threads: 8448 blocks, but a multiprocessor holds 32 blocks, not 64
    assert space.violated({"block_x": 32}).startswith(REASON)
    # 96 threads: 2816 blocks; 21 per multiprocessor hold 2016 of its 2048 threads: 2772
    assert space.violated({"block_x": 96}).startswith(REASON)
    for threads in (128, 256, 512, 1024):  # whole divisors of 2048 keep the threads resident
        assert space.violated({"block_x": threads}) is None
    assert space.violated(space.baseline()) is None


def test_a_kept_or_free_grid_is_bounded_too():
    keep = bound(grid_mode="keep")
    assert keep.violated({"block_x": 128}) is None
    assert keep.violated({"block_x": 512}).startswith(REASON)  # 1056 > 4 x 132
    free = bound(grid_mode="free")
    assert free.violated({"block_x": 256, "grid_x": 1056}) is None
    assert free.violated({"block_x": 256, "grid_x": 1057}).startswith(REASON)


def test_launches_that_are_not_cooperative_have_no_such_bound():
    plain = SpaceContext(grid=(1056, 1, 1), block=(256, 1, 1), multiprocessor_count=132)
    assert bound(plain, "free").violated({"block_x": 1024, "grid_x": 4000}) is None


def test_the_context_reads_the_flag_and_the_devices_limits():
    kernel = SimpleNamespace(params=[SimpleNamespace(is_pointer=True)])
    instance = SimpleNamespace(kernel=kernel, grid=(1776, 1, 1), block=(128, 1, 1), shared_mem=0,
                               cluster=None, cooperative=True)
    props = SimpleNamespace(max_threads_per_block=1024, warp_size=32, multiprocessor_count=148,
                            max_shared_memory_per_block=48 << 10, max_shared_memory_per_block_optin=0,
                            max_threads_per_multiprocessor=1536, max_blocks_per_multiprocessor=0)
    ctx = SpaceContext.from_instance(instance, props)
    assert ctx.cooperative and ctx.multiprocessor_count == 148
    assert ctx.max_threads_per_multiprocessor == 1536
    assert ctx.max_blocks_per_multiprocessor == 32  # 0: not said by the device, the default
    space = bound(ctx)
    assert space.violated({"block_x": 128}) is None  # 1776 = 12 x 148 (1536 / 128 = 12)
    # 1024 threads: 222 blocks, but 1536 threads per multiprocessor hold one: 148
    assert math.ceil(1776 * 128 / 1024) == 222
    assert space.violated({"block_x": 1024}).startswith(REASON)


def test_without_the_key_an_instance_is_not_cooperative():
    kernel = SimpleNamespace(params=[])
    instance = SimpleNamespace(kernel=kernel, grid=(8, 1, 1), block=(128, 1, 1), shared_mem=0)
    assert SpaceContext.from_instance(instance).cooperative is False
