"""The run summary's lines (``pipelines.engine.summary.format_summary``): the keyless share of
messages is always shown (issue #19), mapped fields no record had are warned about, and at most
twenty topics are listed (issue #30)."""

from __future__ import annotations

import pandas as pd
import pytest

from pipelines.engine.summary import format_summary, segments_per_topic


def summary(**changes: object) -> dict:
    base = {"run_id": "r", "status": "finished", "accepted": 200, "quarantined": 0, "late": 0,
            "keyless": 50, "missing_fields": {}, "splits": 0, "merges": 0, "rebuckets": 0,
            "suppressed": 0, "entries": 10, "entries_per_message": 0.05, "per_topic": {},
            "validation": None}
    return {**base, **changes}


@pytest.mark.parametrize("changes, line", [
    ({}, "  keys      keyless 50 of 200 messages (25.0 %)"),
    ({"keyless": 0}, "  keys      keyless 0 of 200 messages (0.0 %)"),
    ({"keyless": 0, "accepted": 0}, "  keys      keyless 0 of 0 messages (-)"),
    ({"keyless": None}, "  keys      keyless share unknown (run written by an older version)"),
])
def test_keyless_share_line(changes, line):
    assert format_summary(summary(**changes)).splitlines()[2] == line


def test_missing_fields_are_warned_after_the_keyless_line():
    lines = format_summary(summary(missing_fields={"key": "lbnn"})).splitlines()
    assert lines[3] == ("  warning   no record of the first micro-batch has field 'lbnn' "
                        "(mapped to key)")


def _topics(created: dict[str, int]) -> dict:
    return {t: {"segments_created": n, "active_segments": 1, "buckets": 4}
            for t, n in created.items()}


def test_a_few_topics_are_each_listed_in_name_order():
    lines = format_summary(summary(per_topic=_topics({"b": 1, "a": 3}))).splitlines()
    assert [x for x in lines if x.startswith("  topic")] == [
        "  topic a: 1 active segments, 4 buckets, 3 segments created",
        "  topic b: 1 active segments, 4 buckets, 1 segments created"]


def test_many_topics_list_the_busiest_twenty_then_how_many_more():
    created = {f"t{i:05d}": 1 for i in range(10_000)} | {"t09999": 5, "t05000": 3}
    lines = format_summary(summary(per_topic=_topics(created))).splitlines()
    topics = [x.split(":")[0].split()[-1] for x in lines if x.startswith("  topic")]
    assert topics == sorted(["t09999", "t05000", *(f"t{i:05d}" for i in range(18))])
    assert "  … and 9,980 more topics (every one is in the segments table and the report)" in lines


def test_segments_per_topic_counts_created_and_active_segments_and_their_buckets():
    segments = pd.DataFrame({
        "topic": ["a", "a", "a", "b"], "state": ["SEALED", "ACTIVE", "ACTIVE", "ACTIVE"],
        "bucket_count": [4, 8, 2, 4]})
    assert segments_per_topic(segments) == {
        "a": {"segments_created": 3, "active_segments": 2, "buckets": 10},
        "b": {"segments_created": 1, "active_segments": 1, "buckets": 4}}
    assert segments_per_topic(segments.iloc[0:0]) == {}
