"""JSON lines have no schema up front (issue #19): a mapped field absent from every record of
the first micro-batch is reported by name on the console and in the run summary; the summary
always shows the keyless share of messages."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pipelines.app.inputs import input_spec as _input_spec
from pipelines.contract.config import load_config
from pipelines.contract.presets import get_preset
from pipelines.engine.summary import format_summary, run_summary
from pipelines.spark.replay import Replay
from pipelines.storage.delta import DeltaStore

pytestmark = pytest.mark.spark

T0 = 1_704_067_200_000  # 2024-01-01T00:00:00Z, epoch ms
RECORDS = [  # 5 records: keys under "key" (2 keyless), producers under "prod"
    {"topic": "t", "key": "a", "prod": "p1", "publish_time": T0, "payload_size": 10},
    {"topic": "t", "key": "b", "prod": "p1", "publish_time": T0 + 1000, "payload_size": 10},
    {"topic": "t", "key": None, "prod": "p2", "publish_time": T0 + 2000, "payload_size": 10},
    {"topic": "t", "prod": "p2", "publish_time": T0 + 3000, "payload_size": 10},
    {"topic": "t", "key": "a", "prod": "p1", "publish_time": T0 + 4000, "payload_size": 10},
]


@pytest.fixture(scope="module")
def log_dir(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("json-log")
    (folder / "part-0.json").write_text("".join(json.dumps(r) + "\n" for r in RECORDS))
    return folder


def replay(spark, log_dir: Path, out: Path, sets: list[str]) -> tuple[dict, list[str]]:
    cfg = load_config(None, sets)
    spec = _input_spec(get_preset("contract"), cfg, [str(log_dir)])
    lines: list[str] = []
    Replay(spark, cfg, spec, [str(log_dir)], str(out), "r",
           progress=lambda p: lines.append(str(getattr(p, "line", p)))).run()
    return run_summary(DeltaStore(str(out), engine="delta-rs"), "r"), lines


@pytest.mark.parametrize("sets, missing, keyless", [
    ([], {}, 2),
    (["input.columns.key=lbnn"], {"key": "lbnn"}, 5),
    (["input.columns.producer_name=prod"], {}, 2),
    (["input.columns.producer_name=producer"], {"producer_name": "producer"}, 2),
])
def test_absent_mapped_field_is_reported_and_keyless_share_counted(spark, log_dir, tmp_path,
                                                                   sets, missing, keyless):
    summary, lines = replay(spark, log_dir, tmp_path / "out", sets)
    assert (summary["accepted"], summary["keyless"]) == (5, keyless)
    assert summary["missing_fields"] == missing
    warned = [ln for ln in lines if "warning: no record has field" in ln]
    assert warned == [f"batch 0: warning: no record has field {s!r} (mapped to {c}); {c} is "
                      f"null for every message — check input.columns"
                      for c, s in missing.items()]
    text = format_summary(summary)
    assert f"  keys      keyless {keyless:,} of 5 messages ({100 * keyless / 5:.1f} %)" in text
    for c, s in missing.items():
        assert (f"  warning   no record of the first micro-batch has field {s!r} "
                f"(mapped to {c})") in text
