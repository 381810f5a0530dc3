"""Spark's Python worker daemon for this pipeline (``spark.python.daemon.module``, set by
:func:`pipelines.spark.session.build_session`): ``pyspark.daemon`` itself, started after taking
off ``sys.path`` the archives Spark puts first on it — ``$SPARK_HOME/python/lib/pyspark.zip``,
the py4j zip and the Spark jar — when the installed ``pyspark`` and ``py4j`` import without them.

Why: Python caches no bytecode for modules imported from a zip, so every new worker compiled
pyspark anew; and every task calls ``importlib.invalidate_caches()``, which makes each
``zipimporter`` on the path re-read its archive's directory (the Spark jar holds thousands of
entries). Together about 5 % of a 10 M-message replay's Python worker time. Archives outside
``$SPARK_HOME`` (a user's own) are kept, and so is everything when pyspark is not installed
apart from them (the daemon then runs exactly as Spark's).

The same is done, by a ``.pth`` line in the venv (:func:`install_startup_hook`), for the Python
processes Spark starts without the daemon.

It also imports the pipeline's worker-side modules (:data:`PRELOADED`) once, before it forks
workers: each forked worker otherwise imported them anew when it unpickled its first function
(about 0.6 s each; a 10 M-message replay forks a dozen workers). Likewise it loads the
batching core's compiled walk (:func:`pipelines.core.batching.compile_walk`).
"""

from __future__ import annotations

import importlib
import os
import sys
from importlib.machinery import PathFinder
from pathlib import Path


def spark_archives(path: list[str], spark_home: str | None) -> list[str]:
    """The entries of ``path`` that are zip or jar archives under ``spark_home`` (none without
    one)."""
    if not spark_home:
        return []
    home = os.path.join(os.path.abspath(spark_home), "")
    return [p for p in path if p.endswith((".zip", ".jar")) and os.path.abspath(p).startswith(home)]


def drop_spark_archives() -> list[str]:
    """Take :func:`spark_archives` off ``sys.path`` (and their importers out of
    ``sys.path_importer_cache``) if ``pyspark`` and ``py4j`` are still found; returns what was
    taken off (nothing when they would not be found)."""
    archives = spark_archives(sys.path, os.environ.get("SPARK_HOME"))
    if not archives:
        return []
    kept = [p for p in sys.path if p not in archives]
    # searched on the path itself: a module already imported would be "found" in sys.modules
    if any(PathFinder.find_spec(m, kept) is None for m in ("pyspark", "py4j")):
        return []
    sys.path[:] = kept
    for p in archives:
        sys.path_importer_cache.pop(p, None)
    return archives


STARTUP_HOOK = "topic_replay_spark_workers.pth"
"""The file :func:`install_startup_hook` writes into the venv's site-packages."""

STARTUP_LINE = ('import sys; any(p.endswith("pyspark.zip") for p in sys.path) and '
                '__import__("pipelines.spark.worker_daemon", fromlist=["_"])'
                '.drop_spark_archives()\n')
"""The hook's one line (``site`` runs a ``.pth`` line that starts with ``import`` at every
interpreter start): :func:`drop_spark_archives` in a process with Spark's zip on its path, a
Python worker Spark starts itself; no work anywhere else."""


def install_startup_hook(site_packages: str | Path) -> Path:
    """Write :data:`STARTUP_LINE` to ``<site_packages>/``:data:`STARTUP_HOOK` (``make setup``,
    ``tools/install_worker_hook.py``) and return its path.

    Why: the Python processes Spark starts itself, without the daemon, import pyspark from its
    zip, where no bytecode is cached: the three that learn the stateful operators' state schemas
    while the emulation query is planned, one after the other (0.6–0.7 s more each than from
    site-packages: 1.0–1.2 s against 0.42 s to import their module), and every ``spark-submit``
    Python worker on a cluster node that has this venv. The hook takes the archives off their
    path as :func:`main` does for the daemon's workers. Without it (a cluster's own Python)
    those processes run exactly as Spark starts them."""
    path = Path(site_packages) / STARTUP_HOOK
    path.write_text(STARTUP_LINE, encoding="utf-8")
    return path


PRELOADED = ("pipelines.spark.staging_pass", "pipelines.spark.emulation")
"""Modules the daemon imports before forking workers: the staging pass's and the emulation
operators' (with pandas, pyarrow and the core)."""


def main() -> None:
    drop_spark_archives()
    # only after the archives are off sys.path, so that pyspark comes from site-packages
    for module in PRELOADED:
        importlib.import_module(module)
    from pipelines.core.batching import compile_walk  # noqa: PLC0415

    compile_walk()
    from pyspark.daemon import manager  # noqa: PLC0415

    manager()


if __name__ == "__main__":
    main()
