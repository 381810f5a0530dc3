"""Kafka topics as input (``--input kafka://HOST:PORT/TOPIC_OR_PATTERN``) on a real Apache Kafka
broker (KRaft, ``brokers.py``; ``make kafka-broker`` fetches it): ``run`` replays what the
topics hold, every record once with its fields; ``stream`` follows them and a restart resumes
from the offsets in its checkpoint. The records are written with Spark's own Kafka sink."""

from __future__ import annotations

from collections.abc import Iterator

import pandas as pd
import pytest

from jobs.replay import main
from pipelines.contract.config import load_config
from pipelines.contract.kafka import KafkaInput, kafka_spec
from pipelines.spark.replay import Replay
from pipelines.spark.session import kafka_jars
from pipelines.storage.delta import DeltaStore
from tests.guarantees.brokers import KAFKA_JARS, KafkaBroker, skip_reason

pytestmark = [
    pytest.mark.spark,
    pytest.mark.skipif(skip_reason(KAFKA_JARS, "kafka-broker") is not None,
                       reason=str(skip_reason(KAFKA_JARS, "kafka-broker"))),
    pytest.mark.skipif(not kafka_jars(), reason="no Kafka-source jars (make kafka-jars)"),
]

PRODUCERS = ("orders-eu", "orders-us", None)  # None: a record without the producer header


@pytest.fixture(scope="session")
def kafka(tmp_path_factory) -> Iterator[KafkaBroker]:
    """One broker for the session, started on free ports, stopped by its pid."""
    with KafkaBroker(tmp_path_factory.mktemp("kafka")).start() as broker:
        yield broker


def records(topic: str, start: int, n: int) -> pd.DataFrame:
    """``n`` known records: key ``k<i % 7>`` (every 10th keyless), value of ``i % 50 + 1``
    bytes, producer header by turns (or none), partition ``i % 3``."""
    rows = []
    for i in range(start, start + n):
        producer = PRODUCERS[i % len(PRODUCERS)]
        rows.append({"topic": topic, "key": None if i % 10 == 0 else f"k{i % 7}",
                     "value": bytes(i % 50 + 1),
                     "headers": [] if producer is None else [("producer", producer.encode())],
                     "partition": i % 3})
    return pd.DataFrame(rows)


BAD_KEY = b"\xff\xfe"  # not UTF-8: the record is quarantined as invalid_utf8


def publish(spark, bootstrap: str, frame: pd.DataFrame) -> None:
    frame = frame.assign(key=[k if k is None or isinstance(k, bytes) else k.encode()
                              for k in frame["key"]])
    schema = ("topic string, key binary, value binary, "
              "headers array<struct<key:string,value:binary>>, partition int")
    (spark.createDataFrame(frame, schema).write.format("kafka")
     .option("kafka.bootstrap.servers", bootstrap).save())


def expected(frame: pd.DataFrame) -> list[tuple[str, str | None, str, int]]:
    """(topic, key, producer_name, payload_size) of each record, sorted."""
    out = []
    for r in frame.itertuples():
        producer = r.headers[0][1].decode() if r.headers else f"partition-{r.partition}"
        out.append((r.topic, r.key, producer, len(r.value)))
    return sorted(out, key=str)


def replayed(store: DeltaStore, run_id: str) -> list[tuple[str, str | None, str, int]]:
    m = store.read("messages", run_id)
    return sorted(((r.topic, None if pd.isna(r.key) else r.key, r.producer_name,
                    int(r.payload_size)) for r in m.itertuples()), key=str)


@pytest.fixture(scope="module")
def batch_run(spark, kafka, tmp_path_factory):
    """``run --input kafka://…/orders`` over 90 published records (and 20 on another topic)."""
    sent = records("orders", 0, 90)
    publish(spark, kafka.bootstrap, sent)
    publish(spark, kafka.bootstrap, pd.DataFrame([{"topic": "orders", "key": BAD_KEY,
                                                   "value": b"x", "headers": [],
                                                   "partition": 0}]))
    publish(spark, kafka.bootstrap, records("clicks", 0, 20))
    out = tmp_path_factory.mktemp("kafka-run") / "out"
    code = main(["run", "--input", f"kafka://{kafka.bootstrap}/orders", "--output", str(out),
                 "--run-id", "k1", "--set", "output.tables=[messages,quarantine,runs]"])
    return code, sent, DeltaStore(str(out), engine="delta-rs")


def test_run_replays_every_record_of_the_topic_once_with_its_fields(batch_run):
    code, sent, store = batch_run
    assert code == 0
    assert replayed(store, "k1") == expected(sent)


def test_a_record_breaking_the_contract_is_quarantined_with_where_it_came_from(kafka,
                                                                                batch_run):
    _, _, store = batch_run
    q = store.read("quarantine", "k1")
    assert list(q["reason"]) == ["invalid_utf8"]
    assert q["source_file"].iloc[0] == f"kafka://{kafka.bootstrap}/orders/0/30"


def test_publish_time_is_the_record_timestamp(spark, kafka, batch_run):
    _, _, store = batch_run
    source = (spark.read.format("kafka").option("kafka.bootstrap.servers", kafka.bootstrap)
              .option("subscribe", "orders").load().where("key != X'FFFE' OR key IS NULL")
              .select("timestamp").toPandas())
    replayed_times = store.read("messages", "k1")["publish_time"]
    assert sorted(pd.to_datetime(replayed_times, utc=True)) == sorted(
        pd.to_datetime(source["timestamp"]).dt.tz_localize("UTC"))


def test_runs_table_names_the_kafka_input(kafka, batch_run):
    _, _, store = batch_run
    assert f"kafka://{kafka.bootstrap}/orders" in store.read("runs", "k1")["inputs"].iloc[0]


def test_stream_follows_the_topic_and_a_restart_resumes_from_its_offsets(spark, kafka,
                                                                          tmp_path):
    cfg = load_config(None, ["output.tables=[messages,quarantine,runs]"])
    source = KafkaInput(kafka.bootstrap, subscribe="live")
    spec = kafka_spec(cfg, None)

    def follow(n_new: int, start: int) -> int:
        replay = Replay(spark, cfg, spec, [source.url], str(tmp_path / "out"), "live",
                        progress=lambda _: None, kafka=source)
        replay.run(stream=True, trigger_seconds=0.2)
        publish(spark, kafka.bootstrap, records("live", start, n_new))
        replay.query.processAllAvailable()
        replay.request_stop()
        replay.await_query()
        return int(replay.state.counts.get("accepted", 0))

    assert follow(30, 0) == 30
    assert follow(25, 30) == 55  # the first 30 are not read again
