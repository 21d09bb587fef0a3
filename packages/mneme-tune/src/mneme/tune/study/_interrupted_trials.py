"""Trials a dead tuner left running, found when a tuner starts on the study.

They are failed as ``interrupted`` (not counted against the budget) and their points are
queued again, so that none is lost. Each tuner names itself in a study attribute
(TUNER_ATTR) when it starts: a running trial counts as abandoned when no other tuner of
the study is alive, or when it is older than any live trial can be.
"""

from __future__ import annotations

import datetime
import time
from typing import TYPE_CHECKING

from optuna.trial import TrialState

from ..tune_types import TRIAL_ATTR
from ._study import owner_alive, tuner_owner

if TYPE_CHECKING:
    import optuna

    from ._mirrored_storage import MirroredStorage

__all__ = ["ABANDONED_AFTER", "TUNER_ATTR", "recover_interrupted"]

#: study attribute prefix naming each tuner process that worked on the study
TUNER_ATTR = "mneme.tuner."
#: seconds after which a running trial counts as abandoned even with other tuners alive
ABANDONED_AFTER = 600.0


def recover_interrupted(study: optuna.Study, storage: MirroredStorage,
                        trial_timeout: float) -> int:
    """Fail the trials a dead tuner left running and queue their points again. Trials
    carry no owner while they run (one storage write less per trial), hence the
    judgement by the tuners alive and by age.

    Parameters:
        study: the tuner's study (over ``storage``).
        storage: the study's MirroredStorage: running trials are in the storage behind it.
        trial_timeout: seconds a trial may take: one running longer than that (with some
            slack) is taken as left.

    Returns:
        How many trials were failed.
    """
    me = tuner_owner()
    tuners = [k.removeprefix(TUNER_ATTR) for k in study.user_attrs if k.startswith(TUNER_ATTR)]
    others_alive = any(owner_alive(t) for t in tuners if t != me)
    study.set_user_attr(TUNER_ATTR + me, time.time())
    grace = max(ABANDONED_AFTER, 3 * trial_timeout)
    now = datetime.datetime.now()
    recovered = 0
    # Running trials are in the storage only when a tuner that wrote them directly
    # (before the mirrored study) died: they are failed there and run again here.
    stored, study_id = storage.backing, storage.backing_study_id
    for trial in stored.get_all_trials(study_id, deepcopy=False, states=(TrialState.RUNNING,)):
        age = (now - trial.datetime_start).total_seconds() if trial.datetime_start else 0.0
        if others_alive and age < grace:
            continue  # maybe a live tuner's trial
        trial_id = stored.get_trial_id_from_study_id_trial_number(study_id, trial.number)
        stored.set_trial_user_attr(trial_id, TRIAL_ATTR, {"failure": "interrupted",
                                                          "reason": "the tuner running it stopped"})
        stored.set_trial_state_values(trial_id, TrialState.FAIL)
        if trial.params:
            study.enqueue_trial(trial.params, skip_if_exists=False)
        recovered += 1
    return recovered
