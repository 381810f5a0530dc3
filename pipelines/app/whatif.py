"""``compare`` and ``sweep``: one log replayed under several scenarios, their metrics side by
side (``pipelines.analysis.whatif``; the replays: ``pipelines.spark.whatif``).

Every scenario's config and input spec, and the output, are checked before Spark starts."""

from __future__ import annotations

import argparse

from pipelines.analysis.page import PageError, write_report, write_sweep_page
from pipelines.analysis.run_tables import metrics_frame
from pipelines.analysis.whatif.recommend import format_recommendations, recommend
from pipelines.analysis.whatif.scenarios import (
    NAME_PATTERN,
    PreparedScenario,
    Scenario,
    ScenarioError,
    check_reuse,
    format_comparison,
    parse_scenario,
)
from pipelines.analysis.whatif.sweep import (
    SweepError,
    check_names,
    check_shared_ingest,
    grid_scenarios,
    parse_grid,
)
from pipelines.app.errors import UsageError
from pipelines.app.inputs import config_and_spec
from pipelines.app.outputs import check_output_location, check_sweep_run_output
from pipelines.app.spark_options import check_spark_options, spark_log
from pipelines.app.targets import check_html_target
from pipelines.engine.findings import DEFAULT_FLAP_WINDOW_S
from pipelines.spark.command_session import replay_session
from pipelines.spark.ingest import resolve_input_spec
from pipelines.spark.progress import ReplayProgress
from pipelines.spark.whatif import replay_scenarios, run_sweep
from pipelines.storage.delta import DeltaStore
from pipelines.storage.fs import is_dir, join


def compare(args: argparse.Namespace) -> int:
    """``topic-replay compare``: a replay per ``--scenario`` (run_id = its name), the metrics
    side by side, the report at ``--html``."""
    check_spark_options(args)
    prepared: list[PreparedScenario] = []
    for text in args.scenarios:
        scenario = _parse_scenario(text)
        if any(p.scenario.name == scenario.name for p in prepared):
            raise UsageError(f"scenario {scenario.name} is given twice")
        cfg, spec = config_and_spec(args, scenario.sets, what=f"scenario {scenario.name}: ")
        prepared.append(PreparedScenario(scenario, cfg, spec))
    check_html_target(args.html)
    check_output_location(args.output)
    if is_dir(args.output):  # a run of the same name must be this very scenario
        store = DeltaStore(args.output, engine="delta-rs")
        for p in prepared:
            try:
                check_reuse(store, p, args.input)
            except ScenarioError as exc:
                raise UsageError(str(exc)) from None
    spark = replay_session(args.master, args.remote, args.shuffle_partitions,
                           spark_log(args, any(p.config.console.spark_log for p in prepared)))
    table = replay_scenarios(spark, prepared, args.input, args.output,
                             progress_for=lambda _name: ReplayProgress())
    print(format_comparison(table))
    if args.html:
        try:
            result = write_report(args.output, [p.scenario.name for p in prepared], args.html)
        except PageError as exc:
            raise UsageError(str(exc)) from None
        print(f"report: {result['html']} ({result['figures']} figures)")
    return 0


def sweep(args: argparse.Namespace) -> int:
    """``topic-replay sweep``: the grid's and the named scenarios from one ingest, the
    ``sweeps`` rows, the metrics side by side, the recommendations, the page at ``--html``."""
    check_spark_options(args)
    window, scenarios = _sweep_scenarios(args)
    cfg, spec = config_and_spec(args)
    prepared = [PreparedScenario(s, *config_and_spec(args, s.sets, what=f"scenario {s.name}: "))
                for s in scenarios]
    try:
        check_shared_ingest(cfg.to_dict(), {p.scenario.name: p.config.to_dict()
                                            for p in prepared})
    except SweepError as exc:
        raise UsageError(str(exc)) from None
    check_sweep_run_output(args.output, args.sweep_id, cfg, spec.preset,
                           {p.scenario.name: p.config for p in prepared})
    print(f"sweep {args.sweep_id}: {len(prepared)} scenarios from one ingest: "
          + ", ".join(p.scenario.name for p in prepared))
    spark = replay_session(args.master, args.remote, args.shuffle_partitions,
                           spark_log(args, cfg.console.spark_log))
    base = PreparedScenario(Scenario("base", (), ""), cfg,
                            resolve_input_spec(spec, spark, args.input))
    progress = ReplayProgress()
    with progress:
        rows = run_sweep(spark, args.sweep_id, base, prepared, args.input, args.output,
                         window, progress=progress)
    if rows.empty:
        print("stopped; run the same sweep again to finish")
        return 0
    metrics = {r["run_id"]: dict(r) for _, r in rows.iterrows()}
    print(format_comparison(metrics_frame(metrics)))
    store = DeltaStore(args.output, engine="delta-rs")
    for line in format_recommendations(recommend(store, [str(r) for r in rows["run_id"]])):
        print(line)
    print(f"sweep {args.sweep_id}: {len(rows)} rows in {join(args.output, 'sweeps')} "
          f"(flap window {window} s)")
    if args.html:
        try:
            write_sweep_page(store, args.sweep_id, args.html)
        except PageError as exc:
            raise UsageError(str(exc)) from None
        print(f"page: {args.html}")
    return 0


def _parse_scenario(text: str) -> Scenario:
    """A ``--scenario NAME=FILE_OR_SETS``; ``UsageError`` when malformed."""
    try:
        return parse_scenario(text)
    except ScenarioError as exc:
        raise UsageError(str(exc)) from None


def _sweep_scenarios(args: argparse.Namespace) -> tuple[int, list[Scenario]]:
    """The sweep's flap window (s) and scenarios (the grid's, then the named ones) from the
    arguments; ``UsageError`` on a bad sweep id, window, grid, scenario or ``--html``."""
    if not NAME_PATTERN.match(args.sweep_id):
        raise UsageError(f"--sweep-id {args.sweep_id!r} must be letters, digits, '_', '.' or "
                         "'-'")
    window = DEFAULT_FLAP_WINDOW_S if args.flap_window_s is None else args.flap_window_s
    if window <= 0:
        raise UsageError(f"--flap-window-s must be > 0, got {window}")
    try:
        scenarios = grid_scenarios([parse_grid(g) for g in args.grids])
        scenarios = [s for s in scenarios if s.sets]  # no --grid: only named scenarios
        scenarios += [parse_scenario(text) for text in args.scenarios]
        check_names(scenarios)
    except (SweepError, ScenarioError) as exc:
        raise UsageError(str(exc)) from None
    if not scenarios:
        raise UsageError("a sweep needs at least one --grid or --scenario")
    check_html_target(args.html)
    return window, scenarios
