"""``topic-replay report``: the HTML draws every figure (Plotly, interactive), ``--png-dir`` renders
the same figures as PNG, every figure is drawn from data, and the summary numbers are the tables'
numbers. One tiny replay by the local engine (module fixture; the
differential test in tests/replays/test_local_engine.py holds its tables equal to Spark's) feeds
the report."""

from __future__ import annotations

import re
import shutil
import struct
from pathlib import Path

import pandas as pd
import pytest
from plotly.offline import get_plotlyjs

from jobs.replay import main
from pipelines.analysis import figures
from pipelines.analysis.figures import (
    PageError,
    fig_batching,
    fig_drain,
    fig_handoffs,
    fig_layout,
    figure_has_data,
    run_figures,
)
from pipelines.analysis.page import topic_table, write_report
from pipelines.analysis.run_tables import (
    RunTables,
    consumer_shares,
    drain_times,
    layout_timeline,
    run_metrics,
    withheld_intervals,
)
from pipelines.contract.config import load_config
from pipelines.contract.presets import get_preset
from pipelines.engine.local import run_local
from pipelines.storage.delta import DeltaStore
from pipelines.workload.generator import WorkloadSpec, generate

SPEC = {
    "seed": 3, "start_time": "2025-01-15T09:00:00Z", "duration_s": 300, "format": "json",
    "gzip": False, "file_span_s": 300,
    "topics": [
        {"name": "orders", "producers": 2, "rate": {"kind": "steps", "steps": [
            {"at_s": 0, "msg_rate": 4}, {"at_s": 90, "msg_rate": 40}, {"at_s": 300,
                                                                        "msg_rate": 1}]},
         "keys": {"distribution": "zipf", "n_keys": 200, "exponent": 1.1},
         "payload": {"kind": "fixed", "size": 200}},
    ],
}
SETS = ["policy.split_msg_rate_in=15", "policy.merge_msg_rate_in=3",
        "policy.split_msg_rate_out=1000", "policy.merge_msg_rate_out=100",
        "policy.merge_window_s=60", "policy.merge_cooldown_s=60",
        "batching.max_publish_delay_ms=200",
        "subscriptions.0.consumers.0.ack_delay_ms=1500",  # slow acks: handoffs and drains take time
        "subscriptions.0.consumers.1.join=150"]           # joins late: bucket handoffs
RUN = "tiny"
KINDS = ("segments", "layout", "dag", "decisions", "rates", "consumers", "handoffs", "drain",
         "batching")
"""The figures of one run, in page order (``pipelines.analysis.figures.run_figures``)."""
PNG = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def output(tmp_path_factory) -> Path:
    log = tmp_path_factory.mktemp("log")
    generate(WorkloadSpec.model_validate(SPEC), log)
    out = tmp_path_factory.mktemp("out")
    cfg = load_config(None, SETS)
    spec = get_preset("contract").replace(format="json", speed=1.0)
    run_local(cfg, spec, [str(log)], str(out), RUN, progress=lambda _: None)
    return out


@pytest.fixture(scope="module")
def tables(output) -> RunTables:
    return RunTables.load(DeltaStore(str(output), engine="delta-rs"), RUN)


@pytest.fixture(scope="module")
def report(output, tmp_path_factory) -> tuple[str, dict]:
    path = tmp_path_factory.mktemp("report") / "report.html"
    result = write_report(str(output), [RUN], path)
    return path.read_text(encoding="utf-8"), result


def test_report_draws_every_figure_with_plotly_js_inlined_once(report):
    page, result = report
    assert result["figures"] == len(KINDS)
    assert page.count(get_plotlyjs()) == 1
    assert page.replace(get_plotlyjs(), "").count("Plotly.newPlot(") == len(KINDS)
    assert "<img" not in page


def test_report_needs_no_network(report):
    page, _ = report
    ours = page.replace(get_plotlyjs(), "")  # the bundle's own strings name links, not requests
    assert not re.search(r"""(src|href)=["']?(https?:)?//""", ours)
    assert "cdn." not in ours.lower()  # (base64 has no ".")


@pytest.mark.skipif(shutil.which("chromium") is None,
                    reason="PNG export drives a headless Chromium (.ci/run installs Debian's)")
def test_report_png_dir_holds_every_figure_of_the_page_as_png(output, tmp_path):
    result = write_report(str(output), [RUN], tmp_path / "r.html", png_dir=tmp_path / "png")
    assert sorted(p.name for p in (tmp_path / "png").iterdir()) == sorted(
        f"{k}-{RUN}.png" for k in KINDS)
    assert sorted(result["pngs"]) == sorted(str(p) for p in (tmp_path / "png").iterdir())
    assert all(p.read_bytes()[:8] == PNG for p in (tmp_path / "png").iterdir())
    # each PNG as wide as PNG_WIDTH and as tall as its figure's layout (IHDR: width, height)
    layout = (tmp_path / "png" / f"layout-{RUN}.png").read_bytes()
    assert struct.unpack(">II", layout[16:24]) == (figures.PNG_WIDTH, 560)


@pytest.fixture
def no_browser(monkeypatch):
    """kaleido as on a machine without Chrome or Chromium."""
    def missing(*args, **kwargs):
        raise figures.ChromeNotFoundError("no chrome")

    monkeypatch.setattr(figures.pio, "write_images", missing)


@pytest.mark.usefixtures("no_browser")
def test_report_png_dir_without_a_browser_fails_before_writing_the_page(output, tmp_path):
    with pytest.raises(PageError, match="--png-dir needs Chrome or Chromium"):
        write_report(str(output), [RUN], tmp_path / "r.html", png_dir=tmp_path / "png")
    assert not (tmp_path / "r.html").exists()


@pytest.mark.usefixtures("no_browser")
def test_report_cli_without_a_browser_for_png_exits_2_with_one_sentence(output, tmp_path,
                                                                        capsys):
    argv = ["report", "--output", str(output), "--html", str(tmp_path / "r.html"),
            "--png-dir", str(tmp_path / "png")]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "--png-dir needs Chrome or Chromium" in err and "Traceback" not in err


def test_every_figure_is_drawn_from_data(tables):
    got = run_figures(tables)
    assert [f.key for f in got] == [f"{k}-{RUN}" for k in KINDS]
    assert [f.key for f in got if not figure_has_data(f.figure)] == []


def test_layout_figure_marks_each_split_decision(tables):
    splits = (tables.decisions["action"] == "split").sum()
    marked = sum(len(t.x) for t in fig_layout(tables).data if t.name.startswith("split"))
    assert splits > 0 and marked == splits


def test_handoffs_figure_marks_every_handoff_at_its_withheld_seconds(tables):
    h = withheld_intervals(tables)
    points = [t for t in fig_handoffs(tables).data if t.xaxis == "x" and t.mode == "markers"
              and not t.name.startswith("still")]
    assert len(h) > 0 and sum(len(t.y) for t in points) == len(h)
    assert sum(map(sum, (t.y for t in points))) == pytest.approx(h["withheld_s"].sum())


def test_drain_figure_draws_every_sealed_segment_of_each_subscription(tables):
    d = drain_times(tables)
    assert len(d) > 0 and sum(len(t.x) for t in fig_drain(tables).data) == len(d)


def test_batching_figure_shares_of_entries_sum_to_one_per_run(tables):
    (hist,) = [t for t in fig_batching([tables]).data if t.type == "scatter"]
    assert sum(hist.y[:-1]) == pytest.approx(1.0)  # the last point repeats the last bin's share
    assert f"{len(tables.entries) / tables.entries['num_messages'].sum():.4f} entries/msg" \
        in hist.name


def test_summary_metrics_equal_the_tables(tables):
    m = run_metrics(tables)
    d, e, s = tables.decisions, tables.entries, tables.segments
    h = tables.handoffs
    active = s[s["state"] == "ACTIVE"]
    until = h["withheld_until"].fillna(tables.end_time)
    assert m["splits"] == (d["action"] == "split").sum()
    assert m["merges"] == (d["action"] == "merge").sum()
    assert m["entries"] == len(e)
    assert m["entries_per_message"] == round(len(e) / e["num_messages"].sum(), 4)
    assert m["mean_batch_size"] == round(e["num_messages"].sum() / len(e), 4)
    assert m["segments_created"] == len(s)
    assert m["segments_final"] == len(active)
    assert m["buckets_final"] == active["bucket_count"].sum()
    assert m["handoffs"] == len(h) > 0
    assert m["withheld_bucket_s"] == round((until - h["withheld_from"]).dt.total_seconds().sum(),
                                           3)
    assert m["sealed_segments"] == s["sealed_at"].notna().sum() > 0


def test_summary_table_shows_the_metric_values(report, tables):
    page, result = report
    m = result["metrics"][RUN]
    for label, value in (("splits", m["splits"]), ("entries", f"{m['entries']:,}"),
                         ("segments created", m["segments_created"])):
        assert f"<td>{label}</td><td>{value}</td>" in page


def test_topic_table_counts_messages_and_segments_per_topic(tables):
    t = topic_table(tables)
    assert t.loc["orders", "messages"] == tables.entries["num_messages"].sum()
    assert t.loc["orders", "segments_created"] == len(tables.segments)


def test_report_cli_writes_html_and_prints_the_summary(output, tmp_path, capsys):
    html = tmp_path / "r.html"
    assert main(["report", "--output", str(output), "--html", str(html)]) == 0
    page = html.read_text(encoding="utf-8").replace(get_plotlyjs(), "")
    assert page.count("Plotly.newPlot(") == len(KINDS)
    assert "entries per message" in capsys.readouterr().out


def test_report_cli_rejects_an_unknown_run_with_exit_2(output, tmp_path, capsys):
    argv = ["report", "--output", str(output), "--run-id", "nope", "--html",
            str(tmp_path / "r.html")]
    assert main(argv) == 2
    assert f"run nope is not in {output}; runs: {RUN}" in capsys.readouterr().err


@pytest.mark.parametrize("folder, message", [
    ("missing", "does not exist"),
    ("empty", "holds no finished run"),
])
def test_report_cli_rejects_an_output_without_runs_with_exit_2(tmp_path, capsys, folder,
                                                                message):
    (tmp_path / "empty").mkdir()
    argv = ["report", "--output", str(tmp_path / folder), "--html", str(tmp_path / "r.html")]
    assert main(argv) == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "r.html").exists()


# ---- pure helpers on inline tables -------------------------------------------------------------

def _ts(s: str) -> pd.Timestamp:
    return pd.Timestamp(f"2025-01-15T09:{s}Z")


def _segments(rows: list[tuple]) -> pd.DataFrame:
    cols = ["topic", "segment_id", "bucket_count", "created_at", "sealed_at"]
    return pd.DataFrame([(t, i, n, _ts(c), _ts(x) if x else pd.NaT) for t, i, n, c, x in rows],
                        columns=cols)


@pytest.mark.parametrize("rows, expected", [
    ([("a", 0, 4, "00:00", None)], [("a", "00:00", 1, 4)]),
    ([("a", 0, 4, "00:00", "01:00"), ("a", 1, 2, "01:00", None), ("a", 2, 2, "01:00", None)],
     [("a", "00:00", 1, 4), ("a", "01:00", 2, 4)]),  # split: no transient third segment
    ([("a", 0, 2, "00:00", "02:00"), ("a", 1, 2, "00:00", "02:00"), ("a", 2, 4, "02:00", None)],
     [("a", "00:00", 2, 4), ("a", "02:00", 1, 4)]),  # merge
    ([("a", 0, 4, "00:00", "03:00"), ("a", 1, 8, "03:00", None), ("b", 0, 4, "01:00", None)],
     [("a", "00:00", 1, 4), ("a", "03:00", 1, 8), ("b", "01:00", 1, 4)]),  # rebucket
])
def test_layout_timeline_counts_active_segments_and_buckets(rows, expected):
    got = layout_timeline(_segments(rows))
    assert [(r.topic, r.time, r.active_segments, r.buckets) for r in got.itertuples()] == [
        (t, _ts(at), n, b) for t, at, n, b in expected]


@pytest.mark.parametrize("drain_rows, drain_s, drained", [
    ([("s", "01:10", 10_000)], 10.0, True),   # drained 10 s after the seal
    ([("s", "01:00", 0)], 0.0, True),         # nothing outstanding at the seal
    ([], None, False),                        # no drain row: still undrained at end of input
    ([("other", "01:05", 5_000)], None, False),  # drained for another subscription only
])
def test_drain_time_comes_from_the_dispatchers_segment_drains(drain_rows, drain_s, drained):
    segments = _segments([("a", 0, 1, "00:00", "01:00"), ("a", 1, 1, "01:00", None)])
    dispatch = pd.DataFrame({"topic": ["a"], "segment_id": [0], "subscription": ["s"]})
    drains = pd.DataFrame(
        [("a", sub, 0, pd.Timestamp("2025-01-15T09:01:00Z"),
          pd.Timestamp(f"2025-01-15T09:{at}Z"), ms) for sub, at, ms in drain_rows],
        columns=["topic", "subscription", "segment_id", "sealed_at", "drained_at", "drain_ms"])
    tables = RunTables(**{k: pd.DataFrame() for k in (
        "runs", "decisions", "segment_load", "entries", "consumer_load", "handoffs")},
        run_id="x", store=None, segments=segments, dispatch=dispatch, drains=drains)
    got = drain_times(tables)
    row = got[got["subscription"] == "s"].iloc[0]
    assert (row["segment_id"], row["drained"]) == (0, drained)
    assert (pd.isna(row["drain_s"]) if drain_s is None else row["drain_s"] == drain_s)


@pytest.mark.parametrize("rows, busy, idle, share", [
    # (topic, messages, busy_ms, idle_ms) of consumer c in one window; one other consumer d
    ([("a", 10, 0, 60_000), ("b", 30, 0, 60_000)], 0, 60_000, 0.8),     # idle counted once
    ([("a", 10, 20_000, 40_000), ("b", 30, 15_000, 45_000)], 35_000, 25_000, 0.8),
    ([("a", 10, 50_000, 10_000), ("b", 30, 40_000, 20_000)], 60_000, 0, 0.8),  # busy capped
])
def test_consumer_busy_and_idle_time_is_per_window_not_per_topic(rows, busy, idle, share):
    t = pd.Timestamp("2025-01-15T09:00:00Z")
    cl = pd.DataFrame([("s", "c", t, m, b, i) for _, m, b, i in rows]
                      + [("s", "d", t, 10, 0, 60_000)],
                      columns=["subscription", "consumer_name", "window_start", "messages",
                               "busy_ms", "idle_ms"])
    tables = RunTables(**{k: pd.DataFrame() for k in (
        "runs", "segments", "decisions", "segment_load", "entries", "dispatch", "handoffs")},
        run_id="x", store=None, consumer_load=cl)
    c = consumer_shares(tables).set_index("consumer_name").loc["c"]
    assert (c["busy_ms"], c["idle_ms"], c["share"], c["windows"]) == (busy, idle, share, 1)


@pytest.mark.parametrize("html, png_dir, message", [
    ("afile/r.html", None, "afile/r.html cannot be written"),
    ("r.html", "afile/png", "--png-dir"),
    ("r.html", "afile", "is a file, not a folder"),
])
def test_report_cli_refuses_an_unwritable_target_with_exit_2(output, tmp_path, capsys, html,
                                                             png_dir, message):
    (tmp_path / "afile").write_text("not a folder")
    argv = ["report", "--output", str(output), "--html", str(tmp_path / html)]
    if png_dir:
        argv += ["--png-dir", str(tmp_path / png_dir)]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err
    assert not (tmp_path / "r.html").exists()
