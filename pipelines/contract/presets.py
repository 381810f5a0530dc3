"""Input specs and presets: how a message log's records map onto the input contract.

The input contract (docs/design.md, "Input contract") has the columns ``topic``, ``key``,
``publish_time``, ``payload_size``, ``producer_name`` and ``sequence_id``. An :class:`InputSpec`
says how to read one kind of file and how to compute each contract column from it:

``columns`` maps a contract column to either

- a **bare identifier** (``[A-Za-z_][A-Za-z0-9_]*``): the source column of that name, or null
  when the source has no such column (so optional columns may be absent), or
- any other string: a **Spark SQL expression** over the source columns, e.g.
  ``"octet_length(raw_record)"``. Expressions may use the source columns, ``raw_record`` (the raw
  line, or the JSON of a Parquet row) and ``source_file``. Source fields an expression uses must
  be listed in ``fields`` (for JSON they are the fields extracted; absent ones are null).

A contract column missing from ``columns`` is null (then ``topic`` falls back to ``topic`` and
``producer_name`` to ``producer_name``; ``sequence_id`` stays null and is assigned later as the
order within the producer).

Presets are ready-made specs in :data:`PRESETS`; :func:`get_preset` returns one with overrides
(e.g. ``get_preset("pulsar-export", format="parquet", speed=100)``).
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from pipelines.contract.timeformat import EPOCH_FORMATS, NAMED_FORMATS, check_timestamp_format

CONTRACT_COLUMNS: tuple[str, ...] = (
    "topic",
    "key",
    "publish_time",
    "payload_size",
    "producer_name",
    "sequence_id",
)
"""Columns of the input contract, in the order of docs/design.md's table."""

FORMATS: tuple[str, ...] = ("csv", "json", "parquet", "text")
"""Supported input formats (gzip-compressed ``.gz`` files are read transparently)."""

FORMAT_ALIASES: Mapping[str, str] = MappingProxyType(
    {"jsonl": "json", "ndjson": "json", "log": "text", "txt": "text"}
)

TIME_FORMATS: tuple[str, ...] = NAMED_FORMATS
"""Named publish-time formats; anything else is a Spark datetime pattern (``yyyy-MM-dd HH:mm``).
The language, and what each named format reads: :mod:`pipelines.contract.timeformat`.
Timestamps without an explicit offset are wall-clock times in the spec's ``time_zone``.
"""

DEFAULT_PRODUCER_NAME = "default-producer"
"""``producer_name`` when a record has none and the spec sets no other default."""

_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def is_identifier(value: str) -> bool:
    """True when a mapping value names a source column (rather than being an expression)."""
    return _IDENTIFIER.fullmatch(value) is not None


def normalize_format(fmt: str) -> str:
    """Canonical format name (``jsonl`` → ``json`` ...); ``ValueError`` for unknown formats."""
    f = FORMAT_ALIASES.get(fmt.lower(), fmt.lower())
    if f not in FORMATS:
        raise ValueError(f"unsupported input format {fmt!r}; use one of {', '.join(FORMATS)}")
    return f


CSV_DEFAULT_OPTIONS: Mapping[str, str] = MappingProxyType({"escape": '"'})
"""CSV parsing defaults: RFC 4180 (a doubled quote inside a quoted field is a literal quote, as
in the online-retail trace). Spark's own default escape character is a backslash."""

CONTRACT_MAPPING: Mapping[str, str] = MappingProxyType({c: c for c in CONTRACT_COLUMNS})


@dataclass(frozen=True)
class InputSpec:
    """How to read and map one kind of message log (see the module docstring).

    Attributes:
        format: ``csv`` | ``json`` (JSON lines) | ``parquet`` | ``text`` (one record per line,
            split by ``record_regex``).
        columns: contract column → source column name or Spark SQL expression.
        csv_columns: CSV column order. ``None`` = the header row of the first input file (see
            ``pipelines.spark.ingest.resolve_input_spec``). A line equal to this header is not a
            record.
        csv_options: Spark CSV options for parsing a line (``from_csv``), over the default
            :data:`CSV_DEFAULT_OPTIONS` (RFC 4180 quoting: ``""`` inside quotes is one ``"``);
            e.g. ``{"sep": ";"}``.
        fields: extra source fields expressions may use (JSON: fields to extract, all read as
            strings; ``text``: the names of ``record_regex``'s capture groups, in order). Bare
            identifiers in ``columns`` are always included.
        record_regex: ``text`` format only: a Java regex a line must match (else it is
            ``malformed_record``); its capture groups become ``fields``.
        topic: constant topic used when the record has none (``None``: such records are
            quarantined as ``missing_topic``).
        producer_name: default producer name when the record has none (null or blank).
        publish_time_format: one of :data:`TIME_FORMATS` or a Spark datetime pattern
            (``input.timestamp_format`` replaces a preset's).
        epoch_unit: the unit of epoch numbers under a format that is not ``epoch_*``
            (``epoch_ms`` unless the run guessed another from their magnitude:
            ``pipelines.ingest.time_unit``).
        epoch_unit_guessed: ``epoch_unit`` was guessed from the magnitude of the numbers
            (recorded in the ``runs`` row).
        time_zone: zone of publish times written without an offset (e.g. ``Europe/London``).
        speed: replay speed factor (> 0): the emulated clock is ``publish_time / speed``.
        spread_within_minute: spread records sharing a publish-time minute evenly over it
            (for traces with minute resolution), ordered by ``spread_order`` then the SHA-256
            of the raw record.
        spread_order: source columns / expressions ordering records within a minute.
        file_glob: only files whose *name* matches this glob are read from folder inputs
            (Spark ``pathGlobFilter``, e.g. ``*.csv``; note ``*.csv`` does not match
            ``x.csv.gz``). ``None`` reads every file.
        preset: name of the preset this spec came from (``custom`` otherwise).
        description: one line on what the spec is for.
        strict_columns: contract columns the user mapped (``input.columns``): their source
            column must exist, like the required ones' (see :meth:`checked_sources`).
    """

    format: str = "json"
    columns: Mapping[str, str] = field(default_factory=lambda: dict(CONTRACT_MAPPING))
    csv_columns: tuple[str, ...] | None = None
    csv_options: Mapping[str, str] = field(default_factory=dict)
    fields: tuple[str, ...] = ()
    record_regex: str | None = None
    topic: str | None = None
    producer_name: str = DEFAULT_PRODUCER_NAME
    publish_time_format: str = "auto"
    epoch_unit: str = "epoch_ms"
    epoch_unit_guessed: bool = False
    time_zone: str = "UTC"
    speed: float = 1.0
    spread_within_minute: bool = False
    spread_order: tuple[str, ...] = ()
    file_glob: str | None = None
    preset: str = "custom"
    description: str = ""
    strict_columns: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "format", normalize_format(self.format))
        unknown = [c for c in self.columns if c not in CONTRACT_COLUMNS]
        if unknown:
            raise ValueError(
                f"columns maps unknown contract column(s) {', '.join(unknown)}; "
                f"contract columns are {', '.join(CONTRACT_COLUMNS)}"
            )
        object.__setattr__(self, "columns", MappingProxyType(dict(self.columns)))
        object.__setattr__(self, "csv_options", MappingProxyType(dict(self.csv_options)))
        if self.csv_columns is not None:
            object.__setattr__(self, "csv_columns", tuple(self.csv_columns))
        object.__setattr__(self, "fields", tuple(self.fields))
        object.__setattr__(self, "spread_order", tuple(self.spread_order))
        object.__setattr__(self, "strict_columns", tuple(self.strict_columns))
        check_timestamp_format(self.publish_time_format)  # TimestampFormatError (ValueError)
        if self.epoch_unit not in EPOCH_FORMATS:
            raise ValueError(f"epoch_unit must be one of {', '.join(EPOCH_FORMATS)}, "
                             f"got {self.epoch_unit!r}")
        if not float(self.speed) > 0:
            raise ValueError(f"speed must be > 0, got {self.speed}")
        object.__setattr__(self, "speed", float(self.speed))
        if self.format == "text" and not self.record_regex:
            raise ValueError("format 'text' needs record_regex (its groups become fields)")
        for required in ("publish_time", "payload_size"):
            if required not in self.columns:
                raise ValueError(f"columns must map the required contract column {required!r}")
        if "topic" not in self.columns and self.topic is None:
            raise ValueError("map 'topic' in columns or give a constant topic")

    def source_fields(self) -> tuple[str, ...]:
        """Source fields the spec refers to: ``fields`` plus bare identifiers in ``columns``
        and ``spread_order`` (order kept, no duplicates)."""
        names = list(self.fields)
        for value in [*self.columns.values(), *self.spread_order]:
            if is_identifier(value):
                names.append(value)
        return tuple(dict.fromkeys(n for n in names if n not in ("raw_record", "source_file")))

    def checked_sources(self) -> dict[str, str]:
        """Contract column → source column for the mappings whose source column must exist:
        the required columns (``publish_time``, ``payload_size``, and ``topic`` when there is
        no constant topic) and :attr:`strict_columns`, when mapped to a bare identifier (an
        expression is not checked; ``raw_record`` / ``source_file`` always exist). An optional
        column a preset maps by default (``key``, ``producer_name``, ``sequence_id``) may be
        absent: it reads as null. Order: :data:`CONTRACT_COLUMNS`."""
        wanted = {"publish_time", "payload_size", *self.strict_columns}
        if self.topic is None:
            wanted.add("topic")
        return {c: v for c in CONTRACT_COLUMNS
                if c in wanted and (v := self.columns.get(c)) is not None
                and is_identifier(v) and v not in ("raw_record", "source_file")}

    def publish_time_facts(self) -> dict[str, Any]:
        """How this spec reads publish times, for the ``runs`` row's ``counts``
        (``publish_time``): the format, the unit of epoch numbers and whether it was
        guessed."""
        return {"timestamp_format": self.publish_time_format,
                "epoch_unit": (self.publish_time_format
                               if self.publish_time_format in EPOCH_FORMATS else self.epoch_unit),
                "guessed": self.epoch_unit_guessed}

    def replace(self, **changes: Any) -> InputSpec:
        """A copy with ``changes`` applied (validated again)."""
        return dataclasses.replace(self, **changes)


CONTRACT = InputSpec(
    format="json",
    preset="contract",
    description="Columns already named as the input contract (any format).",
)
"""``contract`` (default): records already carry the contract columns ``topic``, ``key``,
``publish_time`` (epoch ms or ISO-8601), ``payload_size``, ``producer_name``, ``sequence_id``.
CSV column order comes from the file header."""

ONLINE_RETAIL_CSV_COLUMNS = (
    "InvoiceNo",
    "StockCode",
    "Description",
    "Quantity",
    "InvoiceDate",
    "UnitPrice",
    "CustomerID",
    "Country",
)

ONLINE_RETAIL = InputSpec(
    format="csv",
    csv_columns=ONLINE_RETAIL_CSV_COLUMNS,
    columns={
        "topic": "Country",
        "key": "StockCode",
        "producer_name": "regexp_replace(CustomerID, '[.]0$', '')",
        "publish_time": "InvoiceDate",
        "payload_size": "octet_length(raw_record)",
    },
    producer_name="anonymous",
    publish_time_format="yyyy-MM-dd HH:mm:ss",
    time_zone="Europe/London",
    spread_within_minute=True,
    spread_order=("InvoiceNo", "StockCode"),
    file_glob="*.csv",
    preset="online-retail",
    description="UCI Online Retail invoice lines (../shared/traces/online-retail).",
)
"""``online-retail``: UCI Online Retail CSV (header ``InvoiceNo,StockCode,Description,Quantity,
InvoiceDate,UnitPrice,CustomerID,Country``). topic = Country, key = StockCode, producer_name =
CustomerID without a trailing ``.0`` (``anonymous`` when empty), payload_size = UTF-8 byte length
of the CSV line, publish_time = InvoiceDate (``yyyy-MM-dd HH:mm:ss``, Europe/London). InvoiceDate
has minute resolution, so the rows of one minute are spread evenly over it: row ``i`` of ``n``
(ordered by InvoiceNo, StockCode, SHA-256 of the line) gets ``minute + floor(i * 60000 / n)``
ms. The spreading runs within one micro-batch; the trace has one file per day, so a minute never
spans files (and a micro-batch always holds whole files). Only ``*.csv`` files are read from a
folder (the trace folder also holds ``SOURCE.md``)."""

PULSAR_EXPORT = InputSpec(
    format="json",
    columns={
        "topic": "__topic__",
        "key": "__key__",
        "producer_name": "__producer_name__",
        "sequence_id": "__sequence_id__",
        "publish_time": "__publish_time__",
        "payload_size": "coalesce(__payload_size__, octet_length(__value__))",
    },
    fields=("__message_id__", "__payload_size__", "__value__"),
    preset="pulsar-export",
    description="Pulsar SQL exports (Pulsar 2.2-3.1) with __key__, __publish_time__, ... "
                "columns.",
)
"""``pulsar-export``: exports of Pulsar SQL (the Presto / Trino connector, shipped with Apache
Pulsar 2.2 to 3.1, the 3.0 LTS line included; removed in 3.2 by apache/pulsar#21795, December
2023), whose rows carry ``__key__``, ``__publish_time__``, ... beside the message's fields; no
current Pulsar produces them: capture live topics with ``topic-replay capture`` (preset
``pulsar``) instead. key = ``__key__``, publish_time =
``__publish_time__`` (epoch ms or ISO-8601), producer_name = ``__producer_name__``, sequence_id =
``__sequence_id__``; topic = ``__topic__`` or the spec's constant ``topic``; payload_size =
``__payload_size__`` if present, else the UTF-8 byte length of ``__value__``. ``__message_id__``
is read but not used. Set ``format`` to the export's format."""

PULSAR = InputSpec(
    format="parquet",
    columns=dict(CONTRACT_MAPPING),
    file_glob="*.parquet",
    preset="pulsar",
    description="Message logs written by `topic-replay capture` from live Pulsar topics.",
)
"""``pulsar``: the Parquet files ``topic-replay capture`` writes
(``pipelines.ingest.capture.CAPTURE_SCHEMA``): the contract's columns by name — topic (a
partitioned topic's name), key (the routing key: ordering key, else partition key), publish_time
(ms), payload_size, producer_name, sequence_id (null: numbered in publish order per producer) —
beside ordering_key, partition, message_id, batch_index, event_time and properties, which the
mapping may use (``input.columns.publish_time: "coalesce(event_time, publish_time)"`` replays on
event time, docs/capture.md). Only ``*.parquet`` files are read (the capture's state file is
``_capture_state.json``)."""

NYC_TAXI_CSV_COLUMNS = (
    "VendorID",
    "lpep_pickup_datetime",
    "lpep_dropoff_datetime",
    "store_and_fwd_flag",
    "RatecodeID",
    "PULocationID",
    "DOLocationID",
    "passenger_count",
    "trip_distance",
    "fare_amount",
    "extra",
    "mta_tax",
    "tip_amount",
    "tolls_amount",
    "ehail_fee",
    "improvement_surcharge",
    "total_amount",
    "payment_type",
    "trip_type",
    "congestion_surcharge",
)

NYC_TAXI = InputSpec(
    format="csv",
    csv_columns=NYC_TAXI_CSV_COLUMNS,
    columns={
        "key": "PULocationID",
        "publish_time": "lpep_pickup_datetime",
        "payload_size": "octet_length(raw_record)",
    },
    topic="green-taxi",
    producer_name="green-taxi",
    publish_time_format="auto",
    time_zone="America/New_York",
    file_glob="green_tripdata_*.csv*",
    preset="nyc-taxi",
    description="NYC TLC green-taxi trips (../shared/traces/nyc-green-taxi), one per message.",
)
"""``nyc-taxi``: NYC TLC green-taxi trip records (CSV with the 20 TLC columns, or the Parquet
variant with ``format="parquet"``). Topic constant ``green-taxi``, key = PULocationID,
publish_time = lpep_pickup_datetime (New York wall-clock time), payload_size = byte length of
the raw line (Parquet: of the row's JSON). From a folder, only ``green_tripdata_*.csv*`` files
are read (the trace folder also holds the zone lookup CSV and a Parquet month; give the Parquet
file itself with ``--set input.format=parquet``)."""

APACHE_LOGS = InputSpec(
    format="text",
    record_regex=r'^(\S+) \S+ (\S+) \[([^\]]+)\] "([^"]*)" ([0-9]{3}) (\S+).*$',
    fields=("client", "user", "time", "request", "status", "bytes"),
    columns={
        "key": "client",
        "publish_time": "time",
        "payload_size": "octet_length(raw_record)",
    },
    topic="apache-logs",
    producer_name="httpd",
    publish_time_format="dd/MMM/yyyy:HH:mm:ss Z",
    preset="apache-logs",
    description="Apache common/combined access logs (../shared/traces/elastic-apache-logs).",
)
"""``apache-logs``: Apache common / combined access-log lines, one message per line. Topic
constant ``apache-logs``, key = client address, publish_time = the ``[dd/MMM/yyyy:HH:mm:ss Z]``
field, payload_size = byte length of the line; a line not in that format is
``malformed_record``."""

PRESETS: dict[str, InputSpec] = {
    "contract": CONTRACT,
    "online-retail": ONLINE_RETAIL,
    "pulsar": PULSAR,
    "pulsar-export": PULSAR_EXPORT,
    "nyc-taxi": NYC_TAXI,
    "apache-logs": APACHE_LOGS,
}
"""Preset name → spec. Each preset's docstring (above) documents its mapping."""


def get_preset(name: str = "contract", **overrides: Any) -> InputSpec:
    """The preset ``name`` with ``overrides`` (any :class:`InputSpec` field) applied."""
    try:
        spec = PRESETS[name]
    except KeyError:
        raise ValueError(f"unknown preset {name!r}; presets: {', '.join(PRESETS)}") from None
    return spec.replace(**overrides) if overrides else spec
