"""Replay configuration: defaults, user YAML, ``--set`` overrides and validation.

:func:`load_config` builds a :class:`ReplayConfig` in four steps:

1. read the bundled defaults, ``conf/default.yaml`` (the single source of every default);
2. deep-merge the user's YAML file over them (mappings merge key by key; lists and scalars are
   replaced as a whole, so a ``subscriptions`` list in the user file replaces the default one);
3. apply each ``--set dotted.key=value`` in order. The value is parsed as YAML (``8`` → int,
   ``0.5`` / ``1e5`` → float, ``true`` → bool, ``[a, b]`` → list, ``null`` → None, anything
   else → str) and replaces whatever is at the path. Path segments are separated by dots; a list
   element is addressed by its index (``subscriptions.0.consumers.1.capacity_msg_per_s=500``; the
   index equal to the list length appends); a key containing dots goes in brackets
   (``policy.topic_overrides[persistent://public/default/a.b].max_segments=4``);
4. validate with pydantic v2 models (strict types, ``extra="forbid"``), then the policy and
   batching rules of :mod:`pipelines.core` (:meth:`AutoScaleConfig.problems` for the broker
   policy and for each resolved namespace / topic override layer, :meth:`BatchingConfig.problems`).

Every problem found is collected and raised as one :class:`ConfigError` whose message starts
``Invalid configuration: N problems:`` followed by one ``<dotted.path>: <problem>`` per line.

Where the defaults file is found (in this order): the ``TOPIC_REPLAY_DEFAULT_CONF`` environment
variable (a path; e.g. ship the file with ``spark-submit --files``), ``conf/default.yaml`` of the
repository this module lives in (source checkout and editable installs), then an installed copy
at ``pipelines/conf/default.yaml`` read through :mod:`importlib.resources` (works from wheels and
zip imports if packaging copies the file there). There is one file in the repository; the
installed copy, if any, is produced by packaging, never edited.

Type rules: integers are accepted where a float is expected, never the reverse; strings are never
coerced to numbers or booleans (quote-free YAML numbers are numbers already); infinities and NaN
are rejected (the canonical JSON must round-trip).
"""

from __future__ import annotations

import copy
import difflib
import hashlib
import json
import os
import re
import types
import typing
from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, date, datetime, time, tzinfo
from importlib import resources
from importlib.resources.abc import Traversable
from pathlib import Path
from typing import Annotated, Any, Literal, Union, get_args, get_origin
from zoneinfo import ZoneInfo

import yaml
from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_serializer,
    model_validator,
)

from pipelines.contract.timeformat import (
    NAMED_FORMATS,
    TimestampFormatError,
    check_timestamp_format,
)
from pipelines.core.batching import BatchingConfig, BatchingMode
from pipelines.core.policy import AutoScaleConfig

__all__ = [
    "BROKER_ONLY_POLICY_FIELDS",
    "CONTRACT_COLUMNS",
    "DEFAULT_CONF_ENV",
    "OUTPUT_TABLES",
    "BatchingSection",
    "ConfigError",
    "ConsumerConfig",
    "InputDefaults",
    "InputSection",
    "LeaveConfig",
    "OutputSection",
    "PolicyOverrides",
    "PolicySection",
    "ReplayConfig",
    "ReplaySection",
    "SubscriptionConfig",
    "TopicSection",
    "apply_set",
    "default_conf_path",
    "load_config",
    "parse_config",
]

DEFAULT_CONF_ENV = "TOPIC_REPLAY_DEFAULT_CONF"
"""Environment variable naming a defaults file to use instead of the bundled one."""

OUTPUT_TABLES: tuple[str, ...] = (
    "messages", "entries", "segments", "segment_load", "autoscale_decisions", "dispatch",
    "consumer_load", "bucket_handoffs", "subscription_stats", "segment_drains", "topic_profile",
    "findings", "quarantine", "runs", "validations", "sweeps",
)
"""Every output table, in canonical order (docs/tables.md)."""

CONTRACT_COLUMNS: tuple[str, ...] = (
    "topic", "key", "publish_time", "payload_size", "producer_name", "sequence_id",
)
"""Columns of the input contract (docs/design.md, "Input contract")."""

BROKER_ONLY_POLICY_FIELDS: tuple[str, ...] = ("max_buckets_per_segment",)
"""Policy fields that namespace / topic overrides cannot carry (reference §4.2)."""

TIMESTAMP_FORMATS: tuple[str, ...] = NAMED_FORMATS
"""Named ``input.timestamp_format`` values; anything else must be a Spark datetime pattern
(``pipelines.contract.timeformat``)."""

TableName = Literal[
    "messages", "entries", "segments", "segment_load", "autoscale_decisions", "dispatch",
    "consumer_load", "bucket_handoffs", "subscription_stats", "segment_drains", "topic_profile",
    "findings", "quarantine", "runs", "validations", "sweeps",
]
ContractColumn = Literal[
    "topic", "key", "publish_time", "payload_size", "producer_name", "sequence_id",
]
SubscriptionType = Literal["stream", "checkpoint", "queue"]
InputFormat = Literal["json", "csv", "parquet", "auto", "kafka"]
OutputEngine = Literal["auto", "delta-spark", "delta-rs"]
KeysMode = Literal["raw", "hashed", "none"]
PseudonymizedColumn = Literal["producer_name", "key"]

assert get_args(TableName) == OUTPUT_TABLES
assert get_args(ContractColumn) == CONTRACT_COLUMNS


class ConfigError(ValueError):
    """An invalid configuration. ``problems`` holds one ``"<path>: <problem>"`` string each."""

    def __init__(self, problems: Sequence[str]) -> None:
        self.problems: list[str] = list(problems)
        n = len(self.problems)
        head = f"Invalid configuration: {n} problem{'s' if n != 1 else ''}:"
        super().__init__("\n".join([head, *(f"  - {p}" for p in self.problems)]))


# ---- YAML --------------------------------------------------------------------------------------


class _Loader(yaml.SafeLoader):
    """Safe loader that rejects duplicate keys and reads ``1e5`` as a float (YAML 1.2 style)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        self.flatten_mapping(node)
        seen: set[Any] = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            try:
                duplicate = key in seen
            except TypeError:  # unhashable key: let SafeLoader report it
                break
            if duplicate:
                raise yaml.constructor.ConstructorError(
                    "while constructing a mapping", node.start_mark,
                    f"found duplicate key {key!r}", key_node.start_mark)
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


_Loader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^[-+]?(?:[0-9][0-9_]*(?:\.[0-9_]*)?|\.[0-9_]+)[eE][-+]?[0-9]+$"),
    list("-+0123456789."),
)


def _parse_yaml(text: str) -> Any:
    return yaml.load(text, Loader=_Loader)  # _Loader is a SafeLoader subclass


def _read_yaml_file(path: Path | str, what: str) -> tuple[dict[str, Any], list[str]]:
    """The mapping in a YAML file, or ``({}, [problem])``. An empty file is ``{}``."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        return {}, [f"{what} {path}: cannot be read ({exc.strerror or exc})"]
    try:
        data = _parse_yaml(text)
    except yaml.YAMLError as exc:
        detail = " ".join(str(exc).split())
        return {}, [f"{what} {path}: not valid YAML ({detail})"]
    if data is None:
        return {}, []
    if not isinstance(data, dict):
        return {}, [f"{what} {path}: the top level must be a mapping, got {type(data).__name__}"]
    return data, []


def default_conf_path() -> Path | Traversable:
    """The defaults file :func:`load_config` reads (see the module doc for the search order)."""
    env = os.environ.get(DEFAULT_CONF_ENV)
    if env:
        return Path(env)
    repo_copy = Path(__file__).resolve().parents[2] / "conf" / "default.yaml"
    if repo_copy.is_file():
        return repo_copy
    installed = resources.files("pipelines") / "conf" / "default.yaml"
    if installed.is_file():
        return installed
    return repo_copy  # reported as unreadable by the caller


def _read_defaults() -> tuple[dict[str, Any], list[str]]:
    src = default_conf_path()
    if isinstance(src, Path):
        return _read_yaml_file(src, "defaults file")
    try:  # importlib.resources Traversable (wheel / zip)
        data = _parse_yaml(src.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as exc:
        return {}, [f"defaults file {src}: {exc}"]
    return (data if isinstance(data, dict) else {}), []


# ---- merging and --set -------------------------------------------------------------------------


def _deep_merge(base: dict[str, Any], over: Mapping[str, Any]) -> dict[str, Any]:
    """``over`` merged into a copy of ``base``: mappings recursively, anything else replaced."""
    out = copy.deepcopy(base)
    for key, value in over.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), dict):
            out[key] = _deep_merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


_SEGMENT = re.compile(r"\[([^\]]*)\]|([^.\[\]=]+)")


def _split_assignment(assignment: str) -> tuple[list[str], str]:
    """``"a.b[c.d].0=v"`` → ``(["a", "b", "c.d", "0"], "v")``; ``ValueError`` if malformed."""
    path: list[str] = []
    pos, n = 0, len(assignment)
    while True:
        m = _SEGMENT.match(assignment, pos)
        if m is None or m.end() == pos:
            raise ValueError("expected dotted.key=value")
        seg = m.group(1) if m.group(1) is not None else m.group(2)
        if seg == "":
            raise ValueError("empty [] key")
        path.append(seg.strip() if m.group(2) is not None else seg)
        pos = m.end()
        if pos < n and assignment[pos] == "=":
            return path, assignment[pos + 1:]
        if pos < n and assignment[pos] == ".":
            pos += 1
        elif pos < n and assignment[pos] == "[":
            continue
        else:
            raise ValueError("expected dotted.key=value")


class _SetProblem(Exception):
    """Why a ``--set`` path cannot be followed (the message, without the ``--set`` label)."""


def _descend_mapping(node: dict[str, Any], seg: str, last: bool, value: Any,
                     where: str) -> Any:
    """Set ``node[seg]`` when ``last``, else the child to descend into (an empty mapping is
    created for a missing or null key); ``_SetProblem`` when the child is a scalar."""
    if last:
        node[seg] = value
        return None
    if not isinstance(node.get(seg), dict | list):
        if seg in node and node[seg] is not None:
            raise _SetProblem(f"{where} is a {type(node[seg]).__name__}, not a mapping or list")
        node[seg] = {}
    return node[seg]


def _descend_list(node: list[Any], seg: str, last: bool, value: Any, where: str,
                  parent: str) -> Any:
    """Set item ``seg`` (an index; the list's length appends) when ``last``, else the item to
    descend into; ``_SetProblem`` for a non-index, an index past the end or a scalar item."""
    if not seg.isdigit():
        raise _SetProblem(f"{parent} is a list; {seg!r} is not an index")
    index = int(seg)
    if index > len(node):
        raise _SetProblem(f"{where}: index out of range (the list has {len(node)} "
                          f"item{'s' if len(node) != 1 else ''})")
    if index == len(node):
        node.append(value if last else {})
    elif last:
        node[index] = value
    if last:
        return None
    if not isinstance(node[index], dict | list):
        raise _SetProblem(f"{where} is a {type(node[index]).__name__}, not a mapping or list")
    return node[index]


def _assign(data: dict[str, Any], path: Sequence[str], value: Any) -> None:
    """Set ``value`` at ``path`` in ``data`` (see :func:`apply_set`); ``_SetProblem``."""
    node: Any = data
    for depth, seg in enumerate(path):
        last = depth == len(path) - 1
        where = _render_path(path[:depth + 1])
        if isinstance(node, dict):
            node = _descend_mapping(node, seg, last, value, where)
        elif isinstance(node, list):
            node = _descend_list(node, seg, last, value, where, _render_path(path[:depth]))
        else:  # pragma: no cover - guarded above
            raise _SetProblem(f"{_render_path(path[:depth])} is not a mapping or list")


def apply_set(data: dict[str, Any], assignment: str) -> list[str]:
    """Apply one ``dotted.key=value`` to ``data`` in place; returns problems (empty = applied).

    Missing mapping keys along the path are created (an unknown key is then reported by
    validation with its dotted path); a list index must exist or equal the list length (append).
    """
    label = f"--set {assignment!r}"
    try:
        path, raw_value = _split_assignment(assignment)
    except ValueError as exc:
        return [f"{label}: {exc}"]
    try:
        value = _parse_yaml(raw_value) if raw_value.strip() else None
    except yaml.YAMLError as exc:
        return [f"{label}: value is not valid YAML ({' '.join(str(exc).split())})"]
    try:
        _assign(data, path, value)
    except _SetProblem as exc:
        return [f"{label}: {exc}"]
    return []


# ---- validators --------------------------------------------------------------------------------

TimePoint = float | datetime
"""A consumer join/leave time: seconds after the first event (float) or an aware UTC datetime."""


def _zone(name: Any) -> tzinfo:
    if name in ("UTC", "Z", "utc"):
        return UTC
    return ZoneInfo(str(name))


def _seconds_offset(value: float) -> float:
    """A join/leave time given as seconds after the first event; ``ValueError`` unless finite
    and >= 0."""
    if value != value or value in (float("inf"), float("-inf")):
        raise ValueError(f"seconds offset must be finite, got {value!r}")
    if value < 0:
        raise ValueError(f"seconds offset must be >= 0, got {value!r}")
    return float(value)


def _parse_time_point(value: Any, info: ValidationInfo) -> Any:
    """Number → float seconds offset (>= 0); ISO string / datetime / date → aware UTC datetime.

    A timestamp without offset is read in the time zone passed as validation context
    (``input.time_zone``), UTC when none.
    """
    if value is None:
        return None
    if isinstance(value, bool):
        raise ValueError(f"expected a seconds offset or an ISO-8601 timestamp, got {value!r}")
    if isinstance(value, int | float):
        return _seconds_offset(value)
    tz = (info.context or {}).get("time_zone", UTC)
    if isinstance(value, str):
        try:
            value = datetime.fromisoformat(value.strip())
        except ValueError:
            raise ValueError("expected a seconds offset (number) or an ISO-8601 timestamp such "
                             f"as '2010-12-01T08:00:00Z', got {value!r}") from None
    if isinstance(value, datetime):
        if value.tzinfo is None:
            value = value.replace(tzinfo=tz)
        return value.astimezone(UTC)
    if isinstance(value, date):
        return datetime.combine(value, time(0), tzinfo=tz).astimezone(UTC)
    raise ValueError(f"expected a seconds offset or an ISO-8601 timestamp, got {value!r}")


JoinTime = Annotated[TimePoint, BeforeValidator(_parse_time_point)]
ReconnectTime = Annotated[TimePoint, BeforeValidator(_parse_time_point)]
LeaveTime = Annotated[TimePoint, BeforeValidator(_parse_time_point)]


def _show(point: TimePoint) -> str:
    if isinstance(point, datetime):
        return point.isoformat().replace("+00:00", "Z")
    return f"{point:g} s"


def _time_point_ms(point: TimePoint, first_event_ms: int) -> int:
    if isinstance(point, datetime):
        return round(point.timestamp() * 1000)
    return first_event_ms + round(point * 1000)


# ---- models ------------------------------------------------------------------------------------


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True, allow_inf_nan=False)


PositiveInt = Annotated[int, Field(ge=1)]
NonNegativeInt = Annotated[int, Field(ge=0)]
PositiveFloat = Annotated[float, Field(gt=0)]
NonNegativeFloat = Annotated[float, Field(ge=0)]
NonEmptyStr = Annotated[str, Field(min_length=1)]


def consumer_window_ms(consumer_window_s: float, speed: float) -> int:
    """Length of a ``consumer_load`` / ``subscription_stats`` window on the emulated clock (ms):
    ``replay.consumer_window_s`` of log time compressed by ``replay.speed``, whole ms."""
    return int(consumer_window_s * 1000 / speed)


class ReplaySection(_Model):
    """``replay``: time compression, event-time clocks and trigger sizing."""

    speed: PositiveFloat
    allowed_lateness_s: NonNegativeInt
    auto_scale_interval_s: int
    load_report_interval_s: PositiveInt
    # The broker's stats updater (reference §5.1): TopicStats rates recomputed every
    # stats_update_frequency_s, the first time stats_update_initial_delay_s after the replay's
    # first event (the emulated broker start).
    stats_update_frequency_s: PositiveInt
    stats_update_initial_delay_s: NonNegativeInt
    load_report_rate_change_threshold: NonNegativeFloat
    max_files_per_trigger: PositiveInt
    consumer_window_s: PositiveInt
    # Bytes of input per streaming micro-batch (whole files; Spark's ``maxBytesPerTrigger``);
    # when set it replaces ``max_files_per_trigger``. null = bound by file count.
    max_bytes_per_trigger: PositiveInt | None = None
    # Producer shards per topic: batching runs per (topic, shard) on the Spark runtime, so a
    # hot topic's producers spread over this many tasks. A run constant (the state store's keys
    # depend on it); the tables do not depend on it.
    producer_shards: Annotated[int, Field(ge=1, le=4096)] = 4
    # Topic bins: the Spark runtime's operators are keyed by groups of topics (a topic's bin is
    # a hash of its name modulo this), never by topic. null = four times
    # spark.sql.shuffle.partitions at the run's start. A run constant (recorded in the run's
    # manifest; the state store's keys depend on it); the tables do not depend on it.
    topic_bins: Annotated[int, Field(ge=1, le=65536)] | None = None


class TopicSection(_Model):
    """``topic``: initial layout and naming."""

    initial_segments: Annotated[int, Field(ge=1, le=65536)]
    bucket_budget: PositiveInt
    name: NonEmptyStr | None
    namespace: Annotated[str, Field(pattern=r"^[^/\s]+/[^/\s]+$")]


class PolicyOverrides(_Model):
    """One override layer: every :class:`AutoScaleConfig` field, ``None`` = inherit.

    Serialized without the ``None`` fields. ``max_buckets_per_segment`` is broker-only.
    """

    enabled: bool | None = None
    max_segments: int | None = None
    min_segments: int | None = None
    max_dag_depth: int | None = None
    split_cooldown_s: int | None = None
    merge_cooldown_s: int | None = None
    merge_window_s: int | None = None
    rebucket_cooldown_s: int | None = None
    split_vs_rebucket_min_msg_rate_in: float | None = None
    max_buckets_per_segment: int | None = None
    split_msg_rate_in: float | None = None
    split_bytes_rate_in: float | None = None
    split_msg_rate_out: float | None = None
    split_bytes_rate_out: float | None = None
    merge_msg_rate_in: float | None = None
    merge_bytes_rate_in: float | None = None
    merge_msg_rate_out: float | None = None
    merge_bytes_rate_out: float | None = None

    @field_validator(*BROKER_ONLY_POLICY_FIELDS)
    @classmethod
    def _broker_only(cls, value: Any) -> Any:
        if value is not None:
            raise ValueError("broker-only (scalableTopicEntryBucketMaxPerSegment); it cannot be "
                             "overridden per namespace or topic")
        return value

    @model_serializer(mode="wrap")
    def _drop_inherited(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        return {k: v for k, v in handler(self).items() if v is not None}

    def as_mapping(self) -> dict[str, Any]:
        """The fields this layer sets (``None`` fields left out), for AutoScaleConfig.resolve."""
        return {k: v for k, v in self.__dict__.items() if v is not None}


def topic_namespace(topic: str, default: str) -> str:
    """The ``tenant/namespace`` of a topic name: ``persistent://t/ns/x`` or ``t/ns/x`` → ``t/ns``;
    a local name (``orders``) lies in ``default`` (``topic.namespace``)."""
    parts = topic.split("://", 1)[-1].split("/")
    return "/".join(parts[:2]) if len(parts) >= 3 else default


class PolicySection(_Model):
    """``policy``: broker-level :class:`AutoScaleConfig` plus namespace and topic overrides."""

    enabled: bool
    max_segments: int
    min_segments: int
    max_dag_depth: int
    split_cooldown_s: int
    merge_cooldown_s: int
    merge_window_s: int
    rebucket_cooldown_s: int
    split_vs_rebucket_min_msg_rate_in: float
    max_buckets_per_segment: int
    split_msg_rate_in: float
    split_bytes_rate_in: float
    split_msg_rate_out: float
    split_bytes_rate_out: float
    merge_msg_rate_in: float
    merge_bytes_rate_in: float
    merge_msg_rate_out: float
    merge_bytes_rate_out: float
    namespace_overrides: PolicyOverrides
    topic_overrides: dict[NonEmptyStr, PolicyOverrides]

    def broker(self) -> AutoScaleConfig:
        """The broker-level policy."""
        return AutoScaleConfig(**{f: getattr(self, f) for f in AutoScaleConfig.field_names()})

    def topic_override(self, topic: str) -> PolicyOverrides | None:
        """The override layer of ``topic``: exact key first, else the key equal to its local
        name (the part after the last ``/``); ``None`` when the topic has none."""
        if topic in self.topic_overrides:
            return self.topic_overrides[topic]
        return self.topic_overrides.get(topic.rsplit("/", 1)[-1])

    def resolve(self, topic: str, namespace: str = "public/default") -> AutoScaleConfig:
        """Broker → namespace → topic layering (reference §4.2). ``namespace``: the one
        ``namespace_overrides`` belong to (``topic.namespace``); they apply to ``topic`` only
        when it lies in it (:func:`topic_namespace`)."""
        layer = self.topic_override(topic)
        ns = (self.namespace_overrides.as_mapping()
              if topic_namespace(topic, namespace) == namespace else None)
        return AutoScaleConfig.resolve(self.broker(), ns,
                                       layer.as_mapping() if layer is not None else None)

    def problems(self) -> list[str]:
        """:meth:`AutoScaleConfig.problems` of the broker policy and of every resolved override
        layer, each prefixed with the layer's path; a problem inherited unchanged from a lower
        layer is reported once, at the layer that introduced it."""
        out: list[str] = []
        broker = self.broker()
        seen = set(broker.problems())
        out.extend(f"policy: {p}" for p in broker.problems())
        ns = AutoScaleConfig.resolve(broker, self.namespace_overrides.as_mapping())
        ns_problems = ns.problems()
        out.extend(f"policy.namespace_overrides: {p}" for p in ns_problems if p not in seen)
        seen |= set(ns_problems)
        for name in sorted(self.topic_overrides):
            resolved = AutoScaleConfig.resolve(ns, self.topic_overrides[name].as_mapping())
            where = _render_path(["policy", "topic_overrides", name])
            out.extend(f"{where}: {p}" for p in resolved.problems() if p not in seen)
        return out


class BatchingSection(_Model):
    """``batching``: producer batching mode and limits (ranges: :meth:`BatchingConfig.problems`)."""

    mode: Literal["bucketed", "key_based", "default", "disabled"]
    max_messages: int
    max_bytes: int
    max_publish_delay_ms: int

    def to_core(self) -> BatchingConfig:
        return BatchingConfig(mode=BatchingMode(self.mode), max_messages=self.max_messages,
                              max_bytes=self.max_bytes,
                              max_publish_delay_ms=self.max_publish_delay_ms)

    def problems(self) -> list[str]:
        return [f"batching: {p}" for p in self.to_core().problems()]


LeaveHowName = Literal["close", "crash"]


def _leave_form(value: Any) -> Any:
    """``leave: <time>`` is ``leave: {at: <time>}`` (a clean close); ``null`` stays ``None``."""
    if value is None or isinstance(value, Mapping | LeaveConfig):
        return value
    return {"at": value}


class LeaveConfig(_Model):
    """How and when a consumer leaves (reference §6.1): ``at`` (same forms as ``join``), ``how``
    ``close`` (a clean close: unregistered at once; the default) or ``crash`` (a lost
    connection: the session stays registered for the grace period). Serialized as the bare
    time when ``how`` is ``close`` (the short form, ``leave: 120``)."""

    at: LeaveTime
    how: Annotated[LeaveHowName, BeforeValidator(_lower)] = "close"

    @model_serializer(mode="wrap")
    def _short_form(self, handler: SerializerFunctionWrapHandler) -> Any:
        out: dict[str, Any] = handler(self)
        return out["at"] if self.how == "close" else out


class ConsumerConfig(_Model):
    """One consumer of a subscription (after ``count`` expansion every consumer has a name).

    ``join`` / ``leave.at`` / each of ``reconnects``: ``float`` = seconds after the first event's
    publish_time (log time, before ``speed`` compression), or an aware UTC ``datetime``; see
    :meth:`join_ms`. ``leave`` is a time (a clean close) or ``{at, how: close | crash}``
    (:class:`LeaveConfig`). A reconnect re-registers the existing session (reference §6.1, §7.3): it
    triggers an auto-scale evaluation but no rebalance and does not change the consumer count;
    it must lie strictly after ``join`` and before ``leave``. ``reconnects`` is left out of the
    serialized config when empty (so configurations without it keep their fingerprint).
    """

    name: NonEmptyStr | None = None
    count: PositiveInt | None = Field(default=None, exclude=True)
    name_prefix: str | None = Field(default=None, exclude=True)
    join: JoinTime = 0.0
    leave: Annotated[LeaveConfig | None, BeforeValidator(_leave_form)] = None
    reconnects: list[ReconnectTime] = []
    capacity_msg_per_s: PositiveFloat | None = None
    ack_delay_ms: NonNegativeInt = 0

    @model_validator(mode="after")
    def _check(self) -> ConsumerConfig:
        if self.name is None and self.count is None:
            raise ValueError("a consumer needs a name, or a count (with an optional name_prefix)")
        if self.name is not None and self.count is not None:
            raise ValueError("name and count are mutually exclusive (count declares "
                             "<name_prefix>0 .. <name_prefix>N-1)")
        if self.name_prefix is not None and self.count is None:
            raise ValueError("name_prefix is only valid together with count")
        leave = None if self.leave is None else self.leave.at
        if leave is not None and type(self.join) is type(leave):
            if leave <= self.join:  # type: ignore[operator]
                raise ValueError(f"leave ({_show(leave)}) must be after join "
                                 f"({_show(self.join)})")
        for r in self.reconnects:
            if type(r) is type(self.join) and r <= self.join:  # type: ignore[operator]
                raise ValueError(f"reconnect ({_show(r)}) must be after join "
                                 f"({_show(self.join)})")
            if (leave is not None and type(r) is type(leave)
                    and r >= leave):  # type: ignore[operator]
                raise ValueError(f"reconnect ({_show(r)}) must be before leave "
                                 f"({_show(leave)})")
        return self

    @model_serializer(mode="wrap")
    def _drop_no_reconnects(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        out: dict[str, Any] = handler(self)
        if not self.reconnects:
            out.pop("reconnects", None)
        return out

    def join_ms(self, first_event_ms: int) -> int:
        """Join time as epoch ms, given the first event's publish_time (epoch ms, log time)."""
        return _time_point_ms(self.join, first_event_ms)

    def leave_ms(self, first_event_ms: int) -> int | None:
        """Leave time as epoch ms (``None`` = never leaves)."""
        return None if self.leave is None else _time_point_ms(self.leave.at, first_event_ms)

    @property
    def leave_how(self) -> LeaveHowName:
        """How the consumer leaves: ``close`` (also when it never leaves) or ``crash``."""
        return "close" if self.leave is None else self.leave.how

    def reconnects_ms(self, first_event_ms: int) -> list[int]:
        """Reconnect times as epoch ms, ascending (duplicates kept once)."""
        return sorted({_time_point_ms(r, first_event_ms) for r in self.reconnects})


def _once_each(values: list[str], allowed: Sequence[str]) -> list[str]:
    """``values`` in ``allowed``'s order; ``ValueError`` naming any value listed twice."""
    dups = sorted({v for v in values if values.count(v) > 1})
    if dups:
        raise ValueError(f"listed more than once: {', '.join(dups)}")
    return [v for v in allowed if v in values]


def _lower(value: Any) -> Any:
    return value.lower() if isinstance(value, str) else value


class SubscriptionConfig(_Model):
    """One subscription: name, type and its consumers (``count`` entries already expanded).

    ``grouped`` (CHECKPOINT only; default ``true``): ``false`` declares checkpoint consumers
    created without a consumer group (reference §7.3): they do not register with the
    coordinator, do not count for the auto-scaler's consumer count, trigger no evaluation, and
    each reads every segment on its own. ``grouped`` is left out of the serialized config when
    ``true``.
    """

    name: NonEmptyStr
    type: Annotated[SubscriptionType, BeforeValidator(_lower)] = "stream"
    grouped: bool = True
    consumers: list[ConsumerConfig] = []

    @model_serializer(mode="wrap")
    def _drop_grouped(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        out: dict[str, Any] = handler(self)
        if self.grouped:
            out.pop("grouped", None)
        return out

    @field_validator("consumers")
    @classmethod
    def _expand(cls, consumers: list[ConsumerConfig]) -> list[ConsumerConfig]:
        out: list[ConsumerConfig] = []
        for c in consumers:
            if c.count is None:
                out.append(c)
                continue
            prefix = c.name_prefix if c.name_prefix is not None else "consumer-"
            out.extend(c.model_copy(update={"name": f"{prefix}{i}", "count": None,
                                            "name_prefix": None})
                       for i in range(c.count))
        return out

    @model_validator(mode="after")
    def _unique_names(self) -> SubscriptionConfig:
        names = [c.name for c in self.consumers]
        dups = sorted({n for n in names if names.count(n) > 1 and n is not None})
        if dups:
            raise ValueError(f"duplicate consumer name(s): {', '.join(dups)}")
        if not self.grouped and self.type != "checkpoint":
            raise ValueError(f"grouped: false is only valid for a checkpoint subscription, not "
                             f"a {self.type} one")
        return self

    def consumer_names(self) -> list[str]:
        return [c.name for c in self.consumers if c.name is not None]


class InputDefaults(_Model):
    """``input.defaults``: constants for records without the column."""

    topic: NonEmptyStr | None
    producer_name: NonEmptyStr


SECRET_OPTION = re.compile(r"password|secret|jaas|token|keystore\.key|key\.password", re.I)
"""Kafka options that carry secrets: refused in the config (it is written to ``runs``)."""


class KafkaSection(_Model):
    """``input.kafka``: Kafka topics read with Spark's Kafka source (``input.format: kafka`` or
    ``--input kafka://HOST:PORT/TOPIC_OR_PATTERN``; docs/capture.md)."""

    bootstrap_servers: NonEmptyStr | None = None
    subscribe: NonEmptyStr | None = None
    subscribe_pattern: NonEmptyStr | None = None
    producer_header: NonEmptyStr = "producer"
    starting_offsets: Literal["earliest", "latest"] = "earliest"
    max_offsets_per_trigger: PositiveInt | None = None
    options: dict[NonEmptyStr, str] = Field(default_factory=dict)

    @field_validator("options")
    @classmethod
    def _no_secrets(cls, options: dict[str, str]) -> dict[str, str]:
        for key in options:
            if SECRET_OPTION.search(key):
                raise ValueError(f"{key!r} holds a secret, and the config is written to the "
                                 "runs table: give it to Spark in a JAAS file or "
                                 "spark-submit --conf instead")
            if key in ("subscribe", "subscribePattern", "assign", "kafka.bootstrap.servers",
                       "includeHeaders", "startingOffsets", "maxOffsetsPerTrigger"):
                raise ValueError(f"{key!r} is set by input.kafka's own keys")
        return options


class InputSection(_Model):
    """``input``: how message logs are read and mapped to the contract."""

    format: InputFormat
    preset: NonEmptyStr
    columns: dict[ContractColumn, NonEmptyStr]
    defaults: InputDefaults
    timestamp_format: NonEmptyStr | None
    time_zone: NonEmptyStr
    pseudonymize: list[PseudonymizedColumn]
    pseudonymize_secret_env: NonEmptyStr
    kafka: KafkaSection = Field(default_factory=KafkaSection)

    @field_validator("pseudonymize")
    @classmethod
    def _canonical_pseudonymize(cls, columns: list[str]) -> list[str]:
        return _once_each(columns, get_args(PseudonymizedColumn))

    @field_validator("pseudonymize_secret_env")
    @classmethod
    def _check_env_name(cls, value: str) -> str:
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", value):
            raise ValueError(f"must be an environment variable name, got {value!r}")
        return value

    @field_validator("timestamp_format")
    @classmethod
    def _check_format(cls, value: str | None) -> str | None:
        if value is None:
            return value
        try:
            return check_timestamp_format(value)
        except TimestampFormatError as exc:
            raise ValueError(str(exc)) from None

    @field_validator("time_zone")
    @classmethod
    def _check_zone(cls, value: str) -> str:
        try:
            _zone(value)
        except (ValueError, KeyError):  # ZoneInfoNotFoundError is a KeyError
            raise ValueError(f"unknown IANA time zone {value!r}") from None
        return value

    def tz(self) -> tzinfo:
        return _zone(self.time_zone)


class OutputSection(_Model):
    """``output``: Delta engine, tables to write (canonical order), validation and what the
    tables keep of personal data (``keys``, ``quarantine_raw``; see ``docs/privacy.md``)."""

    engine: OutputEngine
    tables: list[TableName]
    validate_: bool = Field(alias="validate")
    keys: KeysMode
    quarantine_raw: bool

    model_config = ConfigDict(populate_by_name=False, serialize_by_alias=True)

    @field_validator("tables")
    @classmethod
    def _canonical_tables(cls, tables: list[str]) -> list[str]:
        return _once_each(tables, OUTPUT_TABLES)

    @property
    def validate_tables(self) -> bool:
        """``output.validate``: run the data-quality checks after writing."""
        return self.validate_


class ConsoleSection(_Model):
    """``console``: what the commands print. Not part of a run's identity
    (:func:`run_identity`): a restart may change it."""

    spark_log: bool


class ReplayConfig(_Model):
    """A validated replay configuration (every section typed; see ``conf/default.yaml``)."""

    replay: ReplaySection
    topic: TopicSection
    policy: PolicySection
    batching: BatchingSection
    subscriptions: list[SubscriptionConfig]
    input: InputSection
    output: OutputSection
    console: ConsoleSection

    @field_validator("subscriptions")
    @classmethod
    def _unique_subscriptions(cls, subs: list[SubscriptionConfig]) -> list[SubscriptionConfig]:
        names = [s.name for s in subs]
        dups = sorted({n for n in names if names.count(n) > 1})
        if dups:
            raise ValueError(f"duplicate subscription name(s): {', '.join(dups)}")
        return subs

    def broker_policy(self) -> AutoScaleConfig:
        """Broker-level policy (no overrides)."""
        return self.policy.broker()

    def policy_for(self, topic: str) -> AutoScaleConfig:
        """Resolved policy of ``topic``: broker → namespace → topic overrides (reference §4.2).

        ``topic`` may be the full name or the local name; see :meth:`PolicySection.topic_override`.
        """
        return self.policy.resolve(topic, self.topic.namespace)

    def policies_for(self, topics: Iterable[str]) -> dict[str, AutoScaleConfig]:
        """:meth:`policy_for` of each of ``topics`` (topic → policy), resolved once per
        distinct layering — its topic override and whether the namespace overrides apply —
        not once per topic: thousands of topics share a few policies (issue #30)."""
        resolved: dict[tuple[int, bool], AutoScaleConfig] = {}
        out = {}
        ns = self.topic.namespace
        for topic in topics:
            layer = (id(self.policy.topic_override(topic)),
                     topic_namespace(topic, ns) == ns)
            if layer not in resolved:
                resolved[layer] = self.policy_for(topic)
            out[topic] = resolved[layer]
        return out

    def batching_config(self) -> BatchingConfig:
        return self.batching.to_core()

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict (consumers expanded, times as ISO-8601 UTC, overrides without nulls).

        ``parse_config(cfg.to_dict()) == cfg``.
        """
        return self.model_dump(mode="json")

    def to_json(self) -> str:
        """Canonical JSON: sorted keys, no whitespace; stored in the ``runs`` table."""
        return json.dumps(self.to_dict(), sort_keys=True, separators=(",", ":"),
                          ensure_ascii=False, allow_nan=False)

    def fingerprint(self) -> str:
        """sha256 (hex) of :meth:`to_json`: equal iff the configurations are equal."""
        return hashlib.sha256(self.to_json().encode("utf-8")).hexdigest()


NOT_IDENTITY_SECTIONS: tuple[str, ...] = ("console",)
"""Config sections that do not change a run's results (a restart may change them)."""


def run_identity(config: Mapping[str, Any]) -> dict[str, Any]:
    """A config dict (:meth:`ReplayConfig.to_dict`, or the JSON stored in ``runs``) without
    :data:`NOT_IDENTITY_SECTIONS`: what must be equal for two replays to be the same run."""
    return {k: v for k, v in config.items() if k not in NOT_IDENTITY_SECTIONS}


# ---- error rendering ---------------------------------------------------------------------------


def _render_path(loc: Sequence[Any]) -> str:
    """``("policy", "topic_overrides", "a.b", "x")`` → ``policy.topic_overrides[a.b].x``."""
    out = ""
    for part in loc:
        s = str(part)
        if any(ch in s for ch in ".[]=") or s == "":
            out += f"[{s}]"
        else:
            out += f".{s}" if out else s
    return out or "(top level)"


def _unwrap(annotation: Any) -> Any:
    """Strip Annotated / Optional wrappers down to the model or container type."""
    while True:
        origin = get_origin(annotation)
        if origin is Annotated:
            annotation = get_args(annotation)[0]
        elif origin in (Union, types.UnionType):
            args = [a for a in get_args(annotation) if a is not type(None)]
            models = [a for a in args if isinstance(a, type) and issubclass(a, BaseModel)]
            annotation = models[0] if models else args[0]
        else:
            return annotation


def _known_keys(loc: Sequence[Any]) -> list[str]:
    """Field names (aliases) of the model found at ``loc`` under :class:`ReplayConfig`."""
    hints_cache: dict[type, dict[str, Any]] = {}
    current: Any = ReplayConfig
    for part in loc:
        current = _unwrap(current)
        origin = get_origin(current)
        if isinstance(current, type) and issubclass(current, BaseModel):
            if current not in hints_cache:
                hints_cache[current] = typing.get_type_hints(current, include_extras=True)
            fields = {(f.alias or n): n for n, f in current.model_fields.items()}
            if part not in fields:
                return []
            current = hints_cache[current][fields[part]]
        elif origin is list and isinstance(part, int):
            current = get_args(current)[0]
        elif origin is dict:
            current = get_args(current)[1]
        else:
            return []
    current = _unwrap(current)
    if isinstance(current, type) and issubclass(current, BaseModel):
        return [(f.alias or n) for n, f in current.model_fields.items()]
    return []


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _render_error(err: Mapping[str, Any]) -> str:
    loc = list(err.get("loc", ()))
    kind = err.get("type", "")
    msg = str(err.get("msg", ""))
    is_key = bool(loc) and loc[-1] == "[key]"
    if is_key:
        loc = loc[:-1]
    path = _render_path(loc)
    if kind == "extra_forbidden":
        hint = difflib.get_close_matches(str(loc[-1]), _known_keys(loc[:-1]), n=1)
        return f"{path}: unknown key" + (f" (did you mean {hint[0]!r}?)" if hint else "")
    if kind == "missing":
        return f"{path}: required key is missing"
    if kind == "value_error":
        msg = msg.removeprefix("Value error, ")
        return f"{path}: {msg}"
    msg = msg.replace("Input should be", "must be", 1)
    return f"{path}: {'key ' if is_key else ''}{msg}, got {_short(err.get('input'))}"


# ---- entry points ------------------------------------------------------------------------------


def _context_zone(data: Mapping[str, Any]) -> tzinfo:
    section = data.get("input")
    name = section.get("time_zone") if isinstance(section, Mapping) else None
    try:
        return _zone(name) if isinstance(name, str) and name else UTC
    except (ValueError, KeyError):
        return UTC


def _without(data: Any, locs: Sequence[tuple[Any, ...]]) -> Any:
    """A copy of ``data`` without the mapping entries at ``locs`` (pydantic error locations)."""
    out = copy.deepcopy(data)
    for loc in locs:
        path = loc[:-1] if loc and loc[-1] == "[key]" else loc
        if not path:
            continue
        node = out
        for part in path[:-1]:
            node = node.get(part) if isinstance(node, dict) else None
        if isinstance(node, dict):
            node.pop(path[-1], None)
    return out


def _validate(data: Mapping[str, Any]) -> tuple[ReplayConfig | None, list[str]]:
    context = {"time_zone": _context_zone(data)}
    problems: list[str] = []
    config: ReplayConfig | None = None
    errors: list[Any] = []
    try:
        config = ReplayConfig.model_validate(data, context=context)
    except ValidationError as exc:
        errors = exc.errors(include_url=False)
        problems.extend(_render_error(e) for e in errors)
    # Semantic rules of the core, on each section; when the section has type errors, on what is
    # left after dropping the offending keys (so that a typo does not hide a policy problem).
    for key, model in (("policy", PolicySection), ("batching", BatchingSection)):
        section: Any
        if config is not None:
            section = getattr(config, key)
        else:
            bad = [tuple(e["loc"][1:]) for e in errors if tuple(e["loc"][:1]) == (key,)]
            try:
                section = model.model_validate(_without(data.get(key), bad), context=context)
            except ValidationError:
                continue
        problems.extend(section.problems())
    return (config if not problems else None), problems


def parse_config(data: Mapping[str, Any]) -> ReplayConfig:
    """Validate a complete configuration mapping (no defaults merged; e.g. a stored
    :meth:`ReplayConfig.to_dict`). Raises :class:`ConfigError` listing every problem."""
    if not isinstance(data, Mapping):
        raise ConfigError([f"(top level): must be a mapping, got {type(data).__name__}"])
    config, problems = _validate(data)
    if config is None:
        raise ConfigError(problems)
    return config


def load_config(conf_file: str | os.PathLike[str] | None,
                sets: Sequence[str] = ()) -> ReplayConfig:
    """Defaults ← ``conf_file`` (deep merge) ← each ``--set`` in order, then validation.

    ``conf_file`` ``None`` = defaults only. ``sets`` are ``dotted.key=value`` strings (see the
    module doc). Raises :class:`ConfigError` listing every problem, one per line.
    """
    if isinstance(sets, str):
        sets = [sets]
    data, problems = _read_defaults()
    if conf_file is not None:
        user, user_problems = _read_yaml_file(Path(conf_file), "config file")
        problems.extend(user_problems)
        data = _deep_merge(data, user)
    for assignment in sets:
        problems.extend(apply_set(data, assignment))
    config, validation_problems = _validate(data)
    problems.extend(validation_problems)
    if problems or config is None:
        raise ConfigError(problems)
    return config


def _policy_fields_match() -> bool:
    """PolicySection / PolicyOverrides carry exactly AutoScaleConfig's fields."""
    core = set(AutoScaleConfig.field_names())
    section = set(PolicySection.model_fields) - {"namespace_overrides", "topic_overrides"}
    return section == core == set(PolicyOverrides.model_fields)


assert _policy_fields_match(), (
    "pipelines.contract.config policy models out of sync with AutoScaleConfig")
