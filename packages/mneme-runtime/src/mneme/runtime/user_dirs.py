"""Where mneme keeps its per-user files (the XDG base directories): what it can always make
again under the cache directory (compiled code, empty study templates), what must outlive
a command under the state directory (clock locks to give back)."""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["user_cache_dir", "user_state_dir"]


def user_cache_dir() -> Path:
    """mneme's cache directory.

    Returns:
        ``$XDG_CACHE_HOME/mneme``, else ``~/.cache/mneme``.
    """
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "mneme"


def user_state_dir() -> Path:
    """mneme's state directory.

    Returns:
        ``$XDG_STATE_HOME/mneme``, else ``~/.local/state/mneme``.
    """
    return Path(os.environ.get("XDG_STATE_HOME") or Path.home() / ".local" / "state") / "mneme"
