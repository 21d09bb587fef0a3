"""The mapped bytes around recorded regions (slack) that replay fills with a canary and
checks after every run: a kernel writing memory it was not recorded with fails."""

from mneme.replay.engine.restore_layout import Span, slack_intervals

G = 2 << 20
BASE = 0x2000_0000_0000


def test_the_rest_of_each_touched_granule_is_slack():
    assert slack_intervals([Span(BASE, 256 << 10)], G) == [Span(BASE + (256 << 10), G - (256 << 10))]


def test_gaps_between_spans_in_one_granule_and_whole_granules_covered():
    spans = [Span(BASE, 4096), Span(BASE + 65536, 4096), Span(BASE + G, G)]
    assert slack_intervals(spans, G) == [
        Span(BASE + 4096, 65536 - 4096),
        Span(BASE + 65536 + 4096, G - 65536 - 4096),
    ]


def test_spans_across_granules_leave_only_the_ends():
    spans = [Span(BASE + G - 512, 1024)]
    assert slack_intervals(spans, G) == [Span(BASE, G - 512), Span(BASE + G + 512, G - 512)]
    assert slack_intervals([], G) == []
