"""Ending the `mneme tune` process without the interpreter's teardown.

Once the command has printed its last line, Python's own teardown (every module and object
freed one by one: Optuna, SQLAlchemy, alembic, numpy, the studies' trials) took 0.3-0.5 s
here before the shell got its prompt back. None of it is needed: the storages are closed
here (SQLite checkpoints its write-ahead log), the exit handlers run (multiprocessing's,
temporary folders', logging's), the output is flushed, and the process ends with
``os._exit``; the workers' fork server is ended with it (its own teardown held the
command's output open 60-100 ms more: _worker_server.py). Only the command's own process
ends so (``mneme`` run from a shell: mneme.cli.main says so in ``ctx.obj["own_process"]``);
invoked inside another program, the command returns as before.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import sys
import threading
from collections.abc import Iterable

from ._worker_server import stop_worker_server

__all__ = ["end_process"]


def end_process(status: int, storages: Iterable = ()) -> None:
    """End the process now with ``status``, its storages closed and its exit handlers
    run; returns (the normal exit follows) when a thread the normal exit would wait for
    is still running.

    Parameters:
        status: the exit status.
        storages: Optuna storages whose connections are closed first.
    """
    if any(t.is_alive() and not t.daemon for t in threading.enumerate()
           if t is not threading.main_thread()):
        return
    for storage in storages:
        engine = getattr(storage, "engine", None)  # (an RDB storage's connections)
        if engine is not None:
            engine.dispose()
    run_exit_handlers = getattr(atexit, "_run_exitfuncs", None)
    if run_exit_handlers is None:
        return  # (not CPython: the normal exit)
    run_exit_handlers()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):  # (a closed pipe: nothing more to say)
            stream.flush()
    stop_worker_server()  # (without its own teardown, which held the output open)
    os._exit(status)
