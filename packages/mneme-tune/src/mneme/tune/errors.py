"""Errors of the tuner: each is something the user can fix, printed as one line."""

from __future__ import annotations


class TuneError(Exception):
    """Base of every tuning error; the message is one line for the user (exit 2)."""

    mneme_user_error = True


class SpaceError(TuneError):
    """A search space is unknown, empty, or its constraints rule out every point."""


class StudyError(TuneError):
    """The study storage cannot be reached, or a study exists with another space."""


class DeviceSelectionError(TuneError):
    """``--devices`` names a GPU that does not exist (or none is there)."""


class TrialFailed(Exception):  # noqa: N818 - a trial outcome, not a programming error
    """A trial did not give a usable (verified) observation.

    ``kind`` is a short machine-readable reason, set where the failure was raised: by the
    replay (``compile``, ``invalid``, ``launch-refused``, ``context-poisoned``,
    ``restore``: mneme.replay.engine.errors), by the executor (``unverified``: the result
    differs from the recording; ``crashed``: the worker died; ``timeout``: the watchdog
    fired), or ``error`` (anything else). ``message`` says what happened (docs/tune.md,
    "Why a trial fails").
    """

    def __init__(self, kind: str, message: str, result=None):
        super().__init__(f"{kind}: {message}")
        self.kind = kind
        self.message = message
        self.result = result  # the ReplayResult when there is one (unverified)
