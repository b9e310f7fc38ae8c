"""Apache Kafka for the local stack: one KRaft node (broker and controller) on loopback.

The broker is the ``kafka_2.13`` artifact and its runtime dependencies from Maven Central,
copied into ``<cache>/kafka-<version>/libs`` and started as ``kafka.Kafka`` directly on a
JDK (no Apache tarball, no shell scripts). Its storage is formatted once, with static
controller voters, and kept across restarts.
"""

from __future__ import annotations

import base64
import logging
import shutil
import subprocess
import uuid
from collections.abc import Callable
from functools import cached_property
from importlib.resources import files
from pathlib import Path
from string import Template

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient

from pipeline.errors import ServiceError
from pipeline.stack import procs
from pipeline.stack.java import Jdk, pick_jdk
from pipeline.stack.maven import DEPENDENCY_PLUGIN, run_mvn
from pipeline.stack.service import Service

__all__ = ["KafkaService"]

#: log4j2 of the classpath; the 4.x POM has no SLF4J binding, so the binding is declared
LOG4J2_VERSION = "2.25.4"

_ASSETS = files("pipeline.stack") / "assets"

# librdkafka logs every refused connection while the broker starts; that is expected here.
_QUIET = logging.getLogger("pipeline.stack.kafka.client")
_QUIET.addHandler(logging.NullHandler())
_QUIET.propagate = False


def _render(asset: str, **values: object) -> str:
    return Template(_ASSETS.joinpath(asset).read_text()).substitute(values)


class KafkaService(Service):
    name = "kafka"
    title = "Kafka"
    ready_timeout = 120.0
    stop_timeout = 30.0

    @property
    def version(self) -> str:
        return self.cfg.stack.kafka_version

    @property
    def ports(self) -> tuple[int, ...]:
        return (self.cfg.stack.kafka_port, self.cfg.stack.kafka_controller_port)

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.cfg.stack.kafka_port}"

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
        self.properties.write_text(_render(
            "server.properties", port=self.cfg.stack.kafka_port,
            controller_port=self.cfg.stack.kafka_controller_port, data_dir=self.data_dir))
        (self.run_dir / "log4j2.properties").write_text(_render("log4j2.properties"))
        if (self.data_dir / "meta.properties").is_file():
            return
        cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
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

    def launch(self) -> subprocess.Popen[bytes]:
        out = self.logs_dir / "server.out"
        procs.rotate(out)
        with out.open("ab") as log:
            proc = subprocess.Popen(
                self._java("-Xms256m", "-Xmx512m", "-XX:+UseG1GC", "-XX:MaxGCPauseMillis=20",
                           f"-Dkafka.logs.dir={self.logs_dir}", "kafka.Kafka",
                           str(self.properties)),
                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                cwd=self.run_dir, start_new_session=True)
        self.pidfile.write_text(f"{proc.pid}\n")
        return proc

    def probe(self, timeout: float) -> bool:
        if not procs.port_answers(self.cfg.stack.kafka_port):
            return False
        admin = AdminClient({"bootstrap.servers": self.address, "logger": _QUIET})
        try:
            return bool(admin.list_topics(timeout=timeout).brokers)
        except KafkaException:
            return False

    def log_files(self) -> list[Path]:
        return [self.logs_dir / "server.out"]
