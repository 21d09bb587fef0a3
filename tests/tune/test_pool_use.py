"""Which pool bounded a search (pool_use.py): each pool's busy share over the search and
the one at or above LIMIT_USE named as the limit."""

from mneme.tune.workers import LIMIT_USE, BusySeconds, describe, pool_use


def test_a_busy_compile_pool_is_named_the_limit():
    use = pool_use(BusySeconds(1.0, 0.5), BusySeconds(1.0 + 14 * 1.9, 0.5 + 0.8), seconds=2.0,
                   compile_workers=14, replay_workers=1)
    assert abs(use["compile_pool"] - 0.95) < 1e-9 and abs(use["replay_workers"] - 0.4) < 1e-9
    assert use["limit"] == "compile pool"
    assert describe(use) == ("compile pool 95 % busy (14 processes), replay workers 40 % busy: "
                             "the compile pool is the limit")


def test_neither_pool_busy_leaves_the_tuners_own_loop_as_the_limit():
    use = pool_use(BusySeconds(), BusySeconds(2.0, 0.4), seconds=1.0, compile_workers=4, replay_workers=1)
    assert use["compile_pool"] < LIMIT_USE and use["replay_workers"] < LIMIT_USE
    assert use["limit"] == "tuner loop"
    # compile-only tuning has no compile pool (its workers compile themselves)
    none = pool_use(BusySeconds(), BusySeconds(0.0, 1.9), seconds=1.0, compile_workers=0, replay_workers=2)
    assert none["compile_pool"] is None and none["limit"] == "replay workers"
    assert describe(none) == "replay workers 95 % busy: the replay workers is the limit"
