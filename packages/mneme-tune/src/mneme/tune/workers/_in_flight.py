"""How many trials the tuner keeps in flight.

Two per replay worker and two more keep every worker busy when the code is compiled
already. A trial that compiles afresh first waits for the compile pool: on an H100, a
launch+pipeline search with 4-6 trials in flight spent ~57 ms per trial in flight (a
compile of ~25 ms, the replay, the hand-offs) and ran 83-106 trials/s with the pool 16 %
busy: Little's law, not the pool, bounded it. So the compile processes get trials of
their own to work ahead on, up to an eighth of the run's budget (a model-based sampler
proposes the trials in flight without their results: a short run keeps fewer).
"""

from __future__ import annotations

__all__ = ["BUDGET_SHARE", "depth"]

#: at most this share of the budget in flight beyond what keeps the replay workers busy
BUDGET_SHARE = 1 / 8


def depth(replay_workers: int, compile_workers: int, budget: int) -> int:
    """How many trials the tuner keeps in flight.

    Parameters:
        replay_workers: the replay workers.
        compile_workers: the compile pool's processes (0: none).
        budget: the run's trials.

    Returns:
        The number: two per worker and two more, and one per compile process (at most
        ``BUDGET_SHARE`` of the budget) to work ahead.
    """
    busy = 2 * replay_workers + 2
    ahead = min(compile_workers, int(budget * BUDGET_SHARE))
    return busy + max(0, ahead)
