"""The local service stack: real Kafka and Elasticsearch on loopback, fetched with Maven.

For a laptop, the demo and the tests. Everything lives in ``stack.cache_dir``: the Maven
repository, the unpacked services, and ``run/<service>/`` with each one's config, data,
logs and pid file. Data survives ``stop``/``ensure_up``; ``fresh=True`` wipes it.

Python API (the CLI is a thin layer over it)::

    info = ensure_up(cfg)              # start what is not running, wait until ready
    cfg = info.client_config(cfg)      # a Config whose clients talk to this stack
    stop_service(cfg, "elasticsearch") # fault injection: one service down ...
    start_service(cfg, "elasticsearch")  # ... and back, ready
    status(cfg)                        # [ServiceState, ...]
    stop(cfg)                          # everything down (only processes we started)
"""

from __future__ import annotations

import fcntl
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from rich.console import Console

from pipeline.config import Config
from pipeline.errors import ServiceError
from pipeline.stack.elasticsearch import ElasticsearchService
from pipeline.stack.java import find_jdks
from pipeline.stack.kafka import KafkaService
from pipeline.stack.service import Service, ServiceState
from pipeline.stack.ui import Reporter

__all__ = [
    "SERVICES",
    "ServiceState",
    "StackInfo",
    "ensure_up",
    "service",
    "start_service",
    "status",
    "stop",
    "stop_service",
]

#: in start order (stop goes the other way)
SERVICES = ("kafka", "elasticsearch")
_CLASSES: dict[str, type[Service]] = {"kafka": KafkaService,
                                      "elasticsearch": ElasticsearchService}


@dataclass(frozen=True)
class StackInfo:
    """Where the running stack answers, and what this call started."""

    kafka_bootstrap: str
    elasticsearch_url: str
    kafka_version: str
    elasticsearch_version: str
    #: services this call started (empty when everything was already up)
    started: tuple[str, ...]

    def client_config(self, cfg: Config) -> Config:
        """``cfg`` with the Kafka bootstrap and Elasticsearch URL of this stack."""
        return cfg.replace(kafka={"bootstrap": self.kafka_bootstrap},
                           elasticsearch={"url": self.elasticsearch_url})


def service(cfg: Config, name: str) -> Service:
    """The service object for ``name`` (``kafka`` or ``elasticsearch``)."""
    try:
        cls = _CLASSES[name]
    except KeyError:
        raise ServiceError(f"unknown service {name!r}; choose from {', '.join(SERVICES)}") \
            from None
    return cls(cfg, find_jdks())


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


def _select(names: Sequence[str] | None) -> list[str]:
    chosen = list(names) if names else list(SERVICES)
    for name in chosen:
        if name not in _CLASSES:
            raise ServiceError(f"unknown service {name!r}; choose from {', '.join(SERVICES)}")
    return [n for n in SERVICES if n in chosen]


def ensure_up(cfg: Config, *, fresh: bool = False, console: Console | None = None,
              services: Sequence[str] | None = None) -> StackInfo:
    """Fetch (once), start and wait for every service not already running.

    ``fresh`` stops the services first and wipes their data. Raises ServiceError with a
    one-line reason (and the log tail when a service failed to start).
    """
    ui = Reporter(console)
    names = _select(services)
    jdks = find_jdks()
    objs = {n: _CLASSES[n](cfg, jdks) for n in SERVICES}
    started: list[str] = []
    with _locked(cfg):
        if fresh:
            for name in reversed(names):
                objs[name].stop(ui)
                objs[name].wipe()
            ui.note("[green]✓[/] data wiped: " + ", ".join(names))
        for name in names:
            if objs[name].start(ui):
                started.append(name)
            else:
                ui.note(f"{objs[name].title} is already up on {objs[name].address}")
    return StackInfo(
        kafka_bootstrap=objs["kafka"].address, elasticsearch_url=objs["elasticsearch"].address,
        kafka_version=objs["kafka"].state().version,
        elasticsearch_version=objs["elasticsearch"].state().version,
        started=tuple(started))


def stop(cfg: Config, *, console: Console | None = None,
         services: Sequence[str] | None = None) -> list[str]:
    """Stop the services this stack started (by pid file); returns the ones it stopped."""
    ui = Reporter(console)
    jdks = find_jdks()
    stopped: list[str] = []
    with _locked(cfg):
        for name in reversed(_select(services)):
            if _CLASSES[name](cfg, jdks).stop(ui):
                stopped.append(name)
    return stopped


def start_service(cfg: Config, name: str, *, console: Console | None = None) -> bool:
    """Start one service and wait until ready; False if it was already running."""
    svc = service(cfg, name)
    with _locked(cfg):
        return svc.start(Reporter(console))


def stop_service(cfg: Config, name: str, *, console: Console | None = None) -> bool:
    """Stop one service (wait for its exit; SIGKILL after a timeout); False if not running."""
    svc = service(cfg, name)
    with _locked(cfg):
        return svc.stop(Reporter(console))


def status(cfg: Config) -> list[ServiceState]:
    """The state of every service: version, address, pid, running, ready."""
    jdks = find_jdks()
    return [_CLASSES[n](cfg, jdks).state() for n in SERVICES]
