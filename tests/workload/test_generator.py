"""Tests for the deterministic workload generator (pipelines/workload/generator.py)."""

from __future__ import annotations

import gzip
import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml
from pydantic import ValidationError

from jobs.replay import main
from pipelines.workload.generator import (
    GenerateResult,
    WorkloadSpec,
    generate,
    is_omb_workload,
    load_any_spec,
    load_omb_workload,
    load_spec,
)

REPO = Path(__file__).resolve().parents[2]
START = pd.Timestamp("2024-01-01T00:00:00Z")
COLUMNS = ("topic", "key", "publish_time", "payload_size", "producer_name", "sequence_id")


def make_spec(topics: list[dict[str, Any]] | None = None, **overrides: Any) -> WorkloadSpec:
    """Small spec: one topic at 20 msg/s for 60 s, plain JSON lines, unless overridden."""
    topic = {
        "name": "t",
        "producers": 2,
        "rate": {"kind": "constant", "msg_rate": 20},
        "payload": {"kind": "fixed", "size": 100},
    }
    data: dict[str, Any] = {
        "seed": 7,
        "start_time": "2024-01-01T00:00:00Z",
        "duration_s": 60,
        "format": "json",
        "file_span_s": 30,
        "topics": topics if topics is not None else [topic],
    }
    data.update(overrides)
    return WorkloadSpec.model_validate(data)


def topic(**fields: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "name": "t",
        "producers": 1,
        "rate": {"kind": "constant", "msg_rate": 20},
        "payload": {"kind": "fixed", "size": 100},
    }
    base.update(fields)
    return base


def read_log(result: GenerateResult) -> pd.DataFrame:
    """All records of a JSON-lines (optionally gzip) result, in file order."""
    records: list[dict[str, Any]] = []
    for path in result.files:
        opener = gzip.open if path.suffix == ".gz" else open
        with opener(path, "rt", encoding="utf-8") as f:
            records.extend(json.loads(line) for line in f)
    df = pd.DataFrame(records, columns=list(COLUMNS))
    df["t"] = pd.to_datetime(df["publish_time"], format="ISO8601")
    return df


def per_second_counts(df: pd.DataFrame, duration_s: int) -> np.ndarray:
    seconds = ((df["t"] - START).dt.total_seconds() // 1).astype(int)
    return np.bincount(seconds, minlength=duration_s)


def run(
    spec: WorkloadSpec, tmp_path: Path, name: str = "out"
) -> tuple[GenerateResult, pd.DataFrame]:
    result = generate(spec, tmp_path / name)
    return result, read_log(result)


# ------------------------------------------------------------------------------ determinism


def test_same_spec_twice_gives_identical_gzip_json_bytes(tmp_path: Path) -> None:
    spec = make_spec(gzip=True)
    a = generate(spec, tmp_path / "a")
    b = generate(spec, tmp_path / "b")
    assert [p.name for p in a.files] == [p.name for p in b.files]
    assert [p.read_bytes() for p in a.files] == [p.read_bytes() for p in b.files]


def test_same_spec_twice_gives_identical_parquet_bytes(tmp_path: Path) -> None:
    spec = make_spec(format="parquet")
    a = generate(spec, tmp_path / "a")
    b = generate(spec, tmp_path / "b")
    assert [p.read_bytes() for p in a.files] == [p.read_bytes() for p in b.files]


def test_different_seed_gives_different_messages(tmp_path: Path) -> None:
    _, a = run(make_spec(seed=1), tmp_path, "a")
    _, b = run(make_spec(seed=2), tmp_path, "b")
    assert a["publish_time"].tolist() != b["publish_time"].tolist()


def test_messages_do_not_depend_on_file_span(tmp_path: Path) -> None:
    _, a = run(make_spec(file_span_s=7), tmp_path, "a")
    _, b = run(make_spec(file_span_s=60), tmp_path, "b")
    pd.testing.assert_frame_equal(a, b)


def test_adding_a_topic_leaves_other_topics_messages_unchanged(tmp_path: Path) -> None:
    _, alone = run(make_spec([topic(name="x")]), tmp_path, "a")
    _, both = run(make_spec([topic(name="y"), topic(name="x")]), tmp_path, "b")
    x = both[both["topic"] == "x"].reset_index(drop=True)
    pd.testing.assert_frame_equal(alone, x)


def test_gzip_header_has_zero_mtime_and_no_file_name(tmp_path: Path) -> None:
    result = generate(make_spec(gzip=True), tmp_path / "g")
    header = result.files[0].read_bytes()[:10]
    assert header[:3] == b"\x1f\x8b\x08"
    assert header[3] == 0  # flags: no FNAME
    assert header[4:8] == b"\x00\x00\x00\x00"  # mtime 0


# ------------------------------------------------------------------------------ arrivals


def test_message_count_within_poisson_tolerance(tmp_path: Path) -> None:
    spec = make_spec([topic(rate={"kind": "constant", "msg_rate": 50})], duration_s=200)
    result = generate(spec, tmp_path / "o")
    expected = 50 * 200
    assert spec.expected_messages() == expected
    assert abs(result.messages - expected) < 5 * math.sqrt(expected)


def test_zero_rate_gives_no_messages_but_all_span_files(tmp_path: Path) -> None:
    spec = make_spec([topic(rate={"kind": "constant", "msg_rate": 0})], duration_s=90)
    result = generate(spec, tmp_path / "o")
    assert result.messages == 0
    assert [p.name for p in result.files] == [
        "part-00000.json",
        "part-00001.json",
        "part-00002.json",
    ]


def test_steps_rate_changes_per_second_counts_at_step(tmp_path: Path) -> None:
    rate = {"kind": "steps", "steps": [{"at_s": 0, "msg_rate": 10}, {"at_s": 100, "msg_rate": 100}]}
    spec = make_spec([topic(rate=rate)], duration_s=200)
    _, df = run(spec, tmp_path)
    counts = per_second_counts(df, 200)
    assert counts[:100].mean() == pytest.approx(10, abs=5 * math.sqrt(10 / 100))
    assert counts[100:].mean() == pytest.approx(100, abs=5 * math.sqrt(100 / 100))


def test_steps_rate_is_zero_before_first_step(tmp_path: Path) -> None:
    rate = {"kind": "steps", "steps": [{"at_s": 30, "msg_rate": 50}]}
    _, df = run(make_spec([topic(rate=rate)]), tmp_path)
    counts = per_second_counts(df, 60)
    assert counts[:30].sum() == 0
    assert counts[30:].sum() > 0


def test_diurnal_rate_peaks_at_phase_and_dips_half_a_period_later(tmp_path: Path) -> None:
    rate = {"kind": "diurnal", "mean": 50, "amplitude": 0.8, "period_s": 400, "phase_s": 100}
    _, df = run(make_spec([topic(rate=rate)], duration_s=400), tmp_path)
    counts = per_second_counts(df, 400)
    peak = counts[90:110].mean()  # rate ≈ 90 around t = 100
    trough = counts[290:310].mean()  # rate ≈ 10 around t = 300
    assert peak == pytest.approx(90, rel=0.15)
    assert trough == pytest.approx(10, rel=0.4)


def test_burst_multiplies_rate_only_inside_its_window(tmp_path: Path) -> None:
    rate = {
        "kind": "constant",
        "msg_rate": 20,
        "bursts": [{"start_s": 50, "duration_s": 30, "multiplier": 5}],
    }
    _, df = run(make_spec([topic(rate=rate)], duration_s=120), tmp_path)
    counts = per_second_counts(df, 120)
    inside = counts[50:80].mean()
    outside = np.concatenate([counts[:50], counts[80:]]).mean()
    assert inside == pytest.approx(100, rel=0.1)
    assert outside == pytest.approx(20, rel=0.1)


def test_arrival_times_have_millisecond_precision(tmp_path: Path) -> None:
    _, df = run(make_spec(), tmp_path)
    assert df["publish_time"].str.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z").all()


# ------------------------------------------------------------------------------ files, order


def test_files_hold_their_event_time_span_and_are_sorted(tmp_path: Path) -> None:
    result = generate(make_spec(duration_s=60, file_span_s=20), tmp_path / "o")
    assert [p.name for p in result.files] == [f"part-0000{i}.json" for i in range(3)]
    previous = START
    for i, path in enumerate(result.files):
        times = pd.to_datetime(
            [json.loads(line)["publish_time"] for line in path.read_text().splitlines()],
            format="ISO8601",
        )
        assert times.is_monotonic_increasing
        assert times.min() >= START + pd.Timedelta(seconds=20 * i) and times.min() >= previous
        assert times.max() < START + pd.Timedelta(seconds=20 * (i + 1))
        previous = times.max()


def test_rows_are_sorted_by_publish_time_across_topics(tmp_path: Path) -> None:
    spec = make_spec([topic(name="a"), topic(name="b"), topic(name="c")])
    _, df = run(spec, tmp_path)
    assert df["t"].is_monotonic_increasing
    assert set(df["topic"]) == {"a", "b", "c"}


def test_output_columns_follow_input_contract_order(tmp_path: Path) -> None:
    result = generate(make_spec(), tmp_path / "o")
    first = json.loads(result.files[0].read_text().splitlines()[0])
    assert tuple(first) == COLUMNS


def test_existing_part_files_are_replaced_other_files_kept(tmp_path: Path) -> None:
    out = tmp_path / "o"
    generate(make_spec(duration_s=90), out)
    (out / "README.md").write_text("keep")
    result = generate(make_spec(duration_s=30), out)
    assert sorted(p.name for p in out.iterdir()) == ["README.md", "part-00000.json"]
    assert result.files == [out / "part-00000.json"]


def test_result_counts_messages_bytes_and_topics(tmp_path: Path) -> None:
    result, df = run(make_spec([topic(name="a"), topic(name="b")]), tmp_path)
    assert result.messages == len(df)
    assert result.messages_per_topic == df["topic"].value_counts().to_dict()
    assert result.bytes == sum(p.stat().st_size for p in result.files)


def test_parquet_has_contract_schema_with_microsecond_utc_timestamps(tmp_path: Path) -> None:
    spec = make_spec([topic(keys={"n_keys": 10, "keyless_share": 0.5})], format="parquet")
    result = generate(spec, tmp_path / "o")
    table = pq.read_table(result.files[0])
    assert tuple(table.schema.names) == COLUMNS
    assert table.schema.field("publish_time").type == pa.timestamp("us", tz="UTC")
    assert table.column("key").null_count > 0


def test_parquet_and_json_hold_the_same_messages(tmp_path: Path) -> None:
    _, js = run(make_spec([topic(keys={"keyless_share": 0.3})]), tmp_path, "j")
    res = generate(
        make_spec([topic(keys={"keyless_share": 0.3})], format="parquet"), tmp_path / "p"
    )
    pqt = pd.concat([pq.read_table(p).to_pandas() for p in res.files], ignore_index=True)
    assert pqt["key"].tolist() == js["key"].tolist()
    assert (pqt["publish_time"] == js["t"]).all()
    assert pqt["sequence_id"].tolist() == js["sequence_id"].tolist()


def test_csv_has_header_and_writes_null_key_as_empty_field(tmp_path: Path) -> None:
    spec = make_spec([topic(keys={"keyless_share": 1.0})], format="csv")
    result = generate(spec, tmp_path / "o")
    lines = result.files[0].read_text().splitlines()
    assert lines[0] == "topic,key,publish_time,payload_size,producer_name,sequence_id"
    assert lines[1].split(",")[1] == ""


# ------------------------------------------------------------------------------ producers


def test_producer_count_names_producers_after_topic(tmp_path: Path) -> None:
    _, df = run(make_spec([topic(name="orders", producers=3)]), tmp_path)
    assert sorted(df["producer_name"].unique()) == [
        "orders-producer-0",
        "orders-producer-1",
        "orders-producer-2",
    ]


def test_round_robin_producers_alternate_in_publish_order(tmp_path: Path) -> None:
    _, df = run(make_spec([topic(producers=["p", "q", "r"])]), tmp_path)
    expected = [["p", "q", "r"][i % 3] for i in range(len(df))]
    assert df["producer_name"].tolist() == expected


def test_sequence_id_is_zero_based_order_within_producer(tmp_path: Path) -> None:
    spec = make_spec([topic(producers=4, producer_assignment="uniform")], duration_s=60)
    _, df = run(spec, tmp_path)
    for _, group in df.groupby("producer_name"):
        assert group["sequence_id"].tolist() == list(range(len(group)))


# ------------------------------------------------------------------------------ keys


def test_zipf_top_key_share_matches_theory(tmp_path: Path) -> None:
    keys = {"distribution": "zipf", "n_keys": 100, "exponent": 1.1}
    spec = make_spec([topic(keys=keys, rate={"kind": "constant", "msg_rate": 200})], duration_s=100)
    _, df = run(spec, tmp_path)
    p0 = 1.0 / sum(1.0 / k**1.1 for k in range(1, 101))
    n = len(df)
    share = (df["key"] == "key-0").mean()
    assert share == pytest.approx(p0, abs=5 * math.sqrt(p0 * (1 - p0) / n))
    counts = df["key"].value_counts()
    assert counts.index[0] == "key-0"


def test_keyless_share_gives_null_keys(tmp_path: Path) -> None:
    keys = {"keyless_share": 0.25}
    spec = make_spec([topic(keys=keys, rate={"kind": "constant", "msg_rate": 100})], duration_s=100)
    _, df = run(spec, tmp_path)
    n = len(df)
    assert df["key"].isna().mean() == pytest.approx(0.25, abs=5 * math.sqrt(0.25 * 0.75 / n))


def test_round_robin_keys_cycle_over_keyed_messages(tmp_path: Path) -> None:
    keys = {"distribution": "round_robin", "n_keys": 7, "keyless_share": 0.2, "prefix": "k"}
    _, df = run(make_spec([topic(keys=keys)]), tmp_path)
    keyed = df["key"].dropna().tolist()
    assert keyed == [f"k{i % 7}" for i in range(len(keyed))]


def test_uniform_keys_use_every_key_about_equally(tmp_path: Path) -> None:
    keys = {"distribution": "uniform", "n_keys": 10}
    spec = make_spec([topic(keys=keys, rate={"kind": "constant", "msg_rate": 200})], duration_s=50)
    _, df = run(spec, tmp_path)
    shares = df["key"].value_counts(normalize=True)
    assert len(shares) == 10
    assert shares.max() - shares.min() < 0.02


def test_hot_set_sends_hot_share_to_hot_fraction_of_keys(tmp_path: Path) -> None:
    keys = {"distribution": "hot_set", "n_keys": 100, "hot_fraction": 0.05, "hot_share": 0.8}
    spec = make_spec([topic(keys=keys, rate={"kind": "constant", "msg_rate": 200})], duration_s=50)
    _, df = run(spec, tmp_path)
    hot = df["key"].isin([f"key-{i}" for i in range(5)]).mean()
    assert hot == pytest.approx(0.8, abs=0.02)


def test_key_prefix_names_keys(tmp_path: Path) -> None:
    keys = {"n_keys": 3, "prefix": "device-"}
    _, df = run(make_spec([topic(keys=keys)]), tmp_path)
    assert set(df["key"]) == {"device-0", "device-1", "device-2"}


# ------------------------------------------------------------------------------ payloads


def test_fixed_payload_size(tmp_path: Path) -> None:
    _, df = run(make_spec([topic(payload={"kind": "fixed", "size": 321})]), tmp_path)
    assert set(df["payload_size"]) == {321}


def test_uniform_payload_sizes_stay_within_bounds(tmp_path: Path) -> None:
    payload = {"kind": "uniform", "min": 10, "max": 20}
    _, df = run(make_spec([topic(payload=payload)]), tmp_path)
    assert df["payload_size"].min() == 10
    assert df["payload_size"].max() == 20


def test_lognormal_payload_mean_matches_mean_bytes(tmp_path: Path) -> None:
    payload = {"kind": "lognormal", "mean_bytes": 500, "sigma": 0.5}
    spec = make_spec([topic(payload=payload, rate={"kind": "constant", "msg_rate": 200})])
    _, df = run(spec, tmp_path)
    assert df["payload_size"].mean() == pytest.approx(500, rel=0.03)


def test_empirical_payload_resamples_sizes_from_file(tmp_path: Path) -> None:
    sizes = tmp_path / "sizes.csv"
    sizes.write_text("size\n10\n20\n4000\n")
    _, df = run(make_spec([topic(payload={"kind": "empirical", "file": str(sizes)})]), tmp_path)
    assert set(df["payload_size"]) == {10, 20, 4000}


def test_load_spec_resolves_empirical_file_next_to_spec(tmp_path: Path) -> None:
    (tmp_path / "sizes.txt").write_text("7\n9\n")
    spec_data = make_spec().model_dump(mode="json")
    spec_data["topics"][0]["payload"] = {"kind": "empirical", "file": "sizes.txt"}
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(spec_data))
    spec = load_spec(path)
    _, df = run(spec, tmp_path)
    assert set(df["payload_size"]) == {7, 9}


# ------------------------------------------------------------------------------ validation


def test_unknown_top_level_key_is_an_error_naming_it(tmp_path: Path) -> None:
    path = tmp_path / "spec.yaml"
    data = make_spec().model_dump(mode="json")
    data["durration_s"] = 10
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(ValidationError, match="durration_s"):
        load_spec(path)


def test_unknown_nested_key_is_an_error_naming_it() -> None:
    with pytest.raises(ValidationError, match="msg_rat"):
        make_spec([topic(rate={"kind": "constant", "msg_rat": 5})])


def test_gzip_with_parquet_is_rejected() -> None:
    with pytest.raises(ValidationError, match="gzip"):
        make_spec(format="parquet", gzip=True)


def test_zipf_exponent_on_other_distribution_is_rejected() -> None:
    with pytest.raises(ValidationError, match="exponent"):
        make_spec([topic(keys={"distribution": "uniform", "exponent": 1.2})])


def test_naive_start_time_is_taken_as_utc() -> None:
    spec = make_spec(start_time="2024-01-01T00:00:00")
    assert spec.start_ms == 1704067200000


def test_dumped_spec_loads_back_equal(tmp_path: Path) -> None:
    spec = make_spec([topic(keys={"distribution": "hot_set", "hot_share": 0.7})])
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(spec.model_dump(mode="json")))
    assert load_spec(path) == spec


def test_sample_data_is_what_the_sample_spec_generates(tmp_path: Path) -> None:
    spec = load_spec(REPO / "conf" / "workloads" / "sample.yaml")
    result = generate(spec, tmp_path / "sample")
    committed = sorted((REPO / "data" / "sample").glob("part-*.json.gz"))
    assert [p.name for p in committed] == [p.name for p in result.files]
    for ours, theirs in zip(result.files, committed, strict=True):
        assert gzip.decompress(ours.read_bytes()) == gzip.decompress(theirs.read_bytes())


def test_sample_spec_loads_with_planned_size() -> None:
    spec = load_spec(REPO / "conf" / "workloads" / "sample.yaml")
    assert [t.name for t in spec.topics] == ["orders", "clicks", "telemetry"]
    assert spec.duration_s == 3600 and spec.file_count == 12
    assert 150_000 <= spec.expected_messages() <= 300_000


# ------------------------------------------------------------------------------ OMB


OMB_YAML = """
name: 2 topics / 4 partitions / 1kb
topics: 2
partitionsPerTopic: 4
keyDistributor: "KEY_ROUND_ROBIN"
messageSize: 1024
payloadFile: "payload/payload-1Kb.data"
subscriptionsPerTopic: 2
consumerPerSubscription: 3
producersPerTopic: 5
producerRate: 100
consumerBacklogSizeGB: 0
testDurationMinutes: 1
"""


def write_omb(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "omb.yaml"
    path.write_text(text)
    return path


def test_omb_workload_maps_topics_rates_and_producers(tmp_path: Path) -> None:
    spec = load_omb_workload(write_omb(tmp_path, OMB_YAML))
    assert spec.duration_s == 60
    assert [t.name for t in spec.topics] == ["omb-topic-0", "omb-topic-1"]
    assert all(t.rate.kind == "constant" and t.rate.msg_rate == 50 for t in spec.topics)
    assert all(len(t.producer_names) == 5 for t in spec.topics)
    assert spec.topics[0].payload.kind == "fixed" and spec.topics[0].payload.size == 1024
    assert spec.topics[0].keys.distribution == "round_robin"
    assert spec.topics[0].keys.n_keys == 10_000


def test_omb_workload_keeps_partitions_and_consumers_in_omb_field(tmp_path: Path) -> None:
    spec = load_omb_workload(write_omb(tmp_path, OMB_YAML))
    assert spec.omb is not None
    assert spec.omb.partitions_per_topic == 4
    assert spec.omb.consumers["omb-topic-1"] == {
        "sub-000": ["sub-000-consumer-0", "sub-000-consumer-1", "sub-000-consumer-2"],
        "sub-001": ["sub-001-consumer-0", "sub-001-consumer-1", "sub-001-consumer-2"],
    }


def test_omb_no_key_distributor_gives_keyless_messages(tmp_path: Path) -> None:
    text = OMB_YAML.replace("KEY_ROUND_ROBIN", "NO_KEY")
    spec = load_omb_workload(write_omb(tmp_path, text), gzip=False)
    _, df = run(spec, tmp_path)
    assert len(df) > 0 and df["key"].isna().all()


def test_omb_zero_producer_rate_is_rejected(tmp_path: Path) -> None:
    text = OMB_YAML.replace("producerRate: 100", "producerRate: 0")
    with pytest.raises(ValueError, match="producerRate"):
        load_omb_workload(write_omb(tmp_path, text))


def test_omb_unknown_key_is_an_error_naming_it(tmp_path: Path) -> None:
    with pytest.raises(ValidationError, match=r"producerRat\b"):
        load_omb_workload(write_omb(tmp_path, OMB_YAML + "producerRat: 5\n"))


# ------------------------------------------------------------------ OMB through the CLI


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        ({"topics": 2, "producerRate": 10, "messageSize": 1, "testDurationMinutes": 1}, True),
        ({"topics": 1, "partitionsPerTopic": 4}, True),  # integer topics: OMB
        ({"seed": 1, "topics": [{"name": "t"}], "duration_s": 60}, False),
        (["not", "a", "mapping"], False),
    ],
)
def test_is_omb_workload_tells_omb_from_workload_spec(data: Any, expected: bool) -> None:
    assert is_omb_workload(data) is expected


def test_load_any_spec_detects_omb_file(tmp_path: Path) -> None:
    spec = load_any_spec(write_omb(tmp_path, OMB_YAML))
    assert spec.omb is not None and [t.name for t in spec.topics] == ["omb-topic-0",
                                                                      "omb-topic-1"]


def test_load_any_spec_rejects_omb_options_for_workload_spec(tmp_path: Path) -> None:
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(make_spec().model_dump(mode="json", exclude_none=True)))
    with pytest.raises(ValueError, match="apply only to an OMB workload"):
        load_any_spec(path, seed=3)


def test_cli_generate_omb_file_prints_counts_and_consumers(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    spec = write_omb(tmp_path, OMB_YAML.replace("testDurationMinutes: 1",
                                                "testDurationMinutes: 1\nwarmupDurationMinutes: 0"))
    rc = main(["generate", "--spec", str(spec), "--output", str(tmp_path / "out")])
    printed = json.loads(capsys.readouterr().out)
    files = sorted((tmp_path / "out").glob("part-*"))
    assert rc == 0
    assert printed["files"] == len(files) == 1
    assert printed["messages"] == sum(printed["messages_per_topic"].values())
    assert set(printed["messages_per_topic"]) == {"omb-topic-0", "omb-topic-1"}
    assert printed["duration_s"] == 60
    assert printed["omb"]["consumers"]["omb-topic-0"]["sub-001"] == [
        "sub-001-consumer-0", "sub-001-consumer-1", "sub-001-consumer-2"]


def test_cli_generate_omb_producer_rate_overrides_zero_rate(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    spec = write_omb(tmp_path, OMB_YAML.replace("producerRate: 100", "producerRate: 0"))
    rc = main(["generate", "--spec", str(spec), "--output", str(tmp_path / "out"),
               "--producer-rate", "20", "--omb"])
    printed = json.loads(capsys.readouterr().out)
    assert rc == 0
    # --producer-rate is the total over both topics: Poisson around 20 msg/s x 60 s
    assert 1200 * 0.85 < printed["messages"] < 1200 * 1.15


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (OMB_YAML.replace("producerRate: 100", "producerRate: 0"), "producerRate 0"),
        (OMB_YAML + "producerRat: 5\n", "producerRat: Extra inputs are not permitted"),
    ],
)
def test_cli_generate_bad_omb_file_exits_2_with_one_sentence(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str, message: str) -> None:
    rc = main(["generate", "--spec", str(write_omb(tmp_path, text)), "--output",
               str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert rc == 2
    assert message in err and len(err.strip().splitlines()) == 1


def test_cli_generate_workload_spec_prints_counts(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(make_spec().model_dump(mode="json", exclude_none=True)))
    rc = main(["generate", "--spec", str(path), "--output", str(tmp_path / "out")])
    printed = json.loads(capsys.readouterr().out)
    assert rc == 0
    assert printed["messages"] == printed["messages_per_topic"]["t"] > 0
    assert "omb" not in printed


@pytest.mark.parametrize(
    ("prefixes", "table_keys"),
    [
        (["k-"] * 500, 1_000),             # one key space shared by 500 topics
        (["a-", "b-"] * 250, 2_000),        # two spaces
    ],
    ids=["shared", "two-spaces"],
)
def test_the_key_table_follows_distinct_key_spaces_not_topics(prefixes, table_keys) -> None:
    from pipelines.workload.generator import _Tables  # noqa: PLC0415 - the internal table

    keys = {"distribution": "zipf", "n_keys": 1_000}
    spec = make_spec([topic(name=f"t{i}", keys={**keys, "prefix": p})
                      for i, p in enumerate(prefixes)], duration_s=1)
    assert len(_Tables(spec).keys) == table_keys


def test_topics_sharing_a_key_space_still_draw_their_own_keys(tmp_path: Path) -> None:
    keys = {"distribution": "zipf", "n_keys": 50, "prefix": "k-"}
    spec = make_spec([topic(name=f"t{i}", keys=keys) for i in range(3)])
    generate(spec, tmp_path)
    df = pd.concat(pd.read_json(f, lines=True) for f in sorted(tmp_path.glob("part-*")))
    per_topic = df.groupby("topic")["key"].apply(lambda s: tuple(s.head(20)))
    assert per_topic.nunique() == 3  # independent draws per topic (own random stream)
    assert set(df["key"]) <= {f"k-{i}" for i in range(50)}
