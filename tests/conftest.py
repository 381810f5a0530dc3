"""Shared pytest fixtures.

``spark``: ONE SparkSession for the whole test session (starting one takes ~5 s; one per
pytest-xdist worker): ``local[2]`` (``local[1]`` per worker under ``-n 2``),
2 shuffle partitions, UI off, UTC, Arrow on, workers on the driver's interpreter, the Delta
jars of ``make setup`` when present (all via ``pipelines.spark.session.build_session``). Tests
that use it should be marked ``spark``.

``s3_endpoint``: an S3-compatible server (moto's server mode) on 127.0.0.1, per module.

Marks by place (:func:`pytest_collection_modifyitems`): every test under ``tests/replays/`` is
marked ``replay`` and every test under ``tests/guarantees/`` ``guarantee`` (``make
test-replays``); every test that uses the ``spark`` fixture is marked ``spark``, and the tests of
:data:`COMPONENT_MODULES` ``component`` (``make test-unit`` leaves both out).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

try:
    from pipelines.spark.session import delta_jars
except ImportError:  # the Airflow venv (tests/dags/test_dags.py) has no pyspark of ours

    def delta_jars() -> list[str]:
        return []

FOLDER_MARKS = {"replays": "replay", "guarantees": "guarantee"}
"""Folder under ``tests/`` -> the mark every test in it gets."""

COMPONENT_MODULES = {
    "project/test_layout.py": "an interpreter importing every module without Spark",
    "analysis/test_page_browser.py": "a headless chromium and local replays",
    "analysis/test_validation.py": "Great Expectations",
    "analysis/test_report.py": "a local replay and every figure drawn",
    "analysis/test_recommend.py": "three local replays",
    "analysis/test_windows.py": "two local replays",
    "engine/test_findings.py": "a local replay per finding",
    "spark/test_window_loop.py": "an interpreter per operator, as Spark's planner starts",
}
"""Modules without Spark that still cost seconds a test (what they start or replay): marked
``component``, run by ``make test`` but not by ``make test-unit``."""


@pytest.hookimpl(tryfirst=True)  # before ``-m`` deselects by mark
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark each test by its folder (:data:`FOLDER_MARKS`) and by its use of ``spark``."""
    tests = Path(__file__).parent
    for item in items:
        folder = item.path.relative_to(tests).parts[0] if item.path.is_relative_to(tests) else ""
        if folder in FOLDER_MARKS:
            item.add_marker(FOLDER_MARKS[folder])
        if item.path.relative_to(tests).as_posix() in COMPONENT_MODULES:
            item.add_marker("component")
        if "spark" in getattr(item, "fixturenames", ()):
            item.add_marker("spark")


try:
    from hypothesis import HealthCheck, settings
except ImportError:  # the Airflow venv (tests/dags/test_dags.py) has no hypothesis
    pass
else:
    # No timed checks (a test proves behaviour, not speed): on a loaded 2-core machine one slow
    # draw (1.6 s, the interpreter descheduled) failed a property with "Input generation is
    # slow", and an example over the 200 ms deadline would fail the same way.
    settings.register_profile("topic-replay", deadline=None,
                              suppress_health_check=[HealthCheck.too_slow])
    settings.load_profile("topic-replay")


QUICK_PROPERTIES_ENV = "TOPIC_REPLAY_QUICK_PROPERTIES"


def examples(n: int) -> int:
    """How many examples the costliest hypothesis properties draw: ``n``, or a quarter of it (at
    least 25) when ``TOPIC_REPLAY_QUICK_PROPERTIES`` is set, as ``make test-unit`` (the inner loop)
    sets it; ``make test`` and CI draw all ``n``."""
    return max(25, n // 4) if os.environ.get(QUICK_PROPERTIES_ENV) else n


NO_DELTA_JARS = "no Delta jars in .jars/ (make setup fetches them from Maven Central)"
ENGINES = [
    "delta-rs",
    pytest.param("delta-spark", marks=pytest.mark.skipif(not delta_jars(), reason=NO_DELTA_JARS)),
]
"""Both Delta engines, for ``@pytest.mark.parametrize("engine", ENGINES)`` (delta-spark skips
where ``make setup`` could not fetch the jars)."""


@pytest.fixture(scope="session", autouse=True)
def _auto_engine_is_delta_rs() -> Iterator[None]:
    """``output.engine: auto`` writes with delta-rs in tests that do not name an engine (fast
    commits; the engine-parametrized end-to-end, crash, SQL and DeltaStore tests run both)."""
    try:
        # the Airflow venv (make test-dags) loads this conftest without the project's packages
        import pipelines.spark.delta_spark as delta_io  # noqa: PLC0415
    except ImportError:  # the Airflow venv
        yield
        return
    delta_io.AUTO_PICKS_DELTA_SPARK = False
    os.environ[delta_io.AUTO_ENGINE_ENV] = "delta-rs"  # replays started as subprocesses too
    yield
    delta_io.AUTO_PICKS_DELTA_SPARK = True
    os.environ.pop(delta_io.AUTO_ENGINE_ENV, None)


TEST_JVM_OPTIONS = "-XX:TieredStopAtLevel=1"
"""HotSpot flags of every JVM a test starts (``JAVA_TOOL_OPTIONS``: the session's driver, the
replays run as subprocesses, the brokers, the cluster's daemons, the Spark Connect server): the
client compiler only. A test's JVM lives seconds to minutes on a few thousand records, where the
optimizing compiler's work never pays back: about a third less CPU for a subprocess replay and a
quarter less for a module of in-process replays (2026-11-27, back to back on the shared 2-core
machine). Compilation changes how fast, never what, the JVM computes. The product's driver
JVM takes the same option (``pipelines.spark.session.build_session``); this reaches the JVMs it
does not start (brokers, a cluster's daemons and executors, a Connect server)."""


@pytest.fixture(scope="session", autouse=True)
def _test_jvms_use_the_client_compiler() -> Iterator[None]:
    """Add :data:`TEST_JVM_OPTIONS` to ``JAVA_TOOL_OPTIONS`` for the session (before its first
    JVM starts: autouse), and restore it after."""
    before = os.environ.get("JAVA_TOOL_OPTIONS")
    os.environ["JAVA_TOOL_OPTIONS"] = f"{before} {TEST_JVM_OPTIONS}" if before else TEST_JVM_OPTIONS
    yield
    if before is None:
        os.environ.pop("JAVA_TOOL_OPTIONS", None)
    else:
        os.environ["JAVA_TOOL_OPTIONS"] = before


@pytest.fixture(autouse=True)
def _signal_handlers_restored() -> Iterator[None]:
    """A command run in process (``jobs.replay.main``) installs the replay's SIGINT / SIGTERM
    handlers (stop after the micro-batch in progress); put pytest's back after each test, so
    Ctrl-C and a SIGTERM still stop the test run."""
    handlers = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    yield
    for sig, handler in handlers.items():
        signal.signal(sig, handler)


def spark_test_master() -> str:
    """The session's master: ``local[2]`` (the 2-core machine), or ``local[1]`` in each of
    several pytest-xdist workers (``-n 2``: ``PYTEST_XDIST_WORKER_COUNT``), so that two
    workers' sessions do not ask for four cores; ``TOPIC_REPLAY_TEST_MASTER`` overrides it."""
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    return os.environ.get("TOPIC_REPLAY_TEST_MASTER", "local[1]" if workers > 1 else "local[2]")


@pytest.fixture(scope="session")
def spark() -> Iterator[object]:
    from pipelines.spark.session import build_session  # noqa: PLC0415 - see above

    session = build_session(
        app_name="topic-replay-tests",
        master=spark_test_master(),
        shuffle_partitions=2,
        extra_conf={
            "spark.ui.enabled": "false",
            "spark.ui.showConsoleProgress": "false",
            "spark.default.parallelism": "2",
            "spark.sql.streaming.forceDeleteTempCheckpointLocation": "true",
        },
    )
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()


@pytest.fixture(scope="session")
def window_replays(tmp_path_factory) -> object:
    """The sparse and the dense local replay of ``tests/analysis/test_windows.py``'s log
    (``replay_pair``), once for the session: the pandas and the Spark SQL examples of
    docs/tables.md are checked on the same pair."""
    # the Airflow venv loads this conftest without the project's packages
    from tests.analysis.test_windows import replay_pair  # noqa: PLC0415

    return replay_pair(tmp_path_factory.mktemp("windows"))


MOTO_HOST = "127.0.0.1"


@pytest.fixture(scope="module")
def s3_endpoint(tmp_path_factory) -> Iterator[str]:
    """``http://127.0.0.1:<port>`` of a moto S3 server in its own process (stopped by pid).
    Its own process: delta-rs holds the GIL while it waits for a reply, so a server thread in
    this process would never answer it."""
    server = Path(sys.executable).with_name("moto_server")
    if not server.exists():
        pytest.skip("no moto_server (the dev extras install moto[server])")
    port = _free_port()
    log = tmp_path_factory.mktemp("moto") / "moto.log"
    with log.open("wb") as out:
        proc = subprocess.Popen([str(server), "-H", MOTO_HOST, "-p", str(port)],
                                stdout=out, stderr=subprocess.STDOUT)
    endpoint = f"http://{MOTO_HOST}:{port}"
    try:
        for _ in range(300):
            try:
                urllib.request.urlopen(f"{endpoint}/moto-api/", timeout=1)
                break
            except OSError:
                if proc.poll() is not None:
                    raise RuntimeError(f"moto_server exited: {log.read_text()}") from None
                time.sleep(0.1)
        else:
            raise RuntimeError(f"moto_server did not answer: {log.read_text()}")
        yield endpoint
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def _free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now (the OS's choice)."""
    import socket  # noqa: PLC0415 - this conftest is also loaded by the Airflow venv: stdlib only at its top

    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((MOTO_HOST, 0))
        return int(s.getsockname()[1])
