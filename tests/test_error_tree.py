"""One exception tree: everything mneme raises derives from MnemeError (mneme-instrument,
the lowest package), each package keeps its classes in an errors.py, no two classes
share a name, and is_user_error is the one reader of the user-error flag (issue 36)."""

import importlib
import pkgutil

import mneme
import pytest
from mneme.instrument.errors import InstrumentError, MnemeError, is_user_error

PACKAGES = ("instrument", "runtime", "replay", "tune", "cli")


def _skipped(name: str) -> bool:
    last = name.rpartition(".")[2]
    # __main__ runs its command on import; libmneme_* are C libraries preloaded into the
    # recorded application, not Python modules
    return last == "__main__" or last.startswith("libmneme_")


def _modules() -> list:
    found = []

    def failed(name):  # a package that does not import is a failure of its own tests
        raise ImportError(f"cannot import {name}")

    for info in pkgutil.walk_packages(mneme.__path__, "mneme.", onerror=failed):
        if not _skipped(info.name):
            found.append(importlib.import_module(info.name))
    return found


def _exception_classes() -> list[type]:
    """Every exception class a mneme module defines (by its ``__module__``), once."""
    seen = {}
    for module in _modules():
        for value in vars(module).values():
            if (isinstance(value, type) and issubclass(value, BaseException)
                    and value.__module__.split(".")[0] == "mneme"):
                seen[id(value)] = value
    return sorted(seen.values(), key=lambda cls: (cls.__module__, cls.__name__))


@pytest.fixture(scope="module")
def classes():
    found = _exception_classes()
    packages = {cls.__module__.split(".")[1] for cls in found}
    # the walk found each package's errors, so the checks below are not vacuous
    assert {"instrument", "runtime", "replay", "tune"} <= packages, packages
    assert len(found) >= 50
    return found


def test_every_exception_derives_from_mneme_error(classes):
    bad = [f"{cls.__module__}.{cls.__qualname__}" for cls in classes if not issubclass(cls, MnemeError)]
    assert not bad, "not under MnemeError: " + ", ".join(bad)


def test_every_exception_lives_in_an_errors_module(classes):
    bad = [f"{cls.__module__}.{cls.__qualname__}" for cls in classes
           if cls.__module__.rpartition(".")[2] != "errors"]
    assert not bad, "defined outside errors.py: " + ", ".join(bad)


def test_no_two_exceptions_share_a_name(classes):
    by_name: dict[str, list[str]] = {}
    for cls in classes:
        by_name.setdefault(cls.__name__, []).append(cls.__module__)
    duplicates = {name: where for name, where in by_name.items() if len(where) > 1}
    assert not duplicates


def test_names_end_in_error(classes):
    bad = [cls.__name__ for cls in classes
           if not (cls.__name__.endswith("Error")
                   or (issubclass(cls, Warning) and cls.__name__.endswith("Warning")))]
    assert not bad


def test_each_package_root_is_under_mneme_error():
    from mneme.replay.errors import DatabaseError, JitError, ReplayError
    from mneme.runtime.errors import DeviceLayerError
    from mneme.tune.errors import TrialFailedError, TuneError

    for root in (InstrumentError, DeviceLayerError, ReplayError, JitError, DatabaseError,
                 TuneError, TrialFailedError):
        assert MnemeError in root.__bases__, root
    assert issubclass(DeviceLayerError, RuntimeError)  # as it was before the tree


def test_replay_errors_is_the_packages_one_door(classes):
    import mneme.replay.errors as door

    missing = [cls.__name__ for cls in classes if cls.__module__.startswith("mneme.replay.")
               and getattr(door, cls.__name__, None) is not cls]
    assert not missing


def test_is_user_error_reads_the_flag():
    from mneme.cli.main import is_user_error as cli_is_user_error
    from mneme.instrument.errors import SectionError, ToolchainError
    from mneme.replay.errors import DatabaseError, JitConfigError, NvcompError, ReplayError
    from mneme.runtime.errors import DriverError, NoDriverError
    from mneme.tune.errors import ApplicationFailedError, TrialFailedError, TuneError

    assert cli_is_user_error is is_user_error  # the CLI reads it through the same function
    user = [SectionError("x"), ToolchainError("x"), NoDriverError("x"), DatabaseError("x"),
            ReplayError("x"), JitConfigError("x"), TuneError("x"), ApplicationFailedError("x", 1)]
    other = [MnemeError("x"), DriverError("x"), NvcompError("x"), TrialFailedError("error", "x"),
             ValueError("x")]
    assert all(is_user_error(exc) for exc in user)
    assert not any(is_user_error(exc) for exc in other)
