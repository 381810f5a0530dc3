"""``topic-replay capture``'s logic (pipelines/ingest/capture.py) against a fake Reader: the rows
it writes, when files roll, when it stops, how it resumes. The real Pulsar standalone is in
tests/guarantees/test_capture_pulsar.py (make test-slow)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from jobs.replay import main
from pipelines.ingest.capture import (
    STATE_FILE,
    Capture,
    CaptureError,
    CaptureOptions,
    CaptureState,
    PulsarAuth,
    RollingWriter,
    Start,
    admin_url_for,
    load_state,
    message_row,
    parse_time_ms,
    read_token,
    split_partition,
)

T0 = 1_736_931_600_000  # 2025-01-15T09:00:00Z, ms


@dataclass(frozen=True)
class FakeId:
    ledger: int
    entry: int
    batch: int = -1

    def ledger_id(self) -> int:
        return self.ledger

    def entry_id(self) -> int:
        return self.entry

    def batch_index(self) -> int:
        return self.batch

    def serialize(self) -> bytes:
        return f"{self.ledger}:{self.entry}:{self.batch}".encode()


@dataclass(frozen=True)
class FakeMessage:
    mid: FakeId
    publish_ms: int
    payload: bytes = b"x" * 10
    key: str = ""
    ordering: bytes = b""
    producer: str = "p1"
    event_ms: int = 0
    props: dict[str, str] = field(default_factory=dict)

    def data(self) -> bytes:
        return self.payload

    def properties(self) -> dict[str, str]:
        return self.props

    def partition_key(self) -> str:
        return self.key

    def ordering_key(self) -> bytes:
        return self.ordering

    def publish_timestamp(self) -> int:
        return self.publish_ms

    def event_timestamp(self) -> int:
        return self.event_ms

    def message_id(self) -> FakeId:
        return self.mid

    def producer_name(self) -> str:
        return self.producer


class FakeReader:
    """Serves a topic's messages after ``start`` (an id's serialized bytes: after it)."""

    def __init__(self, messages: Sequence[FakeMessage], start: Start) -> None:
        self.messages = list(messages)
        if isinstance(start, bytes):
            ids = [m.mid.serialize() for m in self.messages]
            self.pos = ids.index(start) + 1
        elif start == "latest":
            self.pos = len(self.messages)
        elif isinstance(start, int):
            self.pos = next((i for i, m in enumerate(self.messages) if m.publish_ms >= start),
                            len(self.messages))
        else:
            self.pos = 0

    def read(self, timeout_ms: int) -> FakeMessage | None:
        if self.pos >= len(self.messages):
            return None
        self.pos += 1
        return self.messages[self.pos - 1]

    def caught_up(self) -> bool:
        return self.pos >= len(self.messages)

    def close(self) -> None:
        pass


class FakeSource:
    def __init__(self, topics: dict[str, list[FakeMessage]]) -> None:
        self.topics = topics
        self.opened: dict[str, Start] = {}

    def resolve(self, topics: Sequence[str], pattern: str | None,
                namespace: str | None) -> list[str]:
        return sorted(self.topics)

    def open(self, topic: str, start: Start) -> FakeReader:
        self.opened[topic] = start
        return FakeReader(self.topics[topic], start)

    def close(self) -> None:
        pass


def _messages(n: int, ledger: int = 7, batch: int = 1) -> list[FakeMessage]:
    """``n`` messages, ``batch`` to an entry, one ms apart, keys k0, k1, ..."""
    return [FakeMessage(FakeId(ledger, i // batch, i % batch if batch > 1 else -1), T0 + i,
                        key=f"k{i}") for i in range(n)]


def _capture(tmp_path: Path, source: FakeSource, **options: object) -> Capture:
    opts = CaptureOptions(output=str(tmp_path / "cap"), topics=("t",), until_end=True,
                          **options)  # type: ignore[arg-type]
    return Capture(source, opts, say=lambda _line: None, clock=lambda: 0.0,
                   now_ms=lambda: T0)


def _rows(tmp_path: Path) -> list[dict[str, object]]:
    files = sorted((tmp_path / "cap").glob("capture-*.parquet"))
    return [r for f in files for r in pq.read_table(f).to_pylist()]


TOPIC = "persistent://public/default/orders"


@pytest.mark.parametrize(("ordering", "key", "expected"), [
    (b"ok", "pk", "ok"),
    (b"", "pk", "pk"),
    (b"", "", None),
    (b"\xff\xfe", "pk", "base64://4="),
])
def test_key_is_the_ordering_key_else_the_partition_key(ordering, key, expected):
    msg = FakeMessage(FakeId(1, 2), T0, key=key, ordering=ordering)
    assert message_row(TOPIC, msg)["key"] == expected


def test_a_row_keeps_every_field_of_the_message():
    msg = FakeMessage(FakeId(5, 9, 3), T0, payload=b"abcd", key="k", producer="prod-a",
                      event_ms=T0 - 50, props={"a": "1"})
    assert message_row(f"{TOPIC}-partition-2", msg) == {
        "topic": TOPIC, "key": "k", "publish_time": T0, "payload_size": 4,
        "producer_name": "prod-a", "sequence_id": None, "ordering_key": None, "partition": 2,
        "message_id": "5:9:2:3", "batch_index": 3, "event_time": T0 - 50,
        "properties": [("a", "1")]}


def test_an_unset_event_time_is_null():
    assert message_row(TOPIC, FakeMessage(FakeId(1, 1), T0))["event_time"] is None


@pytest.mark.parametrize(("topic", "expected"), [
    (f"{TOPIC}-partition-11", (TOPIC, 11)),
    (TOPIC, (TOPIC, -1)),
])
def test_split_partition(topic, expected):
    assert split_partition(topic) == expected


def test_until_end_captures_every_message_once(tmp_path):
    source = FakeSource({"a": _messages(5, ledger=1), "b": _messages(7, ledger=2, batch=3)})
    _capture(tmp_path, source).run()
    rows = _rows(tmp_path)
    assert sorted(r["message_id"] for r in rows) == sorted(
        [f"1:{i}:-1:-1" for i in range(5)] + [f"2:{i // 3}:-1:{i % 3}" for i in range(7)])


def test_publish_times_are_millisecond_timestamps(tmp_path):
    _capture(tmp_path, FakeSource({"a": _messages(1)})).run()
    table = pq.read_table(next((tmp_path / "cap").glob("capture-*.parquet")))
    assert str(table.schema.field("publish_time").type) == "timestamp[ms, tz=UTC]"


def test_stop_at_a_publish_time_writes_only_earlier_messages(tmp_path):
    _capture(tmp_path, FakeSource({"a": _messages(10)}), stop_at_ms=T0 + 4).run()
    assert [r["key"] for r in _rows(tmp_path)] == ["k0", "k1", "k2", "k3"]


@pytest.mark.parametrize(("now_ms", "ends"), [(T0 + 100, True), (T0 - 1, False)])
def test_a_caught_up_topic_ends_once_the_clock_passes_the_stop_time(tmp_path, now_ms, ends):
    opts = CaptureOptions(output=str(tmp_path / "cap"), topics=("t",), stop_at_ms=T0 + 50)
    capture = Capture(FakeSource({"a": _messages(3)}), opts, say=lambda _l: None,
                      clock=lambda: 0.0, now_ms=lambda: now_ms)
    reader = FakeReader(_messages(3), "earliest")
    reader.pos = 3  # caught up
    writer = RollingWriter(tmp_path, CaptureState(), 10**9, 60.0, clock=lambda: 0.0)
    assert capture._drain("a", reader, writer) is ends


def test_max_messages_stops_after_that_many(tmp_path):
    _capture(tmp_path, FakeSource({"a": _messages(10)}), max_messages=6).run()
    assert len(_rows(tmp_path)) == 6


def test_start_at_a_publish_time_skips_earlier_messages(tmp_path):
    _capture(tmp_path, FakeSource({"a": _messages(10)}), start=T0 + 7).run()
    assert [r["key"] for r in _rows(tmp_path)] == ["k7", "k8", "k9"]


@pytest.mark.parametrize(("roll_bytes", "files"), [(10**9, 1), (1, 10)])
def test_files_roll_by_size(tmp_path, roll_bytes, files):
    _capture(tmp_path, FakeSource({"a": _messages(10)}), roll_bytes=roll_bytes).run()
    assert len(list((tmp_path / "cap").glob("capture-*.parquet"))) == files


def test_files_roll_by_age(tmp_path):
    now = [0.0]

    def clock() -> float:
        now[0] += 1.0  # every look at the clock: one second later
        return now[0]

    opts = CaptureOptions(output=str(tmp_path / "cap"), topics=("t",), until_end=True,
                          roll_seconds=2.5)
    Capture(FakeSource({"a": _messages(10)}), opts, say=lambda _l: None, clock=clock).run()
    assert len(list((tmp_path / "cap").glob("capture-*.parquet"))) > 1
    assert len(_rows(tmp_path)) == 10


def test_a_restart_continues_after_the_last_message_written(tmp_path):
    messages = _messages(10, batch=4)
    _capture(tmp_path, FakeSource({"a": messages}), max_messages=6).run()
    second = FakeSource({"a": messages})
    _capture(tmp_path, second).run()
    assert second.opened["a"] == messages[5].mid.serialize()
    assert [r["key"] for r in _rows(tmp_path)] == [f"k{i}" for i in range(10)]


def test_a_restart_after_a_crash_before_the_state_file_reads_the_last_file(tmp_path):
    messages = _messages(10)
    _capture(tmp_path, FakeSource({"a": messages}), max_messages=3).run()
    state_after_first = (tmp_path / "cap" / STATE_FILE).read_text()
    _capture(tmp_path, FakeSource({"a": messages}), max_messages=3).run()
    (tmp_path / "cap" / STATE_FILE).write_text(state_after_first)  # as if killed before it
    _capture(tmp_path, FakeSource({"a": messages})).run()
    assert [r["key"] for r in _rows(tmp_path)] == [f"k{i}" for i in range(10)]


def test_the_state_file_names_each_topics_last_message(tmp_path):
    _capture(tmp_path, FakeSource({"a": _messages(3, ledger=4)})).run()
    state = load_state(tmp_path / "cap")
    assert (state.files, state.messages, state.last_ids) == (1, 3, {"a": b"4:2:-1"})


def test_a_stop_request_writes_what_was_read_and_stops(tmp_path):
    source = FakeSource({"a": _messages(10)})
    capture = _capture(tmp_path, source)
    opened = source.open

    def open_stopping(topic: str, start: Start) -> FakeReader:
        reader = opened(topic, start)
        read = reader.read

        def read_then_stop(timeout_ms: int) -> FakeMessage | None:
            if reader.pos == 3:
                capture.request_stop()  # as the SIGTERM handler does, during a read
            return read(timeout_ms)

        reader.read = read_then_stop  # type: ignore[method-assign]
        return reader

    source.open = open_stopping  # type: ignore[method-assign]
    capture.run()
    assert [r["key"] for r in _rows(tmp_path)] == ["k0", "k1", "k2", "k3"]  # k3 read: kept


def test_no_temporary_file_is_left(tmp_path):
    _capture(tmp_path, FakeSource({"a": _messages(10)}), roll_bytes=1).run()
    assert sorted(p.name for p in (tmp_path / "cap").iterdir() if p.name.startswith("_")) == [
        STATE_FILE]


def test_the_progress_line_counts_messages_bytes_and_lag(tmp_path):
    lines: list[str] = []
    opts = CaptureOptions(output=str(tmp_path / "cap"), topics=("t",), until_end=True)
    Capture(FakeSource({"a": _messages(4)}), opts, say=lines.append, clock=lambda: 0.0,
            now_ms=lambda: T0 + 2003).run()
    assert lines[-1].startswith("capture: 4 messages, 0.0 MB, 1 files, lag 2.0 s")


@pytest.mark.parametrize(("options", "problem"), [
    ({}, "one way"),
    ({"topics": ("a",), "namespace": "public/default"}, "one way"),
    ({"namespace": "public"}, "tenant/namespace"),
    ({"pattern": "("}, "not a regex"),
    ({"topics": ("a",), "max_messages": 0}, "max-messages"),
    ({"topics": ("a",), "roll_seconds": 0}, "roll"),
])
def test_bad_options_are_refused(tmp_path, options, problem):
    with pytest.raises(CaptureError, match=problem):
        CaptureOptions(output=str(tmp_path), **options)


@pytest.mark.parametrize(("text", "expected"), [
    ("1736931600000", T0),
    ("2025-01-15T09:00:00Z", T0),
    ("2025-01-15T09:00:00", T0),
    ("2025-01-15T10:00:00+01:00", T0),
])
def test_times_are_epoch_ms_or_iso(text, expected):
    assert parse_time_ms(text, "--stop-at") == expected


@pytest.mark.parametrize(("service", "admin"), [
    ("pulsar://broker:6650", "http://broker:8080"),
    ("pulsar+ssl://broker:6651", "https://broker:8443"),
])
def test_admin_url_defaults_beside_the_service_url(service, admin):
    assert admin_url_for(service) == admin


@pytest.mark.parametrize(("args", "problem"), [
    (["--until-end"], "one way"),
    (["--topic", "a", "--stop-at", "yesterday"], "ISO-8601"),
    (["--topic", "a", "--token-file", "/no/such/file"], "does not exist"),
    (["--topic", "a", "--roll-mb", "-1"], "--roll-mb and --roll-seconds must be > 0"),
    (["--topic", "a", "--roll-mb", "0"], "--roll-mb and --roll-seconds must be > 0"),
])
def test_capture_usage_errors_exit_2_with_one_sentence(tmp_path, capsys, args, problem):
    code = main(["capture", "--service-url", "pulsar://127.0.0.1:1", "--output",
                 str(tmp_path / "cap"), *args])
    err = capsys.readouterr().err
    assert code == 2 and problem in err and len(err.strip().splitlines()) == 1


def test_the_state_file_is_json_with_no_secret(tmp_path):
    _capture(tmp_path, FakeSource({"a": _messages(2)})).run()
    assert set(json.loads((tmp_path / "cap" / STATE_FILE).read_text())) == {
        "files", "messages", "last_ids"}


def test_the_token_is_not_in_the_auths_repr():
    assert "s3cr3t" not in repr(PulsarAuth(token="s3cr3t", tls_trust_certs="/ca.pem"))


@pytest.mark.parametrize(("file_text", "env", "expected"), [
    ("from-file\n", {"TOKEN": "from-env"}, "from-file"),
    (None, {"TOKEN": "from-env"}, "from-env"),
    (None, {}, None),
])
def test_the_token_comes_from_its_file_else_the_environment(tmp_path, file_text, env,
                                                            expected):
    path = None
    if file_text is not None:
        path = tmp_path / "token"
        path.write_text(file_text)
    assert read_token(str(path) if path else None, env, "TOKEN") == expected
