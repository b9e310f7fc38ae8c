"""The local service stack: real Kafka and Elasticsearch on loopback, fetched with Maven,
and, when asked (``stack.prometheus``), a Prometheus built with ``go install`` that scrapes
jobstream's metrics ports with the shipped alert rules.

For a laptop, the demo and the tests. Everything lives in ``stack.cache_dir``: the Maven
repository, the unpacked services, and ``run/<service>/`` with each one's config, data,
logs and pid file. Data survives ``stop``/``ensure_up``; ``fresh=True`` wipes it.

Kafka is ``stack.kafka_brokers`` KRaft nodes (default 1, ``run/kafka/``); with more, node n
runs from ``run/kafka-<n>/`` on ``kafka_port + 2(n-1)`` (its controller on
``kafka_controller_port + 2(n-1)``) and topics are replicated min(3, N) times. A service
name always means all of its nodes.

Python API (the CLI is a thin layer over it)::

    info = ensure_up(cfg)              # start what is not running, wait until ready
    cfg = info.client_config(cfg)      # a Config whose clients talk to this stack
    stop_service(cfg, "elasticsearch") # fault injection: one service down ...
    start_service(cfg, "elasticsearch")  # ... and back, ready
    fetch(cfg, services=["prometheus"])  # into the cache, nothing started (./run test)
    status(cfg)                        # [ServiceState, ...], one per Kafka node
    stop(cfg)                          # everything down (only processes we started)

One broker of a cluster, for fault injection::

    kafka_nodes(cfg)                   # [1, 2, 3]: the node numbers, also the broker ids
    broker_address(cfg, 2)             # "127.0.0.1:9094"
    stop_broker(cfg, 2)                # SIGTERM (controlled shutdown), SIGKILL on timeout
    stop_broker(cfg, 2, kill=True)     # SIGKILL now: a crash
    start_broker(cfg, 2)               # back, and in every node's metadata again
"""

from __future__ import annotations

import contextlib
import fcntl
import signal
import subprocess
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import psutil
from rich.console import Console

from pipeline.runtime.config import Config
from pipeline.runtime.errors import ServiceError
from pipeline.tooling.stack.elasticsearch import ElasticsearchService
from pipeline.tooling.stack.java import Jdk, find_jdks
from pipeline.tooling.stack.kafka import (
    KafkaService,
    broker_address,
    kafka_nodes,
    running_shape,
    stray_nodes,
    wait_brokers,
)
from pipeline.tooling.stack.prometheus import PrometheusService
from pipeline.tooling.stack.service import Service, ServiceState
from pipeline.tooling.stack.ui import Reporter

__all__ = [
    "SERVICES",
    "ServiceState",
    "StackInfo",
    "broker_address",
    "configured",
    "ensure_up",
    "fetch",
    "kafka_nodes",
    "service",
    "start_broker",
    "start_service",
    "status",
    "stop",
    "stop_broker",
    "stop_service",
]

#: in start order (stop goes the other way)
SERVICES = ("kafka", "elasticsearch", "prometheus")
#: the services run only when the config asks (``stack.<name> = true``)
OPTIONAL = frozenset({"prometheus"})
_CLASSES: dict[str, type[Service]] = {"kafka": KafkaService,
                                      "elasticsearch": ElasticsearchService,
                                      "prometheus": PrometheusService}


@dataclass(frozen=True)
class StackInfo:
    """Where the running stack answers, and what this call started."""

    #: every Kafka node's address, comma-separated
    kafka_bootstrap: str
    elasticsearch_url: str
    kafka_version: str
    elasticsearch_version: str
    #: services this call started (empty when everything was already up)
    started: tuple[str, ...]
    #: the stack's Prometheus, "" when it runs none
    prometheus_url: str = ""

    def client_config(self, cfg: Config) -> Config:
        """``cfg`` with the Kafka bootstrap and Elasticsearch URL of this stack (and its
        Prometheus's URL, when it runs one)."""
        cfg = cfg.replace(kafka={"bootstrap": self.kafka_bootstrap},
                          elasticsearch={"url": self.elasticsearch_url})
        if self.prometheus_url:
            cfg = cfg.replace(metrics={"prometheus_url": self.prometheus_url})
        return cfg


def service(cfg: Config, name: str) -> Service:
    """The service object for ``name`` (``kafka`` or ``elasticsearch``); for Kafka, node 1
    (all of it when stack.kafka_brokers is 1; the fetched distribution is the same)."""
    try:
        cls = _CLASSES[name]
    except KeyError:
        raise ServiceError(f"unknown service {name!r}; choose from {', '.join(SERVICES)}") \
            from None
    return cls(cfg, find_jdks())


def _members(cfg: Config, name: str, jdks: list[Jdk]) -> list[Service]:
    """What ``name`` runs as: each Kafka node, or the one Elasticsearch."""
    if name == "kafka":
        return [KafkaService(cfg, jdks, n) for n in kafka_nodes(cfg)]
    return [_CLASSES[name](cfg, jdks)]


def _node(cfg: Config, node: int, jdks: list[Jdk]) -> KafkaService:
    if node not in kafka_nodes(cfg):
        raise ServiceError(f"no Kafka node {node}: stack.kafka_brokers is "
                           f"{cfg.stack.kafka_brokers}")
    return KafkaService(cfg, jdks, node)


def _refuse_strays(cfg: Config, jdks: list[Jdk]) -> None:
    strays = stray_nodes(cfg, jdks)
    if strays:
        running = ", ".join(f"{s.run_dir.name} (pid {s.pidfile.read_text().strip()})"
                            for s in strays)
        raise ServiceError(
            f"Kafka of {cfg.stack.cache_dir} runs in another shape than "
            f"stack.kafka_brokers = {cfg.stack.kafka_brokers}: {running}; "
            "stop it first with 'jobstream stack down kafka'")


def _start(cfg: Config, name: str, jdks: list[Jdk], ui: Reporter) -> bool:
    """Start every node of ``name`` not running, then wait for all; False if all ran."""
    members = _members(cfg, name, jdks)
    if name == "kafka":
        _refuse_strays(cfg, jdks)
    launched: list[tuple[Service, subprocess.Popen[bytes] | None]] = []
    try:
        # every node launched before waiting on any: a node of a cluster is ready only
        # once a quorum of them runs
        for member in members:
            launched.append((member, member.begin(ui)))
        for member, launcher in launched:
            member.finish(launcher, ui)
        if name == "kafka" and len(members) > 1:
            with ui.step("Waiting until every broker sees all of them…"):
                wait_brokers(cfg, set(kafka_nodes(cfg)), KafkaService.ready_timeout)
    except BaseException:
        for member, launcher in launched:
            if launcher is not None:
                member.abort(launcher)
        raise
    return any(launcher is not None for _, launcher in launched)


def _stop(cfg: Config, name: str, jdks: list[Jdk], ui: Reporter) -> bool:
    """Stop every node of ``name`` (for Kafka also those of another shape); False if none
    ran."""
    members = _members(cfg, name, jdks)
    if name == "kafka":
        members += stray_nodes(cfg, jdks)
    running = [m for m in members if m.process() is not None]
    if len(running) > 1:
        # SIGTERM to all nodes first: they shut down together, so the controllers still
        # form a quorum while every broker's controlled shutdown asks them (one after the
        # other, the last node would wait out its timeout for a quorum that is gone)
        for member in running:
            proc = member.process()
            if proc is not None:
                with contextlib.suppress(psutil.NoSuchProcess):
                    proc.send_signal(signal.SIGTERM)
    for member in reversed(running):
        if not member.stop(ui):
            ui.note(f"[green]✓[/] {member.title} stopped")  # it went on the first SIGTERM
    return bool(running)


@contextmanager
def _locked(cfg: Config) -> Iterator[None]:
    """One stack operation at a time per cache directory (CLI and test sessions alike)."""
    cache = Path(cfg.stack.cache_dir).expanduser()
    try:
        cache.mkdir(parents=True, exist_ok=True)
        fh = (cache / "stack.lock").open("a")
    except OSError as exc:
        raise ServiceError(f"stack.cache_dir {cache}: {exc.strerror}") from exc
    with fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        yield


def configured(cfg: Config) -> list[str]:
    """The services a plain ``stack up`` runs: the optional ones only when enabled."""
    return [n for n in SERVICES if n not in OPTIONAL or getattr(cfg.stack, n)]


def _select(names: Sequence[str] | None, default: Sequence[str] = SERVICES) -> list[str]:
    chosen = list(names) if names else list(default)
    for name in chosen:
        if name not in _CLASSES:
            raise ServiceError(f"unknown service {name!r}; choose from {', '.join(SERVICES)}")
    return [n for n in SERVICES if n in chosen]


def ensure_up(cfg: Config, *, fresh: bool = False, console: Console | None = None,
              services: Sequence[str] | None = None) -> StackInfo:
    """Fetch (once), start and wait for every service not already running.

    ``fresh`` stops the services first and wipes their data. Raises ServiceError with a
    one-line reason (and the log tail when a service failed to start). A start that fails
    part-way stops again the services this call had started (with ``fresh``, also those it
    had stopped and started again), and the error names them; a service that was up and
    that this call left alone stays up. A service of several members (a Kafka cluster)
    counts as started when this call started any of them, and is stopped whole.
    """
    ui = Reporter(console)
    names = _select(services, configured(cfg))
    jdks = find_jdks()
    es = ElasticsearchService(cfg, jdks)
    prometheus = PrometheusService(cfg, jdks)
    started: list[str] = []
    with _locked(cfg):
        if fresh:
            for name in reversed(names):
                _stop(cfg, name, jdks, ui)
                for member in _members(cfg, name, jdks):
                    member.wipe()
            ui.note("[green]✓[/] data wiped: " + ", ".join(names))
        try:
            for name in names:
                if _start(cfg, name, jdks, ui):
                    started.append(name)
                else:
                    where = ", ".join(m.address for m in _members(cfg, name, jdks))
                    ui.note(f"{_CLASSES[name].title} is already up on {where}")
        except BaseException as exc:
            undone = _undo_starts(cfg, started, jdks, ui)
            if isinstance(exc, ServiceError) and undone:
                # after a start's log lines on a line of its own, so the reason stays first
                sep = "\n" if "\n" in str(exc) else "; "
                raise ServiceError(f"{exc}{sep}{undone}") from exc
            raise
    kafka = _members(cfg, "kafka", jdks)
    return StackInfo(
        kafka_bootstrap=",".join(m.address for m in kafka),
        elasticsearch_url=es.address,
        kafka_version=kafka[0].state().version,
        elasticsearch_version=es.state().version,
        started=tuple(started),
        prometheus_url=prometheus.address if prometheus.process() is not None else "")


def _undo_starts(cfg: Config, started: list[str], jdks: list[Jdk], ui: Reporter) -> str:
    """Stop, last first, the services of ``started``: a failed ``ensure_up`` leaves nothing
    of its own running unseen. Returns what it did, for the error ("" when nothing)."""
    stopped: list[str] = []
    failed: list[str] = []
    for name in reversed(started):
        title = _CLASSES[name].title
        try:
            if _stop(cfg, name, jdks, ui):
                stopped.append(title)
        except Exception as exc:  # the start's error is the one to raise
            failed.append(f"{title} ({exc})")
    said: list[str] = []
    if stopped:
        said.append(f"stopped again {', '.join(stopped)}, which this call had started")
    if failed:
        said.append(f"could not stop {', '.join(failed)}: 'jobstream stack down' stops it")
    return "; ".join(said)


def stop(cfg: Config, *, console: Console | None = None,
         services: Sequence[str] | None = None) -> list[str]:
    """Stop the services this stack started (by pid file); returns the ones it stopped."""
    ui = Reporter(console)
    jdks = find_jdks()
    stopped: list[str] = []
    with _locked(cfg):
        for name in reversed(_select(services)):
            if _stop(cfg, name, jdks, ui):
                stopped.append(name)
    return stopped


def fetch(cfg: Config, *, console: Console | None = None,
          services: Sequence[str] | None = None) -> list[str]:
    """Fetch (or build) into the cache what is not there yet, starting nothing; returns the
    services it fetched. Without ``services``: those a plain ``stack up`` runs."""
    ui = Reporter(console)
    jdks = find_jdks()
    with _locked(cfg):
        return [name for name in _select(services, configured(cfg))
                if _members(cfg, name, jdks)[0].install(ui)]


def start_service(cfg: Config, name: str, *, console: Console | None = None) -> bool:
    """Start one service (all its nodes) and wait until ready; False if it was already
    running."""
    _select([name])
    jdks = find_jdks()
    with _locked(cfg):
        return _start(cfg, name, jdks, Reporter(console))


def stop_service(cfg: Config, name: str, *, console: Console | None = None) -> bool:
    """Stop one service, all its nodes (wait for their exit; SIGKILL after a timeout);
    False if not running."""
    _select([name])
    jdks = find_jdks()
    with _locked(cfg):
        return _stop(cfg, name, jdks, Reporter(console))


def stop_broker(cfg: Config, node: int, *, kill: bool = False,
                console: Console | None = None) -> bool:
    """Stop Kafka node ``node`` alone: SIGTERM and a controlled shutdown (SIGKILL after the
    stop timeout), or with ``kill`` SIGKILL at once. False if it was not running."""
    jdks = find_jdks()
    with _locked(cfg):
        return _node(cfg, node, jdks).stop(Reporter(console), kill=kill)


def start_broker(cfg: Config, node: int, *, console: Console | None = None) -> bool:
    """Start Kafka node ``node`` and wait until every node's metadata lists it (a broker
    back in the cluster; its replicas catch up after). False if it was already running."""
    jdks = find_jdks()
    ui = Reporter(console)
    with _locked(cfg):
        svc = _node(cfg, node, jdks)
        _refuse_strays(cfg, jdks)
        started = svc.start(ui)
        running = {n for n in kafka_nodes(cfg)
                   if KafkaService(cfg, jdks, n).process() is not None}
        wait_brokers(cfg, running | {node}, KafkaService.ready_timeout)
        return started


def status(cfg: Config, *, running_shape_first: bool = False) -> list[ServiceState]:
    """The state of every service, one per Kafka node (and any Kafka node of this cache
    directory running in another shape): version, address, pid, running, ready.

    ``running_shape_first``: when no node of the configured shape runs but a Kafka of
    another shape does, the state of that one (``stack status`` without ``--brokers``).
    """
    jdks = find_jdks()
    if running_shape_first and all(m.process() is None for m in _members(cfg, "kafka", jdks)):
        shape = running_shape(cfg, jdks)
        if shape is not None:
            cfg = cfg.replace(stack={"kafka_brokers": shape})
    members = [m for n in SERVICES for m in _members(cfg, n, jdks)
               # an optional service not asked for is shown only while it runs
               if n in configured(cfg) or m.process() is not None]
    members[len(kafka_nodes(cfg)):len(kafka_nodes(cfg))] = stray_nodes(cfg, jdks)
    return [m.state() for m in members]
