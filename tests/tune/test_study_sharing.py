"""Tuners sharing one study see each other's trials in flight (MirroredStorage.announce)."""

import socket
import subprocess
import sys

import optuna
from mneme.tune.study import MirroredStorage, open_storage


def mirrored(storage, owner: str) -> tuple[MirroredStorage, optuna.Study]:
    """A tuner's study storage, and the plain study over it."""
    optuna.create_study(study_name="shared", storage=storage, load_if_exists=True)
    mirror = MirroredStorage(storage, "shared", owner)
    return mirror, optuna.Study("shared", mirror, sampler=optuna.samplers.RandomSampler(seed=0))


def test_in_flight_counts_reach_the_other_tuners(tmp_path):
    storage = open_storage(f"journal:{tmp_path / 'j.log'}")
    # A process of this machine that has exited: its count was left behind by a dead tuner.
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True).stdout.strip()
    a, a_study = mirrored(storage, "far-host:1")
    b, _ = mirrored(storage, f"{socket.gethostname()}:{gone}")
    c, c_study = mirrored(storage, "far-host:2")
    try:
        a.announce(5, now=True)
        b.announce(7, now=True)
        c.pull()
        assert (c.others_running, c.others_active) == (5, 1), "the dead tuner's 7 do not count"
        a.announce(0, now=True)
        c.pull()
        assert (c.others_running, c.others_active) == (0, 0)
        # Written behind and coalesced: once written, the trial is seen, and the count (which
        # held the told trial until it was written) catches up at the loop's next word.
        a.announce(1)
        trial = a_study.ask()
        trial.suggest_int("x", 0, 3)
        a_study.tell(trial, 1.0)
        a.announce(0)
        a.flush()
        c.pull()
        assert len(c_study.trials) == 1 and c.others_running <= 1
        a.announce(0)  # the tuner's loop says it again: the count catches up
        a.flush()
        c.pull()
        assert c.others_running == 0 and len(c_study.trials) == 1
    finally:
        for study in (a, b, c):
            study.close()
