"""Output identity: which runs an output may take, decided before Spark starts.

A run's identity is its configuration (``pipelines.contract.config.run_identity``) and input
preset, recorded in its manifest ``_work/<run_id>/run.json`` when it starts (with the run
constants resolved then, ``topic_bins``) and in its ``runs`` row when it finishes. A restart of
the same run passes; another config under the same ``run_id``, or tables of another schema,
are refused with one sentence (:class:`OutputConflictError`). Reads only Delta logs and small
files (delta-rs), so the command line checks an output before any Spark work.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from pipelines.contract.config import ReplayConfig, run_identity
from pipelines.storage import fs as storage
from pipelines.storage.delta import DeltaStore

MANIFEST = "run.json"
"""File under ``_work/<run_id>/`` recording the configuration a run was started with."""


class OutputConflictError(ValueError):
    """The output already holds tables or a run this replay must not be mixed with."""


def manifest_path(output: str, run_id: str) -> str:
    """``<output>/_work/<run_id>/run.json`` (a path or a URL, as the output)."""
    return storage.join(output, "_work", run_id, MANIFEST)


def config_diff(a: Any, b: Any, path: str = "") -> list[str]:
    """Dotted keys whose values differ between two config dicts."""
    if isinstance(a, dict) and isinstance(b, dict):
        out: list[str] = []
        for k in sorted(set(a) | set(b)):
            out += config_diff(a.get(k), b.get(k), f"{path}.{k}" if path else str(k))
        return out
    return [] if a == b else [path or "(top level)"]


def check_output_path(output: str) -> None:
    """Raise :class:`OutputConflictError` when ``output`` is neither a filesystem path nor an
    object-store URL the replay supports (``s3a://``, ``s3://``, ``gs://``, ``abfs(s)://``:
    :func:`pipelines.storage.fs.check_location`, docs/storage.md). The work folder (``_work``:
    manifest, state, staging, checkpoint) lives under the output too, so executors reach it:
    on a cluster the output is an object store or a shared mount (docs/cluster.md)."""
    try:
        storage.check_location(output)
    except storage.StorageError as exc:
        raise OutputConflictError(str(exc)) from None


def check_output(output: str, run_id: str, config: ReplayConfig,
                 preset: str | None = None,
                 lanes: Mapping[str, ReplayConfig] | None = None, new: bool = False) -> None:
    """Refuse to write into ``output`` when that would mix incompatible data.

    Raises :class:`OutputConflictError` listing every problem: an existing table whose schema
    or partitioning differs from :mod:`pipelines.contract.schemas` (written by another version),
    or a ``run_id`` already started (``_work/<run_id>/run.json``) or finished (``runs`` row) with a
    different configuration or input preset (``lanes``: a sweep's runs by run_id, part of its
    manifest; ``new``: the run must not exist at all — a sweep's scenario starting afresh).
    A fresh output or a restart of the same run passes. An output URL of an unsupported
    scheme is refused too (:func:`check_output_path`); ``OSError`` when the output cannot be
    read (an unreachable object store).
    """
    check_output_path(output)
    store = DeltaStore(output, engine="delta-rs", spark=None)
    problems = [f"table {p}" for p in store.schema_problems()]
    want: dict[str, Any] = {"config": run_identity(config.to_dict()), "preset": preset}
    if lanes:
        want["lanes"] = {k: run_identity(v.to_dict()) for k, v in lanes.items()}
    manifest = manifest_path(output, run_id)
    if storage.is_file(manifest):
        have = read_manifest(manifest)
        # resolved when the run started: not part of its identity
        have.pop("topic_bins", None)
        have.pop("state_partitions", None)
        have["config"] = run_identity(have.get("config", {}))
        if "lanes" in have:
            have["lanes"] = {k: run_identity(v) for k, v in have["lanes"].items()}
        changed = config_diff(have, want)
        if changed:
            problems.append(f"run {run_id} was started with a different configuration "
                            f"(differs in {', '.join(changed[:6])}"
                            f"{', …' if len(changed) > 6 else ''})")
    if not problems:  # the runs table (if any) is readable
        runs = store.read("runs", run_id=run_id)
        configs = [run_identity(json.loads(c)) for c in set(runs["config"])] if len(runs) else []
        if new and configs:  # a sweep's run must not be another sweep's or replay's
            problems.append(f"run {run_id} already exists")
        elif any(c != want["config"] for c in configs):
            changed = config_diff(configs[0], want["config"])
            problems.append(f"run {run_id} already finished with a different configuration "
                            f"(differs in {', '.join(changed[:6]) or 'config'})")
    if problems:
        raise OutputConflictError(
            f"output {output} cannot take run {run_id}: {'; '.join(problems)}; use another "
            f"--run-id or --output (or delete the run's rows and "
            f"{storage.join(output, '_work', run_id)})")


def check_sweep_output(output: str, work_id: str, config: ReplayConfig, preset: str | None,
                       lanes: Mapping[str, ReplayConfig]) -> None:
    """A sweep's :func:`check_output`: its work folder ``work_id`` (the manifest lists the
    scenarios' configs, ``lanes``: run_id → config) and each scenario's run, which must be new
    unless the sweep itself started it (a restart). :class:`OutputConflictError` on any
    problem."""
    fresh = not storage.is_file(manifest_path(output, work_id))
    check_output(output, work_id, config, preset, lanes)
    for run_id, cfg in lanes.items():
        check_output(output, run_id, cfg, preset, new=fresh)


def read_manifest(path: str) -> dict[str, Any]:
    """A run's manifest (``run.json``) as a dict."""
    loaded: dict[str, Any] = json.loads(storage.read_bytes(path).decode("utf-8"))
    return loaded


def write_manifest(path: str, config: ReplayConfig, preset: str | None, topic_bins: int,
                   lanes: Mapping[str, ReplayConfig] | None = None,
                   state_partitions: int | None = None) -> None:
    """Record a run's identity and its run constants (``topic_bins``; ``state_partitions``:
    the emulation state's partitions, when the run has a Spark emulation) as it starts."""
    storage.write_bytes(path, json.dumps(
        {"config": config.to_dict(), "preset": preset, "topic_bins": topic_bins,
         **({"state_partitions": state_partitions} if state_partitions else {}),
         **({"lanes": {k: v.to_dict() for k, v in lanes.items()}} if lanes else {})},
        sort_keys=True).encode("utf-8"))
