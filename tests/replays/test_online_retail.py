"""Replay of the first days of the real UCI Online Retail trace (``../shared/traces/online-retail``)
with the ``online-retail`` preset, as a user would run it (``--set replay.speed=3600``).

Skipped with a reason when the shared traces are not beside the repository.
"""

from __future__ import annotations

import csv
import json
import shutil
from pathlib import Path

import pandas as pd
import pytest

from pipelines.contract.config import load_config
from pipelines.contract.presets import get_preset
from pipelines.spark.ingest import resolve_input_spec
from pipelines.spark.replay import Replay
from pipelines.storage.delta import DeltaStore

pytestmark = pytest.mark.spark

TRACE = Path(__file__).resolve().parents[2] / ".." / "shared" / "traces" / "online-retail"
DAYS = ("2010-12-01.csv", "2010-12-02.csv", "2010-12-03.csv")


@pytest.fixture(scope="module")
def days(tmp_path_factory) -> Path:
    if not all((TRACE / d).is_file() for d in DAYS):
        pytest.skip(f"online-retail trace not found at {TRACE.resolve()} (../shared/traces)")
    folder = tmp_path_factory.mktemp("online-retail")
    for d in (*DAYS, "SOURCE.md"):  # a throwaway copy, never inside the repository
        shutil.copy(TRACE / d, folder / d)
    return folder


@pytest.fixture(scope="module")
def rows(days) -> pd.DataFrame:
    frames = [pd.read_csv(days / d, dtype=str, keep_default_na=False) for d in DAYS]
    return pd.concat(frames, ignore_index=True)


@pytest.fixture(scope="module")
def store(spark, days, tmp_path_factory) -> DeltaStore:
    out = tmp_path_factory.mktemp("out")
    cfg = load_config(None, ["replay.speed=3600"])
    spec = resolve_input_spec(get_preset("online-retail").replace(speed=3600.0), spark,
                              [str(days)])
    Replay(spark, cfg, spec, [str(days)], str(out), "retail", progress=lambda _: None).run()
    return DeltaStore(str(out), engine="delta-rs")


def test_every_invoice_line_is_accepted_or_quarantined(store, days):
    records = sum(sum(1 for _ in csv.reader((days / d).open(newline=""))) - 1 for d in DAYS)
    counts = json.loads(store.read("runs", "retail")["counts"].iloc[0])
    assert counts["accepted"] + counts["quarantined"] == records
    assert len(store.read("messages", "retail")) == counts["accepted"]


def test_only_the_csv_files_of_the_trace_folder_are_read(store):
    # SOURCE.md beside the CSVs is not an input (the preset reads *.csv), so nothing is rejected
    assert len(store.read("quarantine", "retail")) == 0


def test_topics_are_countries_and_keys_are_stock_codes(store, rows):
    messages = store.read("messages", "retail")
    assert set(messages["topic"]) == set(rows["Country"])
    assert set(messages["key"]) == set(rows["StockCode"])


def test_producer_is_customer_id_or_anonymous(store, rows):
    messages = store.read("messages", "retail")
    customers = {c.removesuffix(".0") for c in rows["CustomerID"] if c}
    producers = set(messages["producer_name"])
    assert producers == customers | {"anonymous"}


def test_invoice_minute_rows_are_spread_within_their_minute(store):
    messages = store.read("messages", "retail")
    local = messages["publish_time"].dt.tz_convert("Europe/London")
    minute = local.dt.floor("min")
    assert ((local - minute) < pd.Timedelta(seconds=60)).all()
    # several lines of one invoice minute get distinct publish times
    per_minute = messages.assign(m=minute).groupby(["topic", "m"])["publish_time"]
    assert (per_minute.nunique() == per_minute.size()).all()


def test_first_invoice_line_is_published_at_its_london_time(store):
    messages = store.read("messages", "retail")
    first = messages.sort_values("publish_time").iloc[0]
    # 536365 at 2010-12-01 08:26 London (= UTC in winter), the minute's first line
    assert first["publish_time"] == pd.Timestamp("2010-12-01 08:26:00", tz="UTC")
    assert first["topic"] == "United Kingdom"


def test_every_entry_of_the_slice_reaches_each_subscription_once(store):
    entries = store.read("entries", "retail")
    dispatch = store.read("dispatch", "retail")
    per_sub = dispatch.groupby(["subscription", "topic", "producer_name", "entry_id"]).size()
    assert (per_sub == 1).all()
    assert (dispatch.groupby("subscription").size() == len(entries)).all()
