"""A worker handed to a command by the server that started it (workers/_warm_workers.py's
AdoptedProcess): the command, not its parent, watches, stops and reads the end of it."""

from __future__ import annotations

import multiprocessing
import os
import signal
import time

from mneme.tune.workers import AdoptedProcess


def _sleep() -> None:
    time.sleep(600)


def _exit_with(code: int) -> None:
    os._exit(code)


def test_a_process_of_another_parent_is_watched_killed_and_its_status_read():
    context = multiprocessing.get_context("fork")
    sleeper = context.Process(target=_sleep, daemon=True)
    sleeper.start()
    quitter = context.Process(target=_exit_with, args=(7,), daemon=True)
    quitter.start()
    command = os.fork()
    if command == 0:  # the command: a fork of their parent, as the server's process is
        status = 1
        try:
            adopted = AdoptedProcess(sleeper)
            assert adopted.is_alive() and adopted.exitcode is None
            adopted.join(0.1)
            assert adopted.is_alive()
            adopted.kill()
            adopted.join(10)
            assert not adopted.is_alive()
            assert adopted.exitcode == -signal.SIGKILL, adopted.exitcode
            ended = AdoptedProcess(quitter)
            ended.join(10)
            assert ended.exitcode == 7, ended.exitcode
            adopted.kill()  # (ended: nothing is signalled)
            status = 0
        finally:
            os._exit(status)
    _, status = os.waitpid(command, 0)
    assert os.waitstatus_to_exitcode(status) == 0, "the command's checks failed (its output above)"
    sleeper.join(10)
    quitter.join(10)
    assert sleeper.exitcode == -signal.SIGKILL and quitter.exitcode == 7
