"""``topic-replay capture`` against a real Pulsar 4.0.7 standalone (``brokers.py``; ``make
pulsar-standalone`` fetches it; ``make test-slow``): known traffic — keys, ordering keys, event
times, properties, several producers with batching on, a partitioned topic — captured, then
replayed; every message arrives once with the fields it was sent with, also across a capture
killed mid-file (SIGKILL) and restarted, or stopped by SIGTERM."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from jobs.replay import main
from pipelines.ingest.capture import STATE_FILE
from pipelines.storage.delta import DeltaStore
from tests.guarantees.brokers import PULSAR_JARS, REPO, PulsarStandalone, skip_reason

pulsar = pytest.importorskip("pulsar", reason="pulsar-client not installed ([pulsar] extra)")

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(skip_reason(PULSAR_JARS, "pulsar-standalone") is not None,
                       reason=str(skip_reason(PULSAR_JARS, "pulsar-standalone"))),
]

NS = "persistent://public/default"
T_EVENT = 1_736_931_600_000


@pytest.fixture(scope="module")
def broker(tmp_path_factory) -> Iterator[PulsarStandalone]:
    with PulsarStandalone(tmp_path_factory.mktemp("pulsar")).start() as b:
        yield b


def create_partitioned(broker: PulsarStandalone, topic: str, partitions: int) -> None:
    url = f"{broker.admin_url}/admin/v2/persistent/public/default/{topic}/partitions"
    request = urllib.request.Request(url, data=str(partitions).encode(), method="PUT",
                                     headers={"Content-Type": "application/json"})
    urllib.request.urlopen(request, timeout=60).close()


def publish(broker: PulsarStandalone, topic: str, producers: tuple[str, ...],
            n: int) -> list[tuple]:
    """``n`` messages to ``topic`` from ``producers`` by turns (batching on: up to 20 a batch,
    10 ms): key ``k<i % 11>`` (every 9th keyless), an ordering key on every 5th, an event time
    on every 3rd, a property ``i``, ``i % 40 + 1`` payload bytes. Returns each message's
    expected (topic, key, ordering_key, producer_name, payload_size, event_time, property)."""
    client = pulsar.Client(broker.service_url,
                           logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Warn))
    made = {p: client.create_producer(f"{NS}/{topic}", producer_name=p, batching_enabled=True,
                                      batching_max_messages=20,
                                      batching_max_publish_delay_ms=10)
            for p in producers}
    sent, failures = [], []
    for i in range(n):
        name = producers[i % len(producers)]
        key = None if i % 9 == 0 else f"k{i % 11}"
        ordering = f"o{i % 4}" if i % 5 == 0 else None
        event = T_EVENT + i if i % 3 == 0 else None
        made[name].send_async(bytes(i % 40 + 1), lambda res, _id: failures.append(res)
                              if res != pulsar.Result.Ok else None,
                              properties={"i": str(i)}, partition_key=key,
                              ordering_key=ordering, event_timestamp=event)
        sent.append((f"{NS}/{topic}", ordering or key, ordering, name, i % 40 + 1, event,
                     str(i)))
    for p in made.values():
        p.flush()
    client.close()
    assert not failures
    return sent


def captured(folder: Path) -> list[tuple]:
    rows = [r for f in sorted(folder.glob("capture-*.parquet"))
            for r in pq.read_table(f).to_pylist()]
    return [(r["topic"], r["key"], r["ordering_key"], r["producer_name"], r["payload_size"],
             None if r["event_time"] is None else int(r["event_time"].timestamp() * 1000),
             dict(r["properties"])["i"]) for r in rows]


@pytest.fixture(scope="module")
def traffic(broker) -> dict[str, list[tuple]]:
    """A partitioned topic (3 partitions, two producers) and a plain one (one producer)."""
    create_partitioned(broker, "orders", 3)
    return {"orders": publish(broker, "orders", ("orders-eu", "orders-us"), 600),
            "clicks": publish(broker, "clicks", ("clicks-web",), 150)}


def _sorted(rows: list[tuple]) -> list[tuple]:
    return sorted(rows, key=str)


def test_capture_until_end_keeps_every_message_once_with_its_fields(broker, traffic, tmp_path):
    out = tmp_path / "cap"
    assert main(["capture", "--service-url", broker.service_url, "--topic", "orders",
                 "--topic", "clicks", "--until-end", "--output", str(out)]) == 0
    assert _sorted(captured(out)) == _sorted(traffic["orders"] + traffic["clicks"])


def test_batched_messages_carry_their_batch_index_and_partition(broker, traffic, tmp_path):
    out = tmp_path / "cap"
    main(["capture", "--service-url", broker.service_url, "--topic", "orders", "--until-end",
          "--output", str(out)])
    rows = [r for f in sorted(out.glob("capture-*.parquet")) for r in pq.read_table(f).to_pylist()]
    assert {r["partition"] for r in rows} == {0, 1, 2}
    assert max(r["batch_index"] for r in rows) > 0
    assert len({r["message_id"] for r in rows}) == len(rows)


def test_messages_of_one_batch_share_one_publish_time(broker, traffic, tmp_path):
    out = tmp_path / "cap"
    main(["capture", "--service-url", broker.service_url, "--topic", "orders", "--until-end",
          "--output", str(out)])
    times: dict[str, set[object]] = {}
    for f in sorted(out.glob("capture-*.parquet")):
        for r in pq.read_table(f).to_pylist():
            entry = r["message_id"].rsplit(":", 1)[0]  # ledger:entry:partition
            times.setdefault(entry, set()).add(r["publish_time"])
    assert {len(t) for t in times.values()} == {1}
    assert len(times) < 600  # batching was on: fewer entries than messages


def test_a_pattern_captures_the_matching_topics_partitions(broker, traffic, tmp_path):
    out = tmp_path / "cap"
    assert main(["capture", "--service-url", broker.service_url, "--admin-url",
                 broker.admin_url, "--topics-pattern", f"{NS}/ord.*", "--until-end",
                 "--output", str(out)]) == 0
    assert _sorted(captured(out)) == _sorted(traffic["orders"])


def _capture_process(broker: PulsarStandalone, out: Path, *extra: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "jobs.replay", "capture", "--service-url", broker.service_url,
         "--topic", "orders", "--topic", "clicks", "--output", str(out), *extra],
        cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)


def _wait_for_file(out: Path, proc: subprocess.Popen, number: int) -> None:
    """Until the capture has renamed its file ``number`` (or ended)."""
    while proc.poll() is None and not (out / f"capture-{number:06d}.parquet").exists():
        time.sleep(0.05)


def test_a_capture_killed_mid_file_and_restarted_loses_and_duplicates_nothing(
        broker, traffic, tmp_path):
    out = tmp_path / "cap"
    proc = _capture_process(broker, out, "--roll-mb", "0.005")  # live: runs until killed
    _wait_for_file(out, proc, 2)
    assert proc.poll() is None
    os.killpg(proc.pid, signal.SIGKILL)  # rows read but not yet in a file are lost with it
    proc.wait(30)
    assert main(["capture", "--service-url", broker.service_url, "--topic", "orders",
                 "--topic", "clicks", "--until-end", "--output", str(out)]) == 0
    assert _sorted(captured(out)) == _sorted(traffic["orders"] + traffic["clicks"])


def test_sigterm_stops_a_live_capture_cleanly(broker, traffic, tmp_path):
    out = tmp_path / "cap"
    proc = _capture_process(broker, out, "--roll-mb", "0.005")  # live: no stop condition
    _wait_for_file(out, proc, 1)
    os.killpg(proc.pid, signal.SIGTERM)
    output = proc.communicate(timeout=120)[0].decode()
    assert proc.returncode == 0, output
    assert "stopped" in output.splitlines()[-1]
    assert [p.name for p in out.iterdir() if p.name.startswith("_")] == [STATE_FILE]


def test_captured_traffic_replays_every_message_once(broker, traffic, tmp_path):
    out = tmp_path / "cap"
    main(["capture", "--service-url", broker.service_url, "--topic", "orders", "--topic",
          "clicks", "--until-end", "--output", str(out)])
    assert main(["run", "--engine", "local", "--input", str(out), "--preset", "pulsar",
                 "--output", str(tmp_path / "out"), "--run-id", "cap"]) == 0
    m = DeltaStore(str(tmp_path / "out"), engine="delta-rs").read("messages", "cap")
    got = sorted(zip(m["topic"], m["key"].where(m["key"].notna(), None), m["producer_name"],
                     m["payload_size"].astype(int), strict=True), key=str)
    sent = traffic["orders"] + traffic["clicks"]
    assert got == sorted(((t, k, p, s) for t, k, _o, p, s, _e, _i in sent), key=str)
