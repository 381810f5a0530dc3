"""Output table contract: one pyarrow schema per Delta table.

Every writer casts to these schemas (:mod:`pipelines.storage.delta` does it on each append) and
every reader can rely on them. Conventions: ``run_id`` (string) is the first column of every table;
timestamps are ``timestamp[us, tz=UTC]`` (Spark ``TIMESTAMP``; Spark cannot read Parquet
nanosecond timestamps); rates are float64 msg/s or bytes/s; sizes are bytes; ``*_epoch`` columns
are layout epochs (integers, not times). A field marked ``nullable=False`` must never hold a
null: writes with nulls there are rejected.

The docstring after each schema gives its grain (one row = ...). No Spark here: a table's Spark
``StructType`` is :func:`pipelines.spark.schemas.spark_schema`.
"""

from __future__ import annotations

import pyarrow as pa

TS = pa.timestamp("us", tz="UTC")
"""Timestamp type of every time column: microseconds, UTC."""


def _f(name: str, type_: pa.DataType, nullable: bool = False) -> pa.Field:
    return pa.field(name, type_, nullable=nullable)


def _list(value_type: pa.DataType) -> pa.DataType:
    return pa.list_(pa.field("element", value_type, nullable=True))


RUN_ID = _f("run_id", pa.string())

MESSAGES = pa.schema([
    RUN_ID,
    _f("topic", pa.string()),
    _f("key", pa.string(), True),
    _f("producer_name", pa.string()),
    _f("sequence_id", pa.int64()),
    _f("segment_sequence_id", pa.int64()),
    _f("publish_time", TS),
    _f("payload_size", pa.int64()),
    _f("hash32", pa.int64(), True),
    _f("segment_hash", pa.int32(), True),
    _f("hash_b", pa.int32(), True),
    _f("segment_id", pa.int64()),
    _f("bucket_index", pa.int32()),
    _f("layout_epoch", pa.int64()),
    _f("entry_id", pa.int64()),
])
"""messages — one accepted message. ``payload_size`` in bytes; ``hash32`` is the unsigned
murmur3-32 (seed 0) of the key as int64, ``segment_hash`` its high 16 bits, ``hash_b`` its low 16
bits (all null for a keyless message); ``sequence_id`` is the input's (or the order within the
producer when the input has none); ``segment_id`` / ``bucket_index`` / ``layout_epoch`` are the
segment the message was persisted in, its bucket there and the layout epoch that routed it: the
routing in force at ``publish_time``, or, for a message still in an open batch when its segment
was sealed, the successor it was re-sent to (reference §7.2); ``segment_sequence_id`` is its
sequence id from that segment's producer (each per-segment producer numbers its messages from 0,
§7.2); ``entry_id`` is the entry (batch) that carries it."""

ENTRIES = pa.schema([
    RUN_ID,
    _f("topic", pa.string()),
    _f("producer_name", pa.string()),
    _f("segment_id", pa.int64()),
    _f("bucket_index", pa.int32()),
    _f("entry_id", pa.int64()),
    _f("entry_hash_min", pa.int32()),
    _f("entry_hash_max", pa.int32()),
    _f("num_messages", pa.int64()),
    _f("payload_bytes", pa.int64()),
    _f("open_time", TS),
    _f("publish_time", TS),
    _f("close_reason", pa.string()),
    _f("first_sequence_id", pa.int64()),
    _f("last_sequence_id", pa.int64()),
])
"""entries — one emitted batch entry. ``entry_hash_min`` / ``entry_hash_max`` are the min / max
``hash_b`` of its messages; ``payload_bytes`` the sum of their sizes; ``open_time`` the publish
time of its earliest message, ``publish_time`` when the producer sent it; ``close_reason`` the rule
that sent it (``max_messages`` / ``max_bytes``: the container was full; ``max_delay``: the
producer's flush task, reference §7.1 — also for a batch open at the end of the input;
``disabled``: batching off); ``first_sequence_id`` / ``last_sequence_id`` its messages' lowest and
highest ``segment_sequence_id`` (per-segment producer, §7.2); ``entry_id`` numbers the producer's
entries in send order."""

SEGMENTS = pa.schema([
    RUN_ID,
    _f("topic", pa.string()),
    _f("segment_id", pa.int64()),
    _f("range_start", pa.int32()),
    _f("range_end", pa.int32()),
    _f("bucket_count", pa.int32()),
    _f("bucket_splits", _list(pa.int32())),
    _f("state", pa.string()),
    _f("parent_ids", _list(pa.int64())),
    _f("child_ids", _list(pa.int64())),
    _f("created_at_epoch", pa.int64()),
    _f("sealed_at_epoch", pa.int64()),
    _f("created_at", TS),
    _f("sealed_at", TS, True),
    _f("created_by", pa.string()),
])
"""segments — one segment ever created. ``range_start`` / ``range_end``: inclusive
``segment_hash`` range; ``bucket_splits``: the ``bucket_count - 1`` bucket start hashes after
bucket 0; ``sealed_at_epoch`` is -1 (and ``sealed_at`` null) while active; ``created_by`` is one
of initial | split | merge | rebucket."""

SEGMENT_LOAD = pa.schema([
    RUN_ID,
    _f("topic", pa.string()),
    _f("segment_id", pa.int64()),
    _f("sample_time", TS),
    _f("msg_rate_in", pa.float64()),
    _f("bytes_rate_in", pa.float64()),
    _f("msg_rate_out", pa.float64()),
    _f("bytes_rate_out", pa.float64()),
    _f("written", pa.bool_()),
    _f("modified_at", TS),
])
"""segment_load — one segment x load sample (``SegmentLoadStats``). A sweep every
``load_report_interval_s`` over every loaded segment (a sealed one until it reads zeros) gives a
row when it reads a non-zero rate or writes; rates in msg/s and bytes/s are the TopicStats
values of the last stats update (once per ``stats_update_frequency_s``); ``written`` is true
when the reporter wrote the sample (material change); ``modified_at`` is the time of the last
written sample."""

AUTOSCALE_DECISIONS = pa.schema([
    RUN_ID,
    _f("topic", pa.string()),
    _f("eval_time", TS),
    _f("trigger", pa.string()),
    _f("action", pa.string()),
    _f("segment_ids", _list(pa.int64())),
    _f("new_bucket_count", pa.int32(), True),
    _f("reason", pa.string()),
    _f("suppressed_by", pa.string(), True),
    _f("active_segments", pa.int32()),
    _f("consumers", pa.int32()),
    _f("bucket_capacity", pa.int32()),
    _f("layout_epoch", pa.int64()),
])
"""autoscale_decisions — one evaluation that acted or was suppressed. ``action`` is one of
split | merge | rebucket | none; ``suppressed_by`` names the rule that stopped it (null if it
acted); counts are taken at ``eval_time``."""

DISPATCH = pa.schema([
    RUN_ID,
    _f("topic", pa.string()),
    _f("subscription", pa.string()),
    _f("producer_name", pa.string()),
    _f("segment_id", pa.int64()),
    _f("bucket_index", pa.int32()),
    _f("entry_id", pa.int64()),
    _f("publish_time", TS),
    _f("num_messages", pa.int64()),
    _f("payload_bytes", pa.int64()),
    _f("consumer_name", pa.string(), True),
    _f("dispatch_time", TS, True),
    _f("ack_time", TS, True),
    _f("redeliveries", pa.int64()),
])
"""dispatch — one entry x subscription (each consumer of an ungrouped checkpoint subscription
reads every entry as subscription ``<name>/<consumer>``). ``publish_time`` is the entry's; null
``consumer_name`` / ``dispatch_time`` / ``ack_time`` = still in the backlog at end of input;
``redeliveries`` counts earlier deliveries lost because their consumer left before acking."""

CONSUMER_LOAD = pa.schema([
    RUN_ID,
    _f("topic", pa.string()),
    _f("subscription", pa.string()),
    _f("consumer_name", pa.string()),
    _f("window_start", TS),
    _f("window_end", TS),
    _f("messages", pa.int64()),
    _f("bytes", pa.int64()),
    _f("busy_ms", pa.int64()),
    _f("idle_ms", pa.int64()),
    _f("backlog_messages", pa.int64()),
])
"""consumer_load — one consumer x window ``[window_start, window_end)`` where it received, was
busy or its state changed; idle windows are left out ([Idle windows](#idle-windows)): messages
and bytes delivered, busy / idle time in emulated ms (log-time ms / ``replay.speed``; idle =
connected time minus busy), backlog (messages it could take) at the window's end. A series
(topic, subscription, consumer) has a row for its first window, the window the consumer leaves
in, the run's last window, and every window where it received messages, was busy, was not
connected all window or its ``backlog_messages`` changed."""

BUCKET_HANDOFFS = pa.schema([
    RUN_ID,
    _f("topic", pa.string()),
    _f("subscription", pa.string()),
    _f("segment_id", pa.int64()),
    _f("bucket_index", pa.int32()),
    _f("from_consumer", pa.string(), True),
    _f("to_consumer", pa.string(), True),
    _f("withheld_from", TS),
    _f("withheld_until", TS, True),
    _f("pending_messages", pa.int64()),
    _f("redelivered_entries", pa.int64()),
])
"""bucket_handoffs — one bucket move between consumers. The bucket is withheld (draining) from
``withheld_from`` to ``withheld_until`` (null = still withheld at end of input);
``pending_messages``: unacked messages held at the move (PIP-379
``draining_hashes_pending_messages`` of this bucket); ``redelivered_entries``: entries of the
bucket redelivered because ``from_consumer`` left at that instant."""

SUBSCRIPTION_STATS = pa.schema([
    RUN_ID,
    _f("topic", pa.string()),
    _f("subscription", pa.string()),
    _f("window_start", TS),
    _f("window_end", TS),
    _f("backlog_messages", pa.int64()),
    _f("unacked_messages", pa.int64()),
    _f("draining_hashes_count", pa.int64()),
    _f("draining_hashes_max", pa.int64()),
    _f("draining_hashes_pending_messages", pa.int64()),
    _f("draining_hashes_cleared", pa.int64()),
    _f("reassignments", pa.int64()),
    _f("redeliveries", pa.int64()),
    _f("shared_segments", pa.int64()),
    _f("drain_mode_segments", pa.int64()),
    _f("sealed_segments_undrained", pa.int64()),
])
"""subscription_stats — one subscription x window ``[window_start, window_end)`` where a statistic
changed; idle windows are left out ([Idle windows](#idle-windows)): gauges at the window's end
and counts during it, named after Pulsar's metrics. A series (topic, subscription) has a row
for its first and last windows and for every window where a count is not 0, a gauge differs
from the previous row or ``draining_hashes_max`` exceeds ``draining_hashes_count``. PIP-379:
``draining_hashes_count`` (buckets withheld at the end; PIP-486's "buckets withheld" gauge),
``draining_hashes_max`` (most withheld at once in the window),
``draining_hashes_pending_messages`` (unacked messages holding them),
``draining_hashes_cleared`` (withholdings ended in the window). PIP-486: ``reassignments``
(bucket moves), ``shared_segments`` (segments with more than one consumer),
``drain_mode_segments`` (sealed, undrained segments fanned out to several consumers),
``sealed_segments_undrained``; ``redeliveries``: entries redelivered in the window."""

SEGMENT_DRAINS = pa.schema([
    RUN_ID,
    _f("topic", pa.string()),
    _f("subscription", pa.string()),
    _f("segment_id", pa.int64()),
    _f("sealed_at", TS),
    _f("drained_at", TS),
    _f("drain_ms", pa.int64()),
])
"""segment_drains — one sealed segment x subscription that drained: its last entry was acked
(or it was sealed with nothing outstanding) at ``drained_at``; ``drain_ms = drained_at -
sealed_at`` in log-time ms (PIP-486 use case 1). A sealed segment without a row here was not
drained at end of input."""

QUARANTINE = pa.schema([
    RUN_ID,
    _f("source_file", pa.string()),
    _f("raw_record", pa.string()),
    _f("reason", pa.string()),
    _f("batch_id", pa.int64()),
])
"""quarantine — one rejected input record: the file it came from, its raw text (a CSV / JSON
line, or the JSON of a Parquet row), the reason (``pipelines.ingest.rules.QUARANTINE_REASONS``)
and the micro-batch that read it."""

RUNS = pa.schema([
    RUN_ID,
    _f("status", pa.string()),
    _f("config", pa.string()),
    _f("inputs", _list(pa.string())),
    _f("counts", pa.string()),
    _f("versions", pa.string()),
    _f("started_at", TS),
    _f("ended_at", TS, True),
    _f("timings", pa.string()),
])
"""runs — one run. ``config``, ``counts`` (records ``accepted`` / ``quarantined`` / ``late``,
``keyless`` messages, ``entries``, … and, for JSON input, ``missing_fields``: mapped fields no
record of the first micro-batch had), ``versions`` (package versions) and ``timings`` (seconds
per stage) are JSON strings; ``ended_at`` is null while running."""

VALIDATIONS = pa.schema([
    RUN_ID,
    _f("validation_id", pa.int64()),
    _f("table", pa.string()),
    _f("expectation", pa.string()),
    _f("kwargs", pa.string()),
    _f("success", pa.bool_()),
    _f("observed", pa.string(), True),
    _f("element_count", pa.int64(), True),
    _f("unexpected_count", pa.int64(), True),
    _f("exception", pa.string(), True),
])
"""validations — one Great Expectations expectation checked on one table of a run, in one
validation pass: grain (run_id, validation_id, table, expectation, kwargs). ``validation_id``
numbers the passes over a run (1, 2, …) instead of a wall-clock time, so the rows are
deterministic; ``table`` is an output table or ``input_contract``; ``expectation`` is the GE
expectation type; ``kwargs`` (its arguments) and ``observed`` (the observed value or a sample of
unexpected values) are JSON strings; ``exception`` is set when the expectation could not be
evaluated (then ``success`` is false). See :mod:`pipelines.analysis.validation`."""

SWEEPS = pa.schema([
    RUN_ID,
    _f("sweep_id", pa.string()),
    _f("settings", pa.string()),
    _f("accepted", pa.int64()),
    _f("quarantined", pa.int64()),
    _f("topics", pa.int64()),
    _f("segments_max", pa.int64()),
    _f("segments_final", pa.int64()),
    _f("segments_created", pa.int64()),
    _f("buckets_max", pa.int64()),
    _f("buckets_final", pa.int64()),
    _f("splits", pa.int64()),
    _f("merges", pa.int64()),
    _f("rebuckets", pa.int64()),
    _f("suppressed", pa.int64()),
    _f("batching_mode", pa.string(), True),
    _f("bucket_budget", pa.int64(), True),
    _f("entries", pa.int64()),
    _f("entries_per_message", pa.float64(), True),
    _f("mean_batch_size", pa.float64(), True),
    _f("mean_batch_bytes", pa.float64(), True),
    _f("consumers", pa.int64()),
    _f("max_consumer_share", pa.float64(), True),
    _f("idle_consumers", pa.int64()),
    _f("handoffs", pa.int64()),
    _f("withheld_bucket_s", pa.float64()),
    _f("sealed_segments", pa.int64()),
    _f("drain_max_s", pa.float64(), True),
    _f("undrained_segments", pa.int64()),
    _f("flaps", pa.int64()),
    _f("flap_window_s", pa.int64()),
    _f("at_max_segments_s", pa.float64()),
    _f("at_max_segments", pa.string()),
])
"""sweeps — one scenario of a policy sweep (``topic-replay sweep``); ``run_id`` is the
scenario's run. ``settings``: JSON object of the scenario's overrides (dotted key → value);
the metrics are ``topic-replay compare``'s (``pipelines.analysis.run_tables.METRICS``);
``flaps``: splits undone by a merge of the same hash range, or merges undone by a split, within
``flap_window_s`` seconds (``pipelines.engine.findings.flaps``); ``at_max_segments_s``: the
longest time any topic spent at ``policy.max_segments`` (seconds, log time), per topic in
``at_max_segments`` (JSON object topic → seconds)."""

IDLE_WINDOWS_DOC = """\
`consumer_load` and `subscription_stats` are written per window of `replay.consumer_window_s`
(log time), but only where something happened or changed: a year-long log with a minute
window would otherwise hold a row per consumer and minute, nearly all idle. Their grain is
one row per series and *active* window, a series being (`run_id`, `topic`, `subscription`,
`consumer_name`) in `consumer_load` and (`run_id`, `topic`, `subscription`) in
`subscription_stats`.

How to read a gap. A series has rows for its first and its last window (the run's last, or the
window the consumer left in), and its windows in between are contiguous. The run's last window
is the same for every topic: it ends at the log's last message (+ 1 ms, or later while a
backlog drains), also for a topic that went quiet long before — as in `segment_load`, where a
quiet topic's segments are sampled until their rates reach the zero record. A window missing
between two rows of a series is the earlier row carried forward —

- `consumer_load`: `messages`, `bytes`, `busy_ms` 0; `idle_ms` the whole window (connected
  all of it, nothing to do); `backlog_messages` as in the earlier row;
- `subscription_stats`: `draining_hashes_cleared`, `reassignments`, `redeliveries` 0; every
  gauge as in the earlier row; `draining_hashes_max` = the earlier row's
  `draining_hashes_count`.

No window after a series' last row belongs to it (the consumer left, or the run ended). The
windows are `window_ms = int(consumer_window_s * 1000 / speed)` ms long on the emulated clock
(`busy_ms` and `idle_ms` count those ms) and aligned to its multiples; window `k` starts at
`round(k * window_ms * speed)` ms after the epoch in log time (`speed` = `replay.speed`; both
settings are in the `runs` table's `config`). Filled back this way the tables equal, row for
row, the dense tables replays wrote before (tested; on the whole online-retail trace too:
[performance](performance.md)).

In pandas (`pipelines.analysis.windows`, delta-rs):

```python
from deltalake import DeltaTable
from pipelines.analysis.windows import fill_idle_windows, window_settings

OUT = "out/sample"
run = DeltaTable(f"{OUT}/runs").to_pandas().iloc[-1]
load = DeltaTable(f"{OUT}/consumer_load").to_pandas()
load = load[load["run_id"] == run["run_id"]]
dense = fill_idle_windows(load, "consumer_load", window_settings(run["config"]))
```

In Spark SQL (`topic-replay sql --output DIR "…"`, or any session with the tables as views):

```sql
WITH grid AS (
  SELECT run_id,
         CAST(get_json_object(config, '$.replay.speed') AS DOUBLE) AS speed,
         CAST(FLOOR(CAST(get_json_object(config, '$.replay.consumer_window_s') AS DOUBLE)
                    * 1000 / CAST(get_json_object(config, '$.replay.speed') AS DOUBLE))
              AS BIGINT) AS window_ms
  FROM runs),
rows AS (
  SELECT c.*, g.window_ms, g.speed,
         BROUND(unix_millis(c.window_start) / (g.window_ms * g.speed)) AS k,
         BROUND(unix_millis(LEAD(c.window_start) OVER (
                  PARTITION BY c.run_id, c.topic, c.subscription, c.consumer_name
                  ORDER BY c.window_start)) / (g.window_ms * g.speed)) AS next_k
  FROM consumer_load c JOIN grid g ON c.run_id = g.run_id)
SELECT run_id, topic, subscription, consumer_name,
       IF(i = 0, window_start, timestamp_millis(
          CAST(BROUND((k + i) * window_ms * speed) AS BIGINT))) AS window_start,
       IF(i = 0, window_end, timestamp_millis(
          CAST(BROUND((k + i + 1) * window_ms * speed) AS BIGINT))) AS window_end,
       IF(i = 0, messages, 0) AS messages,
       IF(i = 0, bytes, 0) AS bytes,
       IF(i = 0, busy_ms, 0) AS busy_ms,
       IF(i = 0, idle_ms, window_ms) AS idle_ms,
       backlog_messages
FROM rows LATERAL VIEW explode(sequence(0, CAST(COALESCE(next_k - k - 1, 0) AS INT))) AS i
```

`subscription_stats` fills the same way (partition by `run_id, topic, subscription`; the three
counts 0, `draining_hashes_max` = `draining_hashes_count`, the other columns as they are).
"""
"""The section of docs/tables.md on the windowed tables' idle windows (Markdown, rendered as
is): the rule of :func:`pipelines.core.dispatch.idle_consumer_load` /
:func:`~pipelines.core.dispatch.idle_window_stats`, and how to fill them back in."""
TOPIC_PROFILE = pa.schema([
    RUN_ID,
    _f("topic", pa.string()),
    _f("messages", pa.int64()),
    _f("bytes", pa.int64()),
    _f("producers", pa.int64(), True),
    _f("distinct_keys", pa.int64()),
    _f("distinct_keys_exact", pa.bool_()),
    _f("keyless_messages", pa.int64()),
    _f("keyless_share", pa.float64()),
    _f("top_keys", _list(pa.string())),
    _f("top_key_hashes", _list(pa.int64())),
    _f("top_key_messages", _list(pa.int64())),
    _f("top_key_shares", _list(pa.float64())),
    _f("top_key_peak_rates", _list(pa.float64())),
    _f("key_count_error", pa.int64()),
    _f("hot_key_peak_at", TS, True),
    _f("peak_msg_rate_in", pa.float64(), True),
    _f("peak_at", TS, True),
    _f("mean_msg_rate_in", pa.float64(), True),
    _f("split_msg_rate_in", pa.float64(), True),
    _f("hot_key_peak_rate", pa.float64(), True),
    _f("hot_key_vs_split", pa.float64(), True),
    _f("unrelievable_share", pa.float64(), True),
    _f("segments_end", pa.int64(), True),
    _f("segments_peak", pa.int64(), True),
    _f("splits", pa.int64(), True),
    _f("merges", pa.int64(), True),
    _f("rebuckets", pa.int64(), True),
    _f("suppressed", pa.int64(), True),
    _f("flaps", pa.int64(), True),
    _f("entries", pa.int64(), True),
    _f("entries_per_message", pa.float64(), True),
    _f("consumers", pa.int64(), True),
    _f("idle_consumers", pa.int64(), True),
    _f("withheld_max_s", pa.float64(), True),
    _f("drain_max_s", pa.float64(), True),
    _f("undrained_segments", pa.int64(), True),
])
"""topic_profile — one row per run and topic: what the topic's traffic was and what the emulation
did with it (``pipelines.engine.findings``, docs/findings.md). Traffic, counted where the control
plane sees every message (``pipelines.core.heavy_hitters.KeyStats``): ``messages``, ``bytes``,
``distinct_keys`` (distinct key hashes; exact when ``distinct_keys_exact``, else a HyperLogLog
estimate, ±0.8 %), ``keyless_messages`` / ``keyless_share``; the ``top_keys`` (up to 10, hottest
first by their highest rate in one stats period, ``replay.stats_update_frequency_s``; null names
where ``output.keys`` withholds keys) with their hashes, ``top_key_messages`` (a Misra-Gries
lower bound, at most ``key_count_error`` below the true count), ``top_key_shares`` (of all the
topic's messages) and ``top_key_peak_rates`` (msg/s, exact); ``hot_key_peak_at``: when the
hottest key's peak period started. Load, from ``segment_load``: ``peak_msg_rate_in`` /
``mean_msg_rate_in`` (msg/s: the sum over the topic's active segments at a load sample, its
highest and its mean over samples) and ``peak_at``; ``split_msg_rate_in``: the topic's split
threshold; ``hot_key_peak_rate`` / ``hot_key_vs_split`` (that rate over the threshold);
``unrelievable_share``: the share of the peak load no split can relieve, ``max(0,
hot_key_peak_rate − split_msg_rate_in) / peak_msg_rate_in`` (a key always maps to one segment).
Layout and decisions: ``segments_end`` (active at the end), ``segments_peak`` (most active at
once), ``splits`` / ``merges`` / ``rebuckets`` / ``suppressed`` (``autoscale_decisions``),
``flaps`` (as ``sweeps.flaps``). Data plane (from ``entries``): ``producers`` (distinct producers
that sent an entry), ``entries``, ``entries_per_message``; ``consumers`` (configured, over the
topic's subscriptions) and ``idle_consumers`` (those delivered nothing over the run);
``withheld_max_s``: the longest a bucket was withheld in a handoff (one still withheld at the end
counts to the last event); ``drain_max_s``: the longest sealed-segment drain;
``undrained_segments``: sealed segment × subscription pairs not drained at the end. Rates are on
the emulated clock (× ``replay.speed``), as in ``segment_load``."""

FINDINGS = pa.schema([
    RUN_ID,
    _f("topic", pa.string()),
    _f("finding", pa.string()),
    _f("severity", pa.string()),
    _f("at", TS, True),
    _f("subject", pa.string(), True),
    _f("message", pa.string()),
    _f("evidence", pa.string()),
    _f("rule", pa.string()),
    _f("reference", pa.string()),
])
"""findings — one finding about one topic of a run (``pipelines.engine.findings``; every kind
and its rule in docs/findings.md): ``finding`` is hot_key | flapping | idle_consumers |
single_segment | blind_spot; ``severity`` high | medium | low | info; ``at`` when it was first
seen (log time; null when it holds for the whole run); ``subject`` what it is about (a key, a
subscription, a segment, a hash range); ``message`` the finding in words with its numbers;
``evidence`` a JSON object of those numbers; ``rule`` the rule that raised it; ``reference``
the sections of the behaviour reference behind it."""

TABLES: dict[str, pa.Schema] = {
    "messages": MESSAGES,
    "entries": ENTRIES,
    "segments": SEGMENTS,
    "segment_load": SEGMENT_LOAD,
    "autoscale_decisions": AUTOSCALE_DECISIONS,
    "dispatch": DISPATCH,
    "consumer_load": CONSUMER_LOAD,
    "bucket_handoffs": BUCKET_HANDOFFS,
    "subscription_stats": SUBSCRIPTION_STATS,
    "segment_drains": SEGMENT_DRAINS,
    "topic_profile": TOPIC_PROFILE,
    "findings": FINDINGS,
    "quarantine": QUARANTINE,
    "runs": RUNS,
    "validations": VALIDATIONS,
    "sweeps": SWEEPS,
}
"""Every output table by name."""


def table_names() -> list[str]:
    """Names of all output tables."""
    return list(TABLES)


def arrow_schema(table: str) -> pa.Schema:
    """The pyarrow schema of ``table``; ``KeyError`` naming the known tables otherwise."""
    try:
        return TABLES[table]
    except KeyError:
        raise KeyError(f"unknown table {table!r}; known tables: {', '.join(TABLES)}") from None


def table_columns(table: str) -> list[str]:
    """Columns of output ``table`` without ``run_id`` (what the stages produce)."""
    return [n for n in arrow_schema(table).names if n != "run_id"]


def empty_table(table: str) -> pa.Table:
    """A zero-row pyarrow table with ``table``'s schema."""
    return arrow_schema(table).empty_table()
