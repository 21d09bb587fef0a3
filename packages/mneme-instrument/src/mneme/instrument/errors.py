"""The root of every exception mneme raises, and the instrument package's own.

One tree: ``MnemeError`` here (in the lowest package, so every other package can
derive from it), one root per package under it (``InstrumentError``;
mneme.runtime.errors ``DeviceLayerError``; mneme.replay.errors ``ReplayError``,
``JitError``, ``DatabaseError``; mneme.tune.errors ``TuneError``), and each package's
classes in its ``errors.py``. ``except MnemeError`` catches anything mneme raised.

A class with ``mneme_user_error = True`` is a condition the user can fix or must be told
about: the ``mneme`` command, ``mneme-clang++`` and ``python -m mneme.instrument`` print
it as one line (exit status 2) instead of a traceback. ``is_user_error`` is the one
place that reads the flag.

Stdlib only and import-free: the compile wrappers import it at every compile.
"""

from __future__ import annotations

__all__ = [
    "ConfigError",
    "FatbinError",
    "InspectError",
    "InstrumentError",
    "MnemeError",
    "NoFatbinError",
    "NotInstrumentedError",
    "SectionError",
    "ToolchainError",
    "WrapperError",
    "is_user_error",
]


class MnemeError(Exception):
    """Base of every exception mneme raises."""

    #: True: a condition the user can fix, printed as one line (no traceback). Read it
    #: through is_user_error; subclasses set it, never instances.
    mneme_user_error = False


def is_user_error(exc: BaseException) -> bool:
    """Whether an exception is one the user can fix: the commands print it as one line
    and exit 2 (its class's ``mneme_user_error`` flag).

    Parameters:
        exc: the exception.

    Returns:
        True when it is.
    """
    return bool(getattr(type(exc), "mneme_user_error", False))


class InstrumentError(MnemeError):
    """Base of every mneme-instrument error: all are the user's to fix."""

    mneme_user_error = True


class SectionError(InstrumentError):
    """The file cannot be read, is not ELF, or its mneme section is damaged."""


class NotInstrumentedError(SectionError):
    """The file has no mneme section: it was not built with mneme-clang/mneme-clang++."""


class FatbinError(SectionError):
    """The fatbinary is damaged, or an entry cannot be decompressed."""


class NoFatbinError(FatbinError, NotInstrumentedError):
    """The file holds no CUDA fatbinary (not nvcc-built, or host code only)."""


class InspectError(SectionError):
    """A bad `mneme inspect` request (unknown kernel, ...)."""


class ConfigError(InstrumentError):
    """`mneme config` was asked for a key it does not know."""


class WrapperError(InstrumentError):
    """A user error the compile wrapper reports in one line."""


class ToolchainError(InstrumentError):
    """A tool mneme needs is missing; the message says what to install or set."""
