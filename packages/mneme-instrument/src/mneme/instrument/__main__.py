"""`python -m mneme.instrument inspect|config ...`: the package's two commands where
mneme-instrument is installed alone (the `mneme` command belongs to mneme-cli, which
build machines need not install). Same options and output as `mneme inspect|config`."""

from __future__ import annotations

import click

from .commands import config, inspect
from .errors import is_user_error

USER_ERROR_EXIT = 2


class _Group(click.Group):
    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except Exception as exc:
            # user errors (ToolchainError, SectionError, ...) in one line, as `mneme` prints them
            if is_user_error(exc):
                click.echo(f"mneme: error: {exc}", err=True)
                ctx.exit(USER_ERROR_EXIT)
            raise


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
def main() -> None:
    """mneme-instrument's commands: inspect an executable's kernels, print build values."""


main.add_command(inspect)
main.add_command(config)

if __name__ == "__main__":
    main(prog_name="python -m mneme.instrument")
