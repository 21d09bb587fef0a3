"""A tuning run's launch shapes before and after the search.

Shapes earlier runs proved valid or invalid under the recorded code seed the run's valid
region (shape_cache.py), or, in a seeded run, answer its trials of the invalid ones; what
this run learned is kept for the next. Before the search, the probe runs the recorded code
with each shape still unknown (at most PROBE_SHARE of the trials left), so the shapes that
break it leave the space at once (valid_region.py). Each function takes the Tuner whose
run it serves.
"""

from __future__ import annotations

import math
import random
from typing import TYPE_CHECKING, Any

from optuna.trial import TrialState

from ..study import _shape_cache as shape_cache

if TYPE_CHECKING:  # (tuner.py imports this module)
    from ._tuner import Tuner
    from ._valid_region import LaunchRegion

__all__ = ["PROBE_SHARE", "earlier_failure", "keep_shapes", "probe_estimate", "probe_points",
           "seed_region", "shape_cache_applies"]

#: at most this share of the trials left goes to the probe of launch shapes
PROBE_SHARE = 0.5


def shape_cache_applies(tuner: Tuner) -> bool:
    """Launches are kept per instance, learned on a GPU (compile-only runs prove
    nothing about a launch; with several instances a shape's failure is any one's;
    a ``before_run`` hook makes failures up).

    Parameters:
        tuner: the tuner.

    Returns:
        Whether the shape cache is read and written for this run.
    """
    o = tuner.options
    return (o.devices is not None and o.before_run is None and len(tuner.instances) == 1
            and tuner.region.active)


def seed_region(tuner: Tuner) -> int:
    """Seed the tuner's region with the launch shapes earlier runs proved valid or
    invalid under the recorded code.

    Parameters:
        tuner: the tuner.

    Returns:
        How many shapes became known.
    """
    if not shape_cache_applies(tuner):
        return 0
    known = shape_cache.load(tuner.instances[0], tuner.region.recorded_code)
    if tuner.options.seed is not None:
        # A seeded run repeats its search (trial_order.py): its region learns trial by
        # trial as the first run's did, and a trial of a shape an earlier run found
        # invalid is answered with that failure, in its place (earlier_failure), instead
        # of leaving the probe and the sampler (pruned at once) another path.
        shapes = tuner.region.known_shapes(known, random.Random(tuner.options.seed))
        tuner.earlier_invalid = {s: kind for s, kind in shapes.items() if kind != shape_cache.VALID}
        return len(shapes)
    return tuner.region.seed(known, random.Random(tuner.options.seed))


def earlier_failure(region: LaunchRegion, earlier_invalid: dict[tuple, str],
                    point: dict[str, Any]) -> str | None:
    """How a seeded run answers a trial without replaying it: the failure an earlier run
    met launching the point's shape under the recorded code, where the point runs that
    code and this run has not learned the shape itself yet (seed_region).

    Parameters:
        region: the run's valid region.
        earlier_invalid: the shapes earlier runs found invalid (Tuner.earlier_invalid).
        point: the trial's point.

    Returns:
        The failure kind, or None (the trial runs).
    """
    if not earlier_invalid:
        return None
    shape = region.shape_of(point)
    if region.is_invalid(shape) or not region.runs_recorded_code(point):
        return None
    return earlier_invalid.get(shape)


def keep_shapes(tuner: Tuner) -> None:
    """Keep the launch shapes this run learned, for the next runs.

    Parameters:
        tuner: the tuner.
    """
    if shape_cache_applies(tuner):
        shape_cache.store(tuner.instances[0], tuner.region.recorded_code,
                          tuner.region.known_launches())


def probe_estimate(tuner: Tuner) -> int:
    """Probe trials this run may have, before the device's limits are known (the
    executor starts spare processes for them beside the baseline).

    Parameters:
        tuner: the tuner.

    Returns:
        Their number at most.
    """
    o = tuner.options
    if not o.probe or not tuner.region.active or tuner.sampler_name == "grid" \
            or tuner.bound[0].baseline() is None:
        return 0
    shapes = math.prod(p.size for p in tuner.region.params)
    return max(0, min(shapes - 1, int(o.trials * PROBE_SHARE)))


def probe_points(tuner: Tuner, study, point, left: int) -> list[dict[str, Any]]:
    """The launch shapes to try with the recorded code before the search, for ``left``
    trials left in the budget (none for the grid walk, which tries every shape that way
    first anyway).

    Parameters:
        tuner: the tuner.
        study: the study (its queued trials are not probed again).
        point: the recorded configuration's point; None when the space does not hold it.
        left: trials left in the budget.

    Returns:
        The points to try.
    """
    if not tuner.options.probe or tuner.sampler_name == "grid" or point is None:
        return []
    tuner.region.update(study)
    queued = [t.system_attrs.get("fixed_params", {})  # enqueued trials' points
              for t in study.get_trials(deepcopy=False, states=(TrialState.WAITING,))]
    return tuner.region.probe_points(point, int(left * PROBE_SHARE),
                                     random.Random(tuner.options.seed), queued)
