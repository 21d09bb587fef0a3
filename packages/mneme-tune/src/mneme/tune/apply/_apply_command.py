"""`mneme run --apply`: the unmodified application with its tuned kernels swapped in.

The tuned configurations (best.json files) are compiled for this GPU into a plan
(apply_plan.py) that ``libmneme_apply.so``, preloaded, follows at every launch. The
application then runs ``--repeat`` times plain and ``--repeat`` times with the swap,
alternating (drift hits both), and its output is compared between the two: what varies
between the plain runs themselves (timings, thread ids, addresses) is not compared,
everything else must match (output_compare.py). One more run
of each with the planned kernels timed by the GPU's own timestamps (CUPTI kernel
records; CUDA events where CUPTI is unusable, said so) gives their time inside the
application (median over launches, the first apart), set beside their replayed time: the fidelity column (replay is only
useful if it predicts the real run).

Exit status: the application's when it fails; 1 when the output differs from the plain
runs; 2 user error; else 0.
"""

from __future__ import annotations

import json
import re
import statistics
import tempfile
from pathlib import Path

import click
from mneme.replay.tables import console as table_console

from ..errors import ApplicationFailedError, ApplyError
from ._app_process import (
    Run,
    resolve_command,
    run_once,
    swap_env,
    swapper_library,
    timing_method_of,
)
from ._apply_plan import TunedKernel, configs_in, load_tuned, write_plan
from ._apply_tables import listing_row, print_kernel_times, print_listing
from ._output_compare import Comparison, PlainBaseline, compare_runs
from ._output_report import output_json, print_output_check

OUTPUT_DIFFERS_EXIT = 1


def replay_times(kernel: TunedKernel, iterations: int) -> tuple[float | None, float | None, str]:
    """Median replayed time (ms) of the recorded and of the tuned configuration, on the
    instance it was tuned on (None without a GPU or when the replay fails), and how replay
    timed them. Both in the cache mode the tuning measured in (best.json's)."""
    from mneme.replay.engine import ReplayConfig, ReplayError, ReplaySession
    from mneme.replay.engine.config import ReplaySettings
    from mneme.runtime import DriverError

    out: list[float | None] = []
    method = ""
    recorded = ReplaySettings(replay=ReplayConfig(cache=kernel.settings.replay.cache_mode))
    with ReplaySession(kernel.instance) as session:
        if not session.gpu:
            return None, None, ""
        for settings in (recorded, kernel.settings):
            replay = settings.replay.with_(iterations=iterations, verify=False)
            try:
                result = session.run(settings.compile, replay)
            except (ReplayError, DriverError):  # the table says "-"; the application ran
                out.append(None)
                continue
            out.append(result.time)
            method = method or _method_label(result.timing_method, result.timing_note, result.cache)
    return out[0], out[1], method


def _method_label(method: str, why: str, cache: str = "") -> str:
    """'cupti, cache app'; events with why CUPTI did not time."""
    label = why or method
    return f"{label}, cache {cache}" if cache else label


@click.command("run", context_settings={"ignore_unknown_options": True})
@click.option("--apply", "apply_path", required=True, type=click.Path(path_type=Path),
              help="A best.json written by mneme tune --report, or a folder of them.")
@click.option("--repeat", type=click.IntRange(1, 100), default=None,
              help="Runs of the application plain and with the tuned kernels, alternating "
                   "(default 3; 5 for a whole-application report, every run timed).")
@click.option("--check-output/--no-check-output", default=True, show_default=True,
              help="Compare the application's standard output with the plain run's.")
@click.option("--output-filter", default=None,
              help="Compare only the output lines matching this regex (e.g. the checksums); by default "
                   "every line, less what varies between the plain runs and the timings printed.")
@click.option("--replay-iterations", type=click.IntRange(1, 10000), default=20, show_default=True,
              help="Timed replays of each tuned instance for the fidelity column.")
@click.option("--dry-run", is_flag=True,
              help="Compile the tuned kernels and print the plan; run nothing (no GPU needed).")
@click.option("--json", "json_path", type=click.Path(path_type=Path), default=None,
              help="Also write the measurements as JSON.")
@click.option("--clock-control", default="base", show_default=True, metavar="base|none|MHZ",
              help="Lock the SM clock of every GPU the application sees for all its runs, plain "
              "and tuned, and the replays (base: the default applications clock, as Nsight "
              "Compute does; none: as the driver sets it). Needs root; otherwise one line.")
@click.argument("command", nargs=-1, required=True, type=click.UNPROCESSED)
def run(apply_path: Path, repeat: int, check_output: bool, output_filter: str | None,
        replay_iterations: int, dry_run: bool, json_path: Path | None, clock_control: str,
        command: tuple[str, ...]):
    """Run COMMAND plain and with the kernels tuned in --apply swapped in; compare its
    output and time, and each tuned kernel's time inside it with its replayed time."""
    console = table_console(stderr=True)
    pattern = None
    if output_filter is not None:
        try:
            pattern = re.compile(output_filter)
        except re.error as exc:
            raise ApplyError(f"--output-filter {output_filter!r} is not a regular expression: {exc}") from None
    argv = resolve_command(command)
    swapper_library()  # (missing: one line, before anything is compiled)
    from ..app.app_report import read_app_report

    app = read_app_report(apply_path)  # a whole-application report (mneme tune --app)
    repeat = repeat or (5 if app else 3)
    if app is not None and not any(r.get("significant") for r in app["kernels"]):
        raise ApplyError(f"{apply_path}: no kernel of this report got a significant speedup, so "
                         "there is nothing to swap in (app.json says per kernel why)")
    configs = configs_in(apply_path)
    from mneme.runtime import driver_available

    if not dry_run and not driver_available():
        raise ApplyError("mneme run needs a GPU (use --dry-run to compile the plan without one)")
    from mneme.runtime.clock_control import held_clocks, parse_clock_policy

    policy = parse_clock_policy(clock_control)
    # Held until the command ends (click closes it), given back by a guard if it is killed.
    clocks = click.get_current_context().with_resource(
        held_clocks(policy, [] if dry_run else None, lambda line: console.print(line, markup=False)))

    kernels: list[TunedKernel] = []
    with console.status("compiling the tuned kernels"):
        for path in configs:
            kernels.append(load_tuned(path))
    with tempfile.TemporaryDirectory(prefix="mneme-run-") as tmp:
        directory = Path(tmp)
        plan = write_plan(kernels, directory)
        print_listing(console, [listing_row(k) for k in kernels])
        if dry_run:
            click.echo(plan.read_text(), nl=False)
            return

        plain_runs: list[Run] = []
        tuned_runs: list[Run] = []
        report = directory / "report.txt"
        try:
            with console.status("running the application") as status:
                for index in range(repeat):
                    status.update(f"running the application: plain and tuned, {index + 1}/{repeat}")
                    if app is None:
                        plain_runs.append(run_once(argv, None))
                        tuned_runs.append(run_once(argv, swap_env(plan)))
                        continue
                    # Every run timed (every kernel of the process, by CUPTI): plain ones measure
                    # the original code, tuned ones run the winners.
                    plain_runs.append(run_once(argv, swap_env(
                        plan, timing=True, total=True, measure=True, report=report), report))
                    tuned_runs.append(run_once(argv, swap_env(
                        plan, timing=True, total=True, report=report), report))
                if app is None:
                    status.update("timing the tuned kernels inside the application")
                    measured = run_once(argv, swap_env(plan, timing=True, measure=True, report=report), report)
                    timed = run_once(argv, swap_env(plan, timing=True, report=report), report)
                else:
                    measured, timed = plain_runs[-1], tuned_runs[-1]
                replayed = {}
                for k in kernels:
                    status.update(f"replaying {k.demangled_name[:40]}")
                    replayed[k.name] = replay_times(k, replay_iterations)
        except ApplicationFailedError as failure:
            click.echo(f"mneme run: {failure}", err=True)
            raise SystemExit(failure.code if failure.code > 0 else 128 - failure.code) from None

    baseline: PlainBaseline | None
    comparisons: list[Comparison]
    baseline, comparisons = None, []
    if check_output:
        # The measuring run runs the original code: one more plain run to learn from.
        plain_outputs = [r.output for r in plain_runs] + ([] if app else [measured.output])
        tuned_outputs = [r.output for r in tuned_runs] + ([] if app else [timed.output])
        baseline, comparisons = compare_runs(plain_outputs, tuned_outputs, pattern)
    differences = next((c.differences for c in comparisons if not c.equal), [])

    in_app_method = timing_method_of(measured.report, timed.report)
    replay_method = next((m for *_, m in replayed.values() if m), "-")
    rows = []
    for k in kernels:
        original = measured.report.get(k.name)
        tuned = timed.report.get(k.name)
        replay_recorded, replay_tuned, _ = replayed[k.name]
        # fidelity: replayed time of the recorded launch over its time in the application
        same = original.same_config_median_ms
        fidelity = replay_recorded / same if replay_recorded and same else None
        rows.append({"kernel": k.demangled_name, "name": k.name, "instance": k.instance_id,
                     "launches": tuned.launches, "swapped": tuned.swapped, "refused": tuned.refused,
                     "swapped_on": {str(d): n for d, n in sorted(tuned.swapped_on.items())},
                     "in_app_method": in_app_method, "replay_method": replay_method,
                     "in_app_original_first_ms": original.first_ms, "in_app_tuned_first_ms": tuned.first_ms,
                     "in_app_original_ms": original.median_ms, "in_app_tuned_ms": tuned.median_ms,
                     "in_app_original_mean_ms": original.mean_ms, "in_app_tuned_mean_ms": tuned.mean_ms,
                     "in_app_same_config_ms": same,
                     "replay_recorded_ms": replay_recorded, "replay_tuned_ms": replay_tuned,
                     "fidelity": fidelity})
    print_kernel_times(console, rows, in_app_method, replay_method)
    from ._apply_reasons import why_not_swapped

    for k, row in zip(kernels, rows, strict=True):
        why = why_not_swapped(k, timed.report.get(k.name))
        row["not_swapped"] = why
        if why:
            console.print(f"{k.demangled_name}: swapped into no launch: {why}", soft_wrap=True, markup=False)
    kernel_time = None
    if app is not None:
        from ..app.app_measure import compare_devices, compare_kernel_time, print_kernel_time

        plain_ms = [r.report.total_ms for r in plain_runs]
        tuned_ms = [r.report.total_ms for r in tuned_runs]
        if None in plain_ms or None in tuned_ms:
            console.print("application kernel time: not measured (CUPTI could not time every run: "
                          f"{measured.report.fallback or timed.report.fallback or 'no kernel timed'})",
                          soft_wrap=True, markup=False)
        else:
            kernel_time = compare_kernel_time(plain_ms, tuned_ms, app)  # type: ignore[arg-type]
            kernel_time["devices"] = compare_devices(plain_runs, tuned_runs, app)
            print_kernel_time(console, kernel_time)

    plain_s = [r.seconds for r in plain_runs]
    tuned_s = [r.seconds for r in tuned_runs]
    plain_median, tuned_median = statistics.median(plain_s), statistics.median(tuned_s)
    noise = (max(plain_s) - min(plain_s)) / plain_median if plain_median else 0.0
    speedup = plain_median / tuned_median if tuned_median else None
    significant = speedup is not None and abs(speedup - 1) > noise
    verdict = ("faster" if speedup and speedup > 1 else "slower") if significant else "no difference beyond noise"
    console.print(
        f"application: {plain_median:.3f} s plain, {tuned_median:.3f} s tuned (median of {repeat}), "
        f"{speedup:.3f}x, noise ±{100 * noise:.1f} %: {verdict}")
    if baseline is not None:
        print_output_check(console, baseline, comparisons, output_filter)
    if json_path is not None:
        json_path.write_text(json.dumps({
            "command": argv, "repeat": repeat, "plain_s": plain_s, "tuned_s": tuned_s,
            "speedup": speedup, "noise": noise, "significant": significant,
            **output_json(baseline, comparisons, check_output),
            "kernels": rows, "kernel_time": kernel_time, "clock_control": clocks.describe()}, indent=2))
    if differences:
        raise SystemExit(OUTPUT_DIFFERS_EXIT)
