"""Kafka topics as an input: which topics, where, and how a record maps to the contract.

An input is Kafka when it is a ``kafka://HOST:PORT[,HOST:PORT]/TOPIC_OR_PATTERN`` URL or when
``input.format`` is ``kafka`` (then ``input.kafka`` names the servers and topics). Spark's own
Kafka source reads it (``pipelines.spark.kafka.read_kafka_stream``); each record becomes a row
of the ``kafka`` preset (:data:`KAFKA`): ``topic``, ``key`` (the record key as UTF-8; null for
a record without one), ``publish_time`` (the record timestamp: CreateTime or LogAppendTime, as
the topic is configured), ``payload_size`` (``octet_length(value)``, 0 for a tombstone),
``producer_name`` (the header :attr:`KafkaInput.producer_header`, else ``partition-<n>``),
``partition``, ``offset`` and ``timestamp_type``. Pure Python: no Spark here.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from pipelines.contract.config import ReplayConfig
from pipelines.contract.presets import CONTRACT_MAPPING, InputSpec

KAFKA_SCHEME = "kafka://"

TOPIC_NAME = re.compile(r"[A-Za-z0-9._-]+(,[A-Za-z0-9._-]+)*")
"""Kafka topic names (comma-separated): a URL path of anything else is a pattern."""

KAFKA = InputSpec(
    format="parquet",
    columns=dict(CONTRACT_MAPPING),
    preset="kafka",
    description="Kafka records read by Spark's Kafka source (kafka:// inputs).",
)
"""``kafka``: the rows :func:`pipelines.spark.kafka.read_kafka_stream` makes of Kafka records
(a struct per record, like a Parquet row: ``format`` is ``parquet`` for the mapping), mapped by
name; ``partition``, ``offset`` and ``timestamp_type`` are there for ``input.columns``
expressions. ``sequence_id`` is null (numbered in publish order per producer)."""


class KafkaInputError(ValueError):
    """A Kafka input that cannot be read as given: one sentence for the user."""


@dataclass(frozen=True)
class KafkaInput:
    """Where Spark's Kafka source reads: ``bootstrap_servers``, then exactly one of
    ``subscribe`` (comma-separated topics) and ``subscribe_pattern`` (a Java regex); the
    producer header, the starting offsets of a new run, the records per micro-batch at most
    (``None``: all available) and other source ``options``."""

    bootstrap_servers: str
    subscribe: str | None = None
    subscribe_pattern: str | None = None
    producer_header: str = "producer"
    starting_offsets: str = "earliest"
    max_offsets_per_trigger: int | None = None
    options: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "options", MappingProxyType(dict(self.options)))

    @property
    def url(self) -> str:
        """``kafka://<servers>/<topics or pattern>``: the input as the ``runs`` table names it."""
        return f"{KAFKA_SCHEME}{self.bootstrap_servers}/{self.subscribe or self.subscribe_pattern}"


def is_kafka_url(path: str) -> bool:
    """Whether an ``--input`` value is a ``kafka://`` URL."""
    return path.lower().startswith(KAFKA_SCHEME)


def parse_kafka_url(url: str) -> tuple[str, str | None, str | None]:
    """``(bootstrap_servers, subscribe, subscribe_pattern)`` of
    ``kafka://HOST:PORT[,HOST:PORT]/TOPIC_OR_PATTERN``: topic names (letters, digits, ``.``,
    ``_``, ``-``; comma-separated) subscribe, anything else is a pattern; a bare ``kafka://``
    gives ``("", None, None)`` (both from ``input.kafka``). ``KafkaInputError`` when the
    servers or the topic part is missing."""
    rest = url[len(KAFKA_SCHEME):]
    if rest in ("", "/"):  # bare kafka://: both from input.kafka
        return "", None, None
    servers, _, topics = rest.partition("/")
    if not servers or not all(re.fullmatch(r"[^:/,]+:\d+", s) for s in servers.split(",")):
        raise KafkaInputError(f"input {url}: give the brokers as kafka://HOST:PORT/TOPIC "
                              "(HOST:PORT pairs separated by commas)")
    if not topics:
        raise KafkaInputError(f"input {url}: name the topics (or a pattern) after the brokers, "
                              "kafka://HOST:PORT/TOPIC_OR_PATTERN")
    if TOPIC_NAME.fullmatch(topics):
        return servers, topics, None
    try:
        re.compile(topics)
    except re.error as exc:
        raise KafkaInputError(f"input {url}: {topics!r} is neither topic names nor a regex "
                              f"({exc})") from None
    return servers, None, topics


def kafka_input(config: ReplayConfig, inputs: Sequence[str]) -> KafkaInput | None:
    """The Kafka input of a replay, ``None`` when it reads files: ``inputs`` is one
    ``kafka://`` URL (or ``input.format`` is ``kafka``, which then needs one); its servers and
    topics, or, for a bare ``kafka://``, ``input.kafka``'s. ``KafkaInputError`` on files with
    ``input.format: kafka``, a mix of URLs and files, missing servers or topics, or both
    topics and a pattern."""
    urls = [i for i in inputs if is_kafka_url(i)]
    if not urls and config.input.format != "kafka":
        return None
    if len(urls) != len(inputs) or len(urls) > 1:
        raise KafkaInputError("a Kafka input is one --input kafka://HOST:PORT/TOPIC_OR_PATTERN "
                              "(several topics: comma-separated, or a pattern; a bare "
                              "kafka:// takes both from input.kafka), without files")
    k = config.input.kafka
    servers: str | None
    servers, subscribe, pattern = parse_kafka_url(urls[0])
    if not servers:  # bare kafka://
        servers, subscribe, pattern = k.bootstrap_servers, k.subscribe, k.subscribe_pattern
    if servers is None:
        raise KafkaInputError("input.kafka.bootstrap_servers is not set (or give --input "
                              "kafka://HOST:PORT/TOPIC)")
    if (subscribe is None) == (pattern is None):
        raise KafkaInputError("set exactly one of input.kafka.subscribe and "
                              "input.kafka.subscribe_pattern")
    return KafkaInput(servers, subscribe, pattern, k.producer_header, k.starting_offsets,
                      k.max_offsets_per_trigger, dict(k.options))


def kafka_spec(config: ReplayConfig, preset: str | None) -> InputSpec:
    """The input spec of a Kafka input: preset ``kafka`` with ``input.columns`` over it, the
    replay speed and a constant topic when the config names one. ``KafkaInputError`` when
    another preset is asked for."""
    if preset not in (None, "contract", "kafka"):
        raise KafkaInputError(f"a Kafka input is read with preset kafka, not {preset!r}; map "
                              "its columns with input.columns instead")
    changes: dict[str, Any] = {"speed": config.replay.speed}
    if config.input.columns:
        changes["columns"] = {**KAFKA.columns, **config.input.columns}
        changes["strict_columns"] = tuple(config.input.columns)
    if config.topic.name is not None:
        changes["topic"] = config.topic.name
    return KAFKA.replace(**changes)
