"""The config and input spec of a replay command, checked once, before Spark starts.

:func:`config_and_spec` loads the config (``--conf``, ``--set``, a scenario's sets), checks the
inputs exist, reads the pseudonymization secret, and builds the input spec: for files, the
preset with the config's input section, the files surveyed (empty ones skipped, mixed ones
refused), the mapped columns checked against the CSV header or Parquet schema, the format and
the unit of epoch numbers guessed; for a Kafka input (``run`` / ``stream`` only), the ``kafka``
preset's spec. Every problem is a :class:`UsageError` in one sentence.
"""

from __future__ import annotations

import argparse
import glob
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pipelines.app.errors import UsageError
from pipelines.contract.config import ConfigError, ReplayConfig, load_config
from pipelines.contract.kafka import KafkaInput, KafkaInputError, is_kafka_url, kafka_input
from pipelines.contract.kafka import kafka_spec as kafka_preset_spec
from pipelines.contract.presets import InputSpec, get_preset
from pipelines.ingest.input_check import (
    InputColumnError,
    InputFilesError,
    check_columns,
    check_files,
    format_of,
    input_files,
    is_empty,
    only_sub_folders,
    sub_folders_hint,
    survey_inputs,
    unread_folders,
)
from pipelines.ingest.privacy import PrivacyError, pseudonymizer
from pipelines.ingest.time_unit import guess_epoch_unit


def config_and_spec(args: argparse.Namespace, extra_sets: Sequence[str] = (),
                    what: str = "", kafka_ok: bool = False) -> tuple[ReplayConfig, InputSpec]:
    """Check inputs and config file, load the config (``--conf``, ``--set``, then
    ``extra_sets``) and the input spec of the preset, and check its mapped columns against the
    CSV header or Parquet schema (``pipelines.ingest.input_check``); ``UsageError`` (prefixed by
    ``what``, e.g. ``scenario NAME: ``) on any problem. A Kafka input (``kafka_ok``: run and
    stream only) gets the ``kafka`` preset's spec. No Spark."""
    for path in args.input:
        if is_kafka_url(path):
            continue
        if not Path(path).exists() and not (glob.has_magic(path) and glob.glob(path)):
            raise UsageError(f"input path {path} does not exist"
                             + (" (no file matches the pattern)" if glob.has_magic(path) else ""))
    if args.conf and not Path(args.conf).is_file():
        raise UsageError(f"config file {args.conf} does not exist")
    try:
        cfg = load_config(args.conf, [*args.sets, *extra_sets])
    except ConfigError as exc:
        raise UsageError(what + str(exc)) from None
    try:  # input.pseudonymize needs its secret: a missing one is a user mistake
        pseudonymizer(cfg)
    except PrivacyError as exc:
        raise UsageError(what + str(exc)) from None
    kafka = kafka_spec(args, cfg, kafka_ok)
    if kafka is not None:
        return cfg, kafka
    return cfg, file_spec(args, cfg, what)


def file_spec(args: argparse.Namespace, cfg: ReplayConfig, what: str) -> InputSpec:
    """The input spec of files: the preset with the config's input section, the files surveyed
    (empty ones skipped with a line, mixed ones refused) and their mapped columns checked, and
    under ``timestamp_format`` auto the unit of epoch numbers guessed (one line);
    ``UsageError`` (prefixed by ``what``) on any problem. The lines are printed once per
    command (not per scenario: ``what`` empty)."""
    preset = args.preset or cfg.input.preset
    try:
        spec = get_preset(preset)
    except ValueError as exc:
        raise UsageError(what + str(exc)) from None
    try:
        spec = input_spec(spec, cfg, args.input)
    except ValueError as exc:  # a preset's own pattern the replay cannot parse
        raise UsageError(what + str(exc)) from None
    survey = survey_inputs(spec, args.input)  # empty files, formats, headers (issue #32)
    try:  # no content, mixed files, a mapped column the header / schema lacks: before Spark
        check_files(spec, survey, need_content=args.command != "stream")
        check_columns(spec, args.input, survey)
    except (InputColumnError, InputFilesError) as exc:
        raise UsageError(what + str(exc)) from None
    if survey.empty and not what:
        names = ", ".join(f.name for f in survey.empty[:3])
        print(f"input: skipping {len(survey.empty)} empty file(s) ({names}"
              f"{', …' if len(survey.empty) > 3 else ''})")
    if survey.unread_folders and not what:
        names = ", ".join(f"{d.name}/" for d in survey.unread_folders[:3])
        more = ", …" if len(survey.unread_folders) > 3 else ""
        print(f"input: not reading {len(survey.unread_folders)} sub-folder(s) ({names}{more}): "
              f"an input folder's own files are read, not its sub-folders'; "
              f"{sub_folders_hint(survey.unread_folders)}")
    guess = guess_epoch_unit(spec, args.input)
    if guess is not None:  # timestamp_format auto and numbers: one unit for the whole run
        spec = spec.replace(epoch_unit=guess.unit, epoch_unit_guessed=True)
        if not what:
            print(f"input: {guess.note}")
    return spec


def kafka_source(args: argparse.Namespace, cfg: ReplayConfig) -> KafkaInput | None:
    """The Kafka input of ``run`` / ``stream`` (a ``kafka://`` URL, or ``input.format:
    kafka``), ``None`` for files; ``UsageError`` when it is incomplete."""
    try:
        return kafka_input(cfg, args.input)
    except KafkaInputError as exc:
        raise UsageError(str(exc)) from None


def kafka_spec(args: argparse.Namespace, cfg: ReplayConfig, kafka_ok: bool) -> InputSpec | None:
    """The ``kafka`` preset's spec when the input is Kafka (``None`` for files);
    ``UsageError`` when the command does not read Kafka (``kafka_ok`` false) or the input is
    incomplete."""
    if kafka_source(args, cfg) is None:
        return None
    if not kafka_ok:
        raise UsageError(f"{args.command} reads files; a Kafka input is read by run and "
                         "stream only")
    try:
        return kafka_preset_spec(cfg, args.preset)
    except KafkaInputError as exc:
        raise UsageError(str(exc)) from None


def input_spec(spec: InputSpec, cfg: ReplayConfig, inputs: list[str]) -> InputSpec:
    """Apply the config's input section (format, columns, defaults, timestamp format) and speed
    to a preset. ``ValueError`` when the result is not a valid spec; ``UsageError`` when the
    format is ``auto`` and no file name tells it."""
    changes: dict[str, Any] = {"speed": cfg.replay.speed}
    fmt: str = cfg.input.format
    if fmt == "auto" and spec.preset == "contract":
        fmt = guess_format(inputs)
    if fmt != "auto":
        changes["format"] = fmt
    if cfg.input.columns:
        changes["columns"] = {**spec.columns, **cfg.input.columns}
        changes["strict_columns"] = tuple(cfg.input.columns)
    if cfg.input.defaults.topic is not None:
        changes["topic"] = cfg.input.defaults.topic
    if spec.preset == "contract":
        changes["producer_name"] = cfg.input.defaults.producer_name
        if cfg.input.time_zone:
            changes["time_zone"] = cfg.input.time_zone
    if cfg.topic.name is not None:
        changes["topic"] = cfg.topic.name
    if cfg.input.timestamp_format is not None:  # over the preset's own format
        changes["publish_time_format"] = cfg.input.timestamp_format
    return spec.replace(**changes)


def guess_format(inputs: list[str]) -> str:
    """The input format the names of the input files tell (:func:`input_files`: the files
    ingest reads; :func:`format_of`; hidden and ``_`` files skipped): the one most files with
    content name (:func:`is_empty`: an empty file says nothing of the log; the first file's on
    a tie), else the first empty file's. ``UsageError`` when no file name tells one. Files
    naming another format are then reported by the input check (:func:`check_files`)."""
    files = input_files(inputs)
    named = [(f, fmt) for f in files
             if not f.name.startswith((".", "_")) and (fmt := format_of(f.name)) is not None]
    if not named:
        folders = unread_folders(inputs)
        if folders and not files:
            raise UsageError(only_sub_folders(folders))
        raise UsageError("cannot tell the input format from the file names; set input.format "
                         "(--set input.format=json|csv|parquet)")
    if len({fmt for _, fmt in named}) == 1:  # one format named: no file need be opened
        return named[0][1]
    with_content = [fmt for f, fmt in named if not is_empty(f)]
    if not with_content:
        return named[0][1]
    counts = Counter(with_content)
    return max(counts, key=lambda fmt: (counts[fmt], -with_content.index(fmt)))
