"""`mneme server start|stop|status`: the command server that saves ``mneme tune`` its
imports (about 1 s of its start-up; _server.py)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import click
from mneme.tune.workers import device_ordinals

from ._server_client import SERVED_COMMANDS, SWITCH, request, socket_path

__all__ = ["server"]

#: how long ``start`` waits for the new server to answer
START_TIMEOUT_S = 60.0


def _describe(status: dict) -> str:
    up = time.time() - status["started"]
    warm = status.get("warm") or {}
    if warm.get("off"):
        kept = f"no warm GPU workers ({warm['off']})"
    else:
        kept = (f"warm GPU workers for GPU(s) {','.join(map(str, warm['slots']))} "
                f"({'ready' if warm['ready'] else 'starting'}, {warm['handed']} handed out)")
    return (f"pid {status['pid']}, up {up:.0f} s, {status['served']} command(s) served, "
            f"{status['running']} running, {kept}, socket {status['socket']}")


def _warm_slots(text: str | None) -> str:
    """--warm-workers as the server takes it: GPU ordinals, comma-separated ('' for none)."""
    if text is None or text.strip().lower() == "none":
        return ""
    try:
        return ",".join(str(d) for d in device_ordinals(text))
    except ValueError as error:
        raise click.BadParameter(str(error), param_hint="--warm-workers") from None


@click.group("server")
def server():
    """A resident process that has imported what `mneme tune` needs: a tuning command
    then starts in a fraction of a second. One per Python environment and settings; it
    touches no GPU itself."""


@server.command("start")
@click.option("--idle-timeout", type=click.FloatRange(min=0), default=3600.0, show_default=True,
              help="End after this many seconds without a command (0: never).")
@click.option("--warm-workers", metavar="0,1",
              help="GPUs on which a tuning worker is kept ready (its CUDA context made), handed "
                   "to a `mneme tune` whose --devices are exactly these. Default: none (each holds "
                   "a context and its memory on its GPU while the server runs, and a GPU in "
                   "exclusive-process mode to itself).")
def start(idle_timeout, warm_workers):
    """Start this environment's server (`mneme tune` runs through it from then on)."""
    warm = _warm_slots(warm_workers)
    path = socket_path()
    running = request({"op": "status"}, path)
    if running is not None and "pid" in running:
        click.echo(f"mneme server: already running ({_describe(running)})")
        if running.get("stale"):
            click.echo("mneme server: mneme's files changed since it started: it refuses commands "
                       "(run `mneme server stop`, then `mneme server start`)")
        return
    log = Path(path).with_suffix(".log")
    Path(path).parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    with open(log, "ab") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "mneme.cli._server", path, str(idle_timeout), warm],
            stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
            start_new_session=True, close_fds=True)
    began = time.monotonic()
    said = False
    while time.monotonic() - began < START_TIMEOUT_S:
        status = request({"op": "status"}, path, timeout=2.0)
        if status is not None and "pid" in status:
            click.echo(f"mneme server: started ({_describe(status)}); `mneme "
                       f"{'/'.join(sorted(SERVED_COMMANDS))}` runs through it ({SWITCH}=0: not); "
                       f"`mneme server stop` ends it")
            return
        if process.poll() is not None:
            tail = log.read_text(errors="replace").strip().splitlines()[-1:] or ["(no output)"]
            raise click.ClickException(f"the server ended at its start (exit {process.returncode}): "
                                       f"{tail[0]} (its log: {log})")
        if not said and time.monotonic() - began > 2.0:
            click.echo("mneme server: importing mneme's modules ...", err=True)
            said = True
        time.sleep(0.05)
    process.kill()
    raise click.ClickException(f"the server did not answer within {START_TIMEOUT_S:g} s (its log: "
                               f"{log})")


@server.command("stop")
def stop():
    """Stop this environment's server (commands running on it finish first)."""
    status = request({"op": "stop"}, socket_path())
    if status is None or "pid" not in status:
        click.echo("mneme server: none runs for this Python environment and settings: nothing "
                   "to stop")
        return
    click.echo(f"mneme server: stopping ({_describe(status)})")
    deadline = time.monotonic() + 10.0
    while time.monotonic() < deadline:
        try:
            os.kill(status["pid"], 0)
        except ProcessLookupError:
            return
        time.sleep(0.05)
    if status["running"]:
        click.echo(f"mneme server: still running: it ends once its {status['running']} "
                   "command(s) have")


@server.command("status")
def status_command():
    """Say whether this environment's server runs, and what it did."""
    status = request({"op": "status"}, socket_path())
    if status is None or "pid" not in status:
        click.echo(f"mneme server: none runs for this Python environment and settings "
                   f"(its socket would be {socket_path()})")
        sys.exit(1)
    click.echo(f"mneme server: running ({_describe(status)})")
    if status["stale"]:
        click.echo("mneme server: mneme's files changed since it started: it refuses commands "
                   "(run `mneme server stop` and `mneme server start`)")
