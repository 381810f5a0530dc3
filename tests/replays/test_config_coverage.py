"""No documented key without an effect (issue #28): every key of ``conf/default.yaml`` is read
by the code that runs a replay — after the config is loaded and validated, so a key that is
only validated fails this test — on one of the two engines' paths through ``topic-replay
run``; and the keys of how records are read each change the tables when set to another valid
value.

How "read" is seen: every config model's attribute reads are recorded (``_Model.
__getattribute__`` wrapped) while ``jobs.replay.main`` runs a replay, except those made while
the config is being loaded (``load_config``: validation, defaults). Reads in Spark's Python
workers are not seen (other processes); the driver reads every key it hands them. A Kafka
input's keys are read by resolving a ``kafka://`` input as ``run`` does (no broker here).
"""

from __future__ import annotations

import json
import typing
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from deltalake import DeltaTable
from pydantic import BaseModel

import jobs.replay as cli
import pipelines.contract.config as config_module
from pipelines.contract.config import ReplayConfig, _Model, default_conf_path
from pipelines.contract.kafka import kafka_input


def _leaf_keys(node: Any, model: type[BaseModel], prefix: str = "") -> Iterator[tuple[str, str,
                                                                                     str]]:
    """(dotted key, model class name, field name) of every leaf of the default config, walking
    the models beside the YAML (a list of models: its first item)."""
    by_alias = {f.alias or n: n for n, f in model.model_fields.items()}
    for name, value in node.items():
        field = model.model_fields[by_alias[name]]
        sub = _model_of(field.annotation)
        key = f"{prefix}{name}"
        if sub is not None and isinstance(value, dict) and value:
            yield from _leaf_keys(value, sub, key + ".")
        elif sub is not None and isinstance(value, list) and value and isinstance(value[0], dict):
            yield from _leaf_keys(value[0], sub, key + ".0.")
        else:
            yield key, model.__name__, by_alias[name]


def _model_of(annotation: Any) -> type[BaseModel] | None:
    """The config model a field holds (itself, or the item type of a list), if any."""
    if typing.get_origin(annotation) is dict:  # a mapping of models (overrides): a leaf
        return None
    args = getattr(annotation, "__args__", ())
    for t in (annotation, *args):
        if isinstance(t, type) and issubclass(t, BaseModel):
            return t
    return None


DOCUMENTED = sorted(_leaf_keys(yaml.safe_load(Path(str(default_conf_path())).read_text()),
                               ReplayConfig))


def test_the_walk_finds_the_documented_keys():
    keys = [k for k, _, _ in DOCUMENTED]
    assert {"replay.speed", "input.timestamp_format", "subscriptions.0.consumers.0.join",
            "output.quarantine_raw", "console.spark_log", "policy.topic_overrides"} <= set(keys)
    assert len(keys) >= 60


@pytest.fixture
def reads(monkeypatch) -> set[tuple[str, str]]:
    """(model class name, field) of every config attribute read outside config loading."""
    seen: set[tuple[str, str]] = set()
    loading = [0]
    original = _Model.__getattribute__

    def traced(self: Any, name: str) -> Any:
        if not loading[0] and not name.startswith("_"):
            cls = type(self)
            if name in cls.model_fields:
                seen.add((cls.__name__, name))
        return original(self, name)

    real_load = config_module.load_config

    def load(*args: Any, **kwargs: Any) -> Any:
        loading[0] += 1
        try:
            return real_load(*args, **kwargs)
        finally:
            loading[0] -= 1

    monkeypatch.setattr(_Model, "__getattribute__", traced)
    monkeypatch.setattr(config_module, "load_config", load)
    return seen


def _log(folder: Path) -> Path:
    folder.mkdir()
    lines = [{"topic": "orders", "key": f"k{i % 7}", "publish_time": 1_736_931_600_000 + 50 * i,
              "payload_size": 100, "producer_name": f"p{i % 2}"} for i in range(400)]
    (folder / "a.json").write_text("".join(json.dumps(r) + "\n" for r in lines))
    return folder


@pytest.mark.spark
def test_every_documented_key_is_read_by_a_replay(spark, tmp_path, reads):
    logs = _log(tmp_path / "logs")
    sets = ["--set", "input.pseudonymize=[producer_name]", "--set", "output.validate=true",
            "--set", "policy.topic_overrides={orders: {max_segments: 8}}",
            "--set", "policy.namespace_overrides={min_segments: 1}"]
    env = {"TOPIC_REPLAY_SECRET": "s3cret"}
    with pytest.MonkeyPatch.context() as mp:
        for k, v in env.items():
            mp.setenv(k, v)
        for engine in ("local", "spark"):
            code = cli.main(["run", "--input", str(logs), "--output", str(tmp_path / engine),
                             "--engine", engine, *sets])
            assert code == 0
    # a Kafka input's keys: the same resolution `run --input kafka://` makes before it
    # starts Spark's Kafka source (a broker-backed replay is tests/guarantees/test_kafka_input.py)
    kafka = config_module.load_config(None, ["input.kafka.bootstrap_servers=127.0.0.1:9",
                                             "input.kafka.subscribe=orders"])
    assert kafka_input(kafka, ["kafka://"]) is not None
    unread = [key for key, cls, field in DOCUMENTED if (cls, field) not in reads]
    assert unread == []


# (key, a non-default valid value, the column of `messages` it changes)
READ_KEYS = [
    ("input.timestamp_format", "epoch_s", "publish_time"),
    ("input.time_zone", "Europe/Paris", "publish_time"),
    ("input.defaults.producer_name", "someone", "producer_name"),
    ("input.defaults.topic", "fallback", "topic"),
    ("input.columns", "{key: other}", "key"),
    ("output.keys", "hashed", "key"),
]


@pytest.mark.parametrize(("key", "value", "column"), READ_KEYS, ids=[k for k, _, _ in READ_KEYS])
def test_input_keys_change_the_tables(tmp_path, key, value, column):
    logs = tmp_path / "logs"
    logs.mkdir()
    (logs / "a.csv").write_text("topic,key,other,publish_time,payload_size,producer_name\n"
                                "orders,k1,o1,2025-01-15 09:00:00,10,\n"
                                ",k2,o2,2025-01-15 09:00:01,10,p\n")

    def messages(*sets: str) -> list[Any]:
        out = tmp_path / f"out{len(list(tmp_path.iterdir()))}"
        args = ["run", "--input", str(logs), "--output", str(out), "--engine", "local",
                "--allow-empty"]
        for s in sets:
            args += ["--set", s]
        assert cli.main(args) == 0
        df = DeltaTable(str(out / "messages")).to_pandas()
        return sorted(map(str, df[column])) if len(df) else []

    assert messages() != messages(f"{key}={value}")
