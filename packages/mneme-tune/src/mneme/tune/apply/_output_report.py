"""The output check of ``mneme run --apply`` as people read it (a few lines) and as its
JSON holds it: what was compared, what varies between plain runs and was left out, and
the differing lines with both versions (the comparison itself: _output_compare.py)."""

from __future__ import annotations

from rich.console import Console

from ._output_compare import CLOCK, TIMING, Comparison, PlainBaseline, masked

__all__ = ["output_json", "print_output_check"]


def print_output_check(console: Console, baseline: PlainBaseline, comparisons: list[Comparison],
                       output_filter: str | None) -> None:
    """Print the output check in a few lines: what was compared, what was not and why,
    and the differing lines with both versions.

    Parameters:
        console: the console.
        baseline: the plain runs' baseline.
        comparisons: each tuned run compared with it.
        output_filter: the ``--output-filter`` given; None for every line.
    """
    runs = len(comparisons)
    compared = len(baseline.required)
    what = f"{compared} lines" + (f" matching {output_filter!r}" if output_filter else "")
    failed = [c for c in comparisons if not c.equal]
    if not failed:
        console.print(f"output: {what} equal to the plain runs' in all {runs} tuned runs")
    else:
        console.print(f"output: [bold red]DIFFERS[/bold red] from the plain runs in {len(failed)} of {runs} "
                      f"tuned runs ({what} compared); first differing run:")
        for difference in failed[0].differences[:10]:
            console.print(f"  {_line_label(difference.line)}plain: {_shown(difference.plain)}", markup=False)
            console.print(f"  {' ' * len(_line_label(difference.line))}tuned: {_shown(difference.tuned)}",
                          markup=False)
        if len(failed[0].differences) > 10:
            console.print(f"  ... {len(failed[0].differences) - 10} more differing lines")
    fields = baseline.lines_with_varying_fields
    whole = baseline.varying_lines
    timings = baseline.fields_not_compared(TIMING) + baseline.fields_not_compared(CLOCK)
    if fields or whole or baseline.extra_examples:
        console.print(f"  varying between plain runs (not compared): {len(fields)} lines with varying "
                      f"fields, {len(whole) + len(baseline.extra_examples)} lines as a whole", markup=False)
        for line in fields[:3]:
            console.print(f"    line {line.number}: {masked(line)}", markup=False)
        for text in [line.text for line in whole[:3]] + baseline.extra_examples[:max(0, 3 - len(whole))]:
            console.print(f"    whole line: {text}", markup=False)
    if timings:
        console.print(f"  timings and clock times (never compared): {timings} fields", markup=False)
    if not compared:
        # An equal empty output proves nothing: say so rather than let it pass as checked.
        console.print("output: [bold]nothing was compared[/bold]: "
                      + (f"--output-filter {output_filter!r} matched no line of the plain run's output"
                         if output_filter else "the application printed nothing every plain run agrees on"))


def _line_label(line: int | None) -> str:
    return f"line {line}: " if line is not None else "extra: "


def _shown(text: str | None) -> str:
    return "(no such line)" if text is None else repr(text)


def output_json(baseline: PlainBaseline | None, comparisons: list[Comparison], checked: bool) -> dict:
    """The output check as ``--json`` writes it.

    Parameters:
        baseline: the plain runs' baseline; None when nothing was compared.
        comparisons: each tuned run compared with it.
        checked: whether the output was checked.

    Returns:
        Whether it was checked and equal, how many lines were compared, and the first
        difference.
    """
    if baseline is None:
        return {"output_checked": checked, "output_lines_compared": 0, "output_equal": True, "difference": ""}
    differences = next((c.differences for c in comparisons if not c.equal), [])
    return {
        "output_checked": checked, "output_lines_compared": len(baseline.required),
        "output_equal": not differences, "difference": str(differences[0]) if differences else "",
        "output_differences": [{"line": d.line, "plain": d.plain, "tuned": d.tuned} for d in differences],
        "output_varying_fields": [masked(line) for line in baseline.lines_with_varying_fields],
        "output_varying_lines": [line.text for line in baseline.varying_lines] + baseline.extra_examples,
        "output_timings_not_compared": baseline.fields_not_compared(TIMING) + baseline.fields_not_compared(CLOCK),
    }


