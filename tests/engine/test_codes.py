"""The stages' coded strings: rows numbered against labels and strings kept as dictionary
codes (pipelines.engine.stages.codes_in, coded, strings_coded)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

from pipelines.engine.stages import coded, codes_in, strings_coded


def _arrow(values: list[str | None]) -> pd.Series:
    return pd.Series(pd.arrays.ArrowExtensionArray(pa.chunked_array(
        [pa.array(values[:2], pa.string()), pa.array(values[2:], pa.string())])))


@pytest.mark.parametrize("series", [_arrow(["b", "a", None, "c", "b"]),
                                    pd.Series(["b", "a", None, "c", "b"], dtype=object)],
                         ids=["arrow-strings", "object-strings"])
def test_codes_in_gives_each_rows_label_index_and_minus_one_for_null_or_unknown(series):
    assert codes_in(series, ["a", "b"]).tolist() == [1, 0, -1, -1, 1]
    assert codes_in(series, np.array(["c"], dtype=object)).tolist() == [-1, -1, -1, 0, -1]
    assert codes_in(series, []).tolist() == [-1] * 5


def test_coded_is_the_labels_of_the_codes_as_a_dictionary():
    values = coded(["x", "y"], np.array([1, 1, 0]))
    assert pa.types.is_dictionary(values.type)
    assert values.cast(pa.string()).to_pylist() == ["y", "y", "x"]


def test_strings_coded_keeps_values_and_nulls():
    column = strings_coded(np.array(["s", None, "t", "s"], dtype=object))
    assert isinstance(column.dtype, pd.ArrowDtype)
    assert pa.array(column).cast(pa.string()).to_pylist() == ["s", None, "t", "s"]
