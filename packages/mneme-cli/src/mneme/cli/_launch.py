"""The ``mneme`` executable's entry point: a command a server runs (_server_client.py)
is handed to it before anything else is imported; every other, and every command where
no server runs, starts here (mneme.cli.main)."""

from __future__ import annotations

import sys

from ._server_client import hand_off

__all__ = ["main"]


def main() -> None:
    status = hand_off(sys.argv[1:])
    if status is not None:
        sys.exit(status)
    from .main import main as run_here

    run_here()
