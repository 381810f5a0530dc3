"""Independent subprocess replays of a guarantee module, run a few at a time in the background
(the crash and clean-stop cases: each case is its own pair of ``local[1]`` replays in its own
folder, about one core each), so a 2-core machine does them in about half the time. Each test
then waits for its own case and asserts on its outcome; nothing is timed."""

from __future__ import annotations

import os
from collections.abc import Callable, Hashable, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

WORKERS = max(1, min(2, os.cpu_count() or 1))
"""Replays run at once: one per core, at most two (each case's JVM and Python workers take
about a core; more at once would only queue, and hold their memory meanwhile)."""


def collected(session: pytest.Session, test: Callable[..., Any]) -> list[pytest.Function]:
    """The items of ``test`` this session runs: not deselected, not skipped by a true
    ``skipif`` mark (delta-spark without its jars)."""
    return [item for item in session.items
            if isinstance(item, pytest.Function) and item.originalname == test.__name__
            and not any(m.args and m.args[0] for m in item.iter_markers("skipif"))]


@contextmanager
def run_in_background(tmp_path_factory: pytest.TempPathFactory, prefix: str,
                      reference: Callable[[Path], Any],
                      cases: Iterable[tuple[Hashable, str, Callable[[Path], Any]]],
                      ) -> Iterator[dict[Hashable, tuple[Path, Future[Any]]]]:
    """Run ``reference(folder)`` (key ``None``) then each case's ``run(folder)`` (its ``key``,
    folder named ``<prefix>_<name>``), :data:`WORKERS` at a time; yields each key's folder and
    the future of its outcome. A failed run raises in the tests that wait on it; a session
    stopped early (-x) does not start the cases still queued."""
    with ThreadPoolExecutor(max_workers=WORKERS, thread_name_prefix=prefix) as pool:
        out = tmp_path_factory.mktemp(f"{prefix}_ref")
        runs: dict[Hashable, tuple[Path, Future[Any]]] = {None: (out, pool.submit(reference, out))}
        for key, name, run in cases:
            out = tmp_path_factory.mktemp(f"{prefix}_{name}")
            runs[key] = (out, pool.submit(run, out))
        try:
            yield runs
        finally:
            pool.shutdown(wait=True, cancel_futures=True)
