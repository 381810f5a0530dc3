"""The replay through Spark Connect (issue #21): a local Spark Connect server started from
pyspark's jars (``org.apache.spark.sql.connect.service.SparkConnectServer`` through
``spark-class``, on 127.0.0.1, Python workers on this interpreter), and ``topic-replay run
--remote sc://127.0.0.1:<port>`` on the sample: every table must equal the same replay in
process (``run --engine local``: the reference the differential test
``tests/replays/test_local_engine.py`` holds equal to a classic session's replay, table by
table, for a seventh of its CPU). ``topic-replay sql --remote`` answers from the same tables,
and ``stream --remote`` stops cleanly on SIGINT with the tables current up to its last
micro-batch.

Under Spark Connect the micro-batches run in the server's Python process
(``pipelines.spark.remote_batch.RemoteBatch``) and Delta writes go through delta-rs.
"""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from pyspark.find_spark_home import _find_spark_home

from pipelines.storage.delta import DeltaStore
from tests.guarantees.conftest import LOOPBACK, StandaloneCluster, assert_replays_equal, free_port
from tests.guarantees.test_cluster import REPO, SAMPLE, SAMPLE_MESSAGES, topic_replay

SERVER_CLASS = "org.apache.spark.sql.connect.service.SparkConnectServer"
SAMPLE_ENTRIES = 185_575  # `make run`'s summary (README)


class ConnectServer:
    """A Spark Connect server on 127.0.0.1:``port`` (``local[2]``), its log under ``root``;
    its JVM runs in a session of its own and is stopped by its pid."""

    def __init__(self, root: Path, timeout_s: float = 240.0) -> None:
        self.root, self.timeout_s = root, timeout_s
        self.spark_home = _find_spark_home()
        self.port = free_port()
        self.log = root / "connect-server.log"
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"sc://{LOOPBACK}:{self.port}"

    def start(self) -> ConnectServer:
        env = StandaloneCluster(self.root).env()  # 127.0.0.1, this interpreter, empty conf
        for daemon_only in ("SPARK_DAEMON_MEMORY", "SPARK_DAEMON_JAVA_OPTS"):
            env.pop(daemon_only)  # the server is a driver: it takes --driver-memory
        with self.log.open("wb") as out:
            self.proc = subprocess.Popen(
                ["bash", str(Path(self.spark_home) / "bin" / "spark-class"),
                 "org.apache.spark.deploy.SparkSubmit", "--class", SERVER_CLASS,
                 "--master", "local[2]", "--driver-memory", "1g",
                 "--conf", f"spark.pyspark.python={sys.executable}",
                 "--conf", f"spark.connect.grpc.binding.address={LOOPBACK}",
                 "--conf", f"spark.connect.grpc.binding.port={self.port}",
                 "--conf", "spark.sql.session.timeZone=UTC", "--conf", "spark.ui.enabled=false",
                 "spark-internal"],
                env=env, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                start_new_session=True)
        deadline = time.monotonic() + self.timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                break
            with socket.socket() as s:
                if s.connect_ex((LOOPBACK, self.port)) == 0:
                    return self
            time.sleep(1)
        exited = self.proc.poll() is not None
        self.stop()
        raise RuntimeError(f"Spark Connect server {'exited' if exited else 'not listening'} "
                           f"on port {self.port}:\n{self.log.read_text()[-3000:]}")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=30)
        self.proc = None


@pytest.fixture(scope="module")
def connect_server(tmp_path_factory) -> Iterator[ConnectServer]:
    server = ConnectServer(tmp_path_factory.mktemp("connect")).start()
    try:
        yield server
    finally:
        server.stop()


def cli(*args: str, timeout: float = 900) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*topic_replay(), *args], cwd=REPO, capture_output=True, text=True,
                          timeout=timeout, check=False)


def sample_run(output: Path, *extra: str) -> str:
    done = cli("run", "--input", str(SAMPLE), "--conf", str(REPO / "conf" / "sample.yaml"),
               "--output", str(output), "--run-id", "sample", "--set",
               "output.engine=delta-rs", *extra)
    assert done.returncode == 0, done.stderr[-4000:]
    return done.stdout


@pytest.fixture(scope="module")
def runs(connect_server, tmp_path_factory) -> tuple[Path, str]:
    """The sample replayed by the local engine (``<dir>/local``) and through the Spark
    Connect server (``<dir>/connect``); returns ``(dir, the Connect run's console output)``."""
    root = tmp_path_factory.mktemp("connect_runs")
    sample_run(root / "local", "--engine", "local")
    return root, sample_run(root / "connect", "--remote", connect_server.url)


@pytest.mark.spark
@pytest.mark.slow
def test_connect_run_tables_equal_the_local_engine_tables(runs):
    root, printed = runs
    assert f"accepted {SAMPLE_MESSAGES:,}  quarantined 0" in printed
    assert_replays_equal(root / "local", root / "connect")


@pytest.mark.spark
@pytest.mark.slow
def test_connect_sql_counts_the_entries(runs, connect_server):
    root, _ = runs
    done = cli("sql", "--remote", connect_server.url, "--output", str(root / "connect"),
               "--format", "csv", "SELECT count(*) AS n FROM entries")
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split() == ["n", str(SAMPLE_ENTRIES)]


@pytest.mark.spark
@pytest.mark.slow
def test_connect_stream_stops_on_sigint_with_tables_current(connect_server, tmp_path):
    out = tmp_path / "stream"
    proc = subprocess.Popen(
        [*topic_replay(), "stream", "--remote", connect_server.url, "--input", str(SAMPLE),
         "--conf", str(REPO / "conf" / "sample.yaml"), "--output", str(out), "--run-id", "st",
         "--set", "output.engine=delta-rs"],
        cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    state = out / "_work" / "st" / "state"
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline and not any(state.glob("*.pkl")):
        time.sleep(2)  # the first micro-batch's state: it has committed
    proc.send_signal(signal.SIGINT)
    stdout, stderr = proc.communicate(timeout=300)
    assert proc.returncode == 0, stderr[-3000:]
    assert stdout.strip().splitlines()[-1] == (
        f"stopped; tables under {out} are current up to batch 0")
    # the one micro-batch finalized every message before its horizon (max - lateness)
    finalized = len(DeltaStore(str(out), engine="delta-rs").read("messages", "st"))
    assert 0 < finalized < SAMPLE_MESSAGES
