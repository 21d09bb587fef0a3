"""Errors of the tuner, under mneme's one root (mneme.instrument.errors.MnemeError).

Every TuneError is something the user can fix, printed as one line; TrialFailedError is
a trial's outcome, which the tuner records.
"""

from __future__ import annotations

from mneme.instrument.errors import MnemeError


class TuneError(MnemeError):
    """Base of every tuning error; the message is one line for the user (exit 2)."""

    mneme_user_error = True


class SpaceError(TuneError):
    """A search space is unknown, empty, or its constraints rule out every point."""


class StudyError(TuneError):
    """The study storage cannot be reached, or a study exists with another space."""


class DeviceSelectionError(TuneError):
    """``--devices`` names a GPU that does not exist (or none is there)."""


class TrialFailedError(MnemeError):
    """A trial did not give a usable (verified) observation.

    ``kind`` is a short machine-readable reason, set where the failure was raised: by the
    replay (``compile``, ``invalid``, ``launch-refused``, ``context-poisoned``,
    ``restore``: mneme.replay.engine.errors), by the executor (``unverified``: the result
    differs from the recording; ``crashed``: the worker died; ``timeout``: the watchdog
    fired), or ``error`` (anything else) (docs/tune.md, "Why a trial fails").

    Parameters:
        kind: the failure kind.
        message: what happened, in one line.
        result: the ReplayResult when there is one (a replay that did not verify).
    """

    def __init__(self, kind: str, message: str, result=None):
        super().__init__(f"{kind}: {message}")
        self.kind = kind
        self.message = message
        self.result = result  # the ReplayResult when there is one (unverified)


class SlurmError(TuneError):
    """The scripts cannot be written or submitted (storage, Slurm's commands, report folder)."""


class AppReportError(TuneError):
    """A whole-application report that cannot be used (missing, damaged, another database)."""


class NoProfileError(TuneError):
    """The database holds no application profile (recorded before it, or timing off)."""


class ApplyError(TuneError):
    """A configuration to apply cannot be used (no identity, unknown kernel, no code)."""


class ApplicationFailedError(ApplyError):
    """The application failed or was killed.

    Parameters:
        message: what happened, in one line.
        code: its exit status (negative: the signal that ended it).
    """

    def __init__(self, message: str, code: int):
        super().__init__(message)
        self.code = code
