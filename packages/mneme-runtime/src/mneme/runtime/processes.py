"""Whether a process of this machine still runs: the clock lock's owner, a study's tuner,
the tuner a compile process serves."""

from __future__ import annotations

import os

__all__ = ["pid_alive"]


def pid_alive(pid: int) -> bool:
    """Whether process ``pid`` exists (signal 0: nothing is sent).

    Parameters:
        pid: the process id.

    Returns:
        False once it is gone; True while it exists, also where this user may not signal
        it.
    """
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
