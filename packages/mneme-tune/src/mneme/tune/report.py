"""The report of a tuning run: best configuration, every trial, and plots.

``write_report(outcome, DIR)`` writes:

- ``best.json``: the best configuration, accepted by ``mneme replay --config``
- ``summary.json``: study, objectives, baseline, counts, the best configurations
- ``trials.csv``: one row per finished trial (parameters, objectives, verification, reason)
- plots as PNG and HTML: ``history`` (or ``pareto`` for several objectives),
  ``importance``, ``parallel``, and ``times`` (the objective of every configuration);
  without matplotlib (PNG) or plotly (HTML) that format is skipped, said in one line
"""

from __future__ import annotations

import csv
import importlib
import io
import json
import os
import statistics
from pathlib import Path
from typing import Any

from mneme.replay.engine import ReplaySettings
from mneme.replay.files import write_atomic

from .errors import TuneError
from .objective import unit
from .tune_types import TrialRecord, TuneOutcome

TOP = 10


def exported_settings(record: TrialRecord) -> dict[str, Any]:
    """A trial's configuration as ``mneme replay --config`` takes it (replayed on a GPU:
    the compile-only flag of a static tuning run is dropped)."""
    settings = ReplaySettings.from_dict(record.settings)
    replay = settings.replay.with_(compile_only=False)
    return ReplaySettings(settings.compile, replay).to_dict()


def verdict(outcome: TuneOutcome) -> str:
    """One line: what the search found against the recorded configuration, with its noise
    ("no significant speedup" when the difference is inside it)."""
    c = outcome.confirmation
    if not c:
        return "no configuration to compare with the recorded one"
    if c.get("objective") != "time":
        name = c.get("objective")
        if not c.get("significant"):
            return f"no improvement of {name} over the recorded configuration"
        # "24 against 32 registers", "5992 against 6760 bytes of binary_size"
        what = unit(name) if unit(name) == name else f"{unit(name)} of {name}"
        return (f"best (trial {c['trial']}) {c['best'][0]:g} against {c['baseline'][0]:g} "
                f"{what} for the recorded configuration (exact, compile-only)")
    runs = f"{len(c['best'])} and {len(c['baseline'])} runs"
    base, best = statistics.median(c["baseline"]), statistics.median(c["best"])
    numbers = (f"best (trial {c['trial']}) {best:.4g} ms against {base:.4g} ms recorded, "
               f"{c['speedup']:.2f}x, noise ±{100 * c['noise']:.1f} % ({runs})")
    if c.get("failure"):
        return f"no significant speedup: {c['failure']}"
    if not c.get("significant"):
        return f"no significant speedup: {numbers}, the ranges overlap"
    return f"significant speedup: {numbers}"


def best_configuration(outcome: TuneOutcome) -> dict[str, Any]:
    """best.json: the best configuration with what it was tuned on and how it compared."""
    data = exported_settings(outcome.best[0])
    if outcome.identity:
        c = outcome.confirmation
        data["identity"] = {**outcome.identity, "trial": outcome.best[0].number,
                            "speedup": c.get("speedup"), "significant": c.get("significant"),
                            "verdict": verdict(outcome)}
        if outcome.baseline.get("timing"):
            # how the times were measured: method, cache mode, in-app time, fidelity, SM clock
            data["identity"]["timing"] = outcome.baseline["timing"]
    return data


def summary(outcome: TuneOutcome) -> dict[str, Any]:
    def row(r: TrialRecord) -> dict[str, Any]:
        out = {"trial": r.number, "values": r.values, "params": r.params,
               "metrics": r.metrics, "speedup": r.speedup, "verified": r.verified}
        if r.timing_method:
            out["timing_method"] = r.timing_method  # not as the baseline was timed
        return out

    failures: dict[str, int] = {}
    for r in outcome.trials:
        if r.state == "failed":
            failures[r.failure or "error"] = failures.get(r.failure or "error", 0) + 1
    data = {
        "study": outcome.study.study_name,
        "objectives": [{"name": n, "unit": unit(n)} for n in outcome.objectives],
        "baseline": outcome.baseline,
        # how the times were measured (None: compile-only, nothing timed)
        "timing": outcome.baseline.get("timing"),
        "trials": len(outcome.trials),
        "complete": sum(1 for r in outcome.trials if r.state == "complete"),
        "failed": failures,
        "this_run": {"trials": outcome.ran, "failed": outcome.failed,
                     "seconds": outcome.elapsed, "search_seconds": outcome.search_seconds,
                     "worker_restarts": outcome.restarts,
                     "trials_per_second": outcome.trials_per_second,
                     # where the time went (run_phases.py): seconds per phase, in order
                     "phases": outcome.phases,
                     # each pool's use over the search and which bounded it (pool_use.py)
                     "pool_use": outcome.pool_use},
        "best": [row(r) for r in outcome.best[:TOP]],
        "identity": outcome.identity,
        "confirmation": outcome.confirmation,
        "verdict": verdict(outcome),
    }
    if outcome.in_app:  # --confirm-in-app: replayed and in-app speedups (app_confirm.py)
        data["in_app"] = outcome.in_app
    return data


def write_trials_csv(outcome: TuneOutcome, path: Path) -> None:
    params = sorted({k for r in outcome.trials for k in r.params})
    metrics = sorted({k for r in outcome.trials for k in r.metrics})
    header = ["trial", "state", *(f"value_{n}" for n in outcome.objectives), *params, *metrics, "speedup", "verified",
              "failure", "reason"]
    out = io.StringIO()
    writer = csv.writer(out)
    writer.writerow(header)
    for r in sorted(outcome.trials, key=lambda r: r.number):
        values = r.values or [None] * len(outcome.objectives)
        writer.writerow([r.number, r.state, *values, *(r.params.get(p) for p in params),
                         *(r.metrics.get(m) for m in metrics), r.speedup, r.verified,
                         r.failure, r.reason])
    write_atomic(path, out.getvalue().encode())


def _times_figures(outcome: TuneOutcome, png: bool, html: bool):
    """Objective per configuration (trial), failures marked, baseline as a line: a
    matplotlib figure (``png``) and a plotly one (``html``), None for the other."""
    name = outcome.objectives[0]
    label = f"{name} ({unit(name)})"
    done = [r for r in outcome.trials if r.state == "complete" and r.values]
    xs = [r.number for r in done]
    ys = [r.values[0] for r in done]
    failed = [r.number for r in outcome.trials if r.state == "failed"]
    base = (outcome.baseline.get("values") or [None])[0]

    fig = figure = None
    if png:
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(figsize=(8, 4.5), dpi=110)
        ax.scatter(xs, ys, s=12, label="configuration")
        if failed:
            low = min(ys) if ys else 0
            ax.scatter(failed, [low] * len(failed), marker="x", color="tab:red", s=14,
                       label="failed (not measured)")
        if base is not None:
            ax.axhline(base, color="tab:green", linestyle="--", label="recorded configuration")
        ax.set_xlabel("trial")
        ax.set_ylabel(label)
        ax.set_title(f"{name} per configuration (study {outcome.study.study_name[:60]})", fontsize=8)
        ax.legend(fontsize=8)
        fig.tight_layout()

    if html:
        import plotly.graph_objects as go

        figure = go.Figure()
        figure.add_trace(go.Scatter(x=xs, y=ys, mode="markers", name="configuration",
                                    text=[json.dumps(r.params) for r in done]))
        if failed:
            figure.add_trace(go.Scatter(x=failed, y=[min(ys) if ys else 0] * len(failed),
                                        mode="markers", marker_symbol="x", name="failed"))
        if base is not None:
            figure.add_hline(y=base, line_dash="dash", annotation_text="recorded configuration")
        figure.update_layout(title=f"{name} per configuration", xaxis_title="trial",
                             yaxis_title=label)
    return fig, figure


def _optuna_figures(outcome: TuneOutcome, kind: str, png: bool, html: bool):
    import optuna.visualization as vis
    import optuna.visualization.matplotlib as vism

    study = outcome.study
    single = len(outcome.objectives) == 1
    target = None if single else (lambda t: t.values[0])
    target_name = f"{outcome.objectives[0]} ({unit(outcome.objectives[0])})"
    if kind == "history":
        plot, options = "plot_optimization_history", {"target_name": target_name}
    elif kind == "pareto":
        names = [f"{n} ({unit(n)})" for n in outcome.objectives]
        plot, options = "plot_pareto_front", {"target_names": names}
    elif kind == "importance":
        plot, options = "plot_param_importances", {"target": target, "target_name": target_name}
    else:
        plot, options = "plot_parallel_coordinate", {"target": target, "target_name": target_name}
    fig = getattr(vism, plot)(study, **options).figure if png else None
    figure = getattr(vis, plot)(study, **options) if html else None
    return fig, figure


def _importable(module: str) -> bool:
    try:
        importlib.import_module(module)
    except ImportError:
        return False
    return True


def write_plots(outcome: TuneOutcome, directory: Path) -> tuple[list[str], dict[str, str]]:
    """Every plot as PNG (matplotlib) and HTML (plotly); returns (written files, skipped
    plot → why). A plotting library that is missing costs its format, said once, never
    the report: the search before it may have taken hours."""
    import warnings

    png, html = _importable("matplotlib"), _importable("plotly")
    written, skipped = [], {}
    if not (png or html):
        return written, {"all": "matplotlib and plotly are not installed "
                                "(pip install matplotlib plotly)"}
    if not png:
        skipped["png"] = "matplotlib is not installed (pip install matplotlib)"
    if not html:
        skipped["html"] = "plotly is not installed (pip install plotly)"
    if png:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    complete = sum(1 for r in outcome.trials if r.state == "complete")
    kinds = ["history" if len(outcome.objectives) == 1 else "pareto", "importance",
             "parallel", "times"]
    for kind in kinds:
        if complete < 2 and kind in ("importance", "parallel"):
            skipped[kind] = "needs at least two completed trials"
            continue
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                if kind == "times":
                    fig, figure = _times_figures(outcome, png, html)
                else:
                    fig, figure = _optuna_figures(outcome, kind, png, html)
                # Drawn beside the file and renamed into place: whole or not there.
                if fig is not None:
                    fig.savefig(directory / f".{kind}.png.tmp", format="png")
                    plt.close(fig)
                    os.replace(directory / f".{kind}.png.tmp", directory / f"{kind}.png")
                if figure is not None:
                    figure.write_html(directory / f".{kind}.html.tmp", include_plotlyjs="cdn")
                    os.replace(directory / f".{kind}.html.tmp", directory / f"{kind}.html")
        except (ValueError, RuntimeError, ZeroDivisionError, ImportError) as error:
            skipped[kind] = str(error).splitlines()[0] if str(error) else type(error).__name__
            continue
        written += [f"{kind}.{ext}" for ext, made in (("png", fig), ("html", figure))
                    if made is not None]
    return written, skipped


def write_report(outcome: TuneOutcome, directory: str | os.PathLike,
                 plots: bool | str = True) -> dict[str, Any]:
    """Write the report files into ``directory`` (created); returns the summary.
    ``plots``: True draws them before returning, ``"background"`` hands them to a process
    of their own (background_plots.py; ``plots_pending`` in the summary until it is done),
    False draws none."""
    directory = Path(directory)
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise TuneError(f"cannot create report folder {directory}: {error.strerror}") from None
    data = summary(outcome)
    if outcome.best:
        write_atomic(directory / "best.json",
                     json.dumps(best_configuration(outcome), indent=2, sort_keys=True).encode())
    write_trials_csv(outcome, directory / "trials.csv")
    if plots == "background":
        data["plots_pending"] = True
    elif plots:
        data["plots"], data["plots_skipped"] = write_plots(outcome, directory)
    write_atomic(directory / "summary.json", json.dumps(data, indent=2, sort_keys=True, default=str).encode())
    if plots == "background":  # after summary.json, which the drawing process completes
        from .background_plots import draw_in_background

        data["plots_pid"] = draw_in_background(outcome, directory)
    return data
