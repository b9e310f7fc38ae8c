"""Apache Kafka for the local stack: KRaft nodes (each broker and controller) on loopback.

The broker is the ``kafka_2.13`` artifact and its runtime dependencies from Maven Central,
copied into ``<cache>/kafka-<version>/libs`` and started as ``kafka.Kafka`` directly on a
JDK (no Apache tarball, no shell scripts). Its storage is formatted once, with static
controller voters, and kept across restarts.

``stack.kafka_brokers`` nodes make the cluster. One node is ``run/kafka/`` with
``server.properties`` as it always was; with more, node n is ``run/kafka-<n>/`` and listens
on ``kafka_port + 2(n-1)`` (controller ``kafka_controller_port + 2(n-1)``), all formatted
with one cluster id and the same voters, and topics replicated like a site's cluster. The
two shapes keep their data apart, so switching between them loses nothing.
"""

from __future__ import annotations

import base64
import logging
import re
import shutil
import subprocess
import time
import uuid
from collections.abc import Callable
from functools import cached_property
from importlib.resources import files
from pathlib import Path
from string import Template

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient

from pipeline.runtime.config import Config
from pipeline.runtime.errors import ConfigError, ServiceError
from pipeline.tooling.stack import procs
from pipeline.tooling.stack.java import Jdk, pick_jdk
from pipeline.tooling.stack.maven import DEPENDENCY_PLUGIN, run_mvn
from pipeline.tooling.stack.service import Service

__all__ = ["KafkaService", "broker_address", "kafka_nodes", "node_ports", "render_properties",
           "replication", "stray_nodes", "voter_ids", "wait_brokers"]

#: log4j2 of the classpath; the 4.x POM has no SLF4J binding, so the binding is declared
LOG4J2_VERSION = "2.25.4"

_ASSETS = files("pipeline.tooling.stack") / "assets"

# librdkafka logs every refused connection while the broker starts; that is expected here.
_QUIET = logging.getLogger("pipeline.tooling.stack.kafka.client")
_QUIET.addHandler(logging.NullHandler())
_QUIET.propagate = False


def _render(asset: str, **values: object) -> str:
    return Template(_ASSETS.joinpath(asset).read_text()).substitute(values)


def kafka_nodes(cfg: Config) -> list[int]:
    """The node numbers (and KRaft node ids) of the stack's Kafka: 1 .. stack.kafka_brokers.

    Refuses a count whose ports would overlap: node n takes ``kafka_port + 2(n-1)`` and
    ``kafka_controller_port + 2(n-1)``, so the two ports must differ by an odd number
    (9092 and 9093 interleave; 9092 and 9094 would give node 2 node 1's controller port).
    """
    count = cfg.stack.kafka_brokers
    if count < 1:
        raise ConfigError(f"stack.kafka_brokers must be at least 1, not {count}")
    nodes = list(range(1, count + 1))
    ports = [p for n in nodes for p in node_ports(cfg, n)]
    if len(set(ports)) != len(ports) or max(ports) > 65535:
        raise ConfigError(
            f"stack.kafka_brokers = {count} with stack.kafka_port {cfg.stack.kafka_port} and "
            f"stack.kafka_controller_port {cfg.stack.kafka_controller_port} gives the nodes "
            f"overlapping or invalid ports {ports}: choose ports an odd number apart, e.g. "
            f"kafka_controller_port = kafka_port + 1")
    return nodes


def node_ports(cfg: Config, node: int) -> tuple[int, int]:
    """Node ``node``'s broker and controller ports (two apart for each further node)."""
    step = 2 * (node - 1)
    return cfg.stack.kafka_port + step, cfg.stack.kafka_controller_port + step


def broker_address(cfg: Config, node: int) -> str:
    """``host:port`` where node ``node``'s broker answers clients."""
    return f"127.0.0.1:{node_ports(cfg, node)[0]}"


def replication(nodes: int) -> tuple[int, int]:
    """Replication factor and min.insync.replicas of a cluster of ``nodes``: three copies
    at most, and acks=all needs two of them once there are three."""
    factor = min(3, nodes)
    return factor, 2 if factor >= 3 else 1


def render_properties(cfg: Config, node: int, data_dir: Path) -> str:
    """The server.properties of node ``node``."""
    port, controller_port = node_ports(cfg, node)
    nodes = kafka_nodes(cfg)
    if len(nodes) == 1:
        return _render("server.properties", port=port, controller_port=controller_port,
                       data_dir=data_dir)
    factor, min_isr = replication(len(nodes))
    voters = ",".join(f"{n}@127.0.0.1:{node_ports(cfg, n)[1]}" for n in nodes)
    return _render("server-cluster.properties", node_id=node, nodes=len(nodes),
                   voters=voters, port=port, controller_port=controller_port,
                   data_dir=data_dir, replication=factor, min_isr=min_isr)


_VOTERS = re.compile(r"^controller\.quorum\.voters=(.*)$", re.MULTILINE)


def voter_ids(properties: str) -> set[int]:
    """The node ids of ``controller.quorum.voters`` in a server.properties text."""
    found = _VOTERS.search(properties)
    if found is None:
        return set()
    return {int(v.split("@", 1)[0]) for v in found.group(1).split(",") if "@" in v}


def broker_ids(bootstrap: str, timeout: float) -> set[int]:
    """The brokers in the cluster's metadata as ``bootstrap`` answers it; empty when it
    does not answer."""
    admin = AdminClient({"bootstrap.servers": bootstrap, "logger": _QUIET})
    try:
        return set(admin.list_topics(timeout=timeout).brokers)
    except KafkaException:
        return set()


def wait_brokers(cfg: Config, nodes: set[int], timeout: float) -> None:
    """Wait until the metadata of every node in ``nodes`` lists all of ``nodes``: each is
    registered and unfenced, as every one of them sees it."""
    deadline = time.monotonic() + timeout
    pending = set(nodes)
    while pending:
        pending = {n for n in pending
                   if not nodes <= broker_ids(broker_address(cfg, n), timeout=2.0)}
        if not pending:
            return
        if time.monotonic() > deadline:
            raise ServiceError(
                f"Kafka brokers {sorted(nodes)} are not all in the cluster's metadata after "
                f"{timeout:.0f} s (not yet seen by nodes {sorted(pending)})")
        time.sleep(0.5)


def running_shape(cfg: Config, jdks: list[Jdk]) -> int | None:
    """The node count of a Kafka of this cache directory running in another shape than
    ``stack.kafka_brokers`` (its voters), or None: what ``stack status`` shows without
    ``--brokers``, so that a cluster started by ``up --brokers 3`` is not reported as a
    stopped one-node Kafka."""
    for svc in stray_nodes(cfg, jdks):
        if not svc.clustered:
            return 1
        try:
            voters = voter_ids(svc.properties.read_text())
        except OSError:
            continue
        if voters:
            return len(voters)
    return None


def stray_nodes(cfg: Config, jdks: list[Jdk]) -> list[KafkaService]:
    """Kafka nodes of this cache directory running in another shape than
    ``stack.kafka_brokers`` asks for (``run/kafka`` beside a cluster, or a cluster's nodes
    beside one node or beyond its count)."""
    run = Path(cfg.stack.cache_dir).expanduser().absolute() / "run"
    wanted = {KafkaService(cfg, jdks, n).run_dir for n in kafka_nodes(cfg)}
    found: list[KafkaService] = []
    candidates = [run / "kafka", *sorted(run.glob("kafka-*"))]
    for path in candidates:
        if path in wanted or not path.is_dir():
            continue
        if path.name == "kafka":
            node, count = 1, 1
        elif path.name[len("kafka-"):].isdigit():
            node = int(path.name[len("kafka-"):])
            count = max(node, 2)
        else:
            continue
        svc = KafkaService(cfg.replace(stack={"kafka_brokers": count}), jdks, node)
        if svc.process() is not None:
            found.append(svc)
    return found


class KafkaService(Service):
    """Node ``node`` of the stack's Kafka (the only one when stack.kafka_brokers is 1)."""

    name = "kafka"
    title = "Kafka"
    ready_timeout = 120.0
    stop_timeout = 30.0

    def __init__(self, cfg: Config, jdks: list[Jdk], node: int = 1) -> None:
        self.node = node
        self.clustered = cfg.stack.kafka_brokers > 1
        if self.clustered:
            # before Service.__init__: the run directory is named after the service
            self.name = f"kafka-{node}"
            self.title = f"Kafka broker {node}"
        super().__init__(cfg, jdks)

    @property
    def version(self) -> str:
        return self.cfg.stack.kafka_version

    @property
    def ports(self) -> tuple[int, ...]:
        return node_ports(self.cfg, self.node)

    @property
    def address(self) -> str:
        return broker_address(self.cfg, self.node)

    @property
    def home(self) -> Path:
        return self.cache / f"kafka-{self.version}"

    @property
    def libs(self) -> Path:
        return self.home / "libs"

    @property
    def properties(self) -> Path:
        return self.run_dir / "server.properties"

    @property
    def marker(self) -> str:
        return str(self.properties)

    @cached_property
    def jdk(self) -> Jdk:
        # Kafka is built and tested on 17; the oldest suitable JDK is the safest.
        return pick_jdk(self.jdks, 17, newest=False, purpose=f"Kafka {self.version}")

    def installed(self) -> bool:
        return (self.libs / ".complete").is_file()

    def fetch(self, progress: Callable[[str], None]) -> None:
        self.home.mkdir(parents=True, exist_ok=True)
        pom = self.home / "pom.xml"
        pom.write_text(_render("kafka-runtime.pom", kafka_version=self.version,
                               log4j2_version=LOG4J2_VERSION))
        staging = self.home / "libs.partial"
        shutil.rmtree(staging, ignore_errors=True)
        run_mvn(["-f", str(pom), f"{DEPENDENCY_PLUGIN}:copy-dependencies",
                 "-DincludeScope=runtime", f"-DoutputDirectory={staging}"],
                repo=self.cache / "m2", log=self.cache / "logs" / f"mvn-kafka-{self.version}.log",
                java_home=self.jdk.home, what=f"Kafka {self.version}", progress=progress)
        shutil.rmtree(self.libs, ignore_errors=True)
        staging.rename(self.libs)
        (self.libs / ".complete").write_text(self.version + "\n")

    def _java(self, *args: str) -> list[str]:
        # JVM options may follow -cp as long as they precede the main class
        return [str(self.jdk.java), "-Djava.awt.headless=true",
                f"-Dlog4j2.configurationFile={self.run_dir / 'log4j2.properties'}",
                "-cp", f"{self.libs}/*", *args]

    def prepare(self) -> None:
        for d in (self.run_dir, self.data_dir, self.logs_dir):
            d.mkdir(parents=True, exist_ok=True)
        text = render_properties(self.cfg, self.node, self.data_dir)
        formatted = (self.data_dir / "meta.properties").is_file()
        if formatted and self.clustered:
            self._refuse_other_voters(voter_ids(text))
        self.properties.write_text(text)
        (self.run_dir / "log4j2.properties").write_text(_render("log4j2.properties"))
        if formatted:
            return
        cluster_id = self._cluster_id()
        fmt = subprocess.run(
            # "--cluster-id=<id>": a random id may start with "-", which as a separate
            # argument the tool's parser takes for an option (one format in 64 failed)
            self._java("kafka.tools.StorageTool", "format", f"--cluster-id={cluster_id}",
                       "-c", str(self.properties), "--ignore-formatted"),
            capture_output=True, text=True, check=False)
        if fmt.returncode != 0:
            last = (fmt.stderr or fmt.stdout).strip().splitlines()[-5:]
            raise ServiceError(f"Kafka storage format failed in {self.data_dir}: "
                               + " | ".join(last))

    def _refuse_other_voters(self, wanted: set[int]) -> None:
        # the voters are fixed when the storage is formatted: a node formatted for another
        # count of nodes would never form a quorum with these
        try:
            before = voter_ids(self.properties.read_text())
        except OSError:
            return
        if before and before != wanted:
            raise ServiceError(
                f"{self.run_dir} holds a {len(before)}-broker cluster's data, not "
                f"{len(wanted)}: start it with --brokers {len(before)}, or wipe it with "
                f"--fresh, or use another stack.cache_dir")

    def _cluster_id(self) -> str:
        """The cluster id of a node formatted before this one, else a new one."""
        if self.clustered:
            for node in kafka_nodes(self.cfg):
                meta = KafkaService(self.cfg, self.jdks, node).data_dir / "meta.properties"
                try:
                    text = meta.read_text()
                except OSError:
                    continue
                for line in text.splitlines():
                    if line.startswith("cluster.id="):
                        return line.split("=", 1)[1].strip()
        return base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")

    def launch(self) -> subprocess.Popen[bytes]:
        out = self.logs_dir / "server.out"
        procs.rotate(out)
        with out.open("ab") as log:
            proc = subprocess.Popen(
                self._java(*self._heap(), "-XX:+UseG1GC", "-XX:MaxGCPauseMillis=20",
                           f"-Dkafka.logs.dir={self.logs_dir}", "kafka.Kafka",
                           str(self.properties)),
                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                cwd=self.run_dir, start_new_session=True)
        self.pidfile.write_text(f"{proc.pid}\n")
        return proc

    def _heap(self) -> tuple[str, ...]:
        # several nodes share the machine; a local cluster's load fits in less each
        return ("-Xms128m", "-Xmx384m") if self.clustered else ("-Xms256m", "-Xmx512m")

    def probe(self, timeout: float) -> bool:
        """Ready when this node answers and lists itself among the brokers: registered with
        the controller quorum and unfenced (a node of a cluster only gets there once a
        quorum of its nodes runs)."""
        if not procs.port_answers(self.ports[0]):
            return False
        return self.node in broker_ids(self.address, timeout)

    def log_files(self) -> list[Path]:
        return [self.logs_dir / "server.out"]
