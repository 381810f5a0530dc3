"""The operators' keys' slots (``pipelines.spark.placement``): each key lands on the partition
the emulation chose (balanced by its bin's messages; key number ``k`` on ``k mod n`` when the
bins count alike, the busiest bins' keys first), as Spark's own hash partitioning places it,
and no two keys share a slot."""

from __future__ import annotations

import pickle

import pyarrow as pa
import pytest
from pyspark.sql import functions as F

from pipelines.spark.finalization import kept_placement
from pipelines.spark.placement import (
    CANDIDATES,
    Slots,
    balanced,
    balanced_producers,
    placement_order,
    slot_of,
    spark_partition,
    write_placement,
)
from pipelines.storage.staging import (
    PRODUCERS_COUNTED_MAX,
    StagingWriter,
    staged_producers,
    topic_bin,
)

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
    loads = tuple(sum(n for t, n in topics.items() if topic_bin(t, 4) == b) for b in range(4))
    staging = tmp_path / "staging"
    first = kept_placement(str(tmp_path), 4, topics, str(staging), 2)
    assert (first.order, first.loads) == (placement_order(dict(enumerate(loads)), 4), loads)
    # later finalizations (more messages, other busiest bins) and restarts read it back
    assert kept_placement(str(tmp_path), 4, {"t0": 10**6}, str(staging), 2) == first


def test_a_placement_kept_without_loads_counts_every_bin_alike(tmp_path) -> None:
    # written by a version that kept the order only: its keys stay where they were (k mod n),
    # its producers hashed
    (tmp_path / "placement.json").write_text('{"bin_order": [2, 0, 1]}')
    kept = kept_placement(str(tmp_path), 3, {"t0": 5}, str(tmp_path / "staging"), 4)
    assert (kept.order, kept.loads, kept.producers) == ((2, 0, 1), None, {})


def _stage(folder, topics: list[str], names: list[str], bins: int) -> None:
    writer = StagingWriter(str(folder), 0, bins=bins)
    n = len(topics)
    writer.add(pa.RecordBatch.from_pydict({
        "topic": topics, "key": [None] * n, "producer_name": names,
        "sequence_id": list(range(n)), "publish_time": pa.array([0] * n, pa.timestamp("us")),
        "payload_size": [1] * n, "event_ms": [0] * n}))
    writer.close()


def test_a_bins_producers_are_balanced_over_its_shards_from_the_staged_files(tmp_path) -> None:
    # one bin, heaviest first to the lighter shard: p1 (6) → 0, q (4) → 1, p2 (3) → 1,
    # p3 (2) → 0, p4 (1) → 1: 8 messages each (every topic's producers share the bin's shards)
    names = ["p1"] * 6 + ["p2"] * 3 + ["p3"] * 2 + ["p4"] * 1 + ["q"] * 4
    _stage(tmp_path / "staging" / "batch_id=0", ["a"] * 12 + ["b"] * 4, names, bins=1)
    kept = kept_placement(str(tmp_path), 1, {"a": 12, "b": 4}, str(tmp_path / "staging"), 2)
    assert kept.producers == {"a": {"p1": 0, "p2": 1, "p3": 0, "p4": 1}, "b": {"q": 1}}


def test_topics_of_one_producer_each_spread_over_the_shards(tmp_path) -> None:
    topics = [f"t{i}" for i in range(8)]
    _stage(tmp_path / "staging" / "batch_id=0", topics, ["p"] * 8, bins=1)
    kept = kept_placement(str(tmp_path), 1, dict.fromkeys(topics, 1),
                          str(tmp_path / "staging"), 4)
    assert sorted(kept.producers[t]["p"] for t in topics) == [0, 0, 1, 1, 2, 2, 3, 3]


def test_a_bin_of_too_many_producers_is_hashed(tmp_path) -> None:
    names = [f"p{i}" for i in range(PRODUCERS_COUNTED_MAX + 1)]
    _stage(tmp_path / "staging" / "batch_id=0", ["a"] * len(names), names, bins=1)
    assert staged_producers(str(tmp_path / "staging")) == {0: None}
    kept = kept_placement(str(tmp_path), 1, {"a": len(names)}, str(tmp_path / "staging"), 4)
    assert kept.producers == {}


@pytest.mark.parametrize(("counts", "want"), [
    pytest.param({}, {}, id="nothing-staged"),
    pytest.param({0: None}, {}, id="not-counted"),
    pytest.param({0: {"a": {"x": 5, "y": 5}}, 1: {"b": {"z": 1}}},
                 {"a": {"x": 0, "y": 1}, "b": {"z": 0}}, id="bins-apart"),
    pytest.param({0: {"a": {"x": 1, "y": 9, "z": 1}}}, {"a": {"x": 1, "y": 0, "z": 1}},
                 id="heaviest-alone"),
])
def test_balanced_producers_places_each_counted_bins_producers(counts, want) -> None:
    assert balanced_producers(counts, 2) == want


@pytest.mark.parametrize(("weights", "partitions", "want"), [
    pytest.param([5, 5, 5, 5, 5], 2, (0, 1, 0, 1, 0), id="equal-weights-k-mod-n"),
    pytest.param([0, 0, 0, 0], 2, (0, 1, 0, 1), id="empty-keys-spread"),
    pytest.param([54, 36, 10, 0], 2, (0, 1, 1, 1), id="third-joins-the-lighter"),
    pytest.param([10, 54, 36], 2, (1, 0, 1), id="heaviest-first-whatever-its-number"),
    pytest.param([3, 3, 2, 2, 2], 2, (0, 1, 0, 1, 0), id="ties-by-key-number"),
    pytest.param([7], 4, (0,), id="fewer-keys-than-partitions"),
])
def test_balanced_gives_each_key_the_lightest_partition_heaviest_first(weights, partitions,
                                                                         want) -> None:
    assert balanced(weights, partitions) == want


def test_a_bins_keys_are_balanced_by_the_bins_messages() -> None:
    # the 10 M bench: orders (bin 6), clicks (3), telemetry (8); 2 partitions. By key number
    # (k mod n) orders and telemetry shared partition 0: 6.4 M messages against 3.6 M.
    loads = [0] * 16
    loads[6], loads[3], loads[8] = 5_393_366, 3_599_298, 1_007_628
    order = placement_order(dict(enumerate(loads)), 16)
    slots = Slots.of(["r"], bins=16, shards=4, dispatchers=1, partitions=2, order=order,
                     loads=loads)
    control = {b: spark_partition(slots.control("r", b), 2) for b in (6, 3, 8)}
    assert control == {6: 0, 3: 1, 8: 1}
    batching = [[spark_partition(slots.batching("r", b, s), 2) for s in range(4)]
                for b in (6, 3, 8)]
    per_partition = [sum(loads[b] for b, parts in zip((6, 3, 8), batching, strict=True)
                         for p in parts if p == q) / 4 for q in (0, 1)]
    assert abs(per_partition[0] - per_partition[1]) <= 1_007_628 / 4


def test_loads_that_miss_a_bin_are_refused() -> None:
    with pytest.raises(ValueError, match="one count for each of the 3 topic bins"):
        Slots.of(["r"], bins=3, shards=1, dispatchers=1, partitions=2, loads=(1, 2))


def test_the_control_plane_reads_the_kept_producer_shards_once_and_pickles_none(
        tmp_path) -> None:
    from pipelines.spark.control import ControlProcessor  # noqa: PLC0415

    write_placement(str(tmp_path), {"bin_order": [0], "bin_loads": [3],
                                    "producer_shards": {"a": {"p": 1}}})
    processor = ControlProcessor({}, str(tmp_path / "staging"), str(tmp_path),
                                 Slots.of(["r"], bins=1, shards=2, dispatchers=1, partitions=1))
    assert processor.kept_shards() == {"a": {"p": 1}}
    write_placement(str(tmp_path), {"bin_order": [0], "producer_shards": {}})
    assert processor.kept_shards() == {"a": {"p": 1}}  # read once, in the task
    assert pickle.loads(pickle.dumps(processor)).kept_shards() == {}  # a new task reads anew
