"""The application's kernel time, plain and tuned, beside what the report predicted.

``mneme run --apply REPORT`` of a whole-application report runs the application in
alternating pairs, every run with the swapper timing every kernel of the process by CUPTI
(``MNEME_APPLY_TOTAL``): plain runs in its measuring mode (original code), tuned runs
with every winner swapped in. The sum of kernel durations of each run is its kernel time;
their medians give the measured saving, their spreads the noise, and a saving is
significant when the two sets of runs do not overlap and their means differ by more than
twice the standard error of the difference (Welch). The predicted saving comes from the
report (app.json), as a share of the recorded kernel time: the two are set side by side
as shares, since the application's kernel time under ``mneme run`` need not equal the
recorded one.
"""

from __future__ import annotations

import math
import statistics
from typing import Any

from rich.console import Console

__all__ = ["compare_devices", "compare_kernel_time", "print_kernel_time"]


def _stderr(values: list[float]) -> float:
    return statistics.stdev(values) / math.sqrt(len(values)) if len(values) > 1 else 0.0


def compare_kernel_time(plain_ms: list[float], tuned_ms: list[float], app: dict[str, Any]) -> dict[str, Any]:
    """The measured saving beside the predicted one (shares of the kernel time)."""
    plain, tuned = statistics.median(plain_ms), statistics.median(tuned_ms)
    saving = (plain - tuned) / plain if plain else 0.0
    noise = (max(plain_ms) - min(plain_ms)) / plain if plain else 0.0
    separated = max(tuned_ms) < min(plain_ms) or min(tuned_ms) > max(plain_ms)
    gap = abs(statistics.mean(plain_ms) - statistics.mean(tuned_ms))
    welch = math.sqrt(_stderr(plain_ms) ** 2 + _stderr(tuned_ms) ** 2)
    significant = separated and gap > 2 * welch
    predicted = float(app.get("predicted_saving_share") or 0.0)
    return {"plain_kernel_ms": plain_ms, "tuned_kernel_ms": tuned_ms,
            "plain_median_ms": plain, "tuned_median_ms": tuned,
            "measured_saving_share": saving, "noise": noise, "significant": significant,
            "predicted_saving_share": predicted, "recorded_kernel_ms": app.get("kernel_ms"),
            "prediction_error_share": saving - predicted,
            "prediction_within_10pct": abs(saving - predicted) <= 0.10}


def compare_devices(plain_runs, tuned_runs, app: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Per GPU, the same comparison (only when the application's kernels ran on more than
    one): each GPU's kernel time plain and tuned. The predicted saving stays the whole
    application's (the report predicts no split)."""
    devices = sorted({d for r in [*plain_runs, *tuned_runs] for d in r.report.device_ms})
    if len(devices) < 2:
        return {}
    out = {}
    for device in devices:
        plain = [r.report.device_ms.get(device, 0.0) for r in plain_runs]
        tuned = [r.report.device_ms.get(device, 0.0) for r in tuned_runs]
        out[str(device)] = compare_kernel_time(plain, tuned, app)
    return out


def print_kernel_time(console: Console, result: dict[str, Any]) -> None:
    runs = len(result["plain_kernel_ms"])
    verdict = ("significant" if result["significant"] else "not significant (inside the noise)")
    console.print(
        f"application kernel time (CUPTI, every kernel): {result['plain_median_ms']:.3f} ms plain, "
        f"{result['tuned_median_ms']:.3f} ms tuned (median of {runs} each): "
        f"{100 * result['measured_saving_share']:+.1f}% saved, noise ±{100 * result['noise']:.1f}%, {verdict}",
        soft_wrap=True, markup=False)
    for device, each in (result.get("devices") or {}).items():
        console.print(
            f"  GPU {device}: {each['plain_median_ms']:.3f} ms plain, {each['tuned_median_ms']:.3f} ms tuned: "
            f"{100 * each['measured_saving_share']:+.1f}% saved, noise ±{100 * each['noise']:.1f}%, "
            f"{'significant' if each['significant'] else 'not significant'}", soft_wrap=True, markup=False)
    console.print(
        f"predicted by the report: {100 * result['predicted_saving_share']:.1f}% saved "
        f"(of {result['recorded_kernel_ms']:.3f} ms recorded); measured minus predicted "
        f"{100 * result['prediction_error_share']:+.1f} points of the kernel time",
        soft_wrap=True, markup=False)
