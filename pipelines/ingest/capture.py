"""Capture live Pulsar topics into a message log (``topic-replay capture``; docs/capture.md).

A :class:`Capture` reads topics with non-durable Pulsar Readers (the ``pulsar-client`` wheel,
the optional extra ``topic-replay[pulsar]``; :class:`PulsarSource`) and writes every message's
metadata — never its payload — as rows of :data:`CAPTURE_SCHEMA` in rolling Parquet files
``capture-<n>.parquet`` of one folder, ready for ``run`` or for a ``stream`` that watches the
folder (preset ``pulsar``, ``pipelines.contract.presets.PULSAR``):

- **atomic files**: a file is written under a ``_``-prefixed name (which Spark's file source, the
  local engine and the format guess all ignore) and renamed when whole, so a reader never sees a
  partial file; a file rolls when its rows reach ``roll_bytes`` (Arrow's in-memory size, before
  compression) or ``roll_seconds`` after its first row (wall clock), and at the stop;
- **resumable**: each file's footer holds every topic's last message id written so far (key
  :data:`LAST_IDS_KEY`), and :data:`STATE_FILE` repeats them, written atomically after each file;
  a restart takes the newer of the two and each Reader starts right after its topic's last
  written message (batch index included), so a capture killed at any point and restarted loses
  and duplicates nothing — the messages of a file not yet renamed are read again;
- **stops** at a publish time (``stop_at_ms``: a topic is done at its first message published
  at or after it, which is not written, or when it holds nothing more once the wall clock has
  passed that time), after ``max_messages`` (this invocation's), at the end
  of what the topics hold (``until_end``: each Reader's ``has_message_available()`` turns false),
  or on :meth:`Capture.request_stop` (Ctrl-C / SIGTERM): the buffered rows are written as one
  last file, then it returns.

The ``key`` column is the routing key as Pulsar picks it (behaviour reference §1.3): the
ordering key when the message has one, else its partition key, else null (keyless). The other
fields are kept as read; ``sequence_id`` is null (the Python client does not expose it: the
replay numbers each producer's messages in publish order).
"""

from __future__ import annotations

import base64
import binascii
import json
import os
import re
import ssl
import time
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol

import pyarrow as pa
import pyarrow.parquet as pq

CAPTURE_SCHEMA = pa.schema([
    pa.field("topic", pa.string(), nullable=False),
    pa.field("key", pa.string()),
    pa.field("publish_time", pa.timestamp("ms", tz="UTC"), nullable=False),
    pa.field("payload_size", pa.int64(), nullable=False),
    pa.field("producer_name", pa.string()),
    pa.field("sequence_id", pa.int64()),
    pa.field("ordering_key", pa.string()),
    pa.field("partition", pa.int32(), nullable=False),
    pa.field("message_id", pa.string(), nullable=False),
    pa.field("batch_index", pa.int32(), nullable=False),
    pa.field("event_time", pa.timestamp("ms", tz="UTC")),
    pa.field("properties", pa.map_(pa.string(), pa.string())),
])
"""Columns of a capture file. ``topic``: the topic's name (a partitioned topic's, without
``-partition-<n>``); ``key``: routing key (ordering key, else partition key, else null);
``publish_time`` / ``event_time``: milliseconds, UTC (``event_time`` null when the producer set
none; Spark cannot read Parquet nanosecond timestamps); ``payload_size``: payload bytes;
``partition``: the partition index (-1: not partitioned); ``message_id``:
``ledger:entry:partition:batch_index``; ``batch_index``: position in the producer's batch (-1: not
batched); ``properties``: the message's properties. A key or ordering key that is not UTF-8 is
written as ``base64:<its base64>``."""

STATE_FILE = "_capture_state.json"
"""The capture's state file in its output folder (``_``-prefixed: never read as input)."""

LAST_IDS_KEY = b"topic_replay.capture.last_ids"
"""Parquet footer key: JSON of topic (partition) name → base64 of its last serialized message id."""

FILE_PATTERN = re.compile(r"capture-(\d{6,})\.parquet")
PARTITION_SUFFIX = re.compile(r"^(.*)-partition-(\d+)$")
TOPIC_DOMAINS = ("persistent://", "non-persistent://")


class CaptureError(ValueError):
    """A capture that cannot start (options, topics, the client): one sentence for the user."""


# ------------------------------------------------------------------------ what a source gives


class MessageIdLike(Protocol):
    def ledger_id(self) -> int: ...
    def entry_id(self) -> int: ...
    def batch_index(self) -> int: ...
    def serialize(self) -> bytes: ...


class MessageLike(Protocol):
    """The part of ``pulsar.Message`` a capture reads."""

    def data(self) -> bytes: ...
    def properties(self) -> Mapping[str, str]: ...
    def partition_key(self) -> str: ...
    def ordering_key(self) -> bytes | str: ...
    def publish_timestamp(self) -> int: ...
    def event_timestamp(self) -> int: ...
    def message_id(self) -> MessageIdLike: ...
    def producer_name(self) -> str: ...


class TopicReader(Protocol):
    """One topic (or partition) being read: ``pulsar.Reader`` behind :class:`PulsarSource`."""

    def read(self, timeout_ms: int) -> MessageLike | None:
        """The next message, or ``None`` when none arrived within ``timeout_ms``."""
        ...

    def caught_up(self) -> bool:
        """Whether the topic holds nothing more to read now."""
        ...

    def close(self) -> None: ...


Start = str | int | bytes
"""Where a Reader starts: ``"earliest"``, ``"latest"``, a publish time (epoch ms, int) or the
serialized id of the last message already written (bytes: it starts right after it)."""


class Source(Protocol):
    """Topics and their Readers (:class:`PulsarSource`; a fake in the tests)."""

    def resolve(self, topics: Sequence[str], pattern: str | None,
                namespace: str | None) -> list[str]:
        """The topics (partitions of partitioned topics) to read, sorted."""
        ...

    def open(self, topic: str, start: Start) -> TopicReader: ...

    def close(self) -> None: ...


# ------------------------------------------------------------------------------ options


@dataclass(frozen=True)
class CaptureOptions:
    """What to capture and where.

    Attributes:
        output: local folder of the capture files (created).
        topics: topic names (a partitioned topic means all its partitions).
        pattern: a regex over full topic names (``persistent://tenant/ns/orders-.*``); the
            namespace is read from its start, as Pulsar's pattern consumers do.
        namespace: every topic of ``tenant/namespace``.
        start: ``"earliest"``, ``"latest"`` or a publish time (epoch ms) for topics without a
            resume position.
        stop_at_ms: stop each topic at its first message published at or after this (epoch ms),
            or once the wall clock is past it and the topic holds nothing more.
        max_messages: stop after writing this many messages (this invocation).
        until_end: stop each topic when it holds nothing more to read.
        roll_bytes: roll a file when its rows reach this many bytes in memory (> 0).
        roll_seconds: roll a file this long after its first row (wall clock, > 0).
        progress_seconds: a progress line at most this often (wall clock).
        poll_ms: how long one read waits for a message (ms).
    """

    output: str
    topics: tuple[str, ...] = ()
    pattern: str | None = None
    namespace: str | None = None
    start: str | int = "earliest"
    stop_at_ms: int | None = None
    max_messages: int | None = None
    until_end: bool = False
    roll_bytes: int = 32 * 1024 * 1024
    roll_seconds: float = 60.0
    progress_seconds: float = 10.0
    poll_ms: int = 200

    def __post_init__(self) -> None:
        chosen = sum(bool(x) for x in (self.topics, self.pattern, self.namespace))
        if chosen != 1:
            raise CaptureError("give the topics to capture one way: --topic (repeatable), "
                               "--topics-pattern or --namespace")
        if self.pattern is not None:
            try:
                re.compile(self.pattern)
            except re.error as exc:
                raise CaptureError(f"--topics-pattern {self.pattern!r} is not a regex: "
                                   f"{exc}") from None
        if self.namespace is not None and self.namespace.count("/") != 1:
            raise CaptureError(f"--namespace {self.namespace!r} must be tenant/namespace")
        if self.max_messages is not None and self.max_messages <= 0:
            raise CaptureError(f"--max-messages must be > 0, got {self.max_messages}")
        if self.roll_bytes <= 0 or self.roll_seconds <= 0:
            raise CaptureError("--roll-mb and --roll-seconds must be > 0")
        if self.start not in ("earliest", "latest") and not isinstance(self.start, int):
            raise CaptureError(f"--start {self.start!r}: earliest, latest or a time")


def parse_time_ms(text: str, what: str) -> int:
    """Epoch milliseconds from ``text``: an integer (epoch ms) or an ISO-8601 time (without an
    offset: UTC). ``CaptureError`` naming ``what`` otherwise."""
    text = text.strip()
    if re.fullmatch(r"-?\d+", text):
        return int(text)
    try:
        t = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise CaptureError(f"{what} {text!r} is neither epoch milliseconds nor an ISO-8601 "
                           "time (2025-01-15T09:00:00Z)") from None
    if t.tzinfo is None:
        t = t.replace(tzinfo=UTC)
    return int(t.timestamp() * 1000)


def parse_start(text: str) -> str | int:
    """``--start``: ``earliest``, ``latest`` or a publish time (:func:`parse_time_ms`)."""
    return text if text in ("earliest", "latest") else parse_time_ms(text, "--start")


# ------------------------------------------------------------------------------ rows


def split_partition(topic: str) -> tuple[str, int]:
    """``(topic, partition)`` of a topic name: ``…/orders-partition-3`` → ``(…/orders, 3)``;
    a topic that is not a partition → ``(topic, -1)``."""
    m = PARTITION_SUFFIX.match(topic)
    return (m.group(1), int(m.group(2))) if m else (topic, -1)


def _text(value: bytes | str | None) -> str | None:
    """A key as a string: null when empty; bytes decoded as UTF-8, else ``base64:<b64>``."""
    if not value:
        return None
    if isinstance(value, str):
        return value
    try:
        return value.decode("utf-8")
    except UnicodeDecodeError:
        return "base64:" + base64.b64encode(value).decode("ascii")


def message_row(topic: str, msg: MessageLike) -> dict[str, Any]:
    """One :data:`CAPTURE_SCHEMA` row of message ``msg`` read from ``topic`` (a partition's
    name for a partitioned topic)."""
    name, partition = split_partition(topic)
    mid = msg.message_id()
    ordering = _text(msg.ordering_key())
    event_ms = msg.event_timestamp()
    return {
        "topic": name,
        "key": ordering if ordering is not None else _text(msg.partition_key()),
        "publish_time": msg.publish_timestamp(),
        "payload_size": len(msg.data()),
        "producer_name": msg.producer_name() or None,
        "sequence_id": None,
        "ordering_key": ordering,
        "partition": partition,
        "message_id": f"{mid.ledger_id()}:{mid.entry_id()}:{partition}:{mid.batch_index()}",
        "batch_index": mid.batch_index(),
        "event_time": event_ms if event_ms > 0 else None,
        "properties": list(dict(msg.properties()).items()),
    }


_ROW_OVERHEAD = 64  # the fixed-width columns and offsets of a row, bytes


def row_bytes(row: Mapping[str, Any]) -> int:
    """About the in-memory (Arrow) size of ``row``, bytes: what ``roll_bytes`` counts."""
    texts = [row["topic"], row["key"], row["producer_name"], row["ordering_key"],
             row["message_id"], *(s for kv in row["properties"] for s in kv)]
    return _ROW_OVERHEAD + sum(len(t) for t in texts if t)


# ------------------------------------------------------------------------------ files and state


def _fsync_dir(folder: Path) -> None:
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_atomic(path: Path, write: Callable[[Path], object]) -> None:
    """Write ``path`` whole or not at all: ``write`` fills ``_<name>.tmp`` beside it (a name
    readers ignore), which is synced and renamed to ``path``."""
    tmp = path.with_name(f"_{path.name}.tmp")
    write(tmp)
    with open(tmp, "rb+") as f:
        os.fsync(f.fileno())
    os.replace(tmp, path)
    _fsync_dir(path.parent)


def _encode_ids(ids: Mapping[str, bytes]) -> str:
    return json.dumps({t: base64.b64encode(b).decode("ascii") for t, b in sorted(ids.items())})


def _decode_ids(text: str | bytes) -> dict[str, bytes]:
    return {t: base64.b64decode(b) for t, b in json.loads(text).items()}


@dataclass
class CaptureState:
    """What a capture folder holds: the last file number and each topic's last written id."""

    files: int = 0
    last_ids: dict[str, bytes] = field(default_factory=dict)
    messages: int = 0

    def to_json(self) -> str:
        return json.dumps({"files": self.files, "messages": self.messages,
                           "last_ids": json.loads(_encode_ids(self.last_ids))}, indent=1)


def capture_files(folder: Path) -> list[tuple[int, Path]]:
    """The finished capture files of ``folder`` as ``(number, path)``, by number."""
    found = [(int(m.group(1)), p) for p in folder.iterdir()
             if (m := FILE_PATTERN.fullmatch(p.name))] if folder.is_dir() else []
    return sorted(found)


def load_state(folder: Path) -> CaptureState:
    """The state of a capture folder: :data:`STATE_FILE`, brought up to date from the footers
    of any finished file newer than it (a capture stopped between a file's rename and the state
    file's write); an empty state for a new folder. ``CaptureError`` when the state file is
    unreadable."""
    state = CaptureState()
    path = folder / STATE_FILE
    if path.is_file():
        try:
            raw = json.loads(path.read_text())
            state = CaptureState(int(raw["files"]),
                                 _decode_ids(json.dumps(raw["last_ids"])), int(raw["messages"]))
        except (ValueError, KeyError, TypeError, binascii.Error) as exc:
            raise CaptureError(f"{path} is not a capture state file ({exc}); move it away to "
                               "start a new capture in this folder") from None
    for number, file in capture_files(folder):
        if number <= state.files:
            continue
        meta = pq.read_metadata(file)
        ids = (meta.metadata or {}).get(LAST_IDS_KEY)
        if ids is not None:
            state.last_ids.update(_decode_ids(ids))
        state.files, state.messages = number, state.messages + meta.num_rows
    return state


class RollingWriter:
    """Buffers rows and writes them as numbered Parquet files (:func:`write_atomic`), then the
    state file. ``clock``: wall-clock seconds (injected in tests)."""

    def __init__(self, folder: Path, state: CaptureState, roll_bytes: int, roll_seconds: float,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.folder, self.state = folder, state
        self.roll_bytes, self.roll_seconds, self.clock = roll_bytes, roll_seconds, clock
        self.rows: list[dict[str, Any]] = []
        self.bytes = 0
        self.opened: float | None = None
        self.pending_ids: dict[str, bytes] = {}

    def add(self, row: dict[str, Any], topic: str, message_id: bytes) -> None:
        """Buffer ``row``, read from ``topic`` with serialized id ``message_id``."""
        if not self.rows:
            self.opened = self.clock()
        self.rows.append(row)
        self.bytes += row_bytes(row)
        self.pending_ids[topic] = message_id

    def due(self) -> bool:
        """Whether the buffered rows should be written now (size or age)."""
        return bool(self.rows) and (self.bytes >= self.roll_bytes or (
            self.opened is not None and self.clock() - self.opened >= self.roll_seconds))

    def roll(self) -> Path | None:
        """Write the buffered rows as the next file, then the state; the file's path (``None``
        when nothing was buffered)."""
        if not self.rows:
            return None
        ids = {**self.state.last_ids, **self.pending_ids}
        table = pa.Table.from_pylist(self.rows, schema=CAPTURE_SCHEMA)
        table = table.replace_schema_metadata({LAST_IDS_KEY: _encode_ids(ids).encode()})
        number = self.state.files + 1
        path = self.folder / f"capture-{number:06d}.parquet"
        write_atomic(path, lambda tmp: pq.write_table(table, tmp, compression="zstd"))
        self.state.files, self.state.last_ids = number, ids
        self.state.messages += table.num_rows
        write_atomic(self.folder / STATE_FILE,
                     lambda tmp: tmp.write_text(self.state.to_json()))
        self.rows, self.bytes, self.opened, self.pending_ids = [], 0, None, {}
        return path


# ------------------------------------------------------------------------------ the capture


@dataclass
class Progress:
    """Counts of this invocation: messages, payload bytes, files; the last publish time read."""

    messages: int = 0
    payload_bytes: int = 0
    files: int = 0
    last_publish_ms: int | None = None

    def line(self, now_ms: int) -> str:
        """``capture: 1,234 messages, 5.6 MB, 2 files, lag 0.8 s`` (lag: now minus the last
        publish time read)."""
        lag = ("-" if self.last_publish_ms is None
               else f"{max(0, now_ms - self.last_publish_ms) / 1000:.1f} s")
        return (f"capture: {self.messages:,} messages, {self.payload_bytes / 1e6:.1f} MB, "
                f"{self.files} files, lag {lag}")


@dataclass
class Capture:
    """A capture of ``source``'s topics into ``options.output`` (see the module docstring).
    ``say`` gets the progress and status lines; ``clock`` is wall-clock seconds and ``now_ms``
    the time lag is measured against (both injected in tests)."""

    source: Source
    options: CaptureOptions
    say: Callable[[str], None] = print
    clock: Callable[[], float] = time.monotonic
    now_ms: Callable[[], int] = field(default=lambda: int(time.time() * 1000))
    stop_requested: bool = False
    progress: Progress = field(default_factory=Progress)

    def request_stop(self) -> None:
        """Stop after the read in progress (safe from a signal handler): the buffered rows are
        written as a last file."""
        self.stop_requested = True

    def run(self) -> Progress:
        """Capture until a stop condition; returns this invocation's counts."""
        folder = Path(self.options.output)
        folder.mkdir(parents=True, exist_ok=True)
        state = load_state(folder)
        writer = RollingWriter(folder, state, self.options.roll_bytes,
                               self.options.roll_seconds, self.clock)
        readers: dict[str, TopicReader] = {}
        try:
            readers.update(self._open(state))
            self._loop(readers, writer)
        finally:
            self._roll(writer)
            for r in readers.values():
                r.close()
            self.source.close()
        self.say(self.progress.line(self.now_ms()) + f" — stopped; {folder} holds "
                 f"{state.files} files, {state.messages:,} messages")
        return self.progress

    def _open(self, state: CaptureState) -> dict[str, TopicReader]:
        """A Reader per topic (partition): after its last written message, else at
        ``options.start``. ``CaptureError`` when no topic matches."""
        opts = self.options
        topics = self.source.resolve(opts.topics, opts.pattern, opts.namespace)
        if not topics:
            raise CaptureError("no topic matches " + (opts.pattern or opts.namespace or "")
                               + "; nothing to capture")
        resumed = [t for t in topics if t in state.last_ids]
        if resumed:
            self.say(f"capture: resuming {len(resumed)} of {len(topics)} topics after their last "
                     f"message in {opts.output} ({state.files} files)")
        return {t: self.source.open(t, state.last_ids.get(t, opts.start)) for t in topics}

    def _roll(self, writer: RollingWriter) -> None:
        if writer.roll() is not None:
            self.progress.files += 1

    def _loop(self, readers: dict[str, TopicReader], writer: RollingWriter) -> None:
        active = dict(readers)
        last_line = self.clock()
        while active and not self._stop():
            for topic in list(active):
                if self._drain(topic, active[topic], writer):
                    del active[topic]
                if writer.due():
                    self._roll(writer)
                if self._stop():
                    break
            if self.clock() - last_line >= self.options.progress_seconds:
                self.say(self.progress.line(self.now_ms()))
                last_line = self.clock()

    def _stop(self) -> bool:
        cap = self.options.max_messages
        return self.stop_requested or (cap is not None and self.progress.messages >= cap)

    def _drain(self, topic: str, reader: TopicReader, writer: RollingWriter,
               chunk: int = 1000) -> bool:
        """Read up to ``chunk`` messages of ``topic``; whether the topic is done (its stop
        time reached, or its end with ``until_end``)."""
        opts = self.options
        for _ in range(chunk):
            if self._stop():
                return False
            msg = reader.read(opts.poll_ms)
            if msg is None:  # nothing more now: done at its end, or past the stop time
                past_stop = opts.stop_at_ms is not None and self.now_ms() >= opts.stop_at_ms
                return (opts.until_end or past_stop) and reader.caught_up()
            if opts.stop_at_ms is not None and msg.publish_timestamp() >= opts.stop_at_ms:
                return True
            row = message_row(topic, msg)
            writer.add(row, topic, msg.message_id().serialize())
            self.progress.messages += 1
            self.progress.payload_bytes += row["payload_size"]
            self.progress.last_publish_ms = row["publish_time"]
            if writer.due():
                self._roll(writer)
        return False


# ------------------------------------------------------------------------------ Pulsar itself


@dataclass(frozen=True)
class PulsarAuth:
    """How the client authenticates, as Pulsar clients take it: a token (from a file or an
    environment variable, never a command-line value: ``ps`` would show it), TLS trust
    certificates, a client certificate and key (mutual TLS). Never printed nor written."""

    token: str | None = field(default=None, repr=False)
    tls_trust_certs: str | None = None
    tls_cert: str | None = None
    tls_key: str | None = None
    tls_allow_insecure: bool = False


def admin_url_for(service_url: str) -> str:
    """The admin (web service) URL Pulsar serves beside ``service_url`` by default:
    ``pulsar://h:6650`` → ``http://h:8080``, ``pulsar+ssl://h:6651`` → ``https://h:8443``."""
    parts = urllib.parse.urlsplit(service_url.split(",")[0])
    tls = parts.scheme == "pulsar+ssl"
    return f"{'https' if tls else 'http'}://{parts.hostname}:{8443 if tls else 8080}"


class PulsarSource:
    """Topics and Readers of a Pulsar cluster through ``pulsar-client`` (:class:`Source`).

    Topics named are expanded to their partitions (``Client.get_topic_partitions``); a
    namespace or a pattern is listed through the admin REST API at ``admin_url``
    (``GET /admin/v2/{persistent,non-persistent}/<tenant>/<namespace>``), with the same token
    and trust certificates. ``CaptureError`` when the client is not installed or the cluster
    cannot be reached."""

    def __init__(self, service_url: str, auth: PulsarAuth, admin_url: str | None = None) -> None:
        try:  # the optional extra topic-replay[pulsar]; only `capture` needs it
            import pulsar  # noqa: PLC0415
        except ImportError:
            raise CaptureError("capture needs the Pulsar client: pip install "
                               "'topic-replay[pulsar]' (pulsar-client)") from None
        self.pulsar: Any = pulsar
        self.auth = auth
        self.admin_url = (admin_url or admin_url_for(service_url)).rstrip("/")
        options: dict[str, Any] = {"operation_timeout_seconds": 30,
                                   "logger": _quiet_logger(pulsar)}
        if auth.token:
            options["authentication"] = pulsar.AuthenticationToken(auth.token)
        elif auth.tls_cert and auth.tls_key:
            options["authentication"] = pulsar.AuthenticationTLS(auth.tls_cert, auth.tls_key)
        if auth.tls_trust_certs:
            options["tls_trust_certs_file_path"] = auth.tls_trust_certs
        if auth.tls_allow_insecure:
            options["tls_allow_insecure_connection"] = True
        try:
            self.client = pulsar.Client(service_url, **options)
        except Exception as exc:  # the client's own errors (a bad URL, ...)
            raise CaptureError(f"cannot create a Pulsar client for {service_url}: "
                               f"{exc}") from None

    def resolve(self, topics: Sequence[str], pattern: str | None,
                namespace: str | None) -> list[str]:
        if topics:
            names = [self._full(t) for t in topics]
            return sorted({p for t in names for p in self._partitions(t)})
        if namespace is not None:
            return sorted(self._namespace_topics(namespace))
        assert pattern is not None
        full = self._full(pattern)
        ns = full.split("://", 1)[1].split("/")
        regex = re.compile(full)
        listed = self._namespace_topics(f"{ns[0]}/{ns[1]}")
        return sorted(t for t in listed
                      if regex.fullmatch(t) or regex.fullmatch(split_partition(t)[0]))

    @staticmethod
    def _full(topic: str) -> str:
        """A short topic name made full (``orders`` → ``persistent://public/default/orders``)."""
        if topic.startswith(TOPIC_DOMAINS):
            return topic
        parts = topic.split("/")
        if len(parts) == 1:
            return f"persistent://public/default/{topic}"
        if len(parts) == 3:
            return f"persistent://{topic}"
        raise CaptureError(f"topic {topic!r}: give a full name (persistent://tenant/ns/topic), "
                           "tenant/ns/topic or a name in public/default")

    def _partitions(self, topic: str) -> list[str]:
        try:
            return list(self.client.get_topic_partitions(topic))
        except Exception as exc:  # the client's lookup errors
            raise CaptureError(f"cannot look up topic {topic}: {exc}") from None

    def _namespace_topics(self, namespace: str) -> list[str]:
        found: list[str] = []
        for domain in ("persistent", "non-persistent"):
            url = f"{self.admin_url}/admin/v2/{domain}/{namespace}"
            request = urllib.request.Request(url)
            if self.auth.token:
                request.add_header("Authorization", f"Bearer {self.auth.token}")
            context = None
            if url.startswith("https"):
                context = ssl.create_default_context(cafile=self.auth.tls_trust_certs)
            try:
                with urllib.request.urlopen(request, timeout=30, context=context) as r:
                    found += [str(t) for t in json.loads(r.read())]
            except (OSError, ValueError) as exc:
                raise CaptureError(f"cannot list namespace {namespace} at {self.admin_url} "
                                   f"({exc}); give --admin-url or name the topics") from None
        return found

    def open(self, topic: str, start: Start) -> TopicReader:
        p = self.pulsar
        if isinstance(start, bytes):
            begin, seek = p.MessageId.deserialize(start), None
        elif start == "latest":
            begin, seek = p.MessageId.latest, None
        else:
            begin, seek = p.MessageId.earliest, (start if isinstance(start, int) else None)
        try:
            reader = self.client.create_reader(topic, begin, receiver_queue_size=1000,
                                               start_message_id_inclusive=False)
            if seek is not None:
                reader.seek(seek)
        except Exception as exc:  # the client's errors (no such topic, no permission, ...)
            raise CaptureError(f"cannot read topic {topic}: {exc}") from None
        return _PulsarReader(reader, p.Timeout)

    def close(self) -> None:
        self.client.close()


class _PulsarReader:
    """A ``pulsar.Reader`` as a :class:`TopicReader`."""

    def __init__(self, reader: Any, timeout: type[Exception]) -> None:
        self.reader, self.timeout = reader, timeout

    def read(self, timeout_ms: int) -> MessageLike | None:
        try:
            msg: MessageLike = self.reader.read_next(timeout_ms)
        except self.timeout:
            return None
        return msg

    def caught_up(self) -> bool:
        return not self.reader.has_message_available()

    def close(self) -> None:
        self.reader.close()


def _quiet_logger(pulsar: Any) -> Any:
    """The client's own log: warnings and errors only, to stderr (its INFO lines per
    connection and reader would drown the progress line)."""
    return pulsar.ConsoleLogger(pulsar.LoggerLevel.Warn)


def read_token(token_file: str | None, env: Mapping[str, str], env_name: str) -> str | None:
    """The authentication token: the first line of ``token_file``, else ``env[env_name]``;
    ``None`` when neither is set. ``CaptureError`` for an unreadable file."""
    if token_file:
        try:
            return Path(token_file).read_text().strip() or None
        except OSError as exc:
            raise CaptureError(f"cannot read the token file {token_file}: "
                               f"{exc.strerror}") from None
    return env.get(env_name) or None


def missing_files(paths: Iterable[tuple[str, str | None]]) -> str | None:
    """The first ``(option, path)`` whose path is set but is no file, as a sentence."""
    for option, path in paths:
        if path and not Path(path).is_file():
            return f"{option} {path} does not exist"
    return None
