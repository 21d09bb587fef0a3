"""The plots of a tuning run's report, as PNG (matplotlib) and HTML (plotly): the search's
history (or Pareto front), parameter importances, parallel coordinates, and each
configuration's objective. Drawn by report.write_report, or by the detached process of
_background_plots.py; a missing plotting library costs its format, never the report."""

from __future__ import annotations

import importlib
import json
import os
from pathlib import Path
from typing import Any

from ..search._objective import unit
from ..tune_types import TuneOutcome

__all__ = ["write_plots"]


def _times_figures(outcome: TuneOutcome, png: bool, html: bool):
    """Objective per configuration (trial), failures marked, baseline as a line: a
    matplotlib figure (``png``) and a plotly one (``html``), None for the other."""
    name = outcome.objectives[0]
    label = f"{name} ({unit(name)})"
    done = [r for r in outcome.trials if r.state == "complete" and r.values]
    xs = [r.number for r in done]
    ys = [r.values[0] for r in done]  # type: ignore[index]
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
    options: dict[str, Any]
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
    """Draw every plot as PNG (matplotlib) and HTML (plotly). A plotting library that
    is missing costs its format, said once, never the report: the search before it may
    have taken hours.

    Parameters:
        outcome: the run's outcome.
        directory: the report folder.

    Returns:
        The files written, and plot (or format) -> why it was skipped.
    """
    import warnings

    png, html = _importable("matplotlib"), _importable("plotly")
    written: list[str] = []
    skipped: dict[str, str] = {}
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
