"""What-if scenarios: one log replayed under several configs, compared side by side.

``topic-replay compare --input LOG --output DIR --scenario NAME=FILE_OR_SETS …`` replays the
log once per scenario, each as its own ``run_id`` (= the scenario NAME) in the same tables, and
prints :func:`comparison_table`. A scenario starts from the base config (defaults ← ``--conf`` ←
``--set``) and adds either a YAML file (deep-merged over the base, as ``--conf`` is over the
defaults) or ``dotted.key=value`` overrides separated by ``,`` or ``;``.

The metrics (:func:`pipelines.analysis.run_tables.run_metrics`) are read back from the tables,
so a comparison can also be made later from the tables alone (``topic-replay report --run-id A
--run-id B``). This module needs no Spark: the scenarios are replayed by
:func:`pipelines.spark.whatif.replay_scenarios`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd
import yaml

from pipelines.analysis.run_tables import RunTables, format_cell, metrics_frame, run_metrics
from pipelines.contract.config import run_identity
from pipelines.storage.delta import DeltaStore

NAME_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
"""A scenario name (= its run_id and a folder name under ``DIR/_work``)."""

_SET_START = re.compile(r"[;,](?=\s*[A-Za-z_\[][^=;,]*=)")
"""A ``,`` / ``;`` that starts a new ``dotted.key=`` (commas inside values such as ``[1,2]``
are kept)."""


class ScenarioError(ValueError):
    """A malformed ``--scenario`` spec (the CLI reports it as a usage error, exit 2)."""


@dataclass(frozen=True)
class Scenario:
    """One ``--scenario NAME=FILE_OR_SETS``: its name (run_id) and its config overrides as
    ``dotted.key=value`` strings, applied after the base ``--set`` overrides."""

    name: str
    sets: tuple[str, ...]
    source: str  # the FILE_OR_SETS text as given


def parse_scenario(spec: str) -> Scenario:
    """Parse ``NAME=FILE_OR_SETS``.

    ``FILE_OR_SETS`` is a YAML config file (``.yaml`` / ``.yml`` or any existing file), turned
    into overrides by :func:`yaml_to_sets`, or ``key=value`` overrides separated by ``,`` / ``;``.
    Raises :class:`ScenarioError` (one sentence) for a missing ``=``, a bad name, a missing or
    unreadable file, an empty override list or an override without ``=``.
    """
    name, sep, rest = spec.partition("=")
    name, rest = name.strip(), rest.strip()
    if not sep or not name:
        raise ScenarioError(f"scenario {spec!r} is not NAME=FILE_OR_SETS")
    if not NAME_PATTERN.match(name):
        raise ScenarioError(f"scenario name {name!r} must be letters, digits, '_', '.' or '-' "
                            "(it becomes the run_id)")
    if not rest:
        raise ScenarioError(f"scenario {name} has no config file or overrides after '='")
    path = Path(rest)
    if path.is_file():
        return Scenario(name, tuple(yaml_to_sets(path, name)), rest)
    if path.suffix.lower() in (".yaml", ".yml"):
        raise ScenarioError(f"scenario {name}: config file {rest} does not exist")
    sets = tuple(s.strip() for s in _SET_START.split(rest) if s.strip())
    bad = [s for s in sets if "=" not in s]
    if not sets or bad:
        raise ScenarioError(f"scenario {name}: {bad[0] if bad else rest!r} is neither a config "
                            "file nor a dotted.key=value override")
    return Scenario(name, sets, rest)


def yaml_to_sets(path: Path, name: str = "?") -> list[str]:
    """A YAML config file as ``dotted.key=value`` overrides with the same deep-merge meaning
    (mappings merge key by key, lists and scalars replace). Values are written as JSON (valid
    YAML); keys holding ``. [ ] =`` are bracketed. ``ScenarioError`` if the file is not a YAML
    mapping."""
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
        first = " ".join(str(exc).split())
        raise ScenarioError(f"scenario {name}: cannot read {path}: {first}") from None
    if data is None:
        return []
    if not isinstance(data, dict):
        raise ScenarioError(f"scenario {name}: {path} must hold a mapping of config sections")
    out: list[str] = []

    def walk(prefix: str, node: Any) -> None:
        if isinstance(node, dict) and node:
            for key, value in node.items():
                k = str(key)
                part = f"[{k}]" if any(c in k for c in ".[]=") else k
                walk(part if not prefix else (prefix + part if part.startswith("[")
                                              else f"{prefix}.{part}"), value)
        else:
            out.append(f"{prefix}={json.dumps(node, default=str)}")

    walk("", data)
    return out


# ---- metrics ---------------------------------------------------------------------------------


def comparison_table(store: DeltaStore, run_ids: Sequence[str]) -> pd.DataFrame:
    """Side-by-side metrics: index = metric labels of :data:`METRICS`, one column per run_id
    (object dtype: ints, floats, strings or None)."""
    data = {run_id: run_metrics(RunTables.load(store, run_id)) for run_id in run_ids}
    return metrics_frame(data)


def format_comparison(frame: pd.DataFrame) -> str:
    """The side-by-side frame as an aligned text table (values formatted, ``-`` for none); a
    ``*`` marks rows whose values differ between runs."""
    runs = [str(c) for c in frame.columns]
    rows = [[str(label), *(format_cell(v) for v in frame.loc[label])] for label in frame.index]
    differs = [len({r for r in row[1:]}) > 1 for row in rows]
    head = ["metric", *runs]
    widths = [max(len(str(x)) for x in col) for col in zip(head, *rows, strict=True)]
    lines = ["  ".join([head[0].ljust(widths[0] + 2),
                        *(h.rjust(w) for h, w in zip(head[1:], widths[1:], strict=True))])]
    for row, diff in zip(rows, differs, strict=True):
        lines.append("  ".join([(("* " if diff else "  ") + row[0]).ljust(widths[0] + 2),
                                *(v.rjust(w) for v, w in zip(row[1:], widths[1:],
                                                             strict=True))]))
    return "\n".join(lines)


# ---- running the scenarios ---------------------------------------------------------------------

@dataclass
class PreparedScenario:
    """A scenario with its validated config and input spec (ready to replay)."""

    scenario: Scenario
    config: Any  # pipelines.contract.config.ReplayConfig
    input_spec: Any  # pipelines.contract.presets.InputSpec


def existing_run(store: DeltaStore, run_id: str) -> dict[str, Any] | None:
    """The ``runs`` row of ``run_id`` in ``store`` as a dict (``None`` if absent)."""
    runs = store.read("runs", run_id=run_id)
    if runs.empty:
        return None
    return dict(runs.iloc[-1])


def check_reuse(store: DeltaStore, prepared: PreparedScenario, inputs: Sequence[str]) -> bool:
    """True when ``store`` already holds a finished run named like the scenario with the same
    config and inputs (it is reused, not replayed again). ``ScenarioError`` when a run of that
    name exists with another config or other inputs (its tables would mix two scenarios)."""
    row = existing_run(store, prepared.scenario.name)
    if row is None:
        return False
    same_config = (run_identity(json.loads(row["config"]))
                   == run_identity(prepared.config.to_dict()))
    same_inputs = [str(p) for p in row["inputs"]] == [str(p) for p in inputs]
    if not (same_config and same_inputs):
        what = "config" if not same_config else "inputs"
        raise ScenarioError(f"run {prepared.scenario.name} already exists in {store.root} with "
                            f"other {what}; pick another scenario name or output directory")
    return bool(row["status"] == "finished")
