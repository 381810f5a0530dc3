"""How ``publish_time`` is parsed: the named formats and the one pattern language.

``input.timestamp_format`` (and a preset's ``publish_time_format``) is one of

- ``auto``: strings are ISO-8601; numbers (and numeric strings) are epoch values whose unit is
  guessed once per run from their magnitude (``pipelines.ingest.time_unit``);
- ``iso``: ISO-8601 strings only (``T`` or space, optional fraction and offset);
- ``epoch_s`` | ``epoch_ms`` | ``epoch_us`` | ``epoch_ns``: numbers in that unit;
- a **Spark datetime pattern** (the language of Spark SQL's ``to_timestamp``, Java
  ``DateTimeFormatter`` letters), e.g. ``dd/MM/yyyy HH:mm:ss`` or ``dd/MMM/yyyy:HH:mm:ss Z``;
  literal letters go in single quotes (``yyyy-MM-dd'T'HH:mm:ss``).

One language only: a strptime pattern (``%d/%m/%Y``) is refused with the Spark pattern it
means (:func:`check_timestamp_format`). Both engines parse publish times with the same Python
rules (``pipelines.ingest.rules``), which translate the Spark pattern to strptime with
:func:`to_strptime`; only the letters of :data:`PATTERN_LETTERS` are supported.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from types import MappingProxyType

NAMED_FORMATS: tuple[str, ...] = ("auto", "iso", "epoch_s", "epoch_ms", "epoch_us", "epoch_ns")
"""The named publish-time formats; anything else is a Spark datetime pattern."""

EPOCH_FORMATS: tuple[str, ...] = ("epoch_s", "epoch_ms", "epoch_us", "epoch_ns")
"""The named formats of epoch numbers, by unit."""

PATTERN_LETTERS: Mapping[str, str] = MappingProxyType({
    "yyyy": "%Y", "yy": "%y", "MMMM": "%B", "MMM": "%b", "MM": "%m", "dd": "%d",
    "HH": "%H", "hh": "%I", "a": "%p", "mm": "%M", "ss": "%S",
    "S": "%f", "SS": "%f", "SSS": "%f", "SSSSSS": "%f", "SSSSSSSSS": "%f",
    "XXX": "%z", "XX": "%z", "Z": "%z", "EEE": "%a", "EEEE": "%A",
})
"""Spark datetime pattern letter runs the replay parses → their strptime directive. ``S``
runs are a fraction of a second (any length up to 9 digits is read, as Spark reads it)."""

_STRPTIME_TO_SPARK: Mapping[str, str] = MappingProxyType({
    "%Y": "yyyy", "%y": "yy", "%B": "MMMM", "%b": "MMM", "%m": "MM", "%d": "dd", "%H": "HH",
    "%I": "hh", "%p": "a", "%M": "mm", "%S": "ss", "%f": "SSSSSS", "%z": "Z", "%a": "EEE",
    "%A": "EEEE", "%%": "%",
})

_TOKENS = re.compile(r"'[^']*'|([A-Za-z])\1*|[^A-Za-z']+")


class TimestampFormatError(ValueError):
    """A publish-time format that is neither named nor a supported Spark pattern."""


def to_strptime(pattern: str) -> str:
    """The strptime format (for ``pandas.to_datetime``) of the Spark datetime ``pattern``.

    Quoted text (``'T'``; ``''`` is a quote) is literal, and so is any run of non-letters.
    Raises :class:`TimestampFormatError` naming the first letter run outside
    :data:`PATTERN_LETTERS` (e.g. ``D``, ``yyy``) or an unclosed quote."""
    out: list[str] = []
    pos = 0
    for m in _TOKENS.finditer(pattern):
        if m.start() != pos:
            break
        pos = m.end()
        tok = m.group(0)
        if tok.startswith("'"):
            out.append((tok[1:-1] or "'").replace("%", "%%"))
        elif tok[0].isalpha():
            if tok not in PATTERN_LETTERS:
                raise TimestampFormatError(
                    f"pattern letters {tok!r} in {pattern!r} are not supported (supported: "
                    f"{', '.join(PATTERN_LETTERS)}; quote literal text: 'T')")
            out.append(PATTERN_LETTERS[tok])
        else:
            out.append(tok.replace("%", "%%"))
    if pos != len(pattern):
        raise TimestampFormatError(f"unclosed quote in the pattern {pattern!r}")
    return "".join(out)


def strptime_to_spark(fmt: str) -> str:
    """The Spark datetime pattern a strptime format means, for the error that refuses it
    (``%d/%m/%Y %H:%M:%S`` → ``dd/MM/yyyy HH:mm:ss``); letters outside directives are
    quoted. A directive without a Spark letter run stays as it is."""
    out: list[str] = []
    for m in re.finditer(r"%.|[A-Za-z]+|[^%A-Za-z]+", fmt):
        tok = m.group(0)
        if tok.startswith("%"):
            out.append(_STRPTIME_TO_SPARK.get(tok, tok))
        elif tok[0].isalpha():
            out.append(f"'{tok}'")
        else:
            out.append(tok)
    return "".join(out)


def check_timestamp_format(value: str) -> str:
    """``value`` when it is a named format (:data:`NAMED_FORMATS`) or a Spark datetime pattern
    :func:`to_strptime` translates; :class:`TimestampFormatError` (one sentence) otherwise —
    a strptime pattern (it holds ``%``) names the Spark pattern to write instead."""
    if value in NAMED_FORMATS:
        return value
    if "%" in value:
        raise TimestampFormatError(
            f"{value!r} is a strptime pattern; timestamp formats are Spark datetime patterns: "
            f"write {strptime_to_spark(value)!r}")
    if not re.search("%[^%]", to_strptime(value).replace("%%", "")):
        raise TimestampFormatError(
            f"{value!r} is neither one of {', '.join(NAMED_FORMATS)} nor a Spark datetime "
            f"pattern (such as 'yyyy-MM-dd HH:mm:ss')")
    return value
