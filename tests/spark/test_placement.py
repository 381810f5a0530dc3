"""The operators' keys' slots (``pipelines.spark.placement``): each key lands on the partition
the emulation chose (key number ``k`` on ``k mod n``, the busiest bins' keys first), as Spark's
own hash partitioning places it, and no two keys share a slot."""

from __future__ import annotations

import pytest
from pyspark.sql import functions as F

from pipelines.spark.finalization import kept_placement
from pipelines.spark.placement import (
    CANDIDATES,
    Slots,
    placement_order,
    slot_of,
    spark_partition,
)
from pipelines.storage.staging import topic_bin

LONGS = [0, 1, -1, 42, 255, 256, 2**31 - 1, 2**31, -(2**31), 2**40 + 7, 2**63 - 1, -(2**63)]


@pytest.mark.spark
@pytest.mark.parametrize("partitions", [1, 2, 8, 200])
def test_spark_partition_is_sparks_hash_partition_of_a_long(spark, partitions: int) -> None:
    rows = spark.createDataFrame([(v,) for v in LONGS], "slot long")
    got = rows.select("slot", F.expr(f"pmod(hash(slot), {partitions})").alias("p")).collect()
    assert [spark_partition(r.slot, partitions) for r in got] == [r.p for r in got]


@pytest.mark.spark
def test_a_slot_repartitioned_by_spark_lands_on_its_key_numbers_partition(spark) -> None:
    n = 8
    slots = [slot_of(k, n) for k in range(40)]
    rows = spark.createDataFrame([(s,) for s in slots], "slot long").repartition(n, "slot")
    placed = {r.slot: r.p for r in rows.select("slot", F.spark_partition_id().alias("p"))
              .collect()}
    assert [placed[s] for s in slots] == [k % n for k in range(40)]


def test_sixteen_bins_put_two_on_each_of_eight_partitions() -> None:
    slots = Slots.of(["r"], bins=16, shards=4, dispatchers=1, partitions=8)
    places = [spark_partition(slots.control("r", b), 8) for b in range(16)]
    assert sorted(places) == sorted(list(range(8)) * 2)


@pytest.mark.parametrize(("operator", "keys"), [
    ("control", lambda s: [(r, b) for r in s.runs for b in range(s.bins)]),
    ("batching", lambda s: [(r, b, x) for r in s.runs for b in range(s.bins)
                            for x in range(s.shards)]),
    ("dispatch", lambda s: [(r, b, x) for r in s.runs for b in range(s.bins)
                            for x in range(s.dispatchers)]),
])
def test_no_two_keys_of_an_operator_share_a_slot(operator: str, keys) -> None:
    slots = Slots.of(["b", "a", "c"], bins=5, shards=3, dispatchers=2, partitions=4)
    got = [getattr(slots, operator)(*k) for k in keys(slots)]
    assert len(set(got)) == len(got)


def test_a_bins_shards_go_to_consecutive_partitions() -> None:
    slots = Slots.of(["r"], bins=4, shards=4, dispatchers=1, partitions=8)
    assert [spark_partition(slots.batching("r", 1, s), 8) for s in range(4)] == [4, 5, 6, 7]


def test_runs_are_numbered_in_name_order_whatever_the_order_given() -> None:
    one = Slots.of(["b", "a"], bins=2, shards=1, dispatchers=1, partitions=4)
    other = Slots.of(["a", "b"], bins=2, shards=1, dispatchers=1, partitions=4)
    assert one.control("b", 1) == other.control("b", 1) == slot_of(3, 4)


def test_a_run_without_subscriptions_dispatches_as_dispatcher_zero() -> None:
    slots = Slots.of(["r"], bins=2, shards=1, dispatchers=0, partitions=4)
    assert slots.dispatch("r", 1, -1) == slots.dispatch("r", 1, 0) == slot_of(1, 4)


def test_a_key_whose_candidates_all_miss_keeps_its_first() -> None:
    # with more partitions than candidates, most targets are missed by every candidate
    partitions = 100 * CANDIDATES
    misses = [k for k in range(50)
              if spark_partition(slot_of(k, partitions), partitions) != k % partitions]
    assert misses
    assert all(slot_of(k, partitions) == k * CANDIDATES for k in misses)


def test_counts_below_one_are_refused() -> None:
    with pytest.raises(ValueError, match="at least 1"):
        Slots.of(["r"], bins=0, shards=1, dispatchers=1, partitions=8)


@pytest.mark.parametrize(("loads", "order"), [
    pytest.param({}, (0, 1, 2, 3), id="no-messages-bins-in-number-order"),
    pytest.param({2: 50, 0: 10, 3: 50}, (2, 3, 0, 1), id="most-first-ties-by-bin"),
])
def test_placement_order_puts_the_busiest_bins_first(loads, order) -> None:
    assert placement_order(loads, 4) == order


def test_the_busiest_bins_keys_go_to_the_first_partitions() -> None:
    slots = Slots.of(["r"], bins=4, shards=2, dispatchers=1, partitions=8, order=(3, 0, 1, 2))
    assert spark_partition(slots.control("r", 3), 8) == 0
    assert [spark_partition(slots.batching("r", 3, s), 8) for s in range(2)] == [0, 1]
    assert spark_partition(slots.dispatch("r", 0, 0), 8) == 1


def test_an_order_that_misses_a_bin_is_refused() -> None:
    with pytest.raises(ValueError, match="each of the 3 topic bins once"):
        Slots.of(["r"], bins=3, shards=1, dispatchers=1, partitions=2, order=(0, 1, 1))


def test_the_placement_is_kept_from_the_first_finalization(tmp_path) -> None:
    topics = {f"t{i}": i for i in range(8)}
    first = kept_placement(str(tmp_path), 4, topics)
    want = placement_order({b: sum(n for t, n in topics.items() if topic_bin(t, 4) == b)
                            for b in range(4)}, 4)
    assert first == want
    # later finalizations (more messages, other busiest bins) and restarts read it back
    assert kept_placement(str(tmp_path), 4, {"t0": 10**6}) == first
