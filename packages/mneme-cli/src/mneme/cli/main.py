"""`mneme` entry point.

Subcommands come from the ``mneme.commands`` entry-point group so that each
distribution owns its commands and the CLI stays a thin shell. User errors are
exceptions whose class sets ``mneme_user_error = True`` (mneme.instrument.errors, the
root of every package's errors, says so through ``is_user_error``); they become one
line on stderr and exit status 2 instead of a traceback.

Commands find when the ``mneme`` process started in ``ctx.obj["started"]`` (a
time.monotonic() value; absent when ``cli`` is invoked in another program), so that the
time they report counts the interpreter's start and their imports too, and in
``ctx.obj["own_process"]`` whether the process is the command's own (run from its command
line: a command may then end it as it likes).
"""

from __future__ import annotations

import functools
import sys
import time
from importlib.metadata import entry_points, version

import click
from mneme.instrument.errors import is_user_error

from ._server_client import process_started
from .server_command import server

USER_ERROR_EXIT = 2


class MnemeGroup(click.Group):
    """Loads subcommands lazily from entry points and turns user errors into one line."""

    @functools.cached_property
    def _entry_points(self):
        # read once per process: scanning every installed distribution's metadata took
        # ~10 ms a call, and a process that runs commands in-process (tests, scripts)
        # resolved one per command
        return {ep.name: ep for ep in entry_points(group="mneme.commands")}

    def list_commands(self, ctx):
        return sorted(set(super().list_commands(ctx)) | set(self._entry_points))

    def get_command(self, ctx, name):
        cmd = super().get_command(ctx, name)
        if cmd is not None:
            return cmd
        ep = self._entry_points.get(name)
        return ep.load() if ep is not None else None

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except Exception as exc:  # noqa: BLE001 - only user errors are swallowed
            if is_user_error(exc):
                click.echo(f"mneme: error: {exc}", err=True)
                ctx.exit(USER_ERROR_EXIT)
            raise


@click.group(cls=MnemeGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(version("mneme-cli"), prog_name="mneme")
def cli():
    """mneme: record every GPU kernel launch of an application, replay it in
    isolation under any LLVM pipeline or launch configuration, verify, and tune."""


cli.add_command(server)  # (the command line's own command; the packages' come from entry points)


def main(argv: list[str] | None = None, started: float | None = None) -> None:
    """Run ``mneme ARGV`` (None: the process's own command line, which makes the process
    the command's own); ``started``: when the command started, where not this process's
    start (a command server's process runs a command its client started)."""
    own_process = argv is None
    started = started or (process_started() if own_process else None) or time.monotonic()
    cli.main(args=argv, prog_name="mneme", standalone_mode=True,
             obj={"started": started, "own_process": own_process})


if __name__ == "__main__":
    main(sys.argv[1:])
