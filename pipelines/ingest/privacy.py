"""Personal data: keyed pseudonyms, withheld key columns, digested quarantine records.

Message keys and producer names in real logs are customer ids, user names, device ids. Three
config options (``docs/privacy.md`` says what each table holds under each):

- ``input.pseudonymize: [producer_name, key]``: those columns are replaced, as the accepted
  messages are staged, by :func:`pseudonym` (HMAC-SHA256 keyed with the secret in the
  environment variable ``input.pseudonymize_secret_env``, 32 hex characters). The key is
  replaced *after* its murmur3 hashes are computed, so routing (segments, buckets, entries,
  autoscale decisions) is unchanged; the same input and secret give the same tables.
- ``output.keys``: ``raw`` (the key as staged), ``hashed`` (``messages.key`` is null;
  ``hash32`` / ``segment_hash`` / ``hash_b`` kept), ``none`` (all four null). Applied where the
  ``messages`` rows are written (:func:`withheld_columns`).
- ``output.quarantine_raw: false``: a quarantined record's ``raw_record`` is
  ``"sha256:<hex>"`` of its text (:data:`DIGEST_PREFIX`; file-level rows keep their read
  error, which holds no record).

Pure Python + pyarrow (no pyspark): the Spark path and the local engine share it.
"""

from __future__ import annotations

import hashlib
import hmac
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa

PSEUDONYM_HEX_CHARS = 32
"""Length of a pseudonym: the first 128 bits of the HMAC-SHA256, as lowercase hex."""

DIGEST_PREFIX = "sha256:"
"""Prefix of a quarantined record's digest (``output.quarantine_raw: false``)."""

KEY_HASH_COLUMNS = ("hash32", "segment_hash", "hash_b")
"""``messages`` columns derived from the key (withheld by ``output.keys: none``)."""


class PrivacyError(ValueError):
    """A privacy option that cannot be honoured (e.g. the secret's variable is unset)."""


@dataclass(frozen=True)
class Pseudonymizer:
    """Replaces the values of ``columns`` by their keyed pseudonyms (picklable: it travels to
    the tasks that stage the messages). ``secret``: the HMAC key, bytes (never printed)."""

    columns: tuple[str, ...]
    secret: bytes

    def __repr__(self) -> str:  # keep the secret out of logs and tracebacks
        return f"Pseudonymizer(columns={self.columns!r})"

    def array(self, values: pa.Array | pa.ChunkedArray) -> pa.Array:
        """Pseudonyms of a string array (nulls stay null), one HMAC per distinct value."""
        values = values.combine_chunks() if isinstance(values, pa.ChunkedArray) else values
        encoded = values.cast(pa.string()).dictionary_encode()
        names = [None if v is None else pseudonym(v, self.secret)
                 for v in encoded.dictionary.to_pylist()]
        return pa.array(names, pa.string()).take(encoded.indices)

    def batch(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        """``batch`` with each of :attr:`columns` it holds replaced by pseudonyms."""
        arrays = [self.array(col) if name in self.columns else col
                  for name, col in zip(batch.schema.names, batch.columns, strict=True)]
        return pa.RecordBatch.from_arrays(arrays, names=batch.schema.names)

    def frame(self, df: pd.DataFrame) -> pd.DataFrame:
        """A copy of ``df`` with each of :attr:`columns` it holds replaced by pseudonyms."""
        out = df.copy()
        for c in self.columns:
            if c in out.columns:
                values = self.array(pa.array(out[c].to_numpy(object), pa.string()))
                out[c] = np.asarray(values.to_pylist(), dtype=object)
        return out


def pseudonym(value: str, secret: bytes) -> str:
    """The pseudonym of ``value``: HMAC-SHA256(``secret``, UTF-8 of ``value``), first
    :data:`PSEUDONYM_HEX_CHARS` hex characters. Deterministic; not reversible without the
    secret (a dictionary attack needs it)."""
    mac = hmac.digest(secret, value.encode("utf-8"), "sha256")
    return mac.hex()[:PSEUDONYM_HEX_CHARS]


def pseudonymizer(config: Any, environ: Mapping[str, str] | None = None) -> Pseudonymizer | None:
    """The :class:`Pseudonymizer` of ``config.input`` (``None`` when nothing is pseudonymized).

    The secret is the value of the environment variable ``input.pseudonymize_secret_env``
    (``environ``, default ``os.environ``), as UTF-8 bytes. Raises :class:`PrivacyError` (one
    sentence) when that variable is unset or empty."""
    columns = tuple(config.input.pseudonymize)
    if not columns:
        return None
    env = os.environ if environ is None else environ
    name = config.input.pseudonymize_secret_env
    secret = env.get(name, "")
    if not secret:
        raise PrivacyError(f"input.pseudonymize lists {', '.join(columns)} but the secret's "
                           f"environment variable {name} is not set (set it, or change "
                           f"input.pseudonymize_secret_env)")
    return Pseudonymizer(columns, secret.encode("utf-8"))


def withheld_columns(config: Any) -> dict[str, tuple[str, ...]]:
    """Table → columns written as nulls under ``output.keys`` (``{}`` for ``raw``):
    ``hashed`` withholds ``messages.key``; ``none`` also its hashes (:data:`KEY_HASH_COLUMNS`).
    Every withheld column is nullable, so the tables' schemas never change."""
    mode = config.output.keys
    if mode == "hashed":
        return {"messages": ("key",)}
    if mode == "none":
        return {"messages": ("key", *KEY_HASH_COLUMNS)}
    return {}


def withhold(data: pa.Table, columns: tuple[str, ...]) -> pa.Table:
    """``data`` with ``columns`` (those it holds) replaced by nulls of the same type."""
    for c in columns:
        i = data.schema.get_field_index(c)
        if i >= 0:
            data = data.set_column(i, data.schema.field(i), pa.nulls(data.num_rows,
                                                                      data.schema.field(i).type))
    return data


def record_digest(raw: str | None) -> str | None:
    """``"sha256:<hex>"`` of a raw record's UTF-8 text (``None`` stays ``None``): the holder of
    the input can find the line again; the table holds none of its content."""
    if raw is None:
        return None
    return DIGEST_PREFIX + hashlib.sha256(raw.encode("utf-8")).hexdigest()


def conceal_quarantine(quarantine: pd.DataFrame, file_reasons: tuple[str, ...]) -> pd.DataFrame:
    """``output.quarantine_raw: false`` on pandas rows (``source_file``, ``raw_record``,
    ``reason``, …): each record's ``raw_record`` becomes :func:`record_digest`; rows whose
    ``reason`` is in ``file_reasons`` (a whole file: the text is its read error) keep theirs."""
    if not len(quarantine):
        return quarantine
    out = quarantine.copy()
    keep = out["reason"].isin(file_reasons).to_numpy()
    raw = out["raw_record"].to_numpy(object)
    out["raw_record"] = np.asarray([r if k else record_digest(r) for r, k in zip(raw, keep,
                                                                             strict=True)],
                                   dtype=object)
    return out
