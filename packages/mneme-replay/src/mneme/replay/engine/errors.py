"""Errors of the replay engine.

Every class is a condition the user can fix or must be told about (a record id that
does not exist, a block size above the device limit, ...): ``mneme_user_error = True``
makes the CLI print it as one line and exit 2.
"""

from __future__ import annotations


class ReplayError(Exception):
    """Base of every replay-engine error; the message is one line for the user."""

    mneme_user_error = True


class ReplayConfigError(ReplayError):
    """A ReplayConfig field or a command-line override has a bad value."""


class LaunchConfigError(ReplayError):
    """The launch configuration does not fit the device (block size, shared memory)."""


class InstanceNotFoundError(ReplayError):
    """The record id (or kernel) asked for is not in the database; lists those that are."""


class RestoreError(ReplayError):
    """The recorded memory cannot be recreated (bad region layout, missing data)."""


class NoGpuError(ReplayError):
    """A replay that needs a GPU was asked for where there is none."""


class KernelFailedError(ReplayError):
    """The replayed kernel faulted on the device (illegal address, trap, ...)."""
