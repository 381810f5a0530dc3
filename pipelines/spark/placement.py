"""Where the emulation's operator keys run: each key is grouped by a *slot*, a long chosen so
that Spark's hash partitioning puts the key on the partition the emulation wants
(docs/architecture.md, "Operator keys placed on partitions").

A stateful operator's key goes to partition ``pmod(Murmur3Hash(key columns, seed 42), n)``
(Spark's ``HashPartitioning``; ``n`` = the state's partitions, fixed by the query's checkpoint
at its first micro-batch). Keyed by ``(run_id, bin, ...)``, the keys land where the hash puts
them: at 10 M messages the two busy topics' dispatch keys shared one partition (7 of the
stage's 8.5 s on one core), and 16 topic bins over 8 partitions leave some partitions three
bins and others none. Keyed by a slot, key number ``k`` of an operator goes to partition
``k mod n``. Keys are numbered run by run, and within a run by the bins' *placement order*
(the bins by staged messages, most first, at the replay's first finalization: a run
constant, kept beside the emulation's checkpoint), then by shard or dispatcher: each bin's
keys on consecutive partitions, the busiest bins' first. Spark starts a stage's tasks in
partition order, so the longest tasks start first (at 10 M messages the busiest topic's
control-plane task, 6.6 s, started last and set the stage's end).

A slot is ``k * CANDIDATES + j``, ``j`` the first candidate whose partition is the target (0
when none is: the key then goes where the hash puts it). Unique per key, and a function of run
constants only (the runs, ``replay.topic_bins``, ``replay.producer_shards``, the dispatchers,
the state's partitions, kept in the run's manifest), so a restart finds every key's state
under the same slot. A slot decides where a key runs, never what it computes.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import mmh3

SPARK_HASH_SEED = 42
"""The seed of Spark's ``Murmur3Hash`` in ``HashPartitioning`` (and of SQL ``hash()``)."""

CANDIDATES = 256
"""Slots tried per key: with ``n`` partitions a candidate misses the target with probability
``1 - 1/n``, so all of them miss with ``(1 - 1/n) ** 256`` (``2e-15`` for 8 partitions)."""


def spark_partition(slot: int, partitions: int) -> int:
    """The partition Spark's hash partitioning gives a row whose only key column is the long
    ``slot``: ``pmod(Murmur3_x86_32.hashLong(slot, 42), partitions)``. ``hashLong`` mixes
    the low then the high 32 bits and finalizes with length 8: the standard MurmurHash3 of the
    8 little-endian bytes (``mmh3``), signed as Java's int; Python's ``%`` is ``pmod``."""
    return mmh3.hash(struct.pack("<q", slot), SPARK_HASH_SEED, signed=True) % partitions


def slot_of(k: int, partitions: int) -> int:
    """The slot of key number ``k`` (``k >= 0``): the first of its candidates on partition
    ``k mod partitions``."""
    target = k % partitions
    base = k * CANDIDATES
    for j in range(CANDIDATES):
        if spark_partition(base + j, partitions) == target:
            return base + j
    return base


def placement_order(loads: Mapping[int, int], bins: int) -> tuple[int, ...]:
    """The bins ``0 <= b < bins`` by ``loads`` (bin → staged messages; missing = 0), most
    first, ties by bin number."""
    return tuple(sorted(range(bins), key=lambda b: (-int(loads.get(b, 0)), b)))


@dataclass(frozen=True)
class Slots:
    """The slots of a replay's operator keys. ``runs``: its run ids (numbered in name order,
    whatever order the sweep lists them); ``bins``: topic bins; ``shards``: producer shards
    per topic; ``dispatchers``: the most dispatchers of any run (at least 1: a run without
    subscriptions has the one dispatcher ``-1``); ``partitions``: the state's partitions;
    ``order``: the bins in placement order (:func:`placement_order`)."""

    runs: tuple[str, ...]
    bins: int
    shards: int
    dispatchers: int
    partitions: int
    order: tuple[int, ...]

    @classmethod
    def of(cls, runs: Iterable[str], bins: int, shards: int, dispatchers: int,
           partitions: int, order: Sequence[int] | None = None) -> Slots:
        """``order`` defaults to the bins in number order. ``ValueError`` when bins, shards or
        partitions are below 1 (``dispatchers`` may be 0: no run has subscriptions) or
        ``order`` does not list each bin once."""
        if min(bins, shards, partitions) < 1:
            raise ValueError("topic bins, producer shards and partitions must be at least 1")
        order = tuple(range(bins)) if order is None else tuple(int(b) for b in order)
        if sorted(order) != list(range(bins)):
            raise ValueError(f"the placement order must list each of the {bins} topic bins once")
        return cls(tuple(sorted(runs)), bins, shards, max(1, dispatchers), partitions, order)

    def _bin(self, run_id: str, b: int) -> int:
        """The key number of ``(run_id, b)`` among the runs' bins."""
        return self.runs.index(run_id) * self.bins + self.order.index(b)

    def control(self, run_id: str, b: int) -> int:
        """The control plane's key ``(run_id, b)``."""
        return slot_of(self._bin(run_id, b), self.partitions)

    def batching(self, run_id: str, b: int, shard: int) -> int:
        """Batching's key ``(run_id, b, shard)``."""
        return slot_of(self._bin(run_id, b) * self.shards + shard, self.partitions)

    def dispatch(self, run_id: str, b: int, dispatcher: int) -> int:
        """Dispatch's key ``(run_id, b, dispatcher)`` (dispatcher ``-1``: a run without
        subscriptions, numbered as dispatcher 0)."""
        return slot_of(self._bin(run_id, b) * self.dispatchers + max(dispatcher, 0),
                       self.partitions)
