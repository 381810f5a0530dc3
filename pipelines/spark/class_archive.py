"""The driver JVM's class-data archive (the JDK's dynamic AppCDS), so a replay's driver starts
from pre-parsed classes instead of loading and verifying Spark's and Delta's one by one.

A replay's fixed cost is mostly the JVM's own start: the session, the ingest query and the
emulation query each load thousands of classes the first time (docs/performance.md, "Fixed
costs of a run"). The JDK can dump the classes one run loaded into an archive
(``-XX:ArchiveClassesAtExit``) and map it in later runs (``-XX:SharedArchiveFile``): with it,
the driver JVM spent 8.5 s of CPU instead of 15 s starting a session, and 5.7 s instead of
9.2 s on its first job (measured back to back, 2026-11-26).

``make setup`` builds the archive once per Java runtime and classpath (``tools/
build_class_archive.py``: a replay of ``data/sample`` whose JVM dumps its classes when it
exits) into ``$XDG_CACHE_HOME/topic-replay/jvm/`` (or ``~/.cache``), named after a hash of
the ``java`` binary, pyspark's version and jars, and the jars this package adds, so another
Java or Spark never maps it. :func:`driver_java_options` adds it to the driver JVM a replay
starts itself (not under ``spark-submit``, whose JVM already runs); a run without it (no
``make setup``, or ``TOPIC_REPLAY_CLASS_ARCHIVE=off``) starts as before. The JVM checks the
archive against its classpath and ignores it (silently: its ``cds`` log is off) when they
differ. A partly written archive would crash the JVM, so an archive appears only by a rename
after the JVM that wrote it exited (:func:`publish`).
"""

from __future__ import annotations

import hashlib
import os
import shutil
from collections.abc import Sequence
from pathlib import Path

import pyspark

ARCHIVE_ENV = "TOPIC_REPLAY_CLASS_ARCHIVE"
"""``off`` (or ``0``, ``false``, ``no``): start the driver JVM without the archive; a file path:
use (or build) that archive instead of the one in the cache."""

DUMP_ENV = "TOPIC_REPLAY_CLASS_ARCHIVE_DUMP"
"""Set by the builder only: the file the driver JVM writes its loaded classes to at exit."""

QUIET = "-Xlog:cds=off -Xlog:cds+dynamic=off"
"""The JVM's CDS log off: a mismatched archive is ignored without a warning on the console, and
the dump does not write a line per class it skips."""


def disabled() -> bool:
    """Whether ``TOPIC_REPLAY_CLASS_ARCHIVE`` switches the archive off."""
    return os.environ.get(ARCHIVE_ENV, "").strip().lower() in ("off", "0", "false", "no")


def _java() -> Path | None:
    home = os.environ.get("JAVA_HOME")
    found = str(Path(home) / "bin" / "java") if home else shutil.which("java")
    return Path(found).resolve() if found and Path(found).exists() else None


def archive_path(jars: Sequence[str]) -> Path | None:
    """Where the archive for this Java runtime, pyspark and the added ``jars`` (``spark.jars``)
    lives: ``$TOPIC_REPLAY_CLASS_ARCHIVE`` when it names a file, else
    ``<cache>/topic-replay/jvm/spark-<pyspark version>-<hash>.jsa``; ``None`` when switched
    off or no ``java`` is found."""
    if disabled():
        return None
    given = os.environ.get(ARCHIVE_ENV, "").strip()
    if given:
        return Path(given)
    java = _java()
    if java is None:
        return None
    spark_jars = Path(pyspark.__file__).parent / "jars"
    stat = java.stat()
    parts = [str(java), str(stat.st_size), str(stat.st_mtime_ns), pyspark.__version__,
             str(spark_jars), *sorted(p.name for p in spark_jars.glob("*.jar")), *jars]
    digest = hashlib.sha256("\n".join(parts).encode()).hexdigest()[:16]
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return cache / "topic-replay" / "jvm" / f"spark-{pyspark.__version__}-{digest}.jsa"


def driver_java_options(jars: Sequence[str]) -> str:
    """JVM options for a driver this package starts: dump the archive when the builder asks
    (:data:`DUMP_ENV`), map it when it exists, else ``""``."""
    dump = os.environ.get(DUMP_ENV)
    if dump:
        return f"-XX:ArchiveClassesAtExit={dump} {QUIET}"
    path = archive_path(jars)
    if path is None or not path.is_file():
        return ""
    return f"-XX:SharedArchiveFile={path} {QUIET}"


def publish(dumped: Path, target: Path) -> bool:
    """Move the archive a JVM wrote at its exit (``dumped``) to ``target`` in one rename (a
    replay starting meanwhile sees no archive or the whole one); ``False`` when the JVM wrote
    none."""
    if not dumped.is_file() or dumped.stat().st_size == 0:
        return False
    target.parent.mkdir(parents=True, exist_ok=True)
    dumped.replace(target)
    return True
