"""One service of the local stack: the life cycle every service shares.

A service is fetched once into the cache, configured on every start (ports come from the
config), launched detached from the caller (so ``jobstream stack up`` can exit), watched
until it answers, and stopped by the pid it left in its run directory. The subclasses say
how to fetch, configure, launch and probe; this class owns the order, the waiting and the
errors.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import time
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import psutil

from pipeline.runtime.config import Config
from pipeline.runtime.errors import ServiceError
from pipeline.tooling.stack import procs
from pipeline.tooling.stack.java import Jdk
from pipeline.tooling.stack.ui import Reporter

__all__ = ["Service", "ServiceState"]


@dataclass(frozen=True)
class ServiceState:
    """What ``status`` reports about one service."""

    name: str
    title: str
    version: str
    address: str
    ports: tuple[int, ...]
    pid: int | None
    running: bool
    ready: bool


class Service(ABC):
    name: str
    title: str
    #: how long a start may take before it counts as failed (first starts on 2 cores are slow)
    ready_timeout: float = 120.0
    #: how long a SIGTERM may take before SIGKILL (Kafka's controlled shutdown needs a while)
    stop_timeout: float = 30.0
    #: what :meth:`fetch` fetches with, as the first start says
    fetch_tool: str = "Maven"

    def __init__(self, cfg: Config, jdks: list[Jdk]) -> None:
        self.cfg = cfg
        self.jdks = jdks
        self.cache = Path(cfg.stack.cache_dir).expanduser().absolute()
        self.run_dir = self.cache / "run" / self.name
        self.data_dir = self.run_dir / "data"
        self.logs_dir = self.run_dir / "logs"
        self.pidfile = self.run_dir / f"{self.name}.pid"
        self.metafile = self.run_dir / "running.json"
        #: when this object last launched the service (only that run's logs are shown)
        self._launched_at = 0.0

    # -- what subclasses say -------------------------------------------------------------

    @property
    @abstractmethod
    def version(self) -> str:
        """The version this start would run (may raise ServiceError: no suitable JDK)."""

    @property
    @abstractmethod
    def ports(self) -> tuple[int, ...]: ...

    @property
    @abstractmethod
    def address(self) -> str:
        """Where clients connect: bootstrap servers or URL."""

    @property
    @abstractmethod
    def marker(self) -> str:
        """A string in the command line of our server process and of no other."""

    @abstractmethod
    def installed(self) -> bool: ...

    @abstractmethod
    def fetch(self, progress: Callable[[str], None]) -> None:
        """Download into the cache (only called when not ``installed()``)."""

    @abstractmethod
    def prepare(self) -> None:
        """Write config files, create directories, format storage: before every start."""

    @abstractmethod
    def launch(self) -> subprocess.Popen[bytes]:
        """Start the server detached; return the launched process."""

    @abstractmethod
    def probe(self, timeout: float) -> bool:
        """True when the service answers its readiness check."""

    @abstractmethod
    def log_files(self) -> list[Path]: ...

    # -- shared life cycle ---------------------------------------------------------------

    def process(self) -> psutil.Process | None:
        return procs.owned_process(self.pidfile, self.marker)

    def start(self, ui: Reporter) -> bool:
        """Start unless running; wait until ready. False if it was already running."""
        launcher = self.begin(ui)
        self.finish(launcher, ui)
        return launcher is not None

    def begin(self, ui: Reporter) -> subprocess.Popen[bytes] | None:
        """The first half of :meth:`start`: fetch, configure and launch without waiting (the
        nodes of a cluster are all launched before any can be ready). None if it runs."""
        if self.process() is not None:
            return None
        for port in self.ports:
            if procs.port_taken(port):
                owner = procs.port_owner(port)
                raise ServiceError(
                    f"{self.title} cannot start: port {port} is taken by another process"
                    f"{': ' + owner if owner else ''}; stop it or change the port in the "
                    "[stack] config")
        self.install(ui)
        self.prepare()
        self._launched_at = time.time()
        launcher = self.launch()
        procs.remember_child(launcher)
        return launcher

    def install(self, ui: Reporter) -> bool:
        """Fetch into the cache unless there already; False if it was."""
        if self.installed():
            return False
        started = time.monotonic()
        with ui.step(f"Fetching {self.title} {self.version} with "
                     f"{self.fetch_tool}…") as progress:
            self.fetch(progress)
        ui.note(f"[green]✓[/] fetched {self.title} {self.version} "
                f"({time.monotonic() - started:.0f} s)")
        return True

    def finish(self, launcher: subprocess.Popen[bytes] | None, ui: Reporter) -> None:
        """The second half of :meth:`start`: wait until ready (``launcher`` from
        :meth:`begin`; None for a service that was already running)."""
        if launcher is None:
            if not self.probe(timeout=3.0):
                self._wait_ready(None, ui, "Waiting for")
            return
        self._wait_ready(launcher, ui, "Starting")
        self.metafile.write_text(json.dumps({"version": self.version, "address": self.address}))

    def _wait_ready(self, launcher: subprocess.Popen[bytes] | None, ui: Reporter,
                    verb: str) -> None:
        started = time.monotonic()
        deadline = started + self.ready_timeout
        with ui.step(f"{verb} {self.title} {self.version} on {self.address}…") as progress:
            while True:
                if self.probe(timeout=2.0):
                    break
                failed = launcher is not None and launcher.poll() not in (None, 0)
                gone = (launcher is None or launcher.poll() is not None) and \
                    self.process() is None
                if failed or gone:
                    self.abort(launcher)
                    raise ServiceError(f"{self.title} exited while starting; last log lines:\n"
                                       f"{self._log_tail()}")
                if time.monotonic() > deadline:
                    self.abort(launcher)
                    raise ServiceError(
                        f"{self.title} did not become ready within {self.ready_timeout:.0f} s "
                        f"on {self.address}; last log lines:\n{self._log_tail()}")
                progress("waiting for it to answer")
                time.sleep(0.5)
        ui.note(f"[green]✓[/] {self.title} {self.version} ready on {self.address} "
                f"({time.monotonic() - started:.1f} s)")

    def _log_tail(self) -> str:
        return procs.tail(self.log_files(), since=self._launched_at - 1.0)

    def abort(self, launcher: subprocess.Popen[bytes] | None) -> None:
        """Kill what a failed start left behind (our server and the launched process)."""
        proc = self.process()
        if proc is not None:
            procs.stop_process(proc, 10.0)
        if launcher is not None and launcher.poll() is None:
            try:
                os.killpg(launcher.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            launcher.wait()

    def stop(self, ui: Reporter, *, kill: bool = False) -> bool:
        """Stop our server if it runs (``kill``: SIGKILL at once, no clean shutdown). False
        if it was not running."""
        proc = self.process()
        if proc is None:
            self.pidfile.unlink(missing_ok=True)
            return False
        verb = "Killing" if kill else "Stopping"
        with ui.step(f"{verb} {self.title} (pid {proc.pid})…"):
            clean = procs.stop_process(proc, self.stop_timeout, kill=kill)
        self.pidfile.unlink(missing_ok=True)
        how = ("killed" if kill else "stopped" if clean else
               f"killed (no exit within {self.stop_timeout:.0f} s)")
        ui.note(f"[green]✓[/] {self.title} {how}")
        return True

    def wipe(self) -> None:
        """Delete the data directory (``up --fresh``); the service must be stopped."""
        shutil.rmtree(self.data_dir, ignore_errors=True)

    def state(self) -> ServiceState:
        proc = self.process()
        version = ""
        if proc is not None:
            try:
                version = json.loads(self.metafile.read_text())["version"]
            except (OSError, ValueError, KeyError):
                version = ""
        if not version:
            try:
                version = self.version
            except ServiceError:
                version = "?"
        return ServiceState(
            name=self.name, title=self.title, version=version, address=self.address,
            ports=self.ports, pid=proc.pid if proc else None, running=proc is not None,
            ready=proc is not None and self.probe(timeout=3.0))
