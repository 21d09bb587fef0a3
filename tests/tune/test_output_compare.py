"""The output check of `mneme run --apply`: what varies between plain runs is not compared,
everything else is (mneme.tune.apply._output_compare)."""

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from mneme.tune.apply import Field, PlainBaseline, compare_runs, fields, masked, terminal_lines
from mneme.tune.apply._output_compare import CLOCK, NUMBER, TEXT, TIMING


def _check(plain, tuned, pattern=None):
    baseline, [comparison] = compare_runs(plain, [tuned], re.compile(pattern) if pattern else None)
    return baseline, comparison


# --- fields -------------------------------------------------------------------------------

def test_fields_split_text_from_numbers():
    assert fields("Host time: 1677 ms") == [Field(TEXT, "Host time: "), Field(TIMING, "1677"), Field(TEXT, " ms")]
    assert fields("sum = -1.5e-3, n=42") == [Field(TEXT, "sum = "), Field(NUMBER, "-1.5e-3"),
                                             Field(TEXT, ", n="), Field(NUMBER, "42")]
    assert fields("ptr 0x7f3a00001000 hash 85944171f73967e8") == [
        Field(TEXT, "ptr "), Field(NUMBER, "0x7f3a00001000"), Field(TEXT, " hash "),
        Field(NUMBER, "85944171f73967e8")]


@pytest.mark.parametrize("line, kinds", [
    ("Total kernel execution time: 0.0724 s", [TIMING]),
    ("Time= 0.123 msec, Performance= 1234.5 GFlop/s", [TIMING, TIMING]),
    ("bandwidth 3.2GB/s", [TIMING]),
    ("100 iterations in 12.5 ms", [NUMBER, TIMING]),
    ("took 2 seconds", [TIMING]),
    ("5 streams, 3 sms", [NUMBER, NUMBER]),  # words that start like a unit are not one
    ("accuracy 98.5%", [NUMBER]),  # a percentage can be a result: compared unless it varies
    ("[2025-01-31 12:04:55.123] start", [CLOCK]),
    ("at 09:15:02 done", [CLOCK]),
    ("sm_90 x86_64 v1", []),  # digits inside words are text
    ("dates 2025-01-31", [CLOCK]),
])
def test_field_kinds(line, kinds):
    assert [f.kind for f in fields(line) if f.kind != TEXT] == kinds


@given(st.text(alphabet=st.sampled_from("ab x=:.-+0123456789efms/%\t"), max_size=40))
def test_fields_keep_the_line(line):
    """Fields put back together are the line, with runs of blanks as one space."""
    assert "".join(f.value for f in fields(line)) == re.sub(r"\s+", " ", line)


def test_terminal_lines_show_what_a_terminal_shows():
    out = "start\nprogress  10%\rprogress  55%\rprogress 100%\n\x1b[32mok\x1b[0m  \nend\n"
    assert terminal_lines(out) == ["start", "progress 100%", "ok", "end"]
    assert terminal_lines("a\r\n") == ["a"]  # a CRLF line end is no rewrite
    assert terminal_lines("") == []


# --- plain runs against each other, then the tuned run ------------------------------------

def test_timings_the_application_prints_are_not_compared():
    plain = ["Total kernel execution time: 0.0724 s\nchecksum 123456\n",
             "Total kernel execution time: 0.0713 s\nchecksum 123456\n"]
    baseline, result = _check(plain, "Total kernel execution time: 0.0650 s\nchecksum 123456\n")
    assert result.equal and result.compared == 2
    _, result = _check(plain, "Total kernel execution time: 0.0650 s\nchecksum 123457\n")
    [difference] = result.differences
    assert difference.line == 2 and difference.plain == "checksum 123456" and difference.tuned == "checksum 123457"
    assert "plain 'checksum 123456', tuned 'checksum 123457'" in str(difference)


def test_a_timing_the_plain_runs_agreed_on_may_still_change():
    """A coarse timer prints the same in every plain run; the tuned kernel is meant to change it."""
    plain = ["Host time: 2 s\n", "Host time: 2 s\n"]
    assert _check(plain, "Host time: 1 s\n")[1].equal


def test_a_number_that_varies_between_plain_runs_is_masked_and_the_rest_of_the_line_compared():
    plain = ["worker 140234 done, result 42\n", "worker 140777 done, result 42\n",
             "worker 139001 done, result 42\n"]
    baseline, result = _check(plain, "worker 123 done, result 42\n")
    assert result.equal
    [line] = baseline.lines_with_varying_fields
    assert masked(line) == "worker <varies> done, result 42"
    assert not _check(plain, "worker 123 done, result 43\n")[1].equal
    assert not _check(plain, "worker 123 failed, result 42\n")[1].equal  # the text still counts


def test_addresses_thread_ids_and_dates_that_vary_are_not_compared():
    plain = ["[2025-01-31 12:04:55] thread 139851 buffer at 0x7f3a00001000\nsum=3.25\n",
             "[2025-01-31 12:04:57] thread 139902 buffer at 0x7f1100002000\nsum=3.25\n"]
    tuned = "[2025-02-01 00:00:01] thread 1 buffer at 0x7000\nsum=3.25\n"
    assert _check(plain, tuned)[1].equal
    assert not _check(plain, tuned.replace("3.25", "3.26"))[1].equal


def test_iterations_in_a_time_budget():
    plain = ["ran 1200 iterations in 1.00 s\nresidual 1e-06\n", "ran 1187 iterations in 1.00 s\nresidual 1e-06\n"]
    assert _check(plain, "ran 1500 iterations in 1.00 s\nresidual 1e-06\n")[1].equal
    assert not _check(plain, "ran 1500 iterations in 1.00 s\nresidual 2e-06\n")[1].equal


def test_a_line_only_some_plain_runs_print_varies_as_a_whole():
    plain = ["start\nwarning: slow clock 3\nresult 7\n", "start\nresult 7\n"]
    baseline, result = _check(plain, "start\nresult 7\n")
    assert result.equal and result.compared == 2
    assert [line.text for line in baseline.varying_lines] == ["warning: slow clock 3"]
    assert _check(plain, "start\nwarning: slow clock 9\nresult 7\n")[1].equal
    # a line the first plain run lacks is learnt from the others
    plain = ["start\nresult 7\n", "start\nretrying 2\nresult 7\n"]
    baseline, result = _check(plain, "start\nretrying 5\nresult 7\n")
    assert result.equal and baseline.extra_examples == ["retrying 2"]


def test_missing_and_extra_lines_differ():
    plain = ["a 1\nb 2\nc 3\n"] * 2
    [difference] = _check(plain, "a 1\nc 3\n")[1].differences
    assert difference.line == 2 and difference.tuned is None and "missing" in str(difference)
    [difference] = _check(plain, "a 1\nb 2\nnan detected\nc 3\n")[1].differences
    assert difference.line is None and difference.tuned == "nan detected"
    assert _check(plain, "a 1\nb 2\n c  3 \n")[1].equal  # padding is not content


def test_lines_printed_in_another_order_across_plain_runs_vary():
    """Threads finishing in another order: both versions seen, neither line required."""
    plain = ["begin\nthread A ok\nthread B ok\nend 5\n", "begin\nthread B ok\nthread A ok\nend 5\n"]
    baseline, result = _check(plain, "begin\nthread B ok\nthread A ok\nend 5\n")
    assert result.equal
    assert not _check(plain, "begin\nthread B ok\nthread A ok\nend 6\n")[1].equal


def test_the_filter_selects_the_compared_lines():
    plain = ["noise 1\nchecksum 5\n", "noise 2\nchecksum 5\n"]
    baseline, result = _check(plain, "other 3\nchecksum 5\n", pattern="checksum")
    assert result.equal and result.compared == 1
    assert not _check(plain, "checksum 6\n", pattern="checksum")[1].equal


def test_a_single_plain_run_compares_everything_but_timings():
    baseline = PlainBaseline(["n 3\nt 1.5 ms\n"])
    assert baseline.compare("n 3\nt 1.2 ms\n").equal
    assert not baseline.compare("n 4\nt 1.2 ms\n").equal
    assert baseline.fields_not_compared(TIMING) == 1


def test_many_lines_of_one_shape_compare_quickly():
    """MNEME-CHECK-like outputs (thousands of lines of one shape) with a line changed."""
    lines = [f"MNEME-CHECK {i} k() after out 4096 {i * 7919 % 2**60:016x}" for i in range(20000)]
    plain = "\n".join(lines) + "\n"
    tuned = list(lines)
    tuned[12345] = tuned[12345][:-1] + ("0" if tuned[12345][-1] != "0" else "1")
    [difference] = _check([plain, plain], "\n".join(tuned) + "\n")[1].differences
    assert difference.line == 12346


# --- properties ---------------------------------------------------------------------------

_words = st.sampled_from(["result", "time:", "ms", "sum =", "x", "ok", "iter", ",", "0x", "[", "]"])
_numbers = st.one_of(st.integers(-10**6, 10**6).map(str),
                     st.floats(-1e6, 1e6, allow_nan=False).map(lambda v: f"{v:.4g}"))
_lines = st.lists(st.lists(st.one_of(_words, _numbers), min_size=1, max_size=6).map(" ".join),
                  min_size=1, max_size=12)


@settings(max_examples=200, deadline=None)
@given(_lines)
def test_an_output_equals_itself(lines):
    output = "\n".join(lines) + "\n"
    assert PlainBaseline([output, output]).compare(output).equal


@settings(max_examples=200, deadline=None)
@given(_lines, st.data())
def test_a_changed_number_is_found_unless_the_plain_runs_varied_there(lines, data):
    output = "\n".join(lines) + "\n"
    baseline = PlainBaseline([output])
    candidates = [(n, i) for n, line in enumerate(baseline.lines)
                  for i, f in enumerate(line.parsed) if f.kind == NUMBER]
    if not candidates:
        return
    n, i = data.draw(st.sampled_from(candidates))

    def with_number(value: str) -> str:
        parsed = list(baseline.lines[n].parsed)
        parsed[i] = Field(NUMBER, value)
        changed = list(lines)
        changed[n] = "".join(f.value for f in parsed)
        return "\n".join(changed) + "\n"

    other = with_number("987654321")  # a value no strategy draws
    if fields(other.split("\n")[n]) != [*baseline.lines[n].parsed[:i], Field(NUMBER, "987654321"),
                                         *baseline.lines[n].parsed[i + 1:]]:
        return  # the new digits merged with a neighbour: not the same line shape
    assert not PlainBaseline([output, output]).compare(other).equal
    # the same change seen between two plain runs: masked, and any value passes there
    assert PlainBaseline([output, other]).compare(with_number("5")).equal


# --- what mneme run prints ----------------------------------------------------------------

def _printed(plain, tuned, output_filter=None):
    from mneme.tune.apply import output_json, print_output_check
    from rich.console import Console

    baseline, comparisons = compare_runs(plain, tuned, re.compile(output_filter) if output_filter else None)
    console = Console(record=True, width=200)
    print_output_check(console, baseline, comparisons, output_filter)
    return console.export_text(), output_json(baseline, comparisons, True)


def test_the_summary_says_what_was_compared_and_what_varied():
    plain = ["Host time: 1677 ms\nthread 41 ready\nchecksum 99\n", "Host time: 1714 ms\nthread 42 ready\nchecksum 99\n"]
    text, data = _printed(plain, ["Host time: 1500 ms\nthread 7 ready\nchecksum 99\n"] * 2)
    assert "output: 3 lines equal to the plain runs' in all 2 tuned runs" in text
    assert "line 2: thread <varies> ready" in text
    assert "timings and clock times (never compared): 1 fields" in text
    assert data["output_equal"] and data["output_lines_compared"] == 3
    assert data["output_varying_fields"] == ["thread <varies> ready"]


def test_the_summary_shows_both_versions_of_a_differing_line():
    plain = ["checksum 99 [x]\n"] * 2
    text, data = _printed(plain, ["checksum 99 [x]\n", "checksum 98 [x]\n"])
    assert "DIFFERS from the plain runs in 1 of 2 tuned runs" in text
    assert "line 1: plain: 'checksum 99 [x]'" in text and "tuned: 'checksum 98 [x]'" in text
    assert not data["output_equal"]
    assert data["output_differences"] == [{"line": 1, "plain": "checksum 99 [x]", "tuned": "checksum 98 [x]"}]


def test_the_summary_says_when_nothing_was_compared():
    text, data = _printed(["a 1\n"] * 2, ["a 1\n"], output_filter="checksum")
    assert "nothing was compared" in text and "matched no line" in text
    assert data["output_lines_compared"] == 0
