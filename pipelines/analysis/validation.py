"""Data-quality checks of a run's tables with Great Expectations (``topic-replay validate``).

One expectation suite per output table plus ``input_contract`` (docs/design.md, "Input contract",
checked on the accepted records, i.e. the contract columns of ``messages``). Each suite is a
list of GE 1.x expectations (:func:`suites`) run on a pandas frame read with
``DeltaStore(...).read(table, run_id=...)`` through an ephemeral GE context; nothing is written
to disk by GE itself.

What is checked (per table; "key" = the table's grain):

- keys not null and unique where the grain says so (``entries``: topic, producer_name, entry_id;
  ``segments``: topic, segment_id; ``segment_load``: topic, segment_id, sample_time;
  ``dispatch``: topic, subscription, producer_name, entry_id; ``consumer_load``: topic,
  subscription, consumer_name, window_start; ``runs``: run_id);
- ``0 <= bucket_index < bucket_count`` of the row's segment and ``range_start <= segment_hash
  <= range_end`` (``messages``, ``entries``, ``dispatch``): these need a join with ``segments``,
  done in pandas first (:func:`prepare`); the check itself is a GE column-pair expectation on the
  joined frame, and a row whose segment is missing fails ``segment_found``;
- hashes within ``[0, 65535]``; ``entry_hash_min <= entry_hash_max``; times in order
  (``open_time <= publish_time``, ``dispatch_time <= ack_time``, ``withheld_from <=
  withheld_until``, ``created_at <= sealed_at``); rates (msg/s, bytes/s), sizes (bytes), counts
  and durations (ms) ``>= 0``;
- vocabularies, imported from the code that produces them (never a second copy):
  ``autoscale_decisions.reason`` in :data:`pipelines.core.policy.DECISION_REASONS`,
  ``suppressed_by`` items in :data:`pipelines.core.policy.SUPPRESSED_REASONS` (or
  ``operation-failed: …``), ``action`` in :data:`pipelines.core.controller.DECISION_ACTIONS`,
  ``trigger`` a ``+``-join of :class:`pipelines.core.controller.Trigger` values,
  ``entries.close_reason`` in :data:`pipelines.core.batching.CLOSE_REASONS`,
  ``quarantine.reason`` in :data:`pipelines.ingest.rules.QUARANTINE_REASONS`, ``FILE_REASONS`` or
  :data:`pipelines.ingest.rules.LATE`, ``segments.state`` / ``created_by`` in
  :class:`pipelines.core.layout.SegmentState` / :data:`pipelines.core.controller.CREATED_BY`;
- no input file lost (issue #32): ``quarantine.reason`` is not a whole-file reason
  (``unreadable_file``, ``truncated_file``) unless ``allow_unreadable_files``
  (``topic-replay validate --allow-unreadable-files``).

Results are rows of the ``validations`` table (:data:`pipelines.contract.schemas.VALIDATIONS`):
one per (run_id, validation_id, table, expectation, kwargs). ``validation_id`` numbers the passes
over a run (the end-of-run pass is 1) so that the table holds no wall-clock time. Frames are
sorted by their key columns before validation, so the sampled unexpected values are
deterministic too.

Limits: each table of the run is read whole into driver memory (pandas); for a very large run
validate a sample run or raise the driver memory.
"""

from __future__ import annotations

import json
import math
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from pipelines.contract.schemas import arrow_schema
from pipelines.core.batching import CLOSE_REASONS
from pipelines.core.controller import (
    CREATED_BY,
    DECISION_ACTIONS,
    OPERATION_FAILED_PREFIX,
    Trigger,
)
from pipelines.core.layout import SegmentState
from pipelines.core.policy import DECISION_REASONS, SUPPRESSED_REASONS
from pipelines.engine.summary import describe
from pipelines.ingest.rules import FILE_REASONS, LATE, QUARANTINE_REASONS
from pipelines.storage.delta import DeltaStore, table_app_id

if TYPE_CHECKING:
    from great_expectations.expectations import Expectation

INPUT_CONTRACT = "input_contract"
"""Name of the suite checking the input contract (on the accepted records in ``messages``)."""

VALIDATIONS_TABLE = "validations"
END_OF_RUN_VALIDATION_ID = 1
"""``validation_id`` of the pass run at the end of a replay (``output.validate: true``)."""

HASH_MAX = 0xFFFF
"""Largest ``segment_hash`` / ``hash_b`` (16 bits)."""

KEYS: dict[str, tuple[str, ...]] = {
    "messages": ("topic", "producer_name", "sequence_id"),
    "entries": ("topic", "producer_name", "entry_id"),
    "segments": ("topic", "segment_id"),
    "segment_load": ("topic", "segment_id", "sample_time"),
    "autoscale_decisions": ("topic", "eval_time"),
    "dispatch": ("topic", "subscription", "producer_name", "entry_id"),
    "consumer_load": ("topic", "subscription", "consumer_name", "window_start"),
    "bucket_handoffs": ("topic", "subscription", "segment_id", "bucket_index", "withheld_from"),
    "subscription_stats": ("topic", "subscription", "window_start"),
    "segment_drains": ("topic", "subscription", "segment_id"),
    "topic_profile": ("topic",),
    "findings": ("topic", "finding", "subject"),
    "quarantine": ("source_file", "raw_record", "reason"),
    "runs": ("run_id",),
}
"""Columns identifying a row of each table (also the sort order before validation)."""

UNIQUE_KEYS = ("entries", "segments", "segment_load", "dispatch", "consumer_load",
               "subscription_stats", "segment_drains", "topic_profile", "runs")
"""Tables whose :data:`KEYS` are unique by their grain. (``messages``: a log may legitimately
repeat a producer's sequence id; ``autoscale_decisions``, ``bucket_handoffs``, ``quarantine``:
several rows may share the key columns.)"""

CHECKED_TABLES: tuple[str, ...] = (INPUT_CONTRACT, *KEYS)
"""Every suite, in validation order."""


def _regex_one_of(values: Sequence[str]) -> str:
    return "|".join(re.escape(v) for v in values)


TRIGGER_REGEX = rf"^(?:{_regex_one_of(list(Trigger))})(?:\+(?:{_regex_one_of(list(Trigger))}))*$"
"""``autoscale_decisions.trigger``: coalesced triggers joined by ``+``."""
_SUPPRESSED_ITEM = (rf"(?:{_regex_one_of(SUPPRESSED_REASONS)}"
                    rf"|{re.escape(OPERATION_FAILED_PREFIX)}.*)")
SUPPRESSED_BY_REGEX = rf"^{_SUPPRESSED_ITEM}(?:, {_SUPPRESSED_ITEM})*$"
"""``autoscale_decisions.suppressed_by``: rules joined by ``", "`` (null when it acted)."""


def _gx() -> Any:
    """Import Great Expectations with its usage analytics off (no network from a run)."""
    os.environ.setdefault("GX_ANALYTICS_ENABLED", "false")
    # GE takes seconds to import (and must see the variable above): only validating pays it
    import great_expectations as gx  # noqa: PLC0415

    return gx


# ----------------------------------------------------------------------------------- suites


def suites(allow_unreadable_files: bool = False) -> dict[str, list[Expectation]]:
    """The expectation suites: table name → list of GE 1.x expectation objects.

    ``quarantine.reason`` is not a whole-file reason (:data:`pipelines.ingest.rules.FILE_REASONS`:
    an input file that could not be read, or not whole) unless ``allow_unreadable_files``
    (``topic-replay validate --allow-unreadable-files``): a run that lost part of its input
    fails validation by default (issue #32).

    Columns named ``segment_found``, ``bucket_count``, ``range_start``, ``range_end`` on
    ``messages`` / ``entries`` / ``dispatch`` come from the join with ``segments`` made by
    :func:`prepare`.
    """
    _gx()
    import great_expectations.expectations as gxe  # noqa: PLC0415 - after _gx(), see there

    def not_null(*cols: str) -> list[Expectation]:
        return [gxe.ExpectColumnValuesToNotBeNull(column=c) for c in cols]

    def at_least(minimum: int, *cols: str) -> list[Expectation]:
        return [gxe.ExpectColumnValuesToBeBetween(column=c, min_value=minimum) for c in cols]

    def in_set(col: str, values: Sequence[str | bool]) -> Expectation:
        return gxe.ExpectColumnValuesToBeInSet(column=col, value_set=sorted(set(values)))

    def a_ge_b(a: str, b: str, strict: bool = False) -> Expectation:
        return gxe.ExpectColumnPairValuesAToBeGreaterThanB(
            column_A=a, column_B=b, or_equal=not strict, ignore_row_if="either_value_is_missing")

    def hash_range(*cols: str) -> list[Expectation]:
        return [gxe.ExpectColumnValuesToBeBetween(column=c, min_value=0, max_value=HASH_MAX)
                for c in cols]

    def unique(table: str) -> list[Expectation]:
        cols = list(KEYS[table])
        if len(cols) == 1:
            return [gxe.ExpectColumnValuesToBeUnique(column=cols[0])]
        return [gxe.ExpectCompoundColumnsToBeUnique(column_list=cols)]

    def in_segment(hash_column: str | None) -> list[Expectation]:
        checks = [in_set("segment_found", [True]), a_ge_b("bucket_count", "bucket_index", True)]
        if hash_column:
            checks += [a_ge_b(hash_column, "range_start"), a_ge_b("range_end", hash_column)]
        return checks

    s: dict[str, list[Expectation]] = {
        INPUT_CONTRACT: [
            gxe.ExpectTableColumnsToMatchSet(
                column_set=["topic", "key", "publish_time", "payload_size", "producer_name",
                            "sequence_id"], exact_match=False),
            *not_null("topic", "publish_time", "payload_size", "producer_name", "sequence_id"),
            *at_least(0, "payload_size", "sequence_id"),
        ],
        "messages": [
            *not_null("run_id", "topic", "producer_name", "sequence_id", "segment_sequence_id",
                      "publish_time", "segment_id", "bucket_index", "layout_epoch", "entry_id"),
            *hash_range("segment_hash", "hash_b"),
            *at_least(0, "bucket_index", "payload_size", "layout_epoch", "segment_sequence_id"),
            *in_segment("segment_hash"),
        ],
        "entries": [
            *not_null(*KEYS["entries"], "segment_id", "bucket_index", "publish_time"),
            *unique("entries"),
            *hash_range("entry_hash_min", "entry_hash_max"),
            a_ge_b("entry_hash_max", "entry_hash_min"),
            *at_least(1, "num_messages"),
            *at_least(0, "payload_bytes", "bucket_index"),
            a_ge_b("publish_time", "open_time"),
            in_set("close_reason", CLOSE_REASONS),
            *in_segment(None),
        ],
        "segments": [
            *not_null(*KEYS["segments"]),
            *unique("segments"),
            *hash_range("range_start", "range_end"),
            a_ge_b("range_end", "range_start"),
            *at_least(1, "bucket_count"),
            in_set("state", [str(v) for v in SegmentState]),
            in_set("created_by", CREATED_BY),
            a_ge_b("sealed_at", "created_at"),
        ],
        "segment_load": [
            *not_null(*KEYS["segment_load"]),
            *unique("segment_load"),
            *at_least(0, "msg_rate_in", "bytes_rate_in", "msg_rate_out", "bytes_rate_out"),
        ],
        "autoscale_decisions": [
            *not_null(*KEYS["autoscale_decisions"], "action", "reason"),
            in_set("action", DECISION_ACTIONS),
            in_set("reason", DECISION_REASONS),
            gxe.ExpectColumnValuesToMatchRegex(column="trigger", regex=TRIGGER_REGEX),
            gxe.ExpectColumnValuesToMatchRegex(column="suppressed_by", regex=SUPPRESSED_BY_REGEX),
            *at_least(1, "new_bucket_count"),
            *at_least(0, "active_segments", "consumers", "bucket_capacity"),
        ],
        "dispatch": [
            *not_null(*KEYS["dispatch"], "segment_id", "bucket_index"),
            *unique("dispatch"),
            *at_least(1, "num_messages"),
            a_ge_b("ack_time", "dispatch_time"),
            *in_segment(None),
        ],
        "consumer_load": [
            *not_null(*KEYS["consumer_load"]),
            *unique("consumer_load"),
            *at_least(0, "messages", "bytes", "busy_ms", "idle_ms", "backlog_messages"),
        ],
        "bucket_handoffs": [
            *not_null(*KEYS["bucket_handoffs"]),
            *at_least(0, "bucket_index"),
            a_ge_b("withheld_until", "withheld_from"),
            *at_least(0, "pending_messages", "redelivered_entries"),
        ],
        "subscription_stats": [
            *not_null(*KEYS["subscription_stats"], "window_end"),
            *unique("subscription_stats"),
            a_ge_b("window_end", "window_start"),
            a_ge_b("draining_hashes_max", "draining_hashes_count"),
            *at_least(0, "backlog_messages", "unacked_messages", "draining_hashes_count",
                      "draining_hashes_pending_messages", "draining_hashes_cleared",
                      "reassignments", "redeliveries", "shared_segments", "drain_mode_segments",
                      "sealed_segments_undrained"),
        ],
        "segment_drains": [
            *not_null(*KEYS["segment_drains"], "sealed_at", "drained_at"),
            *unique("segment_drains"),
            a_ge_b("drained_at", "sealed_at"),
            *at_least(0, "drain_ms"),
        ],
        "topic_profile": [
            *not_null("topic", "messages", "bytes", "producers", "distinct_keys"),
            *unique("topic_profile"),
            *at_least(0, "messages", "bytes", "keyless_messages", "key_count_error"),
        ],
        "findings": [
            *not_null("topic", "finding", "severity", "message", "evidence", "rule"),
            in_set("severity", ("high", "medium", "low", "info")),
        ],
        "quarantine": [
            *not_null(*KEYS["quarantine"]),
            in_set("reason", (*QUARANTINE_REASONS, *FILE_REASONS, LATE)),
            *([] if allow_unreadable_files else [
                gxe.ExpectColumnValuesToNotBeInSet(column="reason",
                                                   value_set=sorted(FILE_REASONS))]),
        ],
        "runs": [
            *not_null("run_id", "status"),
            *unique("runs"),
        ],
    }
    return s


def prepare(table: str, frames: Mapping[str, pd.DataFrame]) -> pd.DataFrame:
    """The frame the suite of ``table`` runs on, from the run's tables (``frames`` by name).

    ``input_contract``: the contract columns of ``messages``. ``messages`` / ``entries`` /
    ``dispatch``: left-joined with ``segments`` on (topic, segment_id), adding ``bucket_count``,
    ``range_start``, ``range_end`` and ``segment_found`` (bool). Every frame is sorted by its
    :data:`KEYS` (stable) so that sampled unexpected values are deterministic.
    """
    if table == INPUT_CONTRACT:
        cols = ["topic", "key", "publish_time", "payload_size", "producer_name", "sequence_id"]
        df = frames["messages"][cols]
        keys: list[str] = list(KEYS["messages"])
    else:
        df = frames[table]
        keys = list(KEYS[table])
    if table in ("messages", "entries", "dispatch"):
        seg = frames["segments"][["topic", "segment_id", "bucket_count", "range_start",
                                  "range_end"]].drop_duplicates(["topic", "segment_id"])
        df = df.merge(seg, on=["topic", "segment_id"], how="left", indicator="_found")
        df["segment_found"] = df.pop("_found").eq("both")
    return df.sort_values(keys, kind="stable", ignore_index=True) if len(df) else df


# ------------------------------------------------------------------------------- running


def _json(value: Any) -> str:
    def default(o: Any) -> Any:
        if isinstance(o, np.generic):
            return o.item()
        if isinstance(o, (pd.Timestamp, np.datetime64)):
            return str(pd.Timestamp(o))
        if isinstance(o, (set, frozenset, tuple)):
            return list(o)
        return str(o)

    def clean(o: Any) -> Any:
        if isinstance(o, float) and math.isnan(o):
            return None
        if isinstance(o, dict):
            return {str(k): clean(v) for k, v in o.items()}
        if isinstance(o, (list, tuple)):
            return [clean(v) for v in o]
        return o

    return json.dumps(clean(value), default=default, sort_keys=True)


def _observed(result: Mapping[str, Any]) -> Any:
    if "observed_value" in result:
        return result["observed_value"]
    if "partial_unexpected_list" in result:
        return {"unexpected_percent": result.get("unexpected_percent"),
                "partial_unexpected_list": result["partial_unexpected_list"]}
    return None


def ephemeral_context() -> Any:
    """A Great Expectations ephemeral (in-memory) data context with progress bars off."""
    gx = _gx()
    from great_expectations.data_context.types.base import (  # noqa: PLC0415 - see _gx()
        ProgressBarsConfig,
    )

    context = gx.get_context(mode="ephemeral")
    context.variables.progress_bars = ProgressBarsConfig(globally=False)
    return context


def validate_frame(table: str, df: pd.DataFrame, expectations: Sequence[Any],
                   context: Any = None) -> list[dict[str, Any]]:
    """Run ``expectations`` on ``df`` in an ephemeral GE context; one result dict per
    expectation (keys: table, expectation, kwargs (JSON), success, observed (JSON or None),
    element_count, unexpected_count, exception), in ``expectations`` order."""
    gx = _gx()
    if context is None:
        context = ephemeral_context()
    source = context.data_sources.add_or_update_pandas(f"topic-replay-{table}")
    asset = source.add_dataframe_asset(name=table)
    batch = asset.add_batch_definition_whole_dataframe("all").get_batch(
        batch_parameters={"dataframe": df})
    suite = context.suites.add_or_update(gx.ExpectationSuite(
        name=f"topic-replay-{table}", expectations=[e.copy() for e in expectations]))
    run = batch.validate(suite, result_format="SUMMARY")
    order = {e.id: i for i, e in enumerate(suite.expectations)}  # GE does not keep the order
    rows = []
    for r in sorted(run.results, key=lambda r: order[r.expectation_config.id]):
        config = r.expectation_config
        kwargs = {k: v for k, v in config.kwargs.items()
                  if k not in ("batch_id", "result_format")}
        result = r.result or {}
        exc = r.exception_info or {}
        message = exc.get("exception_message") if exc.get("raised_exception") else None
        observed = _observed(result)
        rows.append({
            "table": table,
            "expectation": config.type,
            "kwargs": _json(kwargs),
            "success": bool(r.success),
            "observed": None if observed is None else _json(observed),
            "element_count": result.get("element_count"),
            "unexpected_count": result.get("unexpected_count"),
            "exception": message,
        })
    return rows


@dataclass(frozen=True)
class ValidationResult:
    """One validation pass over a run: ``rows`` has the ``validations`` columns (run_id,
    validation_id, table, expectation, kwargs, success, observed, element_count,
    unexpected_count, exception)."""

    run_id: str
    validation_id: int
    rows: pd.DataFrame

    @property
    def success(self) -> bool:
        return bool(self.rows["success"].all())

    @property
    def failed(self) -> pd.DataFrame:
        return self.rows[~self.rows["success"]]


def validate_frames(frames: Mapping[str, pd.DataFrame], run_id: str,
                    validation_id: int = END_OF_RUN_VALIDATION_ID,
                    allow_unreadable_files: bool = False) -> ValidationResult:
    """Run every suite of :func:`suites` (``allow_unreadable_files`` passed on) on ``frames``
    (table name → pandas frame in the table's schema; a missing table is taken as empty).
    Raises nothing for failed expectations: they are rows with ``success = False``."""
    context = ephemeral_context()
    full = {t: frames[t] if t in frames else arrow_schema(t).empty_table().to_pandas()
            for t in KEYS}
    rows: list[dict[str, Any]] = []
    for table, expectations in suites(allow_unreadable_files).items():
        rows += validate_frame(table, prepare(table, full), expectations, context)
    df = pd.DataFrame(rows, columns=list(arrow_schema(VALIDATIONS_TABLE).names[2:]))
    df.insert(0, "validation_id", int(validation_id))
    df.insert(0, "run_id", run_id)
    for col in ("element_count", "unexpected_count"):
        df[col] = df[col].astype("Int64")
    return ValidationResult(run_id, int(validation_id), df)


def next_validation_id(store: DeltaStore, run_id: str) -> int:
    """1 + the highest ``validation_id`` stored for ``run_id`` (1 when there is none)."""
    done = store.read(VALIDATIONS_TABLE, run_id=run_id)
    return int(done["validation_id"].max()) + 1 if len(done) else 1


def validate_run(store: DeltaStore, run_id: str, validation_id: int | None = None,
                 write: bool = True, allow_unreadable_files: bool = False) -> ValidationResult:
    """Validate the tables of ``run_id`` in ``store`` (a
    :class:`pipelines.storage.delta.DeltaStore`) and, when ``write``, append the result to the
    ``validations`` table (idempotent: app id ``topic-replay:<run_id>:validations``, version =
    ``validation_id``). ``validation_id`` defaults to :func:`next_validation_id`;
    ``allow_unreadable_files``: see :func:`suites`."""
    if validation_id is None:
        validation_id = next_validation_id(store, run_id)
    frames = {t: store.read(t, run_id=run_id) for t in KEYS}
    result = validate_frames(frames, run_id, validation_id, allow_unreadable_files)
    if write:
        store.append(VALIDATIONS_TABLE, result.rows,
                     app_id=table_app_id(run_id, VALIDATIONS_TABLE), version=validation_id)
    return result


def format_validation(result: ValidationResult) -> str:
    """Human-readable report: one headline, then one line per failed expectation."""
    n, bad = len(result.rows), len(result.failed)
    lines = [f"validation {result.validation_id} of run {result.run_id}: "
             f"{n - bad}/{n} expectations passed" + ("" if bad else " (all passed)")]
    lines += [f"  FAILED {describe(r)}" for r in result.failed.to_dict("records")]
    return "\n".join(lines)
