"""Producer batching in event time (reference §7 bucketed batching, §7.1 the flush task, §7.2
layout changes, §3.4 entry routing).

The worked cases are table-driven; the property tests compare :func:`batch` (vectorized, every
producer and container at once, any windowing) against :func:`message_by_message`, a literal
event-by-event reading of the reference's rules.
"""

from __future__ import annotations

import heapq
import subprocess
import sys
from dataclasses import dataclass

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pipelines.core import batching
from pipelines.core.batching import (
    CLOSE_REASONS,
    ENTRY_COLUMNS,
    BatchingConfig,
    ContainerState,
    Messages,
    Reroute,
    batch,
    reroutes,
)
from pipelines.core.buckets import bucket_of
from pipelines.core.layout import SegmentLayout, layout_as_of
from tests.conftest import examples

B0, B1, B2, B3 = 0x0100, 0x4100, 0x8100, 0xC100  # one hash_b in each of 4 equal buckets


@dataclass(frozen=True)
class M:
    """One test message of producer ``p``: publish time, ``segment_hash`` (-1 = keyless),
    ``hash_b``, size, key identity (key_based batching)."""

    t: int
    sh: int = 0x1000
    h: int = B0
    size: int = 10
    p: int = 0
    key: int = -1


def cfg(mode: str = "bucketed", max_messages: int = 1000, max_bytes: int = 131072,
        delay: int = 1) -> BatchingConfig:
    return BatchingConfig(mode=mode, max_messages=max_messages, max_bytes=max_bytes,
                          max_publish_delay_ms=delay)


def routed(msgs: list[M], layout: SegmentLayout) -> Messages:
    """Route like the controller (§1.3): the layout in force at each publish time; keyless
    round-robin per producer over the active segments by range start."""
    seg, bucket, epoch, ordinal = [], [], [], []
    rr: dict[int, int] = {}
    sent: dict[int, int] = {}
    for m in msgs:
        now = layout_as_of(layout, m.t)
        _starts, ids = now.routing_table()
        if m.sh >= 0:
            s = int(now.route_array([m.sh])[0])
        else:
            s = int(ids[rr.get(m.p, 0) % len(ids)])
            rr[m.p] = rr.get(m.p, 0) + 1
        seg.append(s)
        bucket.append(bucket_of(now.segments[s].bucket_splits, m.h if m.sh >= 0 else 0))
        epoch.append(now.epoch)
        ordinal.append(sent.get(m.p, 0))
        sent[m.p] = sent.get(m.p, 0) + 1

    def col(values: list[int]) -> np.ndarray:
        return np.asarray(values, dtype=np.int64)

    return Messages(
        producer=col([m.p for m in msgs]), ordinal=col(ordinal), time_ms=col([m.t for m in msgs]),
        resent=np.zeros(len(msgs), dtype=np.int64), publish_ms=col([m.t for m in msgs]),
        segment_id=col(seg), bucket_index=col(bucket), segment_hash=col([m.sh for m in msgs]),
        hash_b=col([m.h if m.sh >= 0 else 0 for m in msgs]),
        payload_size=col([m.size for m in msgs]), key_id=col([m.key for m in msgs]),
        epoch=col(epoch))


def one_segment(buckets: int = 4) -> SegmentLayout:
    return SegmentLayout.initial(1, buckets, now_ms=0)


def run(msgs: list[M], config: BatchingConfig, layout: SegmentLayout | None = None,
        cuts: tuple[int, ...] = ()) -> tuple[dict[str, list], list[int], dict[str, np.ndarray]]:
    """Feed ``msgs`` (publish-time order) in windows ending at the ``cuts`` times (messages
    before the cut; seals and tasks up to and including it), the open
    batches fed back each time (as the stage does), then end of input. Returns the entries
    (columns as lists, by producer then entry_seq), each message's entry index into them, and
    each message's final placement columns."""
    layout = layout if layout is not None else one_segment()
    all_m = routed(msgs, layout)
    producers = int(all_m.producer.max()) + 1 if len(msgs) else 1
    state = ContainerState()
    base = np.zeros(producers, dtype=np.int64)
    carried = np.zeros(0, dtype=np.intp)
    entries: list[dict[str, np.ndarray]] = []
    entry_of = np.full(len(msgs), -1, dtype=np.int64)
    placed: dict[str, np.ndarray] = {k: np.full(len(msgs), -1, dtype=np.int64) for k in
                                     ("segment_id", "bucket_index", "segment_sequence_id",
                                      "epoch")}
    work = all_m
    lo = -(2**62)  # seals from lo on; messages from lo - 1 on
    for hi in [*cuts, None]:
        published = all_m.publish_ms
        new = np.flatnonzero((published >= lo - 1) & (hi is None or published < hi))
        idx = np.concatenate([carried, new]).astype(np.intp)
        window = work.take(idx)
        r = batch(window, state, reroutes(layout, lo, hi), config, producers, base, hi)
        state, base = r.state, base + r.entries_per_producer
        done = r.entry_seq >= 0
        entry_of[idx[done]] = r.entry_seq[done]
        for k, v in (("segment_id", r.segment_id), ("bucket_index", r.bucket_index),
                     ("segment_sequence_id", r.segment_sequence_id), ("epoch", r.epoch)):
            placed[k][idx[done]] = v[done]
        entries.append(r.entries)
        # the open batches go back with their current placement (re-sent ones included)
        for f in ("time_ms", "resent", "segment_id", "bucket_index", "epoch"):
            getattr(work, f)[idx] = getattr(r, f)
        carried = idx[~done]
        lo = hi + 1 if hi is not None else lo
    cols = {c: np.concatenate([e[c] for e in entries]) for c in ENTRY_COLUMNS}
    order = np.lexsort((cols["entry_seq"], cols["producer"]))
    cols = {c: v[order] for c, v in cols.items()}
    rank = {(int(p), int(s)): i for i, (p, s) in enumerate(zip(cols["producer"],
                                                              cols["entry_seq"], strict=True))}
    mapping = [rank[(m.p, int(e))] for m, e in zip(msgs, entry_of, strict=True)]
    cols["close_reason"] = np.asarray(CLOSE_REASONS, dtype=object)[cols["close_reason"]]
    return {c: v.tolist() for c, v in cols.items()}, mapping, placed


def rows(e: dict[str, list], *columns: str) -> list[tuple]:
    cols = columns or ("segment_id", "bucket_index", "num_messages", "close_reason",
                       "open_time_ms", "publish_time_ms")
    return list(zip(*[e[c] for c in cols], strict=True))


# ---------------------------------------------------------------------------------- config
def test_defaults_are_pulsar_v4_producer_defaults() -> None:
    c = BatchingConfig()
    assert (c.mode, c.max_messages, c.max_bytes, c.max_publish_delay_ms) == (
        "bucketed", 1000, 131072, 1)
    assert c.problems() == []


@pytest.mark.parametrize(("kwargs", "fragment"), [
    ({"max_messages": 0}, "max_messages must be >= 1"),
    ({"max_bytes": 0}, "max_bytes must be >= 1"),
    ({"max_publish_delay_ms": 0}, "max_publish_delay_ms must be >= 1"),
    ({"mode": "per_key"}, "mode 'per_key' is not one of"),
    ({"max_messages": 2.5}, "max_messages must be an integer"),
])
def test_invalid_config_is_reported_and_rejected(kwargs: dict[str, object], fragment: str) -> None:
    c = BatchingConfig(**kwargs)  # type: ignore[arg-type]
    assert any(fragment in p for p in c.problems())
    with pytest.raises(ValueError, match="invalid batching config"):
        batch(routed([], one_segment()), ContainerState(), [], c, 1)


# ------------------------------------------------------------------- the flush task (§7.1)
@pytest.mark.parametrize(("delay", "times", "want"), [
    # delay 1 ms: each ms's messages go out 1 ms after the first of them
    (1, [0, 0, 1, 5], [(2, 0, 1), (1, 1, 2), (1, 5, 6)]),
    # delay 5 ms: a batch opening while the task is pending goes out when it fires (10), not
    # 5 ms after its own first message (12)
    (5, [0, 4, 7, 11, 30], [(2, 0, 5), (1, 7, 10), (1, 11, 15), (1, 30, 35)]),
    # delay 100 ms: after a task send the next one is due 100 ms later; an idle spell ends it
    (100, [0, 50, 120, 150, 199, 450], [(2, 0, 100), (3, 120, 200), (1, 450, 550)]),
])
def test_task_measures_time_since_the_last_send(delay: int, times: list[int],
                                                want: list[tuple]) -> None:
    e, _, _ = run([M(t) for t in times], cfg(delay=delay))
    assert rows(e, "num_messages", "open_time_ms", "publish_time_ms") == want
    assert set(e["close_reason"]) == {"max_delay"}


@pytest.mark.parametrize(("delay", "times", "want"), [
    # count send at 3 (3 messages); the pending task (due 10) re-arms to 3 + 10 = 13: the batch
    # opened at 4 goes out at 13, not at 14
    (10, [0, 2, 3, 4, 6], [(3, "max_messages", 3), (2, "max_delay", 13)]),
    # a message at or after last send + delay finds no pending task: its own task, 10 ms later
    (10, [0, 2, 3, 20], [(3, "max_messages", 3), (1, "max_delay", 30)]),
])
def test_count_send_restarts_the_task_clock(delay: int, times: list[int],
                                            want: list[tuple]) -> None:
    e, _, _ = run([M(t) for t in times], cfg(delay=delay, max_messages=3))
    assert rows(e, "num_messages", "close_reason", "publish_time_ms") == want


def test_size_flush_inside_a_pending_task_moves_the_next_send() -> None:
    # delay 10: 60 + 50 bytes > 100 at t=4 → pre-add send of the first at 4; the task due at 10
    # finds less than 10 ms since that send and re-arms to 14
    e, _, _ = run([M(0, size=60), M(4, size=50), M(6, size=10)], cfg(delay=10, max_bytes=100))
    assert rows(e, "num_messages", "close_reason", "open_time_ms", "publish_time_ms") == [
        (1, "max_bytes", 0, 4), (2, "max_delay", 4, 14)]


def test_message_filling_an_idle_container_schedules_no_task() -> None:
    # a 200-byte message alone fills the container (max_bytes 100) and is sent at once with no
    # task scheduled; the next message then waits its own full delay (12 + 10)
    e, _, _ = run([M(5, size=200), M(12, size=1)], cfg(delay=10, max_bytes=100))
    assert rows(e, "num_messages", "close_reason", "publish_time_ms") == [
        (1, "max_bytes", 5), (1, "max_delay", 22)]


@pytest.mark.parametrize("delay", [1, 5, 100])
def test_open_batch_at_end_of_input_goes_out_when_its_task_fires(delay: int) -> None:
    e, _, _ = run([M(0), M(0, size=20)], cfg(delay=delay))
    assert rows(e, "num_messages", "close_reason", "publish_time_ms") == [
        (2, "max_delay", delay)]
    assert "end_of_input" not in CLOSE_REASONS


def test_fullness_is_aggregate_across_buckets() -> None:
    e, _, _ = run([M(0, h=B0), M(0, h=B1), M(0, h=B2), M(0, h=B3)], cfg(max_messages=4))
    assert rows(e, "bucket_index", "num_messages", "close_reason") == [
        (0, 1, "max_messages"), (1, 1, "max_messages"), (2, 1, "max_messages"),
        (3, 1, "max_messages")]


@pytest.mark.parametrize(("mode", "want"), [
    ("bucketed", [(0, 0x0100, 0x0200, 2), (2, 0x8100, 0x8100, 1)]),
    ("key_based", [(0, 0x0100, 0x0100, 1), (0, 0x0200, 0x0200, 1), (2, 0x8100, 0x8100, 1)]),
    ("default", [(0, 0x0100, 0x8100, 3)]),
    ("disabled", [(0, 0x0100, 0x0100, 1), (0, 0x0200, 0x0200, 1), (2, 0x8100, 0x8100, 1)]),
])
def test_inner_batches_per_mode(mode: str, want: list[tuple]) -> None:
    msgs = [M(0, h=0x0100, key=1), M(0, h=0x0200, key=2), M(0, h=0x8100, key=3)]
    e, _, _ = run(msgs, cfg(mode))
    assert rows(e, "bucket_index", "entry_hash_min", "entry_hash_max", "num_messages") == want


# --------------------------------------------------------------- layout changes (§7.2)
def test_open_batch_at_a_split_is_resent_to_the_children() -> None:
    layout = one_segment().split(0, now_ms=6)  # children 1 = [0, 7fff], 2 = [8000, ffff]
    msgs = [M(0, sh=0x1000, h=B0), M(3, sh=0x9000, h=B2), M(4, sh=0x1000, h=B1),
            M(7, sh=0x9000, h=B2)]
    e, mapping, placed = run(msgs, cfg(delay=10), layout)
    # nothing is sent to segment 0 at or after its seal; its open batch goes to 1 and 2 at 6
    assert rows(e, "segment_id", "bucket_index", "num_messages", "open_time_ms",
                "publish_time_ms", "first_sequence_id", "last_sequence_id") == [
        (1, 0, 2, 0, 16, 0, 1), (2, 1, 2, 3, 16, 0, 1)]
    assert mapping == [0, 1, 0, 1]
    assert placed["segment_id"].tolist() == [1, 2, 1, 2]
    assert placed["bucket_index"].tolist() == [0, 1, 0, 1]  # children have N = 2
    assert placed["epoch"].tolist() == [1, 1, 1, 1]
    assert placed["segment_sequence_id"].tolist() == [0, 0, 1, 1]


def test_resent_messages_go_ahead_of_newer_ones_at_the_seal_time() -> None:
    layout = one_segment().split(0, now_ms=5)
    msgs = [M(2, sh=0x1000, size=10), M(5, sh=0x1000, size=10)]
    e, _mapping, placed = run(msgs, cfg(delay=10, max_messages=2), layout)
    # the parked message enters child 1 at 5, then the message published at 5 fills it
    assert rows(e, "segment_id", "num_messages", "close_reason", "publish_time_ms") == [
        (1, 2, "max_messages", 5)]
    assert placed["segment_sequence_id"].tolist() == [0, 1]


def test_open_batch_at_a_merge_is_resent_to_the_merged_segment() -> None:
    layout = SegmentLayout.initial(2, 4, now_ms=0).merge(0, 1, now_ms=8)  # → segment 2
    msgs = [M(1, sh=0x1000, h=B0), M(2, sh=0x9000, h=B3), M(3, sh=0x9000, h=B3)]
    e, _mapping, placed = run(msgs, cfg(delay=20), layout)
    assert rows(e, "segment_id", "bucket_index", "num_messages", "publish_time_ms",
                "first_sequence_id", "last_sequence_id") == [
        (2, 0, 1, 28, 0, 0), (2, 3, 2, 28, 1, 2)]
    assert placed["segment_id"].tolist() == [2, 2, 2]


def test_batch_sent_before_the_seal_stays_in_the_sealed_segment() -> None:
    layout = one_segment().split(0, now_ms=50)
    e, _, placed = run([M(0), M(1)], cfg(delay=10), layout)
    assert rows(e, "segment_id", "publish_time_ms") == [(0, 10)]
    assert placed["epoch"].tolist() == [0, 0]


def test_task_due_at_the_seal_time_does_not_send_to_the_sealed_segment() -> None:
    layout = one_segment().split(0, now_ms=10)
    e, _, _ = run([M(0, sh=0x1000)], cfg(delay=10), layout)
    assert rows(e, "segment_id", "publish_time_ms") == [(1, 20)]


def test_parked_keyless_messages_go_round_robin_over_the_new_layout() -> None:
    layout = one_segment().split(0, now_ms=5)
    e, _, placed = run([M(0, sh=-1), M(1, sh=-1), M(2, sh=-1)], cfg(delay=10), layout)
    assert placed["segment_id"].tolist() == [1, 2, 1]
    assert placed["bucket_index"].tolist() == [0, 0, 0]
    assert rows(e, "segment_id", "num_messages") == [(1, 2), (2, 1)]


def test_rebucket_rollover_resends_with_the_successors_buckets() -> None:
    layout = one_segment(1).rebucket(0, 4, now_ms=3)
    e, _, placed = run([M(0, h=B0), M(1, h=B3)], cfg(delay=10), layout)
    assert placed["segment_id"].tolist() == [1, 1]
    assert placed["bucket_index"].tolist() == [0, 3]
    assert rows(e, "segment_id", "bucket_index", "publish_time_ms") == [(1, 0, 13), (1, 3, 13)]


def test_sends_of_one_instant_keep_their_order_when_a_trigger_is_resent_later() -> None:
    # at 34: a count send (trigger: the 2nd message), then a pre-add byte send (trigger: the
    # 4th message, which stays open and is re-sent at the split at 36)
    layout = one_segment().split(0, now_ms=36)
    msgs = [M(34, size=0), M(34, size=0), M(34, size=15), M(34, size=2)]
    e, _, placed = run(msgs, cfg(delay=5, max_messages=2, max_bytes=16), layout)
    assert rows(e, "entry_seq", "segment_id", "num_messages", "close_reason",
                "publish_time_ms") == [(0, 0, 2, "max_messages", 34), (1, 0, 1, "max_bytes", 34),
                                       (2, 1, 1, "max_delay", 41)]
    assert placed["segment_id"].tolist() == [0, 0, 0, 1]


def test_sequence_ids_are_per_segment_producer() -> None:
    layout = SegmentLayout.initial(2, 4, now_ms=0)
    msgs = [M(0, sh=0x1000), M(0, sh=0x9000), M(0, sh=0x1000), M(0, sh=0x1000, p=1)]
    _, _, placed = run(msgs, cfg(delay=1), layout)
    assert placed["segment_sequence_id"].tolist() == [0, 0, 1, 0]


def test_entry_ids_follow_the_producers_send_order_across_segments() -> None:
    layout = SegmentLayout.initial(2, 4, now_ms=0)
    msgs = [M(0, sh=0x9000), M(1, sh=0x1000), M(1, sh=0x9000, p=1)]
    e, _mapping, _ = run(msgs, cfg(delay=5), layout)
    assert rows(e, "producer", "entry_seq", "segment_id", "publish_time_ms") == [
        (0, 0, 1, 5), (0, 1, 0, 6), (1, 0, 1, 6)]


# --------------------------------------------------------------- the literal oracle
# The oracle reads the reference's rules literally, in one place (C901/PLR0915 waived): split
# into helpers it would be a second implementation to trust rather than a transcription.
def message_by_message(msgs: list[M], config: BatchingConfig,  # noqa: C901, PLR0915
                       layout: SegmentLayout) -> tuple[list[tuple], list[int]]:
    """The reference's rules read literally, one event at a time per producer (§7, §7.1,
    §7.2): seals, then flush tasks due (by segment id), then messages, at each instant.
    Returns entry rows (producer, entry_seq, segment, bucket, hash min, hash max, count, bytes,
    open time, publish time, reason, first seq, last seq) and each message's entry row."""
    m_all = routed(msgs, layout)
    delay = config.max_publish_delay_ms
    seals = [Reroute.of(layout, t) for t in sorted({
        s.sealed_at_ms for s in layout.segments.values() if not s.is_active})]
    entry_of: list = [-1] * len(msgs)

    def simulate(p: int) -> list[tuple]:  # noqa: C901, PLR0915 - see above
        mine = [i for i, m in enumerate(msgs) if m.p == p]
        cont: dict[int, dict] = {}  # segment → last, task, batch [(i, seq, seg, bucket)], seq
        where = {i: (int(m_all.segment_id[i]), int(m_all.bucket_index[i])) for i in mine}
        produced: list[tuple] = []

        def group(i: int, bucket: int) -> int:
            if config.mode == "bucketed":
                return bucket
            return msgs[i].key if config.mode == "key_based" else 0

        def send(c: dict, seg: int, now: int, reason: str) -> None:
            by_group: dict[int, list] = {}
            for item in c["batch"]:
                by_group.setdefault(group(item[0], item[2]), []).append(item)
            for items in sorted(by_group.values(), key=lambda x: max(s for _, s, _ in x)):
                hs = [m_all.hash_b[i] for i, _, _ in items]
                seqs = [s for _, s, _ in items]
                for i, _, _ in items:
                    entry_of[i] = (p, len(produced))
                produced.append((p, len(produced), seg, min(b for _, _, b in items), min(hs),
                                 max(hs), len(items), sum(msgs[i].size for i, _, _ in items),
                                 min(msgs[i].t for i, _, _ in items), now, reason, min(seqs),
                                 max(seqs)))
            c["batch"], c["count"], c["bytes"], c["last"] = [], 0, 0, now

        def add(i: int, now: int) -> None:
            seg, bucket = where[i]
            c = cont.setdefault(seg, {"last": -(2**62), "task": None, "batch": [], "count": 0,
                                      "bytes": 0, "seq": 0})
            size = msgs[i].size
            if config.mode == "disabled":
                c["batch"] = [(i, c["seq"], bucket)]
                c["seq"] += 1
                send(c, seg, now, "disabled")
                return
            if c["count"] and c["bytes"] + size > config.max_bytes:
                send(c, seg, now, "max_bytes")
            c["batch"].append((i, c["seq"], bucket))
            c["seq"] += 1
            c["count"] += 1
            c["bytes"] += size
            if c["count"] >= config.max_messages:
                send(c, seg, now, "max_messages")
            elif c["bytes"] >= config.max_bytes:
                send(c, seg, now, "max_bytes")
            elif c["task"] is None:
                c["task"] = now + delay

        def fire(seg: int) -> None:
            c = cont[seg]
            now, c["task"] = c["task"], None
            if now - c["last"] < delay:
                c["task"] = c["last"] + delay
            elif c["batch"]:
                send(c, seg, now, "max_delay")
                c["task"] = now + delay

        queue = [(msgs[i].t, i) for i in mine]
        heapq.heapify(queue)
        pending_seals = list(seals)
        while True:
            tasks = [(c["task"], s) for s, c in cont.items() if c["task"] is not None]
            nxt = [(queue[0][0], 2)] if queue else []
            nxt += [(pending_seals[0].time_ms, 0)] if pending_seals else []
            nxt += [(min(tasks)[0], 1)] if tasks else []
            if not nxt:
                break
            now, kind = min(nxt)
            if kind == 0:
                change = pending_seals.pop(0)
                parked = sorted(i for s in change.sealed if s in cont
                                for i, _, _ in cont.pop(s)["batch"])
                if parked:
                    succ = change.route(m_all.segment_hash[parked])
                    for i, s in zip(parked, succ.tolist(), strict=True):
                        where[i] = (s, bucket_of(change.splits[s], int(m_all.hash_b[i])))
                        add(i, now)
            elif kind == 1:
                fire(min(tasks)[1])
            else:
                _, i = heapq.heappop(queue)
                add(i, now)
        return produced

    entries = [e for p in sorted({m.p for m in msgs}) for e in simulate(p)]
    rank = {(e[0], e[1]): k for k, e in enumerate(entries)}
    return entries, [rank[x] for x in entry_of]  # type: ignore[index]


@st.composite
def scenarios(draw: st.DrawFn) -> tuple:
    mode = draw(st.sampled_from(["bucketed", "bucketed", "key_based", "default", "disabled"]))
    config = cfg(mode, draw(st.integers(1, 6)), draw(st.integers(15, 80)),
                 draw(st.sampled_from([1, 2, 5, 20])))
    n = draw(st.integers(1, 40))
    gaps = draw(st.lists(st.sampled_from([0, 0, 1, 2, 5, 9]), min_size=n, max_size=n))
    hashes = st.sampled_from([0, 1, B0, 16383, 16384, B1, 32767, B2, 49152, B3, 65535])
    seg_hashes = st.sampled_from([-1, 0, 0x1000, 0x7FFF, 0x8000, 0xC000, 0xFFFF])
    msgs, t = [], draw(st.integers(0, 3))
    for i in range(n):
        t += gaps[i]
        msgs.append(M(t, draw(seg_hashes), draw(hashes), draw(st.integers(0, 30)),
                      draw(st.integers(0, 2)), draw(st.integers(-1, 3))))
    layout = SegmentLayout.initial(draw(st.integers(1, 2)), 4, now_ms=0)
    change_at = sorted(draw(st.sets(st.integers(1, t + 30), max_size=3)))
    for at in change_at:
        active = sorted(layout.active_segments)
        op = draw(st.sampled_from(["split", "merge", "rebucket"]))
        sid = draw(st.sampled_from(active))
        if op == "merge" and len(active) > 1:
            seg = layout.segments[sid]
            other = [o for o in active if layout.segments[o].is_adjacent(seg)]
            layout = layout.merge(sid, other[0], now_ms=at)
        elif op == "rebucket":
            n_b = layout.segments[sid].bucket_count
            layout = layout.rebucket(sid, 1 if n_b > 1 else 4, now_ms=at)
        else:
            layout = layout.split(sid, now_ms=at)
    cuts = tuple(sorted(draw(st.sets(st.integers(1, t + 40), max_size=4))))
    return config, msgs, layout, cuts


PROPERTY_SETTINGS = settings(max_examples=examples(300), deadline=None,
                             suppress_health_check=[HealthCheck.too_slow])
_ROW = ("producer", "entry_seq", "segment_id", "bucket_index", "entry_hash_min",
        "entry_hash_max", "num_messages", "payload_bytes", "open_time_ms", "publish_time_ms",
        "close_reason", "first_sequence_id", "last_sequence_id")


@PROPERTY_SETTINGS
@given(scenarios())
def test_batch_matches_the_event_by_event_rules_in_any_windows(sc: tuple) -> None:
    config, msgs, layout, cuts = sc
    e, mapping, _ = run(msgs, config, layout, cuts)
    want, want_mapping = message_by_message(msgs, config, layout)
    assert rows(e, *_ROW) == want
    assert mapping == want_mapping


@PROPERTY_SETTINGS
@given(scenarios())
def test_every_message_is_in_exactly_one_entry_within_the_limits(sc: tuple) -> None:
    config, msgs, layout, cuts = sc
    e, mapping, placed = run(msgs, config, layout, cuts)
    counts = np.bincount(mapping, minlength=len(e["entry_seq"]))
    assert counts.tolist() == e["num_messages"]
    sizes = np.array([m.size for m in msgs])
    assert np.bincount(mapping, weights=sizes, minlength=len(counts)).tolist() == \
        e["payload_bytes"]
    assert (np.asarray(e["num_messages"]) <= config.max_messages).all()
    over = np.asarray(e["payload_bytes"]) > config.max_bytes
    assert (np.asarray(e["num_messages"])[over] == 1).all()
    assert set(e["close_reason"]) <= set(CLOSE_REASONS)
    for i, k in enumerate(mapping):
        assert e["segment_id"][k] == placed["segment_id"][i]
        seal = layout.segments[e["segment_id"][k]].sealed_at_ms
        assert seal < 0 or e["publish_time_ms"][k] < seal  # nothing at or after the seal


@PROPERTY_SETTINGS
@given(scenarios())
def test_no_entry_straddles_buckets_in_bucketed_mode(sc: tuple) -> None:
    config, msgs, layout, cuts = sc
    config = cfg("bucketed", config.max_messages, config.max_bytes, config.max_publish_delay_ms)
    e, _, _ = run(msgs, config, layout, cuts)
    for s, lo, hi, b in zip(e["segment_id"], e["entry_hash_min"], e["entry_hash_max"],
                            e["bucket_index"], strict=True):
        splits = layout.segments[s].bucket_splits
        assert bucket_of(splits, lo) == bucket_of(splits, hi) == b


# ------------------------------------------------------ several topics in one call (§7.2)
def two_topics(a: tuple, b: tuple) -> tuple[dict[str, list], dict[str, list], dict[str, list]]:
    """Scenarios ``a`` and ``b`` as two topics (their own layouts, ``b``'s producers coded
    after ``a``'s) through ONE :func:`batch` call with ``a``'s config, each topic's seals
    naming its producers; and each alone. Returns the entries of the call and of each alone."""
    config, msgs_a, layout_a, _ = a
    _, msgs_b, layout_b, _ = b
    shift = 3  # scenarios draw producers 0..2
    m_a, m_b = routed(msgs_a, layout_a), routed(msgs_b, layout_b)
    m_b.producer = m_b.producer + shift
    both = Messages(**{f: np.concatenate([getattr(m_a, f), getattr(m_b, f)])
                       for f in Messages.__dataclass_fields__})
    changes = sorted([*(c.for_producers(np.arange(shift)) for c in reroutes(layout_a, 0, None)),
                      *(c.for_producers(np.arange(shift, 2 * shift))
                        for c in reroutes(layout_b, 0, None))], key=lambda c: c.time_ms)
    r = batch(both, ContainerState(), changes, config, 2 * shift)
    alone = [batch(m, ContainerState(), reroutes(layout, 0, None), config, shift)
             for m, layout in ((m_a, layout_a), (routed(msgs_b, layout_b), layout_b))]
    return r.entries, alone[0].entries, alone[1].entries


def _entry_rows(entries: dict[str, np.ndarray], producers: range, shift: int = 0) -> list[tuple]:
    mine = np.isin(entries["producer"], list(producers))
    return [(int(row[0]) - shift, *row[1:]) for row in zip(*[
        entries[c][mine].tolist() for c in _ROW], strict=True)]


@PROPERTY_SETTINGS
@given(scenarios(), scenarios())
def test_topics_batched_in_one_call_equal_each_topic_alone(a: tuple, b: tuple) -> None:
    both, alone_a, alone_b = two_topics(a, b)
    assert _entry_rows(both, range(3)) == _entry_rows(alone_a, range(3))
    assert _entry_rows(both, range(3, 6), shift=3) == _entry_rows(alone_b, range(3))


def test_a_seal_naming_producers_leaves_other_producers_containers_open() -> None:
    layout = one_segment().split(0, now_ms=6)
    # producer 0 (this topic) and producer 1 (another topic, its own segment 0 not sealed)
    msgs = [M(0, sh=0x1000, h=B0, p=0), M(1, sh=0x1000, h=B0, p=1)]
    m = routed(msgs, one_segment())
    seal = reroutes(layout, 0, None)[0].for_producers(np.array([0]))
    r = batch(m, ContainerState(), [seal], cfg(delay=10), 2)
    # producer 0's open batch is re-sent to child 1 at the seal; producer 1's stays in 0
    assert rows(r.entries, "producer", "segment_id", "open_time_ms", "publish_time_ms") == [
        (0, 1, 0, 16), (1, 0, 1, 11)]


@pytest.mark.parametrize("module", ["pipelines.core.batching", "pipelines.spark.batching"])
def test_importing_batching_does_not_import_numba(module: str) -> None:
    # a fresh interpreter: this test process may already have loaded the walk
    probe = f"import sys, {module}; print('numba' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                         check=True)
    assert out.stdout.strip() == "False"


def test_compile_walk_imports_numba() -> None:
    probe = ("import sys, pipelines.core.batching as b; b.compile_walk(); "
             "print('numba' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                         check=True)
    assert out.stdout.strip() == "True"


@given(st.lists(st.tuples(st.integers(0, 3), st.integers(-2, 5)), max_size=60))
def test_messages_order_by_batch_then_group_as_a_lexsort_does(rows) -> None:
    rows.sort(key=lambda r: r[0])  # the batches come in order
    batch_of = np.array([b for b, _ in rows], dtype=np.int64)
    group = np.array([g for _, g in rows], dtype=np.int64)

    got = batching._by_batch_then_group(batch_of, group)

    assert got.tolist() == np.lexsort((group, batch_of)).tolist()
