"""The interactive pages in a real headless browser (Debian's chromium driven by playwright):
opened from ``file://``, they log no console error, request nothing but the file itself, draw
every Plotly figure, and a click on a sweep figure's point jumps to that scenario's section.

Input: a 2 × 2 sweep (split threshold × bucket budget) of a small generated log, replayed by the
local engine (no Spark) into one output, with the ``sweeps`` rows built here from
``run_metrics`` (the sweep command writes them in production). Skips when /usr/bin/chromium is
missing (``apt-get install chromium``; ``.ci/run`` installs it).
"""

from __future__ import annotations

import importlib.util
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from playwright.sync_api import sync_playwright

from pipelines.analysis.page import write_run_page, write_sweep_page
from pipelines.analysis.whatif.scenarios import Scenario
from pipelines.analysis.whatif.sweep import sweep_rows, write_sweep_rows
from pipelines.contract.config import load_config
from pipelines.contract.presets import get_preset
from pipelines.engine.findings import DEFAULT_FLAP_WINDOW_S
from pipelines.engine.local import run_local
from pipelines.storage.delta import DeltaStore
from pipelines.workload.generator import WorkloadSpec, generate

_spec = importlib.util.spec_from_file_location(
    "screenshot_page", Path(__file__).resolve().parents[2] / "tools" / "screenshot_page.py")
assert _spec is not None and _spec.loader is not None
screenshot_page = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(screenshot_page)
CHROMIUM = screenshot_page.CHROMIUM  # how the screenshot tool launches chromium, too
pytestmark = pytest.mark.skipif(not Path(CHROMIUM).exists(),
                                reason=f"no {CHROMIUM} (apt-get install chromium)")

SPEC = {
    "seed": 5, "start_time": "2025-01-15T09:00:00Z", "duration_s": 240, "format": "json",
    "gzip": False, "file_span_s": 240,
    "topics": [
        {"name": "orders", "producers": 2, "rate": {"kind": "steps", "steps": [
            {"at_s": 0, "msg_rate": 4}, {"at_s": 60, "msg_rate": 40}, {"at_s": 180,
                                                                       "msg_rate": 1}]},
         "keys": {"distribution": "zipf", "n_keys": 100, "exponent": 1.1},
         "payload": {"kind": "fixed", "size": 200}},
    ],
}
BASE = ["policy.merge_msg_rate_in=3", "policy.split_msg_rate_out=1000",
        "policy.merge_msg_rate_out=100", "policy.merge_window_s=60",
        "policy.merge_cooldown_s=60", "batching.max_publish_delay_ms=200",
        "subscriptions.0.consumers.0.ack_delay_ms=1500",
        "subscriptions.0.consumers.1.join=120"]
GRID = {"policy.split_msg_rate_in": [15, 30], "topic.bucket_budget": [4, 8]}
SWEEP = "grid"


def scenarios() -> list[tuple[str, dict[str, Any]]]:
    """(run_id, settings) of the 2 × 2 grid."""
    out = []
    for split in GRID["policy.split_msg_rate_in"]:
        for budget in GRID["topic.bucket_budget"]:
            out.append((f"split_msg_rate_in-{split}.bucket_budget-{budget}",
                        {"policy.split_msg_rate_in": split, "topic.bucket_budget": budget}))
    return out


def sweeps_rows(store: DeltaStore) -> pd.DataFrame:
    """The ``sweeps`` rows of the grid, made as the sweep command makes them."""
    grid = [Scenario(run_id, tuple(f"{k}={v}" for k, v in settings.items()), "")
            for run_id, settings in scenarios()]
    return sweep_rows(store, SWEEP, grid, DEFAULT_FLAP_WINDOW_S)


@pytest.fixture(scope="module")
def pages(tmp_path_factory) -> dict[str, Any]:
    log = tmp_path_factory.mktemp("log")
    generate(WorkloadSpec.model_validate(SPEC), log)
    out = tmp_path_factory.mktemp("out")
    spec = get_preset("contract").replace(format="json", speed=1.0)
    for run_id, settings in scenarios():
        cfg = load_config(None, BASE + [f"{k}={v}" for k, v in settings.items()])
        run_local(cfg, spec, [str(log)], str(out), run_id, progress=lambda _: None)
    store = DeltaStore(str(out), engine="delta-rs")
    write_sweep_rows(store, SWEEP, sweeps_rows(store))
    sweep = write_sweep_page(store, SWEEP, out / "sweep.html")
    run = write_run_page(store, [scenarios()[0][0]], out / "run.html")
    return {"sweep": Path(sweep["html"]), "run": Path(run["html"]),
            "sweep_figures": sweep["figures"], "run_figures": run["figures"]}


class Visit:
    """One page opened in chromium, with what it logged and requested."""

    def __init__(self, browser: Any, path: Path) -> None:
        self.errors: list[str] = []
        self.requests: list[str] = []
        self.url = path.resolve().as_uri()
        self.page = browser.new_page(viewport={"width": 1300, "height": 900})
        self.page.on("console", lambda m: self.errors.append(m.text) if m.type == "error"
                     else None)
        self.page.on("pageerror", lambda e: self.errors.append(str(e)))
        self.page.on("request", lambda r: self.requests.append(r.url))
        self.page.goto(self.url)
        self.page.wait_for_function(screenshot_page.RENDERED_JS, timeout=90_000)

    def plots(self) -> int:
        return int(self.page.locator(".js-plotly-plot").count())

    def click_at(self, div_id: str, js_point: str) -> list[str]:
        """Click the pixel that ``js_point`` (a JS expression of ``gd``, the plot div, giving
        ``[x, y, run_ids]``, x and y in the div) names; returns the run_ids the click may jump
        to."""
        self.page.evaluate(f"document.getElementById('{div_id}').scrollIntoView()")
        x, y, run_ids = self.page.evaluate(
            f"() => {{ const gd = document.getElementById('{div_id}');"
            f" const r = gd.getBoundingClientRect(); const p = {js_point};"
            " return [r.left + p[0], r.top + p[1], p[2]]; }")
        self.page.mouse.click(x, y)
        return [str(r) for r in run_ids]


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=screenshot_page.CHROMIUM_ARGS)
        yield b
        b.close()


@pytest.fixture
def visit(browser) -> Iterator[Any]:
    """``visit(path)`` opens a page (closed after the test)."""
    opened: list[Visit] = []

    def open_page(path: Path) -> Visit:
        opened.append(Visit(browser, path))
        return opened[-1]

    yield open_page
    for v in opened:
        v.page.close()


@pytest.mark.parametrize("which", ["sweep", "run"])
def test_page_loads_without_console_errors_or_requests_beyond_the_file(visit, pages, which):
    page = visit(pages[which])
    assert page.errors == []
    assert page.requests == [page.url]


@pytest.mark.parametrize("which, expected", [
    ("sweep", 3 + 9 * len(scenarios())),  # heat map + 2 Pareto views, 9 figures per scenario
    ("run", 9),
])
def test_page_draws_every_plotly_figure(visit, pages, which, expected):
    page = visit(pages[which])
    assert pages[f"{which}_figures"] == expected
    assert page.plots() == expected


HEATMAP_CELL = """(() => {
  const xa = gd._fullLayout.xaxis, ya = gd._fullLayout.yaxis;
  const t = gd._fullData.find(t => t.visible === true);
  return [xa._offset + xa.l2p(1), ya._offset + ya.l2p(0), [t.customdata[0][1]]];
})()"""
"""The heat map's cell (x = 2nd value, y = 1st value) and its scenario."""

PARETO_POINT = """(() => {
  const xa = gd._fullLayout.xaxis, ya = gd._fullLayout.yaxis, t = gd._fullData[1];
  const at = t.customdata.filter((c, i) => t.x[i] === t.x[0] && t.y[i] === t.y[0]);
  return [xa._offset + xa.l2p(t.x[0]), ya._offset + ya.l2p(t.y[0]), at.map(c => c[0])];
})()"""
"""The first point of the Pareto front trace and the scenarios drawn at that very spot (equal
metrics: any of them may be the one clicked)."""


@pytest.mark.parametrize("div_id, point", [("sweep-fig0", HEATMAP_CELL),
                                           ("sweep-fig1", PARETO_POINT)],
                         ids=["heat-map-cell", "pareto-point"])
def test_a_click_on_a_sweep_point_jumps_to_its_scenarios_section(visit, pages, div_id, point):
    page = visit(pages["sweep"])
    assert page.page.evaluate("window.location.hash") == ""
    candidates = page.click_at(div_id, point)
    page.page.wait_for_function("() => window.location.hash.startsWith('#run-')",
                                timeout=10_000)
    run_id = page.page.evaluate("window.location.hash").removeprefix("#run-")
    top = page.page.evaluate(f"document.getElementById('run-{run_id}')"
                             ".getBoundingClientRect().top")
    assert run_id in candidates
    assert set(candidates) <= set(dict(scenarios()))
    assert abs(top) < 5
