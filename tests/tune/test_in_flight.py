"""Trials in flight (in_flight.py): enough to keep the replay workers busy, and, where a
compile pool compiles fresh code, more for its processes to work ahead on, bounded by a
share of the budget."""

from mneme.tune.workers import BUDGET_SHARE, depth


def test_without_a_compile_pool_two_per_worker_and_two_more():
    assert depth(1, 0, 1000) == 4
    assert depth(2, 0, 1000) == 6


def test_a_compile_pool_works_ahead_up_to_a_share_of_the_budget():
    assert BUDGET_SHARE == 1 / 8
    assert depth(1, 15, 60) == 4 + 7  # a short run keeps few proposals without results
    assert depth(1, 15, 300) == 4 + 15  # a long one one per compile process
    assert depth(2, 14, 8) == 6 + 1
