"""What a run leaves for its reader, for both engines: the ``runs`` row of a finished run
(:func:`runs_row`), the run summary read back from the tables (:func:`run_summary`: what
``topic-replay run`` and ``summary`` print, :func:`format_summary`) and the latest stored
validation pass in it (:func:`latest_validation`). No Spark (``runs_row`` records pyspark's
installed version from the package metadata, without importing it)."""

from __future__ import annotations

import json
import time
from collections.abc import Mapping, Sequence
from importlib.metadata import version
from typing import Any

import pandas as pd

from pipelines.contract.config import ReplayConfig
from pipelines.engine.findings import format_findings, top_findings
from pipelines.storage.delta import DeltaStore


def runs_row(config: ReplayConfig, inputs: Sequence[str], counts: dict[str, Any], engine: str,
             started: float, timings: dict[str, Any]) -> dict[str, Any]:
    """The ``runs`` row of a finished run (columns of ``pipelines.contract.schemas.RUNS`` but
    ``run_id``). ``started``: wall-clock epoch seconds; ``timings``: per-stage seconds (and
    other facts) stored with ``wall_s`` in the ``timings`` JSON."""
    return {
        "status": "finished", "config": config.to_json(), "inputs": [str(p) for p in inputs],
        "counts": json.dumps(counts, sort_keys=True),
        "versions": json.dumps({"pyspark": version("pyspark"), "engine": engine}),
        "started_at": pd.Timestamp(started, unit="s", tz="UTC"),
        "ended_at": pd.Timestamp(time.time(), unit="s", tz="UTC"),
        "timings": json.dumps({"wall_s": round(time.time() - started, 3), **timings}),
    }


TOP_FINDINGS = 5
"""Findings printed after the run summary (the most severe; all are in the ``findings`` table
and the report page)."""
TOP_TOPICS = 20
"""Topic lines printed in the run summary: a cluster's thousands of topics would bury the
rest (issue #30); the ``segments`` table and the report have every topic."""


def run_summary(store: DeltaStore, run_id: str) -> dict[str, Any]:
    """Headline numbers of one run, read back from the tables (``topic-replay summary``);
    ``findings``: the :data:`TOP_FINDINGS` most severe findings, of ``findings_total``."""
    def read(t: str) -> pd.DataFrame:
        return store.read(t, run_id=run_id)

    runs = read("runs")
    decisions = read("autoscale_decisions")
    segments = read("segments")
    # entries grow with the input: scanned by batches, never loaded whole (bounded memory)
    n_entries, n_msgs = store.column_totals("entries", "num_messages", run_id)
    counts = json.loads(runs["counts"].iloc[-1]) if len(runs) else {}
    acted = decisions[decisions["action"] != "none"] if len(decisions) else decisions
    per_topic = segments_per_topic(segments)
    return {
        "run_id": run_id,
        "status": runs["status"].iloc[-1] if len(runs) else "unknown",
        "accepted": counts.get("accepted", 0),
        "quarantined": counts.get("quarantined", 0),
        "late": counts.get("late", 0),
        "unreadable_files": counts.get("bad_files", 0),  # quarantined whole (issue #32)
        "keyless": counts.get("keyless"),  # None: a run written before it was counted
        "missing_fields": counts.get("missing_fields", {}),
        "topics": len(per_topic),
        "splits": int((acted["action"] == "split").sum()) if len(acted) else 0,
        "merges": int((acted["action"] == "merge").sum()) if len(acted) else 0,
        "rebuckets": int((acted["action"] == "rebucket").sum()) if len(acted) else 0,
        "suppressed": int((decisions["action"] == "none").sum()) if len(decisions) else 0,
        "entries": n_entries,
        "entries_per_message": round(n_entries / n_msgs, 4) if n_msgs else None,
        "per_topic": per_topic,
        **dict(zip(("findings", "findings_total"), top_findings(store, run_id, TOP_FINDINGS),
                   strict=True)),
        "validation": latest_validation(store, run_id),
    }


def segments_per_topic(segments: pd.DataFrame) -> dict[str, dict[str, int]]:
    """Per topic: ``segments_created``, ``active_segments`` and their ``buckets``, grouped over
    all topics at once (a pandas group per topic cost a millisecond each: 10 s at 10,000
    topics)."""
    if segments.empty:
        return {}
    active = segments["state"] == "ACTIVE"
    by = pd.DataFrame({"segments_created": 1, "active_segments": active.astype("int64"),
                       "buckets": segments["bucket_count"].where(active, 0).astype("int64")}
                      ).groupby(segments["topic"].to_numpy(object), sort=True).sum()
    return {str(t): {k: int(v) for k, v in row.items()}
            for t, row in zip(by.index, by.to_dict("records"), strict=True)}


def nothing_accepted(summary: dict[str, Any], store: DeltaStore) -> str | None:
    """The sentence a run that accepted no record ends with (its exit code is then 1), naming
    the main quarantine reason; ``None`` when something was accepted. A run whose input held
    no record at all says so instead."""
    if summary["accepted"]:
        return None
    total = summary["quarantined"]
    if not total:
        return ("no record was accepted: the input holds no record (pass --allow-empty when "
                "that is expected)")
    reasons = store.value_counts("quarantine", "reason", summary["run_id"])
    main, n = next(iter(reasons.items())) if reasons else ("unknown", total)
    return (f"no record was accepted: all {total:,} records were quarantined, {n:,} of them as "
            f"{main} (see the quarantine table; pass --allow-empty when that is expected)")


def _keyless_line(summary: dict[str, Any]) -> str:
    """``  keys      keyless 1,234 of 10,000 messages (12.3 %)`` (always shown: a mapping
    mistake shows as a keyless share far from what the log should have)."""
    keyless, accepted = summary.get("keyless"), summary["accepted"]
    if keyless is None:
        return "  keys      keyless share unknown (run written by an older version)"
    share = f"{100 * keyless / accepted:.1f} %" if accepted else "-"
    return f"  keys      keyless {keyless:,} of {accepted:,} messages ({share})"


def format_summary(summary: dict[str, Any]) -> str:
    """The run summary as printed by ``topic-replay run`` / ``summary`` (one line per fact)."""
    lines = [f"run {summary['run_id']}: {summary['status']}",
             f"  records   accepted {summary['accepted']:,}  quarantined "
             f"{summary['quarantined']:,} (late {summary['late']:,})",
             *([f"  files     unreadable {summary['unreadable_files']:,} (quarantine rows "
                f"unreadable_file / truncated_file name them)"]
               if summary.get("unreadable_files") else []),
             _keyless_line(summary),
             *[f"  warning   no record of the first micro-batch has field {s!r} (mapped to "
               f"{c})" for c, s in sorted(summary.get("missing_fields", {}).items())],
             f"  autoscale splits {summary['splits']}  merges {summary['merges']}  rebuckets "
             f"{summary['rebuckets']}  suppressed {summary['suppressed']}",
             f"  entries   {summary['entries']:,}  (entries/message "
             f"{summary['entries_per_message']})"]
    lines += _topic_lines(summary["per_topic"])
    lines += format_findings(summary.get("findings", []), summary.get("findings_total"))
    v = summary.get("validation")
    if v:
        lines.append(f"  validation {v['validation_id']}: {v['expectations'] - len(v['failed'])}"
                     f"/{v['expectations']} expectations passed")
        lines += [f"    FAILED {f}" for f in v["failed"]]
    return "\n".join(lines)


def _topic_lines(per_topic: Mapping[str, Mapping[str, int]]) -> list[str]:
    """One line per topic in name order, at most :data:`TOP_TOPICS` of them: those that
    created the most segments (then the most active ones, then by name), then how many more
    there are."""
    shown = sorted(sorted(per_topic, key=lambda t: (-per_topic[t]["segments_created"],
                                                    -per_topic[t]["active_segments"], t))
                   [:TOP_TOPICS])
    lines = [f"  topic {topic}: {t['active_segments']} active segments, {t['buckets']} buckets, "
             f"{t['segments_created']} segments created"
             for topic, t in ((x, per_topic[x]) for x in shown)]
    if len(per_topic) > TOP_TOPICS:
        lines.append(f"  … and {len(per_topic) - TOP_TOPICS:,} more topics (every one is in the "
                     f"segments table and the report)")
    return lines


def latest_validation(store: DeltaStore, run_id: str) -> dict[str, Any] | None:
    """Summary of the latest stored validation pass of ``run_id`` (None when there is none):
    ``{"validation_id", "expectations", "failed": ["table: expectation kwargs", …]}``."""
    done = store.read("validations", run_id=run_id)
    if not len(done):
        return None
    last = done[done["validation_id"] == done["validation_id"].max()]
    failed = last[~last["success"]]
    return {"validation_id": int(last["validation_id"].iloc[0]),
            "expectations": len(last),
            "failed": [describe(r) for r in failed.to_dict("records")]}


def describe(row: Mapping[str, Any]) -> str:
    """One line for a ``validations`` row: table, expectation, its arguments and what was
    observed."""
    kwargs = json.loads(row["kwargs"])
    args = ", ".join(f"{k}={v}" for k, v in kwargs.items())
    text = f"{row['table']}: {row['expectation']}({args})"
    if row.get("unexpected_count") is not None and not pd.isna(row["unexpected_count"]):
        text += f" — {int(row['unexpected_count'])} unexpected"
    if row.get("exception"):
        text += f" — error: {row['exception']}"
    elif row.get("observed"):
        text += f" — observed {row['observed'][:200]}"
    return text
