"""Is the tuned run's output the plain run's? Judged against what varies between plain runs.

Real applications print their own timings, thread ids, addresses and dates: two plain runs
of the same program already differ there. So the plain runs are first compared with each
other, and only what they agree on is required of the tuned runs.

Each line is split into fields: text and numbers (decimal, ``0x`` hex, hex hashes of 8 or
more digits). Per line of the first plain run (the reference):

- a number that differs in any other plain run is *varying* and not compared; the line's
  text and its other numbers still must match;
- a line that another plain run lacks (or prints with other text) is *varying as a whole*:
  the tuned runs may print it or not, and lines like it;
- a number followed by a unit of time or rate (``1677 ms``, ``0.07 s``, ``3.2 GB/s``,
  ``120 it/s``) is a *timing* and a date or clock time (``2025-01-31``, ``12:04:55``) a
  *clock*: neither is compared even where the plain runs happened to agree, since a
  faster kernel is meant to change them.

Everything else must be equal. Lines are taken as a terminal shows them: ``\\r`` rewrites
(progress bars) keep the last text written, ANSI colour codes and blanks (column padding
around numbers of other widths) do not count.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

TEXT, NUMBER, TIMING, CLOCK = "text", "number", "timing", "clock"

_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
_BLANKS = re.compile(r"\s+")
_TIME_UNIT = r"(?:ns|nsec|us|usec|µs|ms|msec|s|sec|secs|seconds?|min|mins|minutes?)"
_RATE_UNIT = r"(?:[A-Za-z]*/s(?:ec)?|[KMGTP]?FLOPS|fps)"
_FIELD = re.compile(
    r"(?P<clock>\d{4}-\d{2}-\d{2}(?:[T ]\d{1,2}:\d{2}(?::\d{2}(?:\.\d+)?)?)?"
    r"|(?<![\w.:])\d{1,2}:\d{2}:\d{2}(?:\.\d+)?(?![\w:]))"
    r"|(?P<hex>(?<![\w.])[-+]?0[xX][0-9a-fA-F]+)"
    r"|(?P<hash>(?<![\w.])(?=[0-9a-fA-F]*\d)(?=[0-9a-fA-F]*[a-fA-F])[0-9a-fA-F]{8,}(?![\w.]))"
    r"|(?P<number>(?<![\w.])[-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?)"
    r"(?P<unit>\s?(?:" + _TIME_UNIT + "|" + _RATE_UNIT + r")(?![\w/]))?"
)


@dataclass(frozen=True)
class Field:
    """A piece of an output line.

    Attributes:
        kind: TEXT, NUMBER, TIMING or CLOCK.
        value: its text.
    """

    kind: str
    value: str


def terminal_lines(output: str) -> list[str]:
    """The lines as a terminal shows them: the last text of each ``\\r`` rewrite, no
    colour codes, no blanks around them (padding of right-aligned columns).

    Parameters:
        output: an application's output.

    Returns:
        Its lines.
    """
    lines = []
    for raw in output.split("\n"):
        parts = [p for p in _ANSI.sub("", raw).split("\r") if p.strip()]
        lines.append(parts[-1].strip() if parts else "")
    if lines and lines[-1] == "":
        lines.pop()  # the newline that ends the last line starts none
    return lines


def fields(line: str) -> list[Field]:
    """A line as text and number fields; blanks inside text collapse to one space.

    Parameters:
        line: the line.

    Returns:
        Its fields, in order.
    """
    out: list[Field] = []

    def text(value: str) -> None:
        value = _BLANKS.sub(" ", value)
        if value:
            out.append(Field(TEXT, value))

    last = 0
    for match in _FIELD.finditer(line):
        text(line[last:match.start()])
        if match["clock"]:
            out.append(Field(CLOCK, match["clock"]))
        elif match["number"] and match["unit"]:
            out.append(Field(TIMING, match["number"]))
            text(match["unit"])
        else:
            out.append(Field(NUMBER, match["hex"] or match["hash"] or match["number"]))
        last = match.end()
    text(line[last:])
    return out


def _shape(parsed: Sequence[Field]) -> tuple[str, ...]:
    """What two lines must share to be the same line: the text, with a mark per number."""
    return tuple(f.value if f.kind == TEXT else "\0" for f in parsed)


@dataclass
class _Line:
    number: int  # 1-based, in the first plain run's compared lines
    text: str
    parsed: list[Field]
    shape: tuple[str, ...]
    varying: set[int] = field(default_factory=set)  # positions of numbers that varied
    optional: bool = False  # absent or other text in some plain run
    seen: list[str] = field(default_factory=list)  # other plain runs' versions, for examples


@dataclass
class Difference:
    """A line the tuned run does not print as every plain run did.

    Attributes:
        line: its number in the first plain run's compared lines; None for an extra
            line.
        plain: what the plain runs print; None for an extra line.
        tuned: what the tuned run prints; None for a missing line.
    """

    line: int | None
    plain: str | None
    tuned: str | None

    def __str__(self) -> str:
        if self.tuned is None:
            return f"line {self.line}: {self.plain!r} is missing from the tuned run"
        if self.plain is None:
            return f"the tuned run prints {self.tuned!r}, which no plain run printed"
        return f"line {self.line}: plain {self.plain!r}, tuned {self.tuned!r}"


@dataclass
class Comparison:
    """One tuned run's output against the plain runs'.

    Attributes:
        compared: lines of the reference required in the tuned run.
        differences: the lines it does not print as the plain runs did.
    """

    compared: int
    differences: list[Difference]

    @property
    def equal(self) -> bool:
        """Whether the tuned run printed what the plain runs agree on."""
        return not self.differences


def _aligned(a: Sequence, b: Sequence) -> list[tuple[str, int, int, int, int]]:
    """difflib opcodes of ``a`` against ``b``; the common head and tail are taken off first
    (outputs of many lines of one shape make difflib quadratic, and usually differ little)."""
    if list(a) == list(b):
        return [("equal", 0, len(a), 0, len(b))]
    head = 0
    while head < min(len(a), len(b)) and a[head] == b[head]:
        head += 1
    tail = 0
    while tail < min(len(a), len(b)) - head and a[len(a) - 1 - tail] == b[len(b) - 1 - tail]:
        tail += 1
    middle = difflib.SequenceMatcher(None, a[head:len(a) - tail], b[head:len(b) - tail],
                                     autojunk=False).get_opcodes()
    ops = [("equal", 0, head, 0, head)] if head else []
    ops += [(op, i1 + head, i2 + head, j1 + head, j2 + head) for op, i1, i2, j1, j2 in middle]
    if tail:
        ops.append(("equal", len(a) - tail, len(a), len(b) - tail, len(b)))
    return ops


def _numbers(parsed: Sequence[Field]) -> list[tuple[int, Field]]:
    return [(i, f) for i, f in enumerate(parsed) if f.kind != TEXT]


class PlainBaseline:
    """What the plain runs agree on, and what varies between them.

    Parameters:
        plain_outputs: the plain runs' outputs.
        pattern: only lines matching it are compared; None for every line.

    Raises:
        ValueError: no plain run.
    """

    def __init__(self, plain_outputs: Sequence[str], pattern: re.Pattern | None = None):
        if not plain_outputs:
            raise ValueError("a baseline needs at least one plain run")
        self.pattern = pattern
        runs = [self._select(o) for o in plain_outputs]
        self.lines = [_Line(n + 1, text, parsed, _shape(parsed))
                      for n, (text, parsed) in enumerate(runs[0])]
        #: shapes of lines that appear in some plain runs only: tuned runs may print them
        self.optional_shapes: set[tuple[str, ...]] = set()
        #: examples of lines only some plain runs print, for the summary
        self.extra_examples: list[str] = []
        for other in runs[1:]:
            self._learn(other)

    def _select(self, output: str) -> list[tuple[str, list[Field]]]:
        lines = terminal_lines(output)
        if self.pattern is not None:
            lines = [line for line in lines if self.pattern.search(line)]
        return [(line, fields(line)) for line in lines]

    def _learn(self, other: list[tuple[str, list[Field]]]) -> None:
        ops = _aligned([line.shape for line in self.lines], [_shape(p) for _, p in other])
        for op, i1, i2, j1, j2 in ops:
            if op == "equal":
                for line, (text, parsed) in zip(self.lines[i1:i2], other[j1:j2], strict=True):
                    # timings and clocks are never compared: only plain numbers can vary
                    changed = {i for i, f in _numbers(line.parsed)
                               if f.kind == NUMBER and parsed[i].value != f.value}
                    if changed - line.varying and len(line.seen) < 3:
                        line.seen.append(text)
                    line.varying |= changed
                continue
            for line in self.lines[i1:i2]:
                line.optional = True
                self.optional_shapes.add(line.shape)
            for text, parsed in other[j1:j2]:
                self.optional_shapes.add(_shape(parsed))
                if len(self.extra_examples) < 3:
                    self.extra_examples.append(text)

    # What is not compared, for the summary.
    @property
    def required(self) -> list[_Line]:
        return [line for line in self.lines if not line.optional]

    @property
    def varying_lines(self) -> list[_Line]:
        return [line for line in self.lines if line.optional]

    @property
    def lines_with_varying_fields(self) -> list[_Line]:
        return [line for line in self.required if line.varying]

    def fields_not_compared(self, kind: str) -> int:
        """Timing or clock fields of the required lines (never compared)."""
        return sum(1 for line in self.required for f in line.parsed if f.kind == kind)

    def compare(self, output: str) -> Comparison:
        tuned = self._select(output)
        differences: list[Difference] = []
        line: _Line | None
        for op, i1, i2, j1, j2 in _aligned([line.shape for line in self.lines],
                                           [_shape(p) for _, p in tuned]):
            if op == "equal":
                for line, (text, parsed) in zip(self.lines[i1:i2], tuned[j1:j2], strict=True):
                    if not line.optional and not self._same(line, parsed):
                        differences.append(Difference(line.number, line.text, text))
                continue
            missing = [line for line in self.lines[i1:i2] if not line.optional]
            extra = [text for text, parsed in tuned[j1:j2] if _shape(parsed) not in self.optional_shapes]
            for index in range(max(len(missing), len(extra))):
                line = missing[index] if index < len(missing) else None
                differences.append(Difference(line.number if line else None, line.text if line else None,
                                              extra[index] if index < len(extra) else None))
        return Comparison(len(self.required), differences)

    @staticmethod
    def _same(line: _Line, parsed: list[Field]) -> bool:
        for i, f in _numbers(line.parsed):
            if f.kind in (TIMING, CLOCK) or i in line.varying:
                continue
            if parsed[i].value != f.value:
                return False
        return True


def masked(line: _Line) -> str:
    """A line with its uncompared fields shown as ``<…>``, for the summary.

    Parameters:
        line: a line of the baseline.

    Returns:
        Its text, masked.
    """
    out = []
    for i, f in enumerate(line.parsed):
        if f.kind == TEXT:
            out.append(f.value)
        elif f.kind in (TIMING, CLOCK) or i in line.varying:
            out.append(f"<{f.kind if f.kind != NUMBER else 'varies'}>")
        else:
            out.append(f.value)
    return "".join(out)


def compare_runs(plain_outputs: Sequence[str], tuned_outputs: Iterable[str],
                 pattern: re.Pattern | None = None) -> tuple[PlainBaseline, list[Comparison]]:
    """Compare tuned runs' outputs with the plain runs'.

    Parameters:
        plain_outputs: the plain runs' outputs.
        tuned_outputs: the tuned runs' outputs.
        pattern: only lines matching it are compared; None for every line.

    Returns:
        The plain runs' baseline and each tuned run compared against it.
    """
    baseline = PlainBaseline(plain_outputs, pattern)
    return baseline, [baseline.compare(output) for output in tuned_outputs]
