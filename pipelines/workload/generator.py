"""Deterministic synthetic workload generator: message logs in the input contract (docs/design.md).

A :class:`WorkloadSpec` (YAML, see ``conf/workloads/sample.yaml``) describes topics, their
producers, their message rate over time, their key distribution and their payload sizes;
:func:`generate` writes the message log as JSON lines, CSV or Parquet files, one file per
``file_span_s`` seconds of event time. The same spec always gives byte-identical files.

Spec schema (every level rejects unknown keys, naming them)::

    seed: 0                        # int >= 0
    start_time: 2025-01-15T09:00:00Z   # ISO-8601; naive = UTC; at most ms precision
    duration_s: 3600               # int > 0: event-time length, in 1-second slots
    format: json                   # json | csv | parquet
    gzip: true                     # json/csv only
    gzip_level: 6                  # 1..9
    file_span_s: 300               # one file per this many seconds of event time
    topics:
      - name: orders
        producers: 4               # count (names <topic>-producer-<i>, i from 0) or list of names
        producer_assignment: round_robin   # round_robin (default) | uniform
        rate:                      # msg/s as a function of t = seconds since start_time
          kind: constant           # {kind: constant, msg_rate}
                                   # {kind: steps, steps: [{at_s, msg_rate}, ...]}
                                   # {kind: diurnal, mean, amplitude (0..1), period_s, phase_s}
          msg_rate: 20
          bursts: [{start_s: 600, duration_s: 120, multiplier: 5}]   # optional, any kind
        keys:                      # optional (default: uniform over 1000 keys)
          distribution: zipf       # uniform | zipf | hot_set | round_robin
          n_keys: 5000
          exponent: 1.1            # zipf only (default 1.1)
          hot_fraction: 0.1        # hot_set only (default 0.1): share of the keys that are hot
          hot_share: 0.9           # hot_set only (default 0.9): share of messages to hot keys
          keyless_share: 0.1       # share of messages with a null key
          prefix: "key-"           # key names are <prefix><index>, index 0..n_keys-1
        payload: {kind: lognormal, mean_bytes: 600, sigma: 0.5}
                                   # {kind: fixed, size} | {kind: uniform, min, max}
                                   # {kind: empirical, file} (relative to the spec's folder)

Model (all of it in event time, deterministic):

* **Rates.** ``steps``: the rate of the last step with ``at_s <= t`` (0 before the first step).
  ``diurnal``: ``mean * (1 + amplitude * cos(2π (t - phase_s) / period_s))`` (peak at
  ``t = phase_s``). Each burst multiplies the rate by ``multiplier`` for
  ``start_s <= t < start_s + duration_s`` (overlapping bursts multiply; ``multiplier < 1`` makes
  a lull). The rate of 1-second slot ``s`` is taken at its midpoint ``t = s + 0.5``.
* **Arrivals.** Per topic and slot, the message count is Poisson(rate); each message gets a
  uniformly random millisecond inside its slot. Timestamps therefore have ms precision in every
  format (Parquet stores them as ``timestamp[us, UTC]``, which Spark reads; never ns).
* **Producers.** ``round_robin`` (default): the topic's ``j``-th message (in publish order) goes
  to producer ``j mod P`` (like OMB's producers, which each send ``rate / P``). ``uniform``: each
  message picks a producer uniformly at random. ``sequence_id`` is the 0-based order of the
  message among its (topic, producer)'s messages, by publish time.
* **Keys.** ``keyless_share`` of the messages (Bernoulli per message) get a null key; the others
  draw key index ``i`` (name ``<prefix><i>``): ``uniform`` over ``n_keys``; ``zipf`` with
  ``P(i) ∝ 1 / (i + 1) ** exponent`` (``<prefix>0`` is the hottest key); ``hot_set``: the
  first ``max(1, round(hot_fraction * n_keys))`` keys are hot and get ``hot_share`` of the
  messages (uniformly among them), the rest share the remainder uniformly; ``round_robin``: the
  topic's keyed messages cycle ``0, 1, …, n_keys - 1, 0, …`` in publish order.
* **Payload sizes.** ``fixed``; ``uniform`` integers in ``[min, max]``; ``lognormal`` with mean
  ``mean_bytes`` (``mu = ln(mean_bytes) - sigma² / 2``), rounded to an integer; ``empirical``:
  resampled uniformly from a one-column file of sizes (text/CSV with an optional header line,
  ``.gz`` allowed, or Parquet: first column).
* **Randomness.** Each (topic, 10-second block) draws from its own ``numpy`` ``PCG64`` stream,
  seeded by ``SeedSequence(seed, spawn_key=(crc32(topic name), block))``. So the messages do not
  depend on ``file_span_s``, on the output format, or on the other topics of the spec (adding a
  topic leaves the others' messages unchanged), and memory stays bounded (blocks are merged and
  written in chunks).

Output: files ``part-00000.<ext>`` … in ``output_path``, file ``i`` holding the messages with
``publish_time`` in ``[start_time + i * file_span_s, start_time + (i + 1) * file_span_s)``; spans
without messages still get a (header-only / empty) file so that file ``i`` always means window
``i``. Rows are sorted by publish time (ties: topic order in the spec, then generation order)
within and across files. Columns, in this order: ``topic``, ``key`` (null when keyless),
``publish_time`` (JSON/CSV: ISO-8601 UTC string with milliseconds, ``2025-01-15T09:00:00.123Z``;
Parquet: ``timestamp[us, UTC]``), ``payload_size``, ``producer_name``, ``sequence_id``. CSV has a
header line and writes a null key as an empty field. Gzip files have ``mtime = 0`` and no file
name in their header. Existing ``part-*`` files in ``output_path`` are deleted first (other files
are left alone). Byte-identical means: same spec, same zlib / pyarrow versions (the message
content itself depends only on the spec and NumPy's PCG64).

Scale: generation, merge and encoding are vectorized per ~``CHUNK_ROWS`` rows; gzip/Parquet writing
runs on one I/O thread. Measured on 2 cores: 10 M messages in ~3-5 s (Parquet) and ~15-35 s
(gzip JSON lines, depending on load), with peak RSS ~450 MB whatever the message count.

Command line: ``topic-replay generate --spec SPEC.yaml --output DIR`` (or ``python -m
pipelines.workload.generator SPEC.yaml OUTPUT_DIR``). An OpenMessaging Benchmark workload YAML is
detected by its keys (:func:`is_omb_workload`) or forced with ``--omb``; see
:func:`load_omb_workload`.
"""

from __future__ import annotations

import argparse
import gzip
import itertools
import json
import math
import re
import sys
import zlib
from collections import deque
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Annotated, Any, Literal

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationInfo,
    field_validator,
    model_validator,
)

__all__ = [
    "Burst",
    "ConstantRate",
    "DiurnalRate",
    "EmpiricalPayload",
    "FixedPayload",
    "GenerateResult",
    "KeySpec",
    "LognormalPayload",
    "OmbInfo",
    "RateStep",
    "StepsRate",
    "TopicSpec",
    "UniformPayload",
    "WorkloadSpec",
    "generate",
    "is_omb_workload",
    "load_any_spec",
    "load_omb_workload",
    "load_spec",
    "omb_workload_to_spec",
    "result_summary",
]

BLOCK_S = 10
"""Seconds of event time per random stream block (fixed: part of the output's definition)."""
CHUNK_ROWS = 200_000
"""Rows merged and written at a time (bounds memory; does not change the output)."""
OUTPUT_COLUMNS = ("topic", "key", "publish_time", "payload_size", "producer_name", "sequence_id")
PARQUET_SCHEMA = pa.schema(
    [
        pa.field("topic", pa.string(), nullable=False),
        pa.field("key", pa.string(), nullable=True),
        pa.field("publish_time", pa.timestamp("us", tz="UTC"), nullable=False),
        pa.field("payload_size", pa.int64(), nullable=False),
        pa.field("producer_name", pa.string(), nullable=False),
        pa.field("sequence_id", pa.int64(), nullable=False),
    ]
)
_PART_RE = re.compile(r"^part-\d{5,}\.(json|csv|parquet)(\.gz)?$")

FloatArray = npt.NDArray[np.floating[Any]]
IntArray = npt.NDArray[np.int64]


# --------------------------------------------------------------------------------------- spec


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Burst(_Strict):
    """Multiply the rate by ``multiplier`` for ``start_s <= t < start_s + duration_s``."""

    start_s: float = Field(ge=0)
    duration_s: float = Field(gt=0)
    multiplier: float = Field(ge=0)


class _RateBase(_Strict):
    bursts: list[Burst] = Field(default_factory=list)

    def base_rate(self, t: FloatArray) -> FloatArray:
        raise NotImplementedError

    def rate_at(self, t: FloatArray) -> FloatArray:
        """Rate in msg/s at times ``t`` (seconds since ``start_time``), bursts included."""
        rate = np.array(self.base_rate(t), dtype=np.float64)
        for b in self.bursts:
            rate[(t >= b.start_s) & (t < b.start_s + b.duration_s)] *= b.multiplier
        return rate


class ConstantRate(_RateBase):
    kind: Literal["constant"]
    msg_rate: float = Field(ge=0)

    def base_rate(self, t: FloatArray) -> FloatArray:
        return np.full(t.shape, self.msg_rate, dtype=np.float64)


class RateStep(_Strict):
    at_s: float = Field(ge=0)
    msg_rate: float = Field(ge=0)


class StepsRate(_RateBase):
    """Piecewise-constant rate: the last step with ``at_s <= t`` (0 before the first step)."""

    kind: Literal["steps"]
    steps: list[RateStep] = Field(min_length=1)

    @field_validator("steps")
    @classmethod
    def _increasing(cls, steps: list[RateStep]) -> list[RateStep]:
        at = [s.at_s for s in steps]
        if any(b <= a for a, b in itertools.pairwise(at)):
            raise ValueError(f"steps must have strictly increasing at_s, got {at}")
        return steps

    def base_rate(self, t: FloatArray) -> FloatArray:
        at = np.array([s.at_s for s in self.steps], dtype=np.float64)
        rates = np.array([s.msg_rate for s in self.steps], dtype=np.float64)
        idx = np.searchsorted(at, t, side="right") - 1
        return np.where(idx >= 0, rates[np.maximum(idx, 0)], 0.0)


class DiurnalRate(_RateBase):
    """``mean * (1 + amplitude * cos(2π (t - phase_s) / period_s))``: peak at ``t = phase_s``."""

    kind: Literal["diurnal"]
    mean: float = Field(ge=0)
    amplitude: float = Field(ge=0, le=1)
    period_s: float = Field(default=86400.0, gt=0)
    phase_s: float = 0.0

    def base_rate(self, t: FloatArray) -> FloatArray:
        angle = 2.0 * np.pi * (t - self.phase_s) / self.period_s
        rate: FloatArray = self.mean * (1.0 + self.amplitude * np.cos(angle))
        return rate


RateSpec = Annotated[ConstantRate | StepsRate | DiurnalRate, Field(discriminator="kind")]


class KeySpec(_Strict):
    """Key distribution of one topic (see the module doc for the exact model)."""

    distribution: Literal["uniform", "zipf", "hot_set", "round_robin"] = "uniform"
    n_keys: int = Field(default=1000, ge=1)
    exponent: float | None = Field(default=None, ge=0)
    """zipf only; default 1.1."""
    hot_fraction: float | None = Field(default=None, gt=0, le=1)
    """hot_set only; default 0.1."""
    hot_share: float | None = Field(default=None, ge=0, le=1)
    """hot_set only; default 0.9."""
    keyless_share: float = Field(default=0.0, ge=0, le=1)
    prefix: str = "key-"

    @model_validator(mode="after")
    def _params_match_distribution(self) -> KeySpec:
        only = {"exponent": "zipf", "hot_fraction": "hot_set", "hot_share": "hot_set"}
        for name, dist in only.items():
            if getattr(self, name) is not None and self.distribution != dist:
                raise ValueError(f"{name} applies only to distribution {dist!r}")
        return self

    def hot_count(self) -> int:
        """Number of hot keys for ``hot_set``."""
        fraction = 0.1 if self.hot_fraction is None else self.hot_fraction
        return max(1, min(self.n_keys, round(fraction * self.n_keys)))

    def hot_share_or_default(self) -> float:
        return 0.9 if self.hot_share is None else self.hot_share

    def probabilities(self) -> FloatArray:
        """Theoretical probability of each key index among keyed messages."""
        n = self.n_keys
        if self.distribution == "zipf":
            exponent = 1.1 if self.exponent is None else self.exponent
            w = 1.0 / np.arange(1, n + 1, dtype=np.float64) ** exponent
            return np.asarray(w / w.sum(), dtype=np.float64)
        if self.distribution == "hot_set":
            h = self.hot_count()
            p = np.empty(n, dtype=np.float64)
            if h == n:
                p[:] = 1.0 / n
            else:
                share = self.hot_share_or_default()
                p[:h] = share / h
                p[h:] = (1.0 - share) / (n - h)
            return p
        return np.full(n, 1.0 / n, dtype=np.float64)


class FixedPayload(_Strict):
    kind: Literal["fixed"]
    size: int = Field(ge=0)


class UniformPayload(_Strict):
    """Uniform integer sizes in ``[min, max]`` (inclusive)."""

    kind: Literal["uniform"]
    min: int = Field(ge=0)
    max: int = Field(ge=0)

    @model_validator(mode="after")
    def _ordered(self) -> UniformPayload:
        if self.min > self.max:
            raise ValueError(f"min ({self.min}) must be <= max ({self.max})")
        return self


class LognormalPayload(_Strict):
    """Lognormal sizes with mean ``mean_bytes`` and log-space std-dev ``sigma``, rounded."""

    kind: Literal["lognormal"]
    mean_bytes: float = Field(gt=0)
    sigma: float = Field(ge=0)


class EmpiricalPayload(_Strict):
    """Sizes resampled (uniformly, with replacement) from a one-column file of sizes."""

    kind: Literal["empirical"]
    file: Path

    @field_validator("file")
    @classmethod
    def _resolve(cls, v: Path, info: ValidationInfo) -> Path:
        base = (info.context or {}).get("base_dir")
        if not v.is_absolute() and base is not None:
            v = Path(base) / v
        if not v.is_file():
            raise ValueError(f"empirical payload file not found: {v}")
        return v


PayloadSpec = Annotated[
    FixedPayload | UniformPayload | LognormalPayload | EmpiricalPayload,
    Field(discriminator="kind"),
]


class TopicSpec(_Strict):
    name: str = Field(min_length=1)
    producers: Annotated[int, Field(ge=1)] | Annotated[list[str], Field(min_length=1)] = 1
    producer_assignment: Literal["round_robin", "uniform"] = "round_robin"
    rate: RateSpec
    keys: KeySpec = Field(default_factory=KeySpec)
    payload: PayloadSpec

    @field_validator("producers")
    @classmethod
    def _unique_names(cls, v: int | list[str]) -> int | list[str]:
        if isinstance(v, list):
            if len(set(v)) != len(v) or any(not p for p in v):
                raise ValueError("producer names must be unique and non-empty")
        return v

    @property
    def producer_names(self) -> list[str]:
        if isinstance(self.producers, int):
            return [f"{self.name}-producer-{i}" for i in range(self.producers)]
        return list(self.producers)


class OmbInfo(_Strict):
    """What an OpenMessaging Benchmark workload says beyond the message log (consumer side)."""

    name: str
    partitions_per_topic: int
    subscriptions_per_topic: int
    consumer_per_subscription: int
    consumers: dict[str, dict[str, list[str]]]
    """topic → subscription name → consumer names."""


class WorkloadSpec(_Strict):
    seed: int = Field(default=0, ge=0)
    start_time: datetime
    duration_s: int = Field(gt=0)
    format: Literal["json", "csv", "parquet"] = "json"
    gzip: bool = False
    gzip_level: int = Field(default=6, ge=1, le=9)
    file_span_s: int = Field(default=300, gt=0)
    topics: list[TopicSpec] = Field(min_length=1)
    omb: OmbInfo | None = None
    """Set by :func:`load_omb_workload`: OMB subscriptions/consumers for the replay config."""

    @field_validator("start_time")
    @classmethod
    def _utc_ms(cls, v: datetime) -> datetime:
        v = v.replace(tzinfo=UTC) if v.tzinfo is None else v.astimezone(UTC)
        if v.microsecond % 1000:
            raise ValueError("start_time must have at most millisecond precision")
        return v

    @model_validator(mode="after")
    def _consistent(self) -> WorkloadSpec:
        if self.gzip and self.format == "parquet":
            raise ValueError("gzip applies only to format json or csv (parquet is compressed)")
        names = [t.name for t in self.topics]
        dup = sorted({n for n in names if names.count(n) > 1})
        if dup:
            raise ValueError(f"duplicate topic names: {dup}")
        return self

    @property
    def start_ms(self) -> int:
        """``start_time`` in ms since the Unix epoch."""
        return _epoch_ms(self.start_time)

    @property
    def file_count(self) -> int:
        return math.ceil(self.duration_s / self.file_span_s)

    @property
    def file_suffix(self) -> str:
        return f".{self.format}" + (".gz" if self.gzip else "")

    def expected_messages(self, topic: str | None = None) -> float:
        """Expected message count (sum of the slot rates), for one topic or all."""
        t = np.arange(self.duration_s, dtype=np.float64) + 0.5
        return float(
            sum(tp.rate.rate_at(t).sum() for tp in self.topics if topic in (None, tp.name))
        )


def _epoch_ms(dt: datetime) -> int:
    delta = dt - datetime(1970, 1, 1, tzinfo=UTC)
    return (delta.days * 86400 + delta.seconds) * 1000 + delta.microseconds // 1000


def load_spec(path: str | Path) -> WorkloadSpec:
    """Load a :class:`WorkloadSpec` from YAML. Relative ``empirical`` payload files are resolved
    against the YAML file's folder. Raises ``pydantic.ValidationError`` (a ``ValueError``) naming
    the offending key on any unknown or invalid entry."""
    path = Path(path)
    with path.open(encoding="utf-8") as f:
        data = yaml.safe_load(f)
    if not isinstance(data, Mapping):
        raise ValueError(f"{path}: a workload spec must be a YAML mapping")
    return WorkloadSpec.model_validate(data, context={"base_dir": path.resolve().parent})


# --------------------------------------------------------------------------------------- OMB


class _OmbWorkload(BaseModel):
    """OpenMessaging Benchmark ``Workload`` (field names as in OMB's YAML)."""

    model_config = ConfigDict(extra="forbid")

    name: str = "omb-workload"
    topics: int = Field(ge=1)
    partitionsPerTopic: int = Field(default=1, ge=1)
    keyDistributor: Literal["NO_KEY", "KEY_ROUND_ROBIN", "RANDOM_NANO"] = "NO_KEY"
    messageSize: int = Field(ge=0)
    payloadFile: str | None = None
    useRandomizedPayloads: bool = False
    randomBytesRatio: float = 0.0
    randomizedPayloadPoolSize: int = 0
    subscriptionsPerTopic: int = Field(default=1, ge=0)
    producersPerTopic: int = Field(default=1, ge=1)
    consumerPerSubscription: int = Field(default=1, ge=0)
    messageRateReceivedForSubscription: int = 100
    producerRate: float = Field(ge=0)
    producerStartRate: int = 10000
    acceptableBacklog: int = 10000
    producerIncrementRate: int = 0
    producerIncrementSeconds: int = 60
    consumerBacklogSizeGB: float = 0
    backlogDrainRatio: float = 1.0
    producerPauseBeforeDrain: int = 0
    producerPauseDuringDrain: int = 0
    testDurationMinutes: int = Field(ge=1)
    warmupDurationMinutes: int = 0


OMB_KEY_COUNT = 10_000
"""OMB's ``KeyDistributor`` draws from 10 000 fixed keys."""


def omb_workload_to_spec(
    workload: Mapping[str, Any],
    *,
    seed: int = 0,
    start_time: str | datetime = "2024-01-01T00:00:00Z",
    format: Literal["json", "csv", "parquet"] = "json",
    gzip: bool = True,
    file_span_s: int = 300,
    topic_prefix: str = "omb-topic",
    producer_rate: float | None = None,
) -> WorkloadSpec:
    """Map an OMB workload (parsed YAML mapping) to a :class:`WorkloadSpec`.

    Mapping:

    * ``topics`` → that many topics ``<topic_prefix>-<i>`` (i from 0).
    * ``producerRate`` (OMB: total publish rate over all producers of all topics) → a constant
      rate of ``producerRate / topics`` msg/s per topic. OMB's ``producerRate: 0`` (max-rate
      discovery) cannot be replayed: pass ``producer_rate`` instead, else ``ValueError``.
    * ``producersPerTopic`` → producers (``round_robin``: each sends ``rate / producers``).
    * ``keyDistributor``: ``NO_KEY`` → all messages keyless; ``KEY_ROUND_ROBIN`` →
      ``round_robin`` over 10 000 keys (OMB cycles per producer; here per topic);
      ``RANDOM_NANO`` → ``uniform`` over 10 000 keys. Keys are named ``key-<i>``.
    * ``messageSize`` → fixed payload size (``payloadFile`` and the randomized-payload options only
      change payload content, which the log does not carry).
    * ``testDurationMinutes`` → ``duration_s`` (warm-up, backlog build/drain and rate-increment
      options are accepted and ignored).
    * ``partitionsPerTopic``, ``subscriptionsPerTopic``, ``consumerPerSubscription`` → the spec's
      ``omb`` field (:class:`OmbInfo`); ``omb.consumers[topic]`` maps subscription ``sub-<jjj>``
      to consumers ``sub-<jjj>-consumer-<c>``, for the replay's consumer config.

    Unknown OMB keys raise a ``ValidationError`` naming them.
    """
    w = _OmbWorkload.model_validate(dict(workload))
    rate = w.producerRate if producer_rate is None else producer_rate
    if rate <= 0:
        raise ValueError(
            "producerRate 0 means OMB max-rate discovery, which cannot be replayed; "
            "pass producer_rate= to choose a rate"
        )
    if w.keyDistributor == "NO_KEY":
        keys = KeySpec(distribution="uniform", n_keys=1, keyless_share=1.0)
    elif w.keyDistributor == "KEY_ROUND_ROBIN":
        keys = KeySpec(distribution="round_robin", n_keys=OMB_KEY_COUNT)
    else:
        keys = KeySpec(distribution="uniform", n_keys=OMB_KEY_COUNT)
    names = [f"{topic_prefix}-{i}" for i in range(w.topics)]
    subs = [f"sub-{j:03d}" for j in range(w.subscriptionsPerTopic)]
    consumers = {
        t: {s: [f"{s}-consumer-{c}" for c in range(w.consumerPerSubscription)] for s in subs}
        for t in names
    }
    return WorkloadSpec.model_validate(
        {
            "seed": seed,
            "start_time": start_time,
            "duration_s": w.testDurationMinutes * 60,
            "format": format,
            "gzip": gzip,
            "file_span_s": file_span_s,
            "topics": [
                {
                    "name": t,
                    "producers": w.producersPerTopic,
                    "rate": {"kind": "constant", "msg_rate": rate / w.topics},
                    "keys": keys,
                    "payload": {"kind": "fixed", "size": w.messageSize},
                }
                for t in names
            ],
            "omb": {
                "name": w.name,
                "partitions_per_topic": w.partitionsPerTopic,
                "subscriptions_per_topic": w.subscriptionsPerTopic,
                "consumer_per_subscription": w.consumerPerSubscription,
                "consumers": consumers,
            },
        }
    )


OMB_MARKER_KEYS = frozenset({"producerRate", "testDurationMinutes", "messageSize"})
"""Keys every OMB workload has and a workload spec never has (how :func:`load_any_spec` tells
the two apart)."""


def is_omb_workload(data: Any) -> bool:
    """True when the parsed YAML ``data`` looks like an OMB workload: a mapping holding any of
    :data:`OMB_MARKER_KEYS` (a workload spec rejects those keys) or an integer ``topics``."""
    if not isinstance(data, Mapping):
        return False
    return bool(OMB_MARKER_KEYS & set(data)) or isinstance(data.get("topics"), int)


def load_any_spec(path: str | Path, omb: bool | None = None, **options: Any) -> WorkloadSpec:
    """Read a workload spec or an OMB workload (``omb=None``: detected with
    :func:`is_omb_workload`; ``options`` go to :func:`omb_workload_to_spec`, OMB only).

    Raises ``ValueError`` (pydantic's ``ValidationError`` is one) naming the problem.
    """
    if omb is None:
        with Path(path).open(encoding="utf-8") as f:
            omb = is_omb_workload(yaml.safe_load(f))
    if omb:
        return load_omb_workload(path, **options)
    if options:
        raise ValueError(f"{', '.join(sorted(options))} apply only to an OMB workload")
    return load_spec(path)


def result_summary(result: GenerateResult, spec: WorkloadSpec | None = None) -> dict[str, Any]:
    """What ``generate`` prints: files, messages, bytes (on disk), messages per topic, the
    event-time span, and for an OMB workload the subscriptions/consumers to put in the replay
    config (``omb``)."""
    summary: dict[str, Any] = {
        "files": len(result.files),
        "messages": result.messages,
        "bytes": result.bytes,
        "messages_per_topic": result.messages_per_topic,
    }
    if spec is not None:
        summary["start_time"] = spec.start_time.isoformat().replace("+00:00", "Z")
        summary["duration_s"] = spec.duration_s
        if spec.omb is not None:
            summary["omb"] = spec.omb.model_dump()
    return summary


def load_omb_workload(path: str | Path, **options: Any) -> WorkloadSpec:
    """Read an OpenMessaging Benchmark workload YAML and map it with
    :func:`omb_workload_to_spec` (``options`` are its keyword arguments)."""
    with Path(path).open(encoding="utf-8") as f:
        data = yaml.safe_load(f)
    if not isinstance(data, Mapping):
        raise ValueError(f"{path}: an OMB workload must be a YAML mapping")
    return omb_workload_to_spec(data, **options)


# ------------------------------------------------------------------------------- generation


@dataclass(frozen=True)
class GenerateResult:
    files: list[Path]
    """Files written, in event-time order."""
    messages: int
    bytes: int
    """Total size of the files on disk."""
    messages_per_topic: dict[str, int] = field(default_factory=dict)


@dataclass
class _Rows:
    """Messages in columnar form; strings as indexes into the run's global tables."""

    ms: IntArray  # ms since start_time
    topic: IntArray
    key: IntArray  # global key index, -1 = null
    size: IntArray
    producer: IntArray  # global producer index
    seq: IntArray

    def __len__(self) -> int:
        return len(self.ms)

    @staticmethod
    def concat(parts: Sequence[_Rows]) -> _Rows:
        return _Rows(
            *(np.concatenate([getattr(p, f) for p in parts]) for f in _Rows.__dataclass_fields__)
        )

    def take(self, idx: IntArray | slice) -> _Rows:
        return _Rows(*(getattr(self, f)[idx] for f in _Rows.__dataclass_fields__))


class _TopicState:
    """Per-topic tables and running counters (round-robin positions, sequence ids)."""

    def __init__(self, index: int, spec: TopicSpec, key_offset: int, producer_offset: int,
                 key_cdfs: dict[tuple[int, float | None], FloatArray] | None = None) -> None:
        self.index = index
        self.spec = spec
        self.stream_id = zlib.crc32(spec.name.encode("utf-8"))
        self.key_offset = key_offset
        self.producer_offset = producer_offset
        self.n_producers = len(spec.producer_names)
        self.key_cdf: FloatArray | None = None
        if spec.keys.distribution == "zipf":
            # one CDF per (n_keys, exponent), shared by the topics that have it: thousands of
            # topics of one key spec cost one array, not one each
            cdfs = {} if key_cdfs is None else key_cdfs
            shape = (spec.keys.n_keys, spec.keys.exponent)
            if shape not in cdfs:
                cdfs[shape] = np.cumsum(spec.keys.probabilities())
            self.key_cdf = cdfs[shape]
        self.sizes = (
            _load_sizes(spec.payload.file) if isinstance(spec.payload, EmpiricalPayload) else None
        )
        self.rr_key = 0
        self.rr_producer = 0
        self.seq = np.zeros(self.n_producers, dtype=np.int64)
        self.count = 0

    def block(self, seed: int, block: int, slot0: int, slot1: int) -> _Rows:
        spec = self.spec
        rng = np.random.Generator(
            np.random.PCG64(np.random.SeedSequence(seed, spawn_key=(self.stream_id, block)))
        )
        slots = np.arange(slot0, slot1, dtype=np.int64)
        counts = rng.poisson(spec.rate.rate_at(slots + 0.5))
        n = int(counts.sum())
        ms = np.repeat(slots * 1000, counts) + rng.integers(0, 1000, n)
        ms.sort()
        keys = self._keys(rng, n)
        sizes = self._sizes(rng, n)
        producer, seq = self._producers(rng, n)
        self.count += n
        return _Rows(
            ms=ms,
            topic=np.full(n, self.index, dtype=np.int64),
            key=np.where(keys >= 0, keys + self.key_offset, -1),
            size=sizes,
            producer=producer + self.producer_offset,
            seq=seq,
        )

    def _keys(self, rng: np.random.Generator, n: int) -> IntArray:
        ks = self.spec.keys
        keyless = rng.random(n) < ks.keyless_share
        if ks.distribution == "round_robin":
            keyed = ~keyless
            pos = self.rr_key + np.cumsum(keyed) - 1
            self.rr_key += int(keyed.sum())
            idx = pos % ks.n_keys
        elif ks.distribution == "zipf":
            assert self.key_cdf is not None
            idx = np.searchsorted(self.key_cdf, rng.random(n), side="right")
            idx = np.minimum(idx, ks.n_keys - 1)
        elif ks.distribution == "hot_set":
            h = ks.hot_count()
            hot = rng.random(n) < ks.hot_share_or_default()
            hot_idx = rng.integers(0, h, n)
            cold_idx = h + rng.integers(0, max(ks.n_keys - h, 1), n) if ks.n_keys > h else hot_idx
            idx = np.where(hot, hot_idx, cold_idx)
        else:
            idx = rng.integers(0, ks.n_keys, n)
        return np.where(keyless, -1, idx).astype(np.int64)

    def _sizes(self, rng: np.random.Generator, n: int) -> IntArray:
        p = self.spec.payload
        if isinstance(p, FixedPayload):
            return np.full(n, p.size, dtype=np.int64)
        if isinstance(p, UniformPayload):
            return rng.integers(p.min, p.max + 1, n, dtype=np.int64)
        if isinstance(p, LognormalPayload):
            mu = math.log(p.mean_bytes) - p.sigma**2 / 2.0
            return np.rint(rng.lognormal(mu, p.sigma, n)).astype(np.int64)
        assert self.sizes is not None
        return self.sizes[rng.integers(0, len(self.sizes), n)]

    def _producers(self, rng: np.random.Generator, n: int) -> tuple[IntArray, IntArray]:
        p_count = self.n_producers
        if self.spec.producer_assignment == "round_robin":
            j = self.rr_producer + np.arange(n, dtype=np.int64)
            self.rr_producer += n
            return j % p_count, j // p_count
        producer = rng.integers(0, p_count, n, dtype=np.int64)
        order = np.argsort(producer, kind="stable")
        sorted_p = producer[order]
        starts = np.searchsorted(sorted_p, np.arange(p_count))
        seq = np.empty(n, dtype=np.int64)
        seq[order] = self.seq[sorted_p] + np.arange(n) - starts[sorted_p]
        self.seq += np.bincount(producer, minlength=p_count)
        return producer, seq


def _load_sizes(path: Path) -> IntArray:
    """One-column file of sizes: Parquet (first column) or text/CSV (optional header, .gz ok)."""
    if path.suffix == ".parquet":
        values = pq.read_table(path).column(0).to_numpy()
    else:
        opener = gzip.open if path.suffix == ".gz" else open
        with opener(path, "rt", encoding="utf-8") as f:
            lines = [ln.strip().split(",")[0] for ln in f if ln.strip()]
        if lines and not _is_number(lines[0]):
            lines = lines[1:]
        values = np.array([float(v) for v in lines], dtype=np.float64)
    sizes = np.rint(np.asarray(values, dtype=np.float64)).astype(np.int64)
    if len(sizes) == 0 or (sizes < 0).any():
        raise ValueError(f"{path}: empirical sizes must be a non-empty column of numbers >= 0")
    return sizes


def _is_number(s: str) -> bool:
    try:
        float(s)
    except ValueError:
        return False
    return True


def _generate_rows(spec: WorkloadSpec, states: list[_TopicState]) -> Iterator[_Rows]:
    """Merged (all topics), time-sorted chunks of about ``CHUNK_ROWS`` rows."""
    pending: list[_Rows] = []
    size = 0
    n_blocks = math.ceil(spec.duration_s / BLOCK_S)
    for b in range(n_blocks):
        slot0, slot1 = b * BLOCK_S, min((b + 1) * BLOCK_S, spec.duration_s)
        for st in states:
            rows = st.block(spec.seed, b, slot0, slot1)
            pending.append(rows)
            size += len(rows)
        if size >= CHUNK_ROWS or b == n_blocks - 1:
            merged = _Rows.concat(pending)
            # Blocks are disjoint in time and appended block by block, topic by topic, so a
            # stable sort breaks publish-time ties by topic order, then generation order.
            yield merged.take(np.argsort(merged.ms, kind="stable"))
            pending, size = [], 0


class _Tables:
    """Global string tables (topic, key, producer names) and their per-format encodings."""

    def __init__(self, spec: WorkloadSpec) -> None:
        self.topics = [t.name for t in spec.topics]
        self.keys: list[str] = []
        self.producers: list[str] = []
        self.key_offsets: list[int] = []
        self.producer_offsets: list[int] = []
        spaces: dict[tuple[str, int], int] = {}
        for t in spec.topics:
            # key names are "<prefix><index>": topics with the same prefix and key count name
            # the same keys, so they share one range of the table (its size follows the distinct
            # key spaces, not the topics)
            space = (t.keys.prefix, t.keys.n_keys)
            if space not in spaces:
                spaces[space] = len(self.keys)
                self.keys.extend(f"{t.keys.prefix}{i}" for i in range(t.keys.n_keys))
            self.key_offsets.append(spaces[space])
            self.producer_offsets.append(len(self.producers))
            self.producers.extend(t.producer_names)

    def encoded(self, fmt: str) -> tuple[Any, Any, Any]:
        """Object arrays of encoded topic, key (last entry = null) and producer strings."""
        enc = json.dumps if fmt == "json" else _csv_field
        null = "null" if fmt == "json" else ""
        return (
            np.array([enc(s) for s in self.topics], dtype=object),
            np.array([enc(s) for s in self.keys] + [null], dtype=object),
            np.array([enc(s) for s in self.producers], dtype=object),
        )


def _csv_field(s: str) -> str:
    if any(c in s for c in ',"\r\n') or s == "":
        return '"' + s.replace('"', '""') + '"'
    return s


class _TextEncoder:
    def __init__(self, fmt: str, tables: _Tables, start_ms: int) -> None:
        self.fmt = fmt
        self.topic, self.key, self.producer = tables.encoded(fmt)
        self.start_ms = start_ms

    def header(self) -> bytes:
        return (",".join(OUTPUT_COLUMNS) + "\n").encode() if self.fmt == "csv" else b""

    def encode(self, rows: _Rows) -> bytes:
        if len(rows) == 0:
            return b""
        abs_ms = rows.ms + self.start_ms
        sec = abs_ms // 1000
        uniq, inv = np.unique(sec, return_inverse=True)
        prefix = np.datetime_as_string(uniq.astype("datetime64[s]"), unit="s").astype(object)
        cols = zip(
            self.topic[rows.topic].tolist(),
            self.key[rows.key].tolist(),  # -1 → the null entry at the end
            prefix[inv].tolist(),
            (abs_ms % 1000).tolist(),
            rows.size.tolist(),
            self.producer[rows.producer].tolist(),
            rows.seq.tolist(),
            strict=True,
        )
        if self.fmt == "json":
            text = "".join(
                [
                    f'{{"topic":{t},"key":{k},"publish_time":"{s}.{m:03d}Z",'
                    f'"payload_size":{z},"producer_name":{p},"sequence_id":{q}}}\n'
                    for t, k, s, m, z, p, q in cols
                ]
            )
        else:
            text = "".join([f"{t},{k},{s}.{m:03d}Z,{z},{p},{q}\n" for t, k, s, m, z, p, q in cols])
        return text.encode("utf-8")


class _FileSet:
    """Writes rows into ``part-NNNNN`` files, one per ``file_span_s`` of event time.

    Rows are encoded on the calling thread; opening, compressing/writing and closing files run in
    submission order on one I/O thread (zlib and Arrow release the GIL, so gzip compression
    overlaps the encoding of the next chunk). At most ``_MAX_PENDING`` operations are queued.
    """

    _MAX_PENDING = 2

    def __init__(self, spec: WorkloadSpec, out: Path, tables: _Tables) -> None:
        self.spec = spec
        self.out = out
        self.span_ms = spec.file_span_s * 1000
        self.files: list[Path] = []
        self.current = -1
        # Touched only by the I/O thread:
        self._raw: IO[bytes] | None = None
        self._stream: IO[bytes] | gzip.GzipFile | None = None
        self._parquet: pq.ParquetWriter | None = None
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="generator-io")
        self._pending: deque[Future[None]] = deque()
        if spec.format == "parquet":
            self.topic_arr = pa.array(tables.topics, pa.string())
            self.key_arr = pa.array(tables.keys, pa.string())
            self.producer_arr = pa.array(tables.producers, pa.string())
        else:
            self.text = _TextEncoder(spec.format, tables, spec.start_ms)

    def write(self, rows: _Rows) -> None:
        """Append time-sorted ``rows`` (later than anything written before)."""
        if len(rows) == 0:
            return
        file_idx = rows.ms // self.span_ms
        first, last = int(file_idx[0]), int(file_idx[-1])
        bounds = np.searchsorted(file_idx, np.arange(first, last + 2))
        for i in range(first, last + 1):
            self._advance_to(i)
            part = rows.take(slice(int(bounds[i - first]), int(bounds[i - first + 1])))
            if len(part) == 0:
                continue
            if self.spec.format == "parquet":
                self._submit(self._io_write_table, self._arrow(part))
            else:
                self._submit(self._io_write_bytes, self.text.encode(part))

    def finish(self) -> None:
        """Create the remaining (empty) span files, close, and wait for all I/O."""
        self._advance_to(self.spec.file_count - 1)
        self._submit(self._io_close)
        self._drain()

    def abort(self) -> None:
        """After a failure: stop the I/O thread and close whatever is open (errors ignored)."""
        for fut in self._pending:
            fut.cancel()
        self._pool.shutdown(wait=True)
        self._pending.clear()
        self._io_close()

    def _submit(self, fn: Callable[..., None], *args: Any) -> None:
        self._pending.append(self._pool.submit(fn, *args))
        while len(self._pending) > self._MAX_PENDING:
            self._pending.popleft().result()  # re-raises an I/O error here

    def _drain(self) -> None:
        while self._pending:
            self._pending.popleft().result()
        self._pool.shutdown(wait=True)

    def _advance_to(self, idx: int) -> None:
        while self.current < idx:
            self.current += 1
            path = self.out / f"part-{self.current:05d}{self.spec.file_suffix}"
            self.files.append(path)
            self._submit(self._io_open, path)

    def _arrow(self, rows: _Rows) -> pa.Table:
        key_idx = pa.array(rows.key, mask=rows.key < 0)
        micros = (rows.ms + self.spec.start_ms) * 1000
        return pa.Table.from_arrays(
            [
                pc.take(self.topic_arr, pa.array(rows.topic)),
                pc.take(self.key_arr, key_idx),
                pa.array(micros, pa.timestamp("us", tz="UTC")),
                pa.array(rows.size, pa.int64()),
                pc.take(self.producer_arr, pa.array(rows.producer)),
                pa.array(rows.seq, pa.int64()),
            ],
            schema=PARQUET_SCHEMA,
        )

    # ---- I/O thread

    def _io_open(self, path: Path) -> None:
        self._io_close()
        if self.spec.format == "parquet":
            self._parquet = pq.ParquetWriter(path, PARQUET_SCHEMA, compression="snappy")
            return
        raw: IO[bytes] = path.open("wb")
        stream: IO[bytes] | gzip.GzipFile = raw
        if self.spec.gzip:
            # No file name and mtime 0 in the header: byte-identical output.
            stream = gzip.GzipFile(
                filename="", mode="wb", fileobj=raw, mtime=0, compresslevel=self.spec.gzip_level
            )
        self._raw, self._stream = raw, stream
        stream.write(self.text.header())

    def _io_write_bytes(self, data: bytes) -> None:
        assert self._stream is not None
        self._stream.write(data)

    def _io_write_table(self, table: pa.Table) -> None:
        assert self._parquet is not None
        self._parquet.write_table(table, row_group_size=1 << 20)

    def _io_close(self) -> None:
        try:
            if self._parquet is not None:
                self._parquet.close()
            if self._stream is not None and self._stream is not self._raw:
                self._stream.close()
        finally:
            if self._raw is not None:
                self._raw.close()
            self._parquet = self._stream = self._raw = None


def generate(spec: WorkloadSpec, output_path: str | Path) -> GenerateResult:
    """Write the message log of ``spec`` into the folder ``output_path`` (created if needed;
    existing ``part-*`` files there are removed first). See the module doc for the model."""
    out = Path(output_path)
    out.mkdir(parents=True, exist_ok=True)
    for old in out.iterdir():
        if old.is_file() and _PART_RE.match(old.name):
            old.unlink()
    tables = _Tables(spec)
    key_cdfs: dict[tuple[int, float | None], FloatArray] = {}
    states = [
        _TopicState(i, t, tables.key_offsets[i], tables.producer_offsets[i], key_cdfs)
        for i, t in enumerate(spec.topics)
    ]
    files = _FileSet(spec, out, tables)
    total = 0
    try:
        for rows in _generate_rows(spec, states):
            files.write(rows)
            total += len(rows)
        files.finish()
    except BaseException:
        files.abort()
        raise
    return GenerateResult(
        files=files.files,
        messages=total,
        bytes=sum(p.stat().st_size for p in files.files),
        messages_per_topic={st.spec.name: st.count for st in states},
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Generate a synthetic message log.")
    parser.add_argument("spec", type=Path, help="workload spec YAML (or OMB workload with --omb)")
    parser.add_argument("output", type=Path, help="output folder")
    parser.add_argument("--omb", action="store_true", help="spec is an OMB workload YAML")
    args = parser.parse_args(argv)
    spec = load_any_spec(args.spec, omb=True if args.omb else None)
    result = generate(spec, args.output)
    json.dump(result_summary(result, spec), sys.stdout, indent=2)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
