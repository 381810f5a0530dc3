"""Policy sweeps: one log replayed under a grid of settings, from a single ingest.

``topic-replay sweep --input LOG --output DIR --grid policy.split_msg_rate_in=500,1000
--grid topic.bucket_budget=4,8 [--scenario NAME=FILE_OR_SETS] [--html FILE]`` replays the
Cartesian product of the ``--grid`` axes (and any named scenarios) as runs of the same tables,
each ``run_id`` a readable name of its settings (:func:`scenario_name`). The log is read,
validated, hashed and staged once; the scenarios then go through the emulation query together,
the scenario's ``run_id`` being part of every operator's grouping key (:mod:`pipelines.spark`),
so they spread over the cluster's cores. Each scenario's tables equal a ``topic-replay run`` of
it alone.

The ``sweeps`` table gets one row per scenario (:func:`sweep_rows`): its settings, the metrics
``topic-replay compare`` prints (``pipelines.analysis.compare.run_metrics``), flapping
(:func:`pipelines.engine.findings.flaps`, the findings' flapping rule) and the time each topic
spent at ``policy.max_segments`` (:func:`time_at_max_segments`). Spark runs only in
:func:`run_sweep`, and in :func:`replay_scenarios`: ``topic-replay compare``'s replays, one
per scenario (its comparison is :mod:`pipelines.analysis.compare`).
"""

from __future__ import annotations

import itertools
import json
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pandas as pd
import yaml
from pyspark.sql import SparkSession

from pipelines.analysis.compare import (
    NAME_PATTERN,
    PreparedScenario,
    RunTables,
    Scenario,
    check_reuse,
    comparison_table,
    layout_timeline,
    run_metrics,
)
from pipelines.contract.config import parse_config
from pipelines.engine.findings import DEFAULT_FLAP_WINDOW_S, flaps
from pipelines.spark.ingest import resolve_input_spec
from pipelines.spark.replay import Replay, RunSpec
from pipelines.storage.delta import DeltaStore, table_app_id

INGEST_KEYS: tuple[str, ...] = ("input", "output", "console", "replay.speed",
                                "replay.allowed_lateness_s", "replay.max_files_per_trigger",
                                "replay.max_bytes_per_trigger")
"""Config keys (and sections) every scenario of a sweep shares: they decide what is read,
accepted, staged and how it is written, which happens once for all scenarios. A sweep over
one of them is refused (``--set`` changes them for every scenario)."""

_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]")


class SweepError(ValueError):
    """A malformed ``--grid`` or a sweep that cannot run (the CLI reports it, exit 2)."""


@dataclass(frozen=True)
class GridAxis:
    """One ``--grid dotted.key=v1,v2,…``: a config key and the values it takes (as given)."""

    key: str
    values: tuple[str, ...]


def ingest_key(key: str) -> str | None:
    """The entry of :data:`INGEST_KEYS` that ``key`` (dotted) falls under, or ``None``."""
    for k in INGEST_KEYS:
        if key == k or key.startswith(k + "."):
            return k
    return None


def parse_grid(spec: str) -> GridAxis:
    """Parse ``dotted.key=v1,v2,…`` (values split on ``,``; at least one; each once).

    Raises :class:`SweepError` (one sentence) for a missing ``=``, an empty key or value, a
    value given twice, or a key of :data:`INGEST_KEYS`."""
    key, sep, rest = spec.partition("=")
    key = key.strip()
    values = tuple(v.strip() for v in rest.split(","))
    if not sep or not key or not rest.strip():
        raise SweepError(f"--grid {spec!r} is not dotted.key=value1,value2,…")
    if any(not v for v in values):
        raise SweepError(f"--grid {key}: empty value in {rest!r}")
    if len(set(values)) != len(values):
        raise SweepError(f"--grid {key}: a value is given twice in {rest!r}")
    shared = ingest_key(key)
    if shared is not None:
        raise SweepError(f"--grid {key}: {shared} is read once for every scenario of a sweep; "
                         "set it with --set instead")
    return GridAxis(key, values)


def _label(key: str, keys: Sequence[str]) -> str:
    """The shortest dotted suffix of ``key`` that no other of ``keys`` ends with."""
    parts = key.split(".")
    for n in range(1, len(parts) + 1):
        tail = ".".join(parts[-n:])
        if not any(k != key and (k == tail or k.endswith("." + tail)) for k in keys):
            return tail.replace(".", "_")
    return key.replace(".", "_")


def scenario_name(pairs: Sequence[tuple[str, str]], keys: Sequence[str]) -> str:
    """A grid point's run_id: ``<label>-<value>`` per axis joined by ``.``, e.g.
    ``split_msg_rate_in-500.bucket_budget-4`` (label: the key's last part, longer when two
    axes share it; characters outside ``[A-Za-z0-9_.-]`` become ``_``)."""
    return ".".join(_UNSAFE.sub("_", f"{_label(k, keys)}-{v}") for k, v in pairs)


def grid_scenarios(axes: Sequence[GridAxis]) -> list[Scenario]:
    """The Cartesian product of ``axes`` (first axis slowest) as scenarios with
    ``key=value`` overrides. :class:`SweepError` when an axis key is given twice."""
    keys = [a.key for a in axes]
    if len(set(keys)) != len(keys):
        twice = next(k for k in keys if keys.count(k) > 1)
        raise SweepError(f"--grid {twice} is given twice; list all its values in one --grid")
    out = []
    for point in itertools.product(*[[(a.key, v) for v in a.values] for a in axes]):
        out.append(Scenario(scenario_name(point, keys), tuple(f"{k}={v}" for k, v in point),
                            ",".join(f"{k}={v}" for k, v in point)))
    return out


def settings_of(scenario: Scenario) -> dict[str, Any]:
    """A scenario's overrides as dotted key → value (values read as YAML scalars)."""
    out: dict[str, Any] = {}
    for s in scenario.sets:
        key, _, value = s.partition("=")
        out[key.strip()] = yaml.safe_load(value)
    return out


def check_names(scenarios: Sequence[Scenario]) -> None:
    """:class:`SweepError` for a name given twice or not a valid run_id."""
    seen: set[str] = set()
    for s in scenarios:
        if not NAME_PATTERN.match(s.name):
            raise SweepError(f"scenario name {s.name!r} is not a valid run_id")
        if s.name in seen:
            raise SweepError(f"scenario {s.name} is given twice")
        seen.add(s.name)


def ingest_part(config: Mapping[str, Any]) -> dict[str, Any]:
    """The part of a config dict (``ReplayConfig.to_dict()``) under :data:`INGEST_KEYS`."""
    out: dict[str, Any] = {}
    for k in INGEST_KEYS:
        node: Any = config
        for part in k.split("."):
            node = node.get(part) if isinstance(node, Mapping) else None
        out[k] = node
    return out


def check_shared_ingest(base: Mapping[str, Any],
                        scenarios: Mapping[str, Mapping[str, Any]]) -> None:
    """:class:`SweepError` naming the first scenario whose config differs from ``base`` in an
    ingest setting (:data:`INGEST_KEYS`): a named scenario's file may set one."""
    want = ingest_part(base)
    for name, cfg in scenarios.items():
        have = ingest_part(cfg)
        diff = [k for k in INGEST_KEYS if have[k] != want[k]]
        if diff:
            raise SweepError(f"scenario {name} changes {diff[0]}, which a sweep reads once for "
                             "every scenario; set it with --set instead")


# ---- sweep metrics ------------------------------------------------------------------------------


def time_at_max_segments(segments: pd.DataFrame, max_segments: Callable[[str], int],
                         end: pd.Timestamp | None) -> dict[str, float]:
    """Seconds each topic spent with ``max_segments(topic)`` or more active segments, up to
    ``end`` (the run's last event; ``None`` = nothing after the last layout change). Topics in
    name order; a topic never at its maximum has 0.0."""
    timeline = layout_timeline(segments)
    out: dict[str, float] = {}
    for topic, g in timeline.groupby("topic", sort=True):
        times = [*list(g["time"]), end if end is not None else g["time"].iloc[-1]]
        at_max = g["active_segments"].to_numpy() >= max_segments(str(topic))
        seconds = sum((times[i + 1] - times[i]).total_seconds()
                      for i in range(len(g)) if at_max[i] and times[i + 1] > times[i])
        out[str(topic)] = round(float(seconds), 3)
    return out


def sweep_row(tables: RunTables, sweep_id: str, settings: Mapping[str, Any],
              flap_window_s: int) -> dict[str, Any]:
    """One ``sweeps`` row (columns of ``pipelines.contract.schemas.SWEEPS``) of one scenario's
    run."""
    config = parse_config(tables.config)
    at_max = time_at_max_segments(tables.segments,
                                  lambda t: config.policy_for(t).max_segments,
                                  tables.end_time)
    return {"run_id": tables.run_id, "sweep_id": sweep_id,
            "settings": json.dumps(dict(settings), sort_keys=True),
            **run_metrics(tables),
            "flaps": flaps(tables.segments, flap_window_s), "flap_window_s": int(flap_window_s),
            "at_max_segments_s": max(at_max.values(), default=0.0),
            "at_max_segments": json.dumps(at_max, sort_keys=True)}


def sweep_rows(store: DeltaStore, sweep_id: str, scenarios: Sequence[Scenario],
               flap_window_s: int) -> pd.DataFrame:
    """The ``sweeps`` rows of ``scenarios`` (finished runs in ``store``), in their order."""
    return pd.DataFrame([sweep_row(RunTables.load(store, s.name), sweep_id, settings_of(s),
                                   flap_window_s) for s in scenarios])


def write_sweep_rows(store: DeltaStore, sweep_id: str, rows: pd.DataFrame) -> None:
    """Write a sweep's ``sweeps`` rows in ONE commit that replaces its runs' earlier rows
    (idempotent: app transaction of the sweep's ``sweeps`` write)."""
    if len(rows):
        store.replace_run("sweeps", rows, list(rows["run_id"]),
                          app_id=table_app_id(f"sweep.{sweep_id}", "sweeps"), version=1)


def run_sweep(spark: SparkSession, sweep_id: str, base: PreparedScenario,
              prepared: Sequence[PreparedScenario], inputs: Sequence[str], output: str,
              flap_window_s: int = DEFAULT_FLAP_WINDOW_S,
              progress: Callable[[Any], None] = print) -> pd.DataFrame:
    """Spark: replay ``inputs`` once for every scenario of ``prepared`` (one ingest under
    ``base``'s config and input spec; one run per scenario, run_id = its name) into
    ``output``, write the ``sweeps`` rows and return them.

    The replay's work folder is ``_work/sweep.<sweep_id>`` (a restart of the same sweep
    resumes there). Raises ``pipelines.storage.output_identity.OutputConflictError`` as
    ``topic-replay run`` does, for the sweep or any of its runs."""
    replay = Replay(spark, base.config, base.input_spec, list(inputs), output,
                    f"sweep.{sweep_id}", progress=progress,
                    runs=[RunSpec(p.scenario.name, p.config) for p in prepared])
    replay.run()
    if not replay.state.finalized:  # stopped (request_stop): a restart resumes the sweep
        return pd.DataFrame()
    store = DeltaStore(output, engine="delta-rs")
    rows = sweep_rows(store, sweep_id, [p.scenario for p in prepared], flap_window_s)
    write_sweep_rows(DeltaStore(output, engine=replay.store.engine, spark=spark), sweep_id, rows)
    return rows


# ---- compare: one replay per scenario ------------------------------------------------------

def _prefixed(name: str) -> Callable[[object], None]:
    return lambda event: print(f"[{name}] {event}", flush=True)


def replay_scenarios(spark: SparkSession, prepared: Sequence[PreparedScenario],
                     inputs: Sequence[str], output: str, say: Callable[[str], None] = print,
                     progress_for: Callable[[str], Any] = _prefixed) -> pd.DataFrame:
    """Replay ``inputs`` once per scenario (run_id = scenario name) into ``output`` and return
    :func:`~pipelines.analysis.compare.comparison_table` over the scenarios, in the given order.

    ``say`` gets one line per scenario; ``progress_for(name)`` gives the ``progress`` callable of
    that scenario's :class:`pipelines.spark.replay.Replay` (closed after the run when it has
    ``close()``). A scenario whose finished run already exists with the same config and inputs is
    not replayed again (:func:`~pipelines.analysis.compare.check_reuse`). Everything is written
    under ``output`` (tables and each run's ``_work`` folder); nothing else is touched.
    """
    store = DeltaStore(output, engine="delta-rs")
    for p in prepared:
        name = p.scenario.name
        if check_reuse(store, p, inputs):
            say(f"scenario {name}: already in {output} with the same config and inputs; reused")
            continue
        say(f"scenario {name}: replaying with {', '.join(p.scenario.sets) or 'the base config'}")
        spec = resolve_input_spec(p.input_spec, spark, list(inputs))
        progress = progress_for(name)
        try:
            Replay(spark, p.config, spec, list(inputs), output, name, progress=progress).run()
        finally:
            if hasattr(progress, "close"):
                progress.close()
    return comparison_table(store, [p.scenario.name for p in prepared])
