"""``jobstream edge slurm``: every Slurm source in one daemon, each optional in the config.

* ``receiver`` -- jobcomp/elasticsearch POSTs (:mod:`.receiver`), format ``slurm-jobcomp``;
* ``bridge`` -- Slurm's jobcomp/kafka topic re-keyed (:mod:`.bridge`), ``slurm-jobcomp``;
* ``hooks`` -- PrologSlurmctld / EpilogSlurmctld via socket or drop directory
  (:mod:`.hooks`), ``slurm-hook``;
* ``poller`` -- ``squeue`` / ``sacct --json`` reconciliation (:mod:`.poller`),
  ``slurm-squeue`` / ``slurm-sacct``;
* ``nodes`` -- ``scontrol show nodes --json`` (``sinfo --json`` on 22.05), the nodes whose
  state changed (:mod:`.nodes`), ``slurm-nodes``;
* ``submit_plugins`` -- the lines of job_submit.lua and cli_filter.lua in the submit spool
  (:mod:`.submit`), ``slurm-submit-plugin``.

All of them write through one spool (``<spool_dir>/slurm.db``). For tests and embedding::

    edge = SlurmEdge(cfg).start()      # listening when start() returns
    ... edge.receiver.url, edge.hook_socket ...
    edge.stop()
"""

from __future__ import annotations

import logging
import threading
from typing import Protocol

from pipeline.edges.base import EdgeRuntime
from pipeline.edges.slurm.bridge import JobcompKafkaBridge
from pipeline.edges.slurm.hooks import DropDirIngester, HookListener, hook_paths
from pipeline.edges.slurm.nodes import NodePoller
from pipeline.edges.slurm.poller import SlurmPoller
from pipeline.edges.slurm.receiver import JobcompReceiver
from pipeline.edges.slurm.submit import SubmitSpoolIngester, submit_spool_path
from pipeline.runtime.config import Config

__all__ = ["SlurmEdge"]

logger = logging.getLogger(__name__)


class _Component(Protocol):
    def start(self) -> None: ...

    def stop(self) -> None: ...


class SlurmEdge:
    def __init__(self, cfg: Config, *, runtime: EdgeRuntime | None = None) -> None:
        self.cfg = cfg
        self.runtime = runtime or EdgeRuntime(cfg, "slurm")
        s = cfg.edge.slurm
        self.hook_socket, self.hook_drop_dir = hook_paths(cfg)
        self.receiver = (JobcompReceiver(self.runtime, s.receiver_host, s.receiver_port)
                         if s.receiver else None)
        self.hooks = (HookListener(self.runtime, self.hook_socket, s.hook_user)
                      if s.hooks else None)
        self.drops = (DropDirIngester(self.runtime, self.hook_drop_dir, s.hook_scan_s,
                                      s.hook_user) if s.hooks else None)
        self.bridge = JobcompKafkaBridge(self.runtime) if s.bridge else None
        self.poller = SlurmPoller(self.runtime) if s.poller else None
        # built here, before the runtime starts: it must hear every confirmation
        self.nodes = NodePoller(self.runtime) if s.nodes else None
        self.submit_spool = submit_spool_path(cfg)
        self.submits = (SubmitSpoolIngester(self.runtime, self.submit_spool, s.submit_scan_s,
                                            s.hook_user) if s.submit_plugins else None)
        self._started: list[_Component] = []

    @property
    def components(self) -> list[_Component]:
        return [c for c in (self.drops, self.hooks, self.submits, self.receiver, self.bridge,
                            self.poller, self.nodes) if c is not None]

    def start(self) -> SlurmEdge:
        """Start the drainer and every enabled source; on failure stop what started."""
        self.runtime.start()
        try:
            for comp in self.components:
                comp.start()
                self._started.append(comp)
        except BaseException:
            self.stop()
            raise
        if not self._started:
            logger.warning("edge.slurm enables no source; only the spool is drained")
        return self

    def stop(self, timeout: float = 10.0) -> None:
        """Stop the sources, then the drainer (``timeout``: how long records in flight may
        take to be confirmed; the rest stays spooled)."""
        for comp in reversed(self._started):
            comp.stop()
        self._started.clear()
        self.runtime.stop(timeout)

    def run(self, stop: threading.Event) -> None:
        self.start()
        try:
            stop.wait()
        finally:
            self.stop()
