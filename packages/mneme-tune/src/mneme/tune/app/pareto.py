"""The Pareto plot of a profile: each launch shape's share of the application's kernel
time as a bar, largest first, and the cumulative share as a line (PNG, matplotlib)."""

from __future__ import annotations

from pathlib import Path

from .profile import Ranking

#: bars drawn; the rest are summed into one "others" bar
MAX_BARS = 25


def _label(name: str, width: int = 28) -> str:
    base = name.partition("(")[0].removeprefix("void ")
    return base if len(base) <= width else base[: width - 1] + "…"


def write_pareto(ranking: Ranking, path: Path, marked: set[int] | None = None) -> Path:
    """Writes the plot to ``path``; rows whose index is in ``marked`` (the kernels a tuning
    run took) are drawn in another colour."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = list(ranking.rows[:MAX_BARS])
    shares = [100 * r.share for r in rows]
    labels = [_label(r.display_name) for r in rows]
    rest = sum(r.share for r in ranking.rows[MAX_BARS:])
    if rest > 0:
        shares.append(100 * rest)
        labels.append(f"{len(ranking.rows) - MAX_BARS} others")
    colours = ["tab:orange" if marked and i in marked else "tab:blue" for i in range(len(shares))]
    fig, ax = plt.subplots(figsize=(max(6.0, 0.45 * len(shares) + 2), 4.5))
    ax.bar(range(len(shares)), shares, color=colours)
    ax.set_ylabel("share of the application's kernel time (%)")
    ax.set_xticks(range(len(shares)), labels, rotation=60, ha="right", fontsize=7)
    line = ax.twinx()
    cumulative, total = [], 0.0
    for s in shares:
        total += s
        cumulative.append(min(total, 100.0))
    line.plot(range(len(shares)), cumulative, color="black", marker=".")
    line.set_ylim(0, 105)
    line.set_ylabel("cumulative (%)")
    ax.set_title(f"{ranking.database.name}: {ranking.kernel_ms:.2f} ms of kernel time, "
                 f"{ranking.profile.launches} launches")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
