"""Real message brokers for the tests: an Apache Kafka broker (KRaft) and a Pulsar standalone.

Each runs as a JVM started from the jars a make target fetched from Maven Central
(``make kafka-broker``: ``.jars/kafka-broker-<v>/``; ``make pulsar-standalone``:
``.jars/pulsar-standalone-<v>/``), bound to 127.0.0.1 on ports chosen free at start, its data
and log under one folder, and stopped by its process id (the JVM is the leader of its own
process group, so the group goes with it). :func:`skip_reason` says why a broker cannot run
here (no Java, no jars): the tests skip with it.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
LOOPBACK = "127.0.0.1"
KAFKA_VERSION = "4.1.1"
PULSAR_VERSION = "4.0.7"
KAFKA_JARS = REPO / ".jars" / f"kafka-broker-{KAFKA_VERSION}"
PULSAR_JARS = REPO / ".jars" / f"pulsar-standalone-{PULSAR_VERSION}"
KRAFT_CLUSTER_ID = "q1Sh-9_ISia_zwGINzRvyQ"


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now (the OS's choice)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((LOOPBACK, 0))
        return int(s.getsockname()[1])


def java() -> str | None:
    """The ``java`` to start brokers with (``$JAVA_HOME/bin/java`` or the one on PATH)."""
    home = os.environ.get("JAVA_HOME")
    if home and (Path(home) / "bin" / "java").is_file():
        return str(Path(home) / "bin" / "java")
    for folder in os.environ.get("PATH", "").split(os.pathsep):
        if (Path(folder) / "java").is_file():
            return str(Path(folder) / "java")
    return None


def skip_reason(jars: Path, target: str) -> str | None:
    """Why a broker from ``jars`` cannot start here (``None`` when it can)."""
    if java() is None:
        return "no Java (JAVA_HOME or java on PATH) to start the broker"
    if not (jars / ".fetched").is_file():
        return f"no broker jars in {jars.relative_to(REPO)} (`make {target}` fetches them)"
    return None


def _port_open(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.settimeout(0.5)
        return s.connect_ex((LOOPBACK, port)) == 0


class _Broker:
    """A broker JVM: :meth:`start` it, :meth:`stop` it (by pid, the whole process group)."""

    def __init__(self, root: Path, timeout_s: float) -> None:
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)
        self.timeout_s = timeout_s
        self.proc: subprocess.Popen[bytes] | None = None
        self.log = self.root / "broker.log"

    def _launch(self, jars: Path, main: str, *args: str, heap: str = "512m") -> None:
        with open(self.log, "ab") as out:
            self.proc = subprocess.Popen(
                [java() or "java", f"-Xmx{heap}", "-Djava.net.preferIPv4Stack=true",
                 "-cp", f"{jars}/*", main, *args],
                stdout=out, stderr=subprocess.STDOUT, cwd=self.root, start_new_session=True)

    def _wait(self, ready: list[int], url: str | None = None) -> None:
        deadline = time.monotonic() + self.timeout_s
        while time.monotonic() < deadline:
            if self.proc is not None and self.proc.poll() is not None:
                break
            if all(_port_open(p) for p in ready) and (url is None or _http_ok(url)):
                return
            time.sleep(0.5)
        tail = self.log.read_text(errors="replace")[-3000:] if self.log.exists() else ""
        self.stop()
        raise RuntimeError(f"broker did not start within {self.timeout_s:.0f} s:\n{tail}")

    def stop(self) -> None:
        """Stop the broker by its process id (SIGTERM to its group, SIGKILL after 20 s)."""
        if self.proc is None or self.proc.poll() is not None:
            return
        os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(20)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)

    def __enter__(self) -> _Broker:
        return self

    def __exit__(self, *_: object) -> None:
        self.stop()


def _http_ok(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as r:
            return bool(r.status == 200)
    except OSError:
        return False


class KafkaBroker(_Broker):
    """An Apache Kafka broker in KRaft combined mode (broker and controller in one JVM), one
    node, on free ports of 127.0.0.1; :attr:`bootstrap` is its ``host:port``."""

    def __init__(self, root: Path, jars: Path = KAFKA_JARS, timeout_s: float = 90.0) -> None:
        super().__init__(root, timeout_s)
        self.jars = jars
        self.port, self.controller_port = free_port(), free_port()
        self.bootstrap = f"{LOOPBACK}:{self.port}"

    def _properties(self) -> Path:
        props = self.root / "server.properties"
        props.write_text("\n".join([
            "process.roles=broker,controller",
            "node.id=1",
            f"controller.quorum.voters=1@{LOOPBACK}:{self.controller_port}",
            f"listeners=PLAINTEXT://{LOOPBACK}:{self.port},"
            f"CONTROLLER://{LOOPBACK}:{self.controller_port}",
            f"advertised.listeners=PLAINTEXT://{LOOPBACK}:{self.port}",
            "controller.listener.names=CONTROLLER",
            "listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
            f"log.dirs={self.root / 'data'}",
            "num.partitions=3",
            "offsets.topic.replication.factor=1",
            "transaction.state.log.replication.factor=1",
            "transaction.state.log.min.isr=1",
            "share.coordinator.state.topic.replication.factor=1",
            "share.coordinator.state.topic.min.isr=1",
            "group.initial.rebalance.delay.ms=0",
            "auto.create.topics.enable=true",
            "",
        ]))
        return props

    def start(self) -> KafkaBroker:
        """Format the storage (``kafka.tools.StorageTool``), start ``kafka.Kafka`` and wait
        until its port accepts connections; ``RuntimeError`` (with the log's tail) when it
        does not within ``timeout_s``."""
        props = self._properties()
        with open(self.log, "ab") as out:
            subprocess.run([java() or "java", "-cp", f"{self.jars}/*", "kafka.tools.StorageTool",
                            "format", "-t", KRAFT_CLUSTER_ID, "-c", str(props)],
                           stdout=out, stderr=subprocess.STDOUT, check=True, timeout=120)
        self._launch(self.jars, "kafka.Kafka", str(props))
        self._wait([self.port])
        return self


class PulsarStandalone(_Broker):
    """A Pulsar standalone (broker, bookie and metadata store in one JVM, no functions worker)
    on free ports of 127.0.0.1: :attr:`service_url` (``pulsar://``) and :attr:`admin_url`
    (``http://``)."""

    def __init__(self, root: Path, jars: Path = PULSAR_JARS, timeout_s: float = 180.0) -> None:
        super().__init__(root, timeout_s)
        self.jars = jars
        self.port, self.web_port = free_port(), free_port()
        self.bookie_port, self.zk_port = free_port(), free_port()
        self.service_url = f"pulsar://{LOOPBACK}:{self.port}"
        self.admin_url = f"http://{LOOPBACK}:{self.web_port}"

    def _conf(self) -> Path:
        conf = self.root / "standalone.conf"
        conf.write_text("\n".join([
            "clusterName=standalone",
            f"bindAddress={LOOPBACK}",
            f"advertisedAddress={LOOPBACK}",
            f"brokerServicePort={self.port}",
            f"webServicePort={self.web_port}",
            f"metadataStoreUrl=rocksdb://{self.root / 'metadata'}",
            f"configurationMetadataStoreUrl=rocksdb://{self.root / 'metadata'}",
            "managedLedgerDefaultEnsembleSize=1",
            "managedLedgerDefaultWriteQuorum=1",
            "managedLedgerDefaultAckQuorum=1",
            "allowAutoTopicCreation=true",
            "allowAutoTopicCreationType=non-partitioned",
            "brokerDeleteInactiveTopicsEnabled=false",
            "functionsWorkerEnabled=false",
            "systemTopicEnabled=false",
            "topicLevelPoliciesEnabled=false",
            "loadBalancerEnabled=false",
            "",
        ]))
        return conf

    def start(self) -> PulsarStandalone:
        """Start ``PulsarStandaloneStarter`` and wait until its admin API answers; raises
        ``RuntimeError`` (with the log's tail) when it does not within ``timeout_s``."""
        conf = self._conf()
        self._launch(self.jars, "org.apache.pulsar.PulsarStandaloneStarter",
                     "--config", str(conf), "--no-functions-worker", "--no-stream-storage",
                     "--bookkeeper-port", str(self.bookie_port),
                     "--zookeeper-port", str(self.zk_port),
                     "--bookkeeper-dir", str(self.root / "bookie"), heap="1g")
        self._wait([self.port, self.web_port],
                   f"{self.admin_url}/admin/v2/namespaces/public/default")
        return self
