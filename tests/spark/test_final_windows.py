"""End-of-input windows (``pipelines.spark.finalization.window_cuts``): each topic bin's messages
bound a window, not the messages of all bins together (issue #30)."""

from __future__ import annotations

import numpy as np
import pytest

from pipelines.spark.finalization import window_cuts

LO, WIDTH = 1000, 10  # time bin i starts at 1000 + 10 i


@pytest.mark.parametrize(("counts", "limit", "cuts"), [
    pytest.param([[3, 3, 3]], 10, [], id="one-bin-under-the-limit-is-one-window"),
    pytest.param([[4, 4, 4]], 10, [1020], id="one-bin-cut-before-the-time-bin-past-the-limit"),
    pytest.param([[6, 6, 6], [6, 6, 6]], 12, [1020],
                 id="bins-counted-apart-not-summed"),
    pytest.param([[0, 9, 0, 9], [9, 0, 9, 0]], 10, [1020],
                 id="a-cut-when-any-bin-would-pass-the-limit"),
    pytest.param([[25, 1]], 10, [1010], id="a-time-bin-over-the-limit-is-a-window-of-its-own"),
    pytest.param([[0, 5, 0, 0, 6]], 10, [1040], id="empty-time-bins-never-start-a-window"),
])
def test_windows_hold_at_most_the_limit_of_any_one_topic_bin(counts, limit, cuts) -> None:
    assert window_cuts(LO, WIDTH, np.array(counts, dtype=np.int64), limit) == cuts


def test_many_quiet_bins_need_no_more_windows_than_their_largest() -> None:
    counts = np.ones((1000, 100), dtype=np.int64)  # 100,000 messages, 100 per bin
    assert window_cuts(LO, WIDTH, counts, 100) == []
    assert window_cuts(LO, WIDTH, counts, 50) == [LO + 50 * WIDTH]
