"""The application as a child process under the launch swapper (``libmneme_apply.so``
preloaded, following a plan that apply_plan.py wrote): find its executable, run it once,
read the swapper's report, say how its kernels were timed. Shared by ``mneme run
--apply`` (apply_command.py) and ``--confirm-in-app`` (app_confirm.py)."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import ApplicationFailedError, ApplyError
from ._apply_plan import SwapReport, read_report

SWAPPER = "libmneme_apply.so"


def swapper_library() -> Path:
    """The launch swapper library mneme-runtime ships (preloaded into the application).

    Returns:
        Its path.

    Raises:
        ApplyError: it is missing.
    """
    import mneme.runtime

    path = Path(mneme.runtime.__file__).with_name(SWAPPER)
    if not path.is_file():
        raise ApplyError(f"the launch swapper library is missing ({path}): reinstall mneme-runtime")
    return path


@dataclass
class Run:
    """One run of the application.

    Attributes:
        seconds: its wall time.
        output: its standard output.
        report: the swapper's report of it (empty when there was none).
    """

    seconds: float
    output: str
    report: SwapReport = field(default_factory=SwapReport)


def resolve_command(command: Sequence[str]) -> list[str]:
    """The application's argv with its executable found.

    Parameters:
        command: the argv.

    Returns:
        The argv, its executable found on PATH.

    Raises:
        ApplyError: no such executable, or one that is not executable.
    """
    executable = shutil.which(command[0]) or command[0]
    if not Path(executable).is_file():
        raise ApplyError(f"{command[0]}: no such executable")
    if not os.access(executable, os.X_OK):
        raise ApplyError(f"{command[0]}: not executable")
    return [executable, *command[1:]]


def swap_env(plan: Path, *, timing: bool = False, total: bool = False, measure: bool = False,
             report: Path | None = None) -> dict[str, str]:
    """This process's environment with the swapper preloaded to follow ``plan``.

    Parameters:
        plan: The plan apply_plan.py wrote.
        timing: Time each launch of a planned kernel (MNEME_APPLY_TIMING).
        total: Time every kernel of the process, summed (MNEME_APPLY_TOTAL).
        measure: Run the original kernels, timed, without swapping (MNEME_APPLY_MODE).
        report: Where the swapper writes its report at exit (MNEME_APPLY_REPORT).

    Returns:
        The environment to run the application with.
    """
    from mneme.runtime import native_settings as ns
    from mneme.runtime.kernel_timing import cupti_wheel_libraries

    env = dict(os.environ)
    if ns.CUPTI_LIBRARY not in env and (wheels := cupti_wheel_libraries()):
        env[ns.CUPTI_LIBRARY] = wheels[0]  # the preloaded swapper cannot ask Python
    env["LD_PRELOAD"] = ":".join(filter(None, [str(swapper_library()), env.get("LD_PRELOAD", "")]))
    env[ns.APPLY_PLAN] = str(plan)
    if timing:
        env[ns.APPLY_TIMING] = "1"
    if total:
        env[ns.APPLY_TOTAL] = "1"
    if measure:
        env[ns.APPLY_MODE] = "measure"
    if report is not None:
        env[ns.APPLY_REPORT] = str(report)
    return env


def run_once(command: list[str], env: dict[str, str] | None, report: Path | None = None,
             timeout: float | None = None) -> Run:
    """One run of the application.

    Parameters:
        command: its argv.
        env: its environment (``swap_env``'s); None for this process's.
        report: where the swapper writes its report; None for no report.
        timeout: seconds it may take; None for no limit.

    Returns:
        Its wall time, output and the swapper's report.

    Raises:
        ApplicationFailedError: it fails or outlives ``timeout`` (one line: how it
            ended, the last lines of its stderr).
    """
    from mneme.runtime.native_settings import APPLY_PLAN

    swapped = " under the swap" if env and APPLY_PLAN in env else ""
    start = time.perf_counter()
    try:
        done = subprocess.run(command, env=env, capture_output=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise ApplicationFailedError(f"{command[0]} did not finish in {timeout:.0f} s{swapped} (killed)",
                                     -signal.SIGKILL) from None
    took = time.perf_counter() - start
    if done.returncode != 0:
        tail = done.stderr.decode(errors="replace").strip().splitlines()[-3:]
        how = (f"died of signal {-done.returncode}" if done.returncode < 0
               else f"exited with status {done.returncode}")
        raise ApplicationFailedError(
            f"{command[0]} {how}{swapped}"
            + (f": {' | '.join(tail)}" if tail else ""), done.returncode)
    return Run(took, done.stdout.decode(errors="replace"), read_report(report) if report else SwapReport())


def timing_method_of(*reports: SwapReport) -> str:
    """How the in-app times were measured.

    Parameters:
        *reports: the swapper's reports of the runs.

    Returns:
        ``cupti``, or events with the reason CUPTI did not time (the swapper's report
        says it); ``-`` when nothing was timed.
    """
    methods = {k.method for r in reports for k in r.kernels.values() if k.timed}
    why = next((r.fallback for r in reports if r.fallback), "")
    if methods == {"cupti"}:
        return "cupti"
    return f"events (CUPTI unusable: {why})" if why else ("events" if methods else "-")


__all__ = ["SWAPPER", "ApplicationFailedError", "Run", "resolve_command", "run_once", "swap_env",
           "swapper_library", "timing_method_of"]
