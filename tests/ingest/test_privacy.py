"""Privacy options without Spark: pseudonyms, withheld key columns, quarantine digests, the
CLI's refusal of a missing secret and its help (issue #21)."""

from __future__ import annotations

import hashlib
import hmac
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import pytest

import pipelines.spark.session
from jobs.replay import main
from pipelines.contract.config import ConfigError, load_config
from pipelines.ingest.privacy import (
    PrivacyError,
    conceal_quarantine,
    pseudonym,
    pseudonymizer,
    withheld_columns,
    withhold,
)


def test_pseudonym_is_the_first_128_bits_of_the_hmac_sha256_in_hex() -> None:
    expected = hmac.new(b"s3cret", b"customer-17", hashlib.sha256).hexdigest()[:32]
    assert pseudonym("customer-17", b"s3cret") == expected


@pytest.mark.parametrize(("a", "b", "same"), [
    (("k", b"s"), ("k", b"s"), True),
    (("k", b"s"), ("k", b"t"), False),
    (("k", b"s"), ("j", b"s"), False),
], ids=["same_value_and_secret", "other_secret", "other_value"])
def test_pseudonym_depends_on_value_and_secret(a: tuple[str, bytes], b: tuple[str, bytes],
                                               same: bool) -> None:
    assert (pseudonym(*a) == pseudonym(*b)) is same


def test_pseudonymizer_replaces_only_its_columns_and_keeps_nulls() -> None:
    cfg = load_config(None, ["input.pseudonymize=[key]"])
    p = pseudonymizer(cfg, {"TOPIC_REPLAY_SECRET": "s"})
    assert p is not None
    batch = pa.RecordBatch.from_pydict({"key": ["a", None, "a"], "producer_name": ["p"] * 3})
    out = p.batch(batch)
    assert out.column("key").to_pylist() == [pseudonym("a", b"s"), None, pseudonym("a", b"s")]
    assert out.column("producer_name").to_pylist() == ["p"] * 3


def test_pseudonymizer_frame_matches_its_batch() -> None:
    cfg = load_config(None, ["input.pseudonymize=[producer_name, key]"])
    p = pseudonymizer(cfg, {"TOPIC_REPLAY_SECRET": "s"})
    assert p is not None
    df = pd.DataFrame({"key": ["a", None], "producer_name": ["p", "q"], "n": [1, 2]})
    out = p.frame(df)
    assert out["key"].tolist() == [pseudonym("a", b"s"), None]
    assert out["producer_name"].tolist() == [pseudonym("p", b"s"), pseudonym("q", b"s")]
    assert out["n"].tolist() == [1, 2]


def test_nothing_to_pseudonymize_needs_no_secret() -> None:
    assert pseudonymizer(load_config(None, []), {}) is None


def test_missing_secret_is_one_sentence_naming_the_variable() -> None:
    cfg = load_config(None, ["input.pseudonymize=[key]", "input.pseudonymize_secret_env=MY_S"])
    with pytest.raises(PrivacyError, match=r"^input.pseudonymize lists key but the secret's "
                                           r"environment variable MY_S is not set"):
        pseudonymizer(cfg, {"MY_S": ""})


def test_pseudonymizer_repr_hides_the_secret() -> None:
    p = pseudonymizer(load_config(None, ["input.pseudonymize=[key]"]),
                      {"TOPIC_REPLAY_SECRET": "hunter2"})
    assert "hunter2" not in repr(p) and "hunter2" not in str(p)


@pytest.mark.parametrize(("sets", "expected"), [
    (["input.pseudonymize=[nickname]"], "input.pseudonymize.0"),
    (["input.pseudonymize=[key, key]"], "listed more than once: key"),
    (["input.pseudonymize_secret_env=not a name"], "must be an environment variable name"),
    (["output.keys=masked"], "output.keys"),
    (["output.quarantine_raw=maybe"], "output.quarantine_raw"),
], ids=["unknown_column", "duplicate", "bad_env_name", "unknown_keys_mode", "not_a_bool"])
def test_invalid_privacy_option_is_a_config_error(sets: list[str], expected: str) -> None:
    with pytest.raises(ConfigError, match=expected):
        load_config(None, sets)


def test_privacy_defaults_keep_everything() -> None:
    cfg = load_config(None, [])
    assert (cfg.input.pseudonymize, cfg.input.pseudonymize_secret_env, cfg.output.keys,
            cfg.output.quarantine_raw) == ([], "TOPIC_REPLAY_SECRET", "raw", True)


def test_pseudonymized_columns_are_in_canonical_order() -> None:
    cfg = load_config(None, ["input.pseudonymize=[key, producer_name]"])
    assert cfg.input.pseudonymize == ["producer_name", "key"]


@pytest.mark.parametrize(("mode", "expected"), [
    ("raw", {}),
    ("hashed", {"messages": ("key",)}),
    ("none", {"messages": ("key", "hash32", "segment_hash", "hash_b")}),
])
def test_keys_mode_withholds_message_columns(mode: str, expected: dict[str, Any]) -> None:
    assert withheld_columns(load_config(None, [f"output.keys={mode}"])) == expected


def test_withhold_nulls_the_columns_and_keeps_their_types() -> None:
    t = pa.table({"key": ["a", "b"], "hash32": pa.array([1, 2], pa.int64()), "n": [1, 2]})
    out = withhold(t, ("key", "hash32", "absent"))
    assert out.schema == t.schema
    assert out.column("key").null_count == 2 and out.column("hash32").null_count == 2
    assert out.column("n").to_pylist() == [1, 2]


def test_concealed_quarantine_keeps_file_errors_and_digests_records() -> None:
    q = pd.DataFrame({"source_file": ["f", "g"], "raw_record": ['{"key": "c-1"}', "EOF"],
                      "reason": ["malformed_record", "truncated_file"]})
    out = conceal_quarantine(q, ("truncated_file",))
    digest = "sha256:" + hashlib.sha256(b'{"key": "c-1"}').hexdigest()
    assert out["raw_record"].tolist() == [digest, "EOF"]
    assert out["source_file"].tolist() == ["f", "g"]


# ---- CLI ------------------------------------------------------------------------------------


@pytest.fixture
def no_spark(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*_: Any, **__: Any) -> None:
        raise AssertionError("Spark was started")

    monkeypatch.setattr(pipelines.spark.session, "build_session", refuse)


def test_missing_secret_is_refused_before_spark(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                monkeypatch: pytest.MonkeyPatch,
                                                no_spark: None) -> None:
    monkeypatch.delenv("TOPIC_REPLAY_SECRET", raising=False)
    log = tmp_path / "log.json"
    log.write_text('{"topic": "t", "publish_time": 0, "payload_size": 1}\n')
    code = main(["run", "--input", str(log), "--output", str(tmp_path / "out"),
                 "--set", "input.pseudonymize=[producer_name]"])
    err = capsys.readouterr().err
    assert code == 2
    assert err == ("topic-replay: error: input.pseudonymize lists producer_name but the "
                   "secret's environment variable TOPIC_REPLAY_SECRET is not set (set it, or "
                   "change input.pseudonymize_secret_env)\n")


def test_run_help_lists_the_privacy_options(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["run", "--help"])
    out = capsys.readouterr().out
    for option in ("input.pseudonymize=", "input.pseudonymize_secret_env=", "output.keys=",
                   "output.quarantine_raw="):
        assert option in out
