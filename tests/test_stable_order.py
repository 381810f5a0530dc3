"""``pipelines.stages.stable_order`` is pandas' stable multi-key sort (nulls last), faster."""

from __future__ import annotations

import numpy as np
import pandas as pd
from hypothesis import given, settings
from hypothesis import strategies as st

from pipelines.stages import stable_order

rows = st.lists(
    st.tuples(st.integers(0, 3),                                  # event_ms: many ties
              st.one_of(st.none(), st.sampled_from(["p-b", "p-a", "p-c"])),
              st.one_of(st.none(), st.integers(-2, 2)),
              st.sampled_from(["f0", "0a", "ff", "a0"])),          # order_key
    max_size=40)


def _frame(data: list[tuple]) -> pd.DataFrame:
    return pd.DataFrame(data, columns=["event_ms", "producer_name", "seq", "order_key"]).astype(
        {"event_ms": "int64", "seq": "float64"})


@settings(max_examples=300, deadline=None)
@given(rows)
def test_stable_order_matches_pandas_stable_sort_values(data: list[tuple]) -> None:
    pdf = _frame(data)
    keys = ["event_ms", "producer_name", "seq", "order_key"]
    expected = pdf.sort_values(keys, kind="stable").index.to_numpy()
    assert stable_order(pdf, keys).tolist() == expected.tolist()


@settings(max_examples=100, deadline=None)
@given(rows)
def test_stable_order_keeps_input_order_of_full_ties(data: list[tuple]) -> None:
    pdf = _frame(data)
    order = stable_order(pdf, ["event_ms"]).tolist()
    expected = pdf.sort_values(["event_ms"], kind="stable").index.tolist()
    assert order == expected


def test_stable_order_compares_the_last_key_only_on_ties() -> None:
    pdf = pd.DataFrame({"event_ms": np.array([2, 1, 1], np.int64),
                        "order_key": ["a", "z", "b"]})
    assert stable_order(pdf, ["event_ms", "order_key"]).tolist() == [2, 1, 0]
