"""Kafka inputs before Spark starts (pipelines/contract/kafka.py, jobs/replay.py): which URL
means which topics, and the mistakes refused with one sentence (exit 2)."""

from __future__ import annotations

import pytest

import pipelines.spark.session as session_module
from jobs.replay import main
from pipelines.contract.config import ConfigError, load_config
from pipelines.contract.kafka import KafkaInputError, kafka_input, kafka_spec, parse_kafka_url
from pipelines.spark.session import KAFKA_JARS_ENV, kafka_jars


@pytest.mark.parametrize(("url", "expected"), [
    ("kafka://b:9092/orders", ("b:9092", "orders", None)),
    ("kafka://b1:9092,b2:9092/orders,clicks", ("b1:9092,b2:9092", "orders,clicks", None)),
    ("kafka://b:9092/orders.v1", ("b:9092", "orders.v1", None)),
    ("kafka://b:9092/orders-.*", ("b:9092", None, "orders-.*")),
])
def test_kafka_url_names_topics_or_a_pattern(url, expected):
    assert parse_kafka_url(url) == expected


@pytest.mark.parametrize(("url", "problem"), [
    ("kafka://b/orders", "HOST:PORT"),
    ("kafka://b:9092", "name the topics"),
    ("kafka://b:9092/(", "neither topic names nor a regex"),
])
def test_a_bad_kafka_url_is_refused(url, problem):
    with pytest.raises(KafkaInputError, match=problem):
        parse_kafka_url(url)


def test_a_bare_kafka_url_takes_the_input_from_the_config():
    cfg = load_config(None, ["input.format=kafka", "input.kafka.bootstrap_servers=b:9092",
                             "input.kafka.subscribe_pattern=orders-.*",
                             "input.kafka.producer_header=app"])
    got = kafka_input(cfg, ["kafka://"])
    assert got is not None
    assert (got.url, got.producer_header) == ("kafka://b:9092/orders-.*", "app")


def test_files_are_not_a_kafka_input():
    assert kafka_input(load_config(None, []), ["logs/"]) is None


def test_input_columns_map_over_the_kafka_preset():
    cfg = load_config(None, ["input.columns.key=partition"])
    assert kafka_spec(cfg, None).columns["key"] == "partition"


def test_a_secret_in_kafka_options_is_refused():
    with pytest.raises(ConfigError, match="holds a secret"):
        load_config(None, ["input.kafka.options={kafka.sasl.jaas.config: x}"])


@pytest.mark.parametrize(("args", "problem"), [
    (["run", "--engine", "local", "--input", "kafka://b:9092/t"], "--engine spark"),
    (["run", "--input", "kafka://b:9092/t", "--input", "logs/"], "without files"),
    (["run", "--input", "kafka://b:9092/t", "--preset", "online-retail"], "preset kafka"),
    (["run", "--input", "logs/", "--set", "input.format=kafka"], "one --input kafka://"),
    (["run", "--input", "kafka://", "--set", "input.format=kafka"], "bootstrap_servers"),
    (["compare", "--input", "kafka://b:9092/t", "--scenario", "a=policy.max_segments=2"],
     "run and stream only"),
])
def test_kafka_usage_errors_exit_2_with_one_sentence(tmp_path, capsys, monkeypatch, args,
                                                    problem):
    (tmp_path / "logs").mkdir()
    monkeypatch.chdir(tmp_path)
    code = main([*args, "--output", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert code == 2 and problem in err and len(err.strip().splitlines()) == 1


def test_kafka_jars_are_the_jars_of_the_folder_the_environment_names(tmp_path, monkeypatch):
    (tmp_path / "b.jar").touch()
    (tmp_path / "a.jar").touch()
    (tmp_path / "notes.txt").touch()
    monkeypatch.setenv(KAFKA_JARS_ENV, str(tmp_path))
    assert kafka_jars() == [str(tmp_path / "a.jar"), str(tmp_path / "b.jar")]
    monkeypatch.setenv(KAFKA_JARS_ENV, str(tmp_path / "empty"))
    assert kafka_jars() == []


@pytest.mark.spark
def test_without_the_kafka_source_a_kafka_input_is_refused_with_one_sentence(
        spark, tmp_path, capsys, monkeypatch):
    # The session's driver cannot load the Kafka source (as without the jars of
    # kafka_jars() on spark.jars): the session of the tests stands in for a new one,
    # which would start a JVM of its own (13 s), with the class asked for one it has not.
    monkeypatch.setattr(session_module, "KAFKA_SOURCE_CLASS", "org.example.NoKafkaSource")
    code = main(["run", "--input", "kafka://127.0.0.1:9/t", "--output", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert code == 2
    assert "needs Spark's Kafka source" in err
    assert len(err.strip().splitlines()) == 1
