"""The run summary's lines (``pipelines.engine.summary.format_summary``): the keyless share of
messages is always shown (issue #19), and mapped fields no record had are warned about."""

from __future__ import annotations

import pytest

from pipelines.engine.summary import format_summary


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
