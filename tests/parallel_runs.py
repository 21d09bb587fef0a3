"""How the suite shares a machine between pytest-xdist workers (`-n auto --dist loadgroup`,
the `hatch run test` script); without xdist every hook here is a no-op.

* Work units. Tests sharing one of our fixtures wider than a function (a session's corpus
  build or recording, a module's environment) form one unit, which one worker runs: each
  such fixture is built once per run, not once per worker. Other tests go one by one.
  The workers work the units out as they collect and write them to a file; the
  controller's scheduler (a LoadScopeScheduling whose scope is the unit) reads it. We do
  not use xdist_group marks: xdist applies them by rewriting `item._nodeid`, which pytest
  9.2 no longer reads, so the groups were silently ignored.
* Order. Units of several tests (those holding the long builds) are handed out first,
  single tests after them fill the gaps, so the workers do not end on one long build
  each; tests/test_wheels.py comes last, as scripts/test.sh builds the wheels beside the
  run and those tests wait for them.
* Exclusive tests. A test marked `exclusive` (it asserts wall-clock bounds) or `gpu`
  (it times or shares the device) runs its body while no other worker runs a test: the
  other workers hold a shared lock around each of their tests, it takes the exclusive one
  at its call (not its setup: a GPU test skipped there waits for nobody). scripts/test.sh's
  builds beside the run (the wheels, tests/early_builds.py) share the cores with the other
  tests; while the exclusive lock is held they are niced to 19 (MNEME_BACKGROUND_PGIDS
  names their process groups), and back to 0 after it where that is allowed (root). The tests
  marked exclusive form one unit and the lock stays held from one to the next, so the
  other workers stop once for all of them. Where no CUDA driver library loads (CI), a
  `gpu` test has no device to time or share and skips: it runs beside the others, as a
  lock taken by one that skips in its body would idle a core until the others' tests end.
"""

from __future__ import annotations

import ctypes
import fcntl
import functools
import json
import os
import shutil
import tempfile
from pathlib import Path

import pytest

#: the module of the wheel tests, which wait for scripts/test.sh's background wheel build
WHEEL_TESTS = "tests/test_wheels.py"
#: fixture scopes whose value every test of the run shares
SHARED_SCOPES = ("session", "package")
#: the folder, made by the controller, where workers write the units and hold the locks
RUN_DIR = "MNEME_PARALLEL_RUN_DIR"
#: process groups of builds running beside the tests (scripts/test.sh), quiet during
#: exclusive tests
BACKGROUND = "MNEME_BACKGROUND_PGIDS"


def _controller_of_groups(config: pytest.Config) -> bool:
    return getattr(config.option, "dist", "no") == "loadgroup" and \
        not os.environ.get("PYTEST_XDIST_WORKER")


def pytest_configure(config: pytest.Config) -> None:
    if _controller_of_groups(config):
        # inherited by the workers, which xdist starts after this hook
        os.environ[RUN_DIR] = tempfile.mkdtemp(prefix="mneme-pytest-")


def pytest_unconfigure(config: pytest.Config) -> None:
    if _controller_of_groups(config) and os.environ.get(RUN_DIR):
        shutil.rmtree(os.environ.pop(RUN_DIR), ignore_errors=True)


def _run_dir() -> Path | None:
    """The run's shared folder, on an xdist worker of a `--dist loadgroup` run."""
    folder = os.environ.get(RUN_DIR)
    return Path(folder) if folder and os.environ.get("PYTEST_XDIST_WORKER") else None


def _shared_fixtures(item: pytest.Item) -> list[str]:
    """Keys of the fixtures of our own (conftests, test modules) that this test shares with
    others: session- and package-scoped ones by name, module- and class-scoped ones by
    name and the node that holds their value. pytest's and plugins' fixtures have an empty
    base id and are cheap."""
    info = getattr(item, "_fixtureinfo", None)
    if info is None:
        return []
    keys = []
    for name in info.names_closure:
        for d in info.name2fixturedefs.get(name, ()):
            if not d.baseid or d.scope == "function":
                continue
            if d.scope in SHARED_SCOPES:
                keys.append(f"fixture:{name}")
            else:
                holder = item.getparent(pytest.Class if d.scope == "class" else pytest.Module)
                keys.append(f"fixture:{name}@{holder.nodeid if holder else ''}")
    return keys


class _Groups:
    """Union-find over test ids and shared fixture keys."""

    def __init__(self) -> None:
        self.parent: dict[str, str] = {}

    def find(self, key: str) -> str:
        self.parent.setdefault(key, key)
        while self.parent[key] != key:
            self.parent[key] = self.parent[self.parent[key]]
            key = self.parent[key]
        return key

    def union(self, a: str, b: str) -> None:
        ra, rb = self.find(a), self.find(b)
        if ra != rb:
            self.parent[max(ra, rb)] = min(ra, rb)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    folder = _run_dir()
    if folder is None:
        return
    groups = _Groups()
    shared: set[str] = set()
    for item in items:
        groups.find(item.nodeid)
        # exclusive tests back to back on one worker: the others wait for them once
        marks = ["marker:exclusive"] if item.get_closest_marker("exclusive") else []
        for key in _shared_fixtures(item) + marks:
            groups.union(item.nodeid, key)
            shared.add(key)
    shared_roots = {groups.find(key) for key in shared}
    unit = {item.nodeid: groups.find(item.nodeid) for item in items}

    def rank(item: pytest.Item) -> int:
        if item.nodeid.split("::", 1)[0] == WHEEL_TESTS:
            return 2
        return 0 if unit[item.nodeid] in shared_roots else 1

    items.sort(key=rank)  # stable: each unit keeps its tests' order
    # every worker collects the same tests: the first to finish writing wins the rename
    staged = folder / f"units.{os.environ['PYTEST_XDIST_WORKER']}.json"
    staged.write_text(json.dumps(unit))
    staged.replace(folder / "units.json")


@pytest.hookimpl(optionalhook=True)  # an xdist hook: pytest without xdist never calls it
def pytest_xdist_make_scheduler(config: pytest.Config, log):
    if not _controller_of_groups(config):
        return None
    from xdist.scheduler import LoadScopeScheduling

    class UnitScheduling(LoadScopeScheduling):
        """xdist's scope scheduling with our units as scopes, in collection order."""

        units: dict[str, str] | None = None

        def _split_scope(self, nodeid: str) -> str:
            if self.units is None:  # read once every worker has collected (schedule())
                self.units = json.loads((Path(os.environ[RUN_DIR]) / "units.json").read_text())
            return self.units.get(nodeid, nodeid)

    config.option.loadscopereorder = False  # keep the order the workers chose
    return UnitScheduling(config, log)


def _lock(mode: int):
    """The run's lock taken in `mode` (fcntl.LOCK_SH or LOCK_EX): its open file, to be
    closed to release it. A turnstile lock taken first keeps a waiting exclusive test from
    starving behind a stream of shared ones."""
    folder = _run_dir()
    if folder is None:
        return None
    with open(folder / "turnstile", "a") as turnstile:
        fcntl.flock(turnstile, fcntl.LOCK_EX)
        lock = open(folder / "lock", "a")  # held past this function: closing releases it
        fcntl.flock(lock, mode)
    return lock


def _nice_background(niceness: int) -> None:
    """Sets the niceness of the builds running beside the tests (BACKGROUND); a group
    that has ended, or a niceness this user may not lower back, is left as it is."""
    for pgid in os.environ.get(BACKGROUND, "").split():
        try:
            os.setpriority(os.PRIO_PGRP, int(pgid), niceness)
        except (OSError, ValueError):
            pass


@functools.cache
def _driver_library_loads() -> bool:
    """Whether libcuda.so.1 loads here: without it no `gpu` test can use a device. Only
    loaded, never initialised (cuInit in a worker would change what its tests' forks see)."""
    try:
        ctypes.CDLL("libcuda.so.1")
    except OSError:
        return False
    return True


def _exclusive(item: pytest.Item | None) -> bool:
    if item is None:
        return False
    if item.get_closest_marker("exclusive") is not None:
        return True
    return item.get_closest_marker("gpu") is not None and _driver_library_loads()


#: the exclusive lock, held from an exclusive test's call through the next tests of this
#: worker while they are exclusive too (one wait for the other workers, not one each)
_held = None


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem):
    global _held
    if not _exclusive(item):
        lock = _lock(fcntl.LOCK_SH)
        try:
            yield
        finally:
            if lock is not None:
                lock.close()
        return
    try:
        yield
    finally:
        if _held is not None and not _exclusive(nextitem):
            _nice_background(0)
            _held.close()
            _held = None


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item: pytest.Item):
    global _held
    if _exclusive(item) and _held is None:
        _held = _lock(fcntl.LOCK_EX)
        if _held is not None:
            _nice_background(19)
    yield
