"""``pipelines.engine.stages.stable_order`` is pandas' stable multi-key sort (nulls last), faster;
the replay order of messages (``_sorted``) does not depend on the input order."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipelines.engine.stages import _sorted, packed_key, stable_order, ties_ranked_apart
from tests.conftest import examples

rows = st.lists(
    st.tuples(st.integers(0, 3),                                  # event_ms: many ties
              st.one_of(st.none(), st.sampled_from(["p-b", "p-a", "p-c"])),
              st.one_of(st.none(), st.integers(-2, 2)),
              st.one_of(st.none(), st.sampled_from(["f0", "0a", "ff", "a0"])),  # key
              st.integers(0, 2)),                                                # µs
    max_size=40)


def _frame(data: list[tuple]) -> pd.DataFrame:
    pdf = pd.DataFrame(data, columns=["event_ms", "producer_name", "seq", "key", "us"]).astype(
        {"event_ms": "int64", "seq": "float64", "us": "int64"})
    return pdf.assign(publish_time=pd.to_datetime(pdf["event_ms"] * 1000 + pdf["us"], unit="us",
                                                  utc=True)).drop(columns="us")


@settings(max_examples=examples(300), deadline=None)
@given(rows)
def test_stable_order_matches_pandas_stable_sort_values(data: list[tuple]) -> None:
    pdf = _frame(data)
    keys = ["event_ms", "producer_name", "seq", "publish_time", "key"]
    expected = pdf.sort_values(keys, kind="stable").index.to_numpy()
    assert stable_order(pdf, keys).tolist() == expected.tolist()


@settings(max_examples=examples(300), deadline=None)
@given(rows)
def test_stable_order_with_tie_keys_matches_pandas_stable_sort_values(data: list[tuple]) -> None:
    pdf = _frame(data)
    keys, then = ["event_ms", "producer_name", "seq"], ["publish_time", "key"]
    expected = pdf.sort_values([*keys, *then], kind="stable").index.to_numpy()
    assert stable_order(pdf, keys, then).tolist() == expected.tolist()


@settings(max_examples=examples(100), deadline=None)
@given(rows)
def test_stable_order_keeps_input_order_of_full_ties(data: list[tuple]) -> None:
    pdf = _frame(data)
    order = stable_order(pdf, ["event_ms"]).tolist()
    expected = pdf.sort_values(["event_ms"], kind="stable").index.tolist()
    assert order == expected


def test_stable_order_ranks_tie_keys_only_where_the_keys_tie() -> None:
    pdf = pd.DataFrame({"event_ms": np.array([2, 1, 1], np.int64), "key": ["a", "z", "b"]})
    assert stable_order(pdf, ["event_ms"], ["key"]).tolist() == [2, 1, 0]
    assert stable_order(pdf.iloc[:2], ["event_ms"], ["key"]).tolist() == [1, 0]


def _messages(rows: list[tuple]) -> pd.DataFrame:
    """(event_ms, µs past that ms, producer, sequence id, key, size) → accepted-message columns."""
    pdf = pd.DataFrame(rows, columns=["event_ms", "us", "producer_name", "sequence_id", "key",
                                      "payload_size"])
    return pdf.assign(
        publish_time=pd.to_datetime(pdf["event_ms"] * 1000 + pdf["us"], unit="us", utc=True),
        sequence_id=pdf["sequence_id"].astype("Int64")).drop(columns="us")


def test_replay_order_breaks_ties_by_publish_time_then_key_then_size() -> None:
    # one producer, one ms, no sequence ids: only the tie keys order them
    pdf = _messages([(5, 900, "p", None, "b", 1), (5, 100, "p", None, "z", 1),
                     (5, 100, "p", None, "a", 2), (5, 100, "p", None, "a", 1),
                     (4, 999, "q", None, "z", 9)])
    out = _sorted(pdf)
    assert list(zip(out["key"], out["payload_size"], strict=True)) == [
        ("z", 9), ("a", 1), ("a", 2), ("z", 1), ("b", 1)]


@settings(max_examples=examples(100), deadline=None)
@given(st.lists(st.tuples(st.integers(0, 2), st.integers(0, 2), st.sampled_from(["p", "q"]),
                          st.one_of(st.none(), st.integers(0, 2)),
                          st.one_of(st.none(), st.sampled_from(["a", "b"])),
                          st.integers(0, 2)), max_size=30),
       st.randoms(use_true_random=False))
def test_replay_order_does_not_depend_on_the_input_order(rows: list[tuple], rnd) -> None:
    shuffled = list(rows)
    rnd.shuffle(shuffled)
    pd.testing.assert_frame_equal(_sorted(_messages(rows)), _sorted(_messages(shuffled)))


@settings(max_examples=examples(300), deadline=None)
@given(rows, st.permutations(["event_ms", "producer_name", "seq"]), st.integers(0, 3))
def test_ties_ranked_apart_equals_stable_order_with_tie_keys(data: list[tuple], keys: list[str],
                                                            n_keys: int) -> None:
    """The control plane's sort (tie keys ranked only among tied rows) gives stable_order's
    order, whatever the keys, ties and nulls."""
    pdf = _frame(data)
    keys, then = keys[:n_keys], ["publish_time", "key"]
    assert ties_ranked_apart(pdf, keys, then).tolist() == stable_order(pdf, keys, then).tolist()
    assert ties_ranked_apart(pdf, keys, []).tolist() == stable_order(pdf, keys).tolist()


@settings(max_examples=examples(300), deadline=None)
@given(st.integers(1, 4).flatmap(lambda k: st.lists(
    st.tuples(*[st.integers(-(2**62), 2**62) | st.integers(-3, 3)] * k), min_size=1,
    max_size=40)))
def test_a_packed_key_sorts_as_lexsort_of_its_keys(rows: list[tuple]) -> None:
    cols = [np.array(c, dtype=np.int64) for c in zip(*rows, strict=True)]
    packed = packed_key(cols)
    if packed is None:  # the keys' ranges need more than 63 bits
        assert sum((int(c.max()) - int(c.min())).bit_length() for c in cols) > 63
        return
    assert np.argsort(packed, kind="stable").tolist() == np.lexsort(cols[::-1]).tolist()
    equal = np.equal.outer(packed, packed)
    assert (equal == np.logical_and.reduce([np.equal.outer(c, c) for c in cols])).all()


@pytest.mark.parametrize(("cols", "packed"), [
    ([np.array([0, 0, 1]), np.array([5, 3, 4])], [2, 0, 5]),  # (0,5) (0,3) (1,4): 1 and 2 bits
    ([np.array([0.5, 1.0])], None),                           # not integers
    ([np.array([0, 2**62]), np.array([0, 2])], None),         # 63 + 2 bits
    ([np.array([], dtype=np.int64)], None),                   # no rows
])
def test_packed_key_offsets_each_key_and_refuses_what_it_cannot_pack(cols, packed) -> None:
    got = packed_key(cols)
    assert (got if got is None else got.tolist()) == packed


def test_categorical_strings_sort_by_value_not_by_their_categories_order() -> None:
    """Handed-over entries' producers are categorical, their categories in whatever order the
    shards' dictionaries were unified; the dispatch order is by name."""
    names = pd.Categorical(["b", "c", "a", None, "b"], categories=["c", "b", "a"])
    frame = pd.DataFrame({"p": names, "t": [1, 1, 1, 1, 0]})
    plain = frame.astype({"p": object})
    assert stable_order(frame, ["p", "t"]).tolist() == stable_order(plain, ["p", "t"]).tolist()
    assert stable_order(frame, ["p", "t"]).tolist() == [2, 4, 0, 1, 3]
