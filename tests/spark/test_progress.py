"""Replay progress display (pipelines/spark/progress.py): a bar on a terminal, plain lines
otherwise."""

from __future__ import annotations

import io

import pytest

from pipelines.spark.progress import BatchProgress, ReplayProgress


class Terminal(io.StringIO):
    """A text stream that says it is a terminal."""

    def isatty(self) -> bool:
        return True


def event(batch: int, records: int, accepted: int, quarantined: int, latest: str) -> BatchProgress:
    return BatchProgress(line=f"batch {batch}: accepted {records}", records=records,
                         total_accepted=accepted, total_quarantined=quarantined,
                         latest_publish_time=latest)


def test_plain_lines_when_not_a_terminal() -> None:
    out = io.StringIO()
    with ReplayProgress(out) as progress:
        progress(event(0, 10, 10, 0, "2025-01-15 09:05:00+00:00"))
        progress("finalizing")
    assert out.getvalue() == "batch 0: accepted 10\nfinalizing\n"


def test_plain_line_of_a_batch_is_its_line() -> None:
    assert str(event(3, 5, 5, 0, "-")) == "batch 3: accepted 5"


@pytest.mark.parametrize(("stream", "expected"), [(Terminal(), True), (io.StringIO(), False)])
def test_bar_is_chosen_by_whether_the_stream_is_a_terminal(stream: io.StringIO,
                                                           expected: bool) -> None:
    assert ReplayProgress(stream).use_bar is expected


def test_bar_counts_records_and_shows_quarantined_and_event_time() -> None:
    out = Terminal()
    with ReplayProgress(out) as progress:
        progress(event(0, 1200, 1190, 10, "2025-01-15 09:05:00+00:00"))
        progress(event(1, 800, 1985, 15, "2025-01-15 09:10:00+00:00"))
    final = out.getvalue().replace("\r", "\n").strip().splitlines()[-1]
    assert final.startswith("replay: 2.00k records")
    assert "quarantined 15, event time 2025-01-15 09:10:00+00:00" in final
    assert "batch 0" not in out.getvalue()  # the bar replaces the plain lines


def test_other_messages_are_written_above_the_bar() -> None:
    out = Terminal()
    with ReplayProgress(out) as progress:
        progress(event(0, 5, 5, 0, "-"))
        progress("window 1/1: finalized up to end of input")
    assert "window 1/1: finalized up to end of input\n" in out.getvalue()


def test_bar_can_be_forced_off_on_a_terminal() -> None:
    out = Terminal()
    ReplayProgress(out, bar=False)(event(0, 5, 5, 0, "-"))
    assert out.getvalue() == "batch 0: accepted 5\n"
