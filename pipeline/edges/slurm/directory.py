"""A directory the Slurm edge empties into its spool, now and every ``interval`` seconds.

The hooks' drop directory and the lua plugins' submit spool are both filled by scripts
that run inside Slurm and never wait for the edge; each ingester says what a file is
(:meth:`DirectoryIngester.scan`) and how its directory must be kept (``prepare``).
"""

from __future__ import annotations

import logging
import threading
from abc import ABC, abstractmethod
from pathlib import Path

from pipeline.edges.base import EdgeRuntime
from pipeline.runtime.errors import JobstreamError

__all__ = ["DirectoryIngester"]

logger = logging.getLogger(__name__)


class DirectoryIngester(ABC):
    """Scans ``directory`` at start and then every ``interval`` seconds, in a thread."""

    #: the thread's name, and what the directory is in the log
    name = "directory"

    def __init__(self, runtime: EdgeRuntime, directory: str | Path, interval: float,
                 hook_user: str = "") -> None:
        self.runtime = runtime
        self.directory = Path(directory)
        self.interval = interval
        self.hook_user = hook_user
        self.ingested = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @abstractmethod
    def prepare(self) -> None:
        """Create the directory, or check it, with the owner and mode it needs."""

    @abstractmethod
    def scan(self) -> int:
        """Spool what the directory holds now; how many records."""

    def start(self) -> None:
        self.prepare()
        self.scan()
        self._thread = threading.Thread(target=self._run, name=self.name, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                self.scan()
            except JobstreamError as exc:
                logger.error("%s not ingested: %s", self.name, exc)
            except Exception:  # noqa: BLE001 - a dead thread would ingest nothing more, ever
                logger.exception("%s: scan failed; trying again in %.0f s", self.name,
                                 self.interval)

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(5.0)
