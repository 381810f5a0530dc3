"""Where the emulation's operator keys run: each key is grouped by a *slot*, a long chosen so
that Spark's hash partitioning puts the key on the partition the emulation wants
(docs/architecture.md, "Operator keys placed on partitions").

A stateful operator's key goes to partition ``pmod(Murmur3Hash(key columns, seed 42), n)``
(Spark's ``HashPartitioning``; ``n`` = the state's partitions, fixed by the query's checkpoint
at its first micro-batch). Keyed by ``(run_id, bin, ...)``, the keys land where the hash puts
them: at 10 M messages the two busy topics' dispatch keys shared one partition (7 of the
stage's 8.5 s on one core), and 16 topic bins over 8 partitions leave some partitions three
bins and others none. Keyed by a slot, each key goes to the partition the emulation chose.

Keys are numbered run by run, and within a run by the bins' *placement order* (the bins by
staged messages, most first, at the replay's first finalization: a run constant, kept beside
the emulation's checkpoint with the bins' messages), then by shard or dispatcher. Each
operator's keys are then *balanced* over the partitions, the longest-processing-time-first
rule: keys by their bin's messages, most first (ties by key number), each to the partition
with the fewest messages so far (ties: the lowest). A partition is one task per operator and
micro-batch, its keys one after the other, and Spark starts the tasks in partition order: at
10 M messages over 3 topics on 2 partitions, ``k mod n`` put the busiest topic's bin and the
third one's on one partition (6.4 M messages against 3.6 M). With every bin's messages
unknown or equal (a placement kept before the messages were), the rule is ``k mod n``.

A slot is ``k * CANDIDATES + j``, ``j`` the first candidate whose partition is the target (0
when none is: the key then goes where the hash puts it). Unique per key, and a function of run
constants only (the runs, ``replay.topic_bins``, ``replay.producer_shards``, the dispatchers,
the state's partitions, the placement, kept in the run's manifest and beside the checkpoint),
so a restart finds every key's state under the same slot. A slot decides where a key runs,
never what it computes.
"""

from __future__ import annotations

import heapq
import json
import struct
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any

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


def slot_of(k: int, partitions: int, target: int | None = None) -> int:
    """The slot of key number ``k`` (``k >= 0``): the first of its candidates on partition
    ``target`` (default ``k mod partitions``)."""
    target = k % partitions if target is None else target
    base = k * CANDIDATES
    for j in range(CANDIDATES):
        if spark_partition(base + j, partitions) == target:
            return base + j
    return base


def balanced(weights: Sequence[int], partitions: int) -> tuple[int, ...]:
    """The partition of each key (``weights[k]``: key ``k``'s expected messages) by the
    longest-processing-time-first rule: keys by weight, heaviest first (ties by key number),
    each to the partition with the least weight so far (ties: the lowest partition), a key
    weighing at least 1. Equal weights give ``k mod partitions``. Cost: a heap operation per
    key."""
    heap = [(0, p) for p in range(partitions)]
    out = [0] * len(weights)
    # a key costs at least one message: keys of empty bins spread instead of piling on one
    for k in sorted(range(len(weights)), key=lambda k: (-weights[k], k)):
        total, p = heapq.heappop(heap)
        out[k] = p
        heapq.heappush(heap, (total + max(weights[k], 1), p))
    return tuple(out)


def balanced_producers(counts: Mapping[int, Mapping[str, Mapping[str, int]] | None],
                       shards: int) -> dict[str, dict[str, int]]:
    """The producer shards of each topic of a counted bin (``{topic: {producer_name:
    shard}}``): the bin's (topic, producer) pairs (``counts``: bin → topic → producer →
    staged messages; ``None``: not counted, its producers are hashed), numbered in (topic,
    name) order, :func:`balanced` over ``shards`` by their messages. A bin's batching runs as
    one key per shard, each holding every topic's producers of that shard: hashed, the 10 M
    bench's 20 producers of a topic fell 3, 4, 7 and 6 to its 4 shards (a shard's task 1.3 s,
    another's 2.9 s), and every topic's first producer on its own shard would leave a bin of
    topics with one producer each a single busy shard."""
    out: dict[str, dict[str, int]] = {}
    for b in sorted(counts):
        topics = counts[b]
        if not topics:
            continue
        pairs = [(t, n) for t in sorted(topics) for n in sorted(topics[t])]
        parts = balanced([int(topics[t][n]) for t, n in pairs], shards)
        for (t, n), shard in zip(pairs, parts, strict=True):
            out.setdefault(t, {})[n] = shard
    return out


PLACEMENT_FILE = "placement.json"
"""The placement's file beside the emulation's checkpoint: JSON ``{"bin_order": [bins],
"bin_loads": [messages by bin], "producer_shards": {topic: {producer_name: shard}}}`` (the
last two absent from a placement kept by an earlier version)."""


def read_placement(emulation: str) -> dict[str, Any] | None:
    """The placement kept under ``emulation`` (:data:`PLACEMENT_FILE`), ``None`` when none
    is."""
    from pipelines.storage import fs as storage  # noqa: PLC0415 (see write_placement)

    path = storage.join(emulation, PLACEMENT_FILE)
    if not storage.is_file(path):
        return None
    kept: dict[str, Any] = json.loads(storage.read_bytes(path).decode("utf-8"))
    return kept


def write_placement(emulation: str, placement: Mapping[str, Any]) -> None:
    """Keep ``placement`` (:data:`PLACEMENT_FILE`'s fields) under ``emulation``, whole."""
    # imported here: Spark's planner unpickles the operators, and their Slots, in a process
    # that must not load pyarrow (tests/spark/test_window_loop.py)
    from pipelines.storage import fs as storage  # noqa: PLC0415

    storage.write_bytes(storage.join(emulation, PLACEMENT_FILE),
                        json.dumps(placement, sort_keys=True).encode("utf-8"))


def kept_producer_shards(emulation: str) -> dict[str, dict[str, int]]:
    """The producer shards kept under ``emulation`` (:func:`balanced_producers`; ``{}``
    when none are: every producer is hashed)."""
    kept = read_placement(emulation)
    return {} if kept is None else dict(kept.get("producer_shards", {}))


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
    ``order``: the bins in placement order (:func:`placement_order`); ``loads``: each bin's
    staged messages when the placement was made, by bin number (``None``: unknown, every bin
    alike), which :func:`balanced` spreads each operator's keys by."""

    runs: tuple[str, ...]
    bins: int
    shards: int
    dispatchers: int
    partitions: int
    order: tuple[int, ...]
    loads: tuple[int, ...] | None = None

    @classmethod
    def of(cls, runs: Iterable[str], bins: int, shards: int, dispatchers: int,
           partitions: int, order: Sequence[int] | None = None,
           loads: Sequence[int] | None = None) -> Slots:
        """``order`` defaults to the bins in number order. ``ValueError`` when bins, shards or
        partitions are below 1 (``dispatchers`` may be 0: no run has subscriptions),
        ``order`` does not list each bin once or ``loads`` does not give one count per
        bin."""
        if min(bins, shards, partitions) < 1:
            raise ValueError("topic bins, producer shards and partitions must be at least 1")
        order = tuple(range(bins)) if order is None else tuple(int(b) for b in order)
        if sorted(order) != list(range(bins)):
            raise ValueError(f"the placement order must list each of the {bins} topic bins once")
        if loads is not None and len(loads) != bins:
            raise ValueError(f"the placement's loads must give one count for each of the {bins} "
                             f"topic bins, got {len(loads)}")
        return cls(tuple(sorted(runs)), bins, shards, max(1, dispatchers), partitions, order,
                   None if loads is None else tuple(int(n) for n in loads))

    def _bin(self, run_id: str, b: int) -> int:
        """The key number of ``(run_id, b)`` among the runs' bins."""
        return self.runs.index(run_id) * self.bins + self.order.index(b)

    def _targets(self, per_bin: int) -> tuple[int, ...]:
        """The partition of each key of an operator with ``per_bin`` keys per bin (numbered
        ``bin key × per_bin + i``), :func:`balanced` by their bins' loads."""
        loads = self.loads or (0,) * self.bins
        weights = [loads[b] for _ in self.runs for b in self.order for _ in range(per_bin)]
        return balanced(weights, self.partitions)

    @cached_property
    def _control(self) -> tuple[int, ...]:
        return self._targets(1)

    @cached_property
    def _batching(self) -> tuple[int, ...]:
        return self._targets(self.shards)

    @cached_property
    def _dispatch(self) -> tuple[int, ...]:
        return self._targets(self.dispatchers)

    def control(self, run_id: str, b: int) -> int:
        """The control plane's key ``(run_id, b)``."""
        k = self._bin(run_id, b)
        return slot_of(k, self.partitions, self._control[k])

    def batching(self, run_id: str, b: int, shard: int) -> int:
        """Batching's key ``(run_id, b, shard)``."""
        k = self._bin(run_id, b) * self.shards + shard
        return slot_of(k, self.partitions, self._batching[k])

    def dispatch(self, run_id: str, b: int, dispatcher: int) -> int:
        """Dispatch's key ``(run_id, b, dispatcher)`` (dispatcher ``-1``: a run without
        subscriptions, numbered as dispatcher 0)."""
        k = self._bin(run_id, b) * self.dispatchers + max(dispatcher, 0)
        return slot_of(k, self.partitions, self._dispatch[k])
