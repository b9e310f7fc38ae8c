"""``jobstream edge node``: the sampler of this compute node on a schedule, through the
edges' durable spool to ``hpc.jobs.raw``.

Every ``edge.node.interval_s`` it samples the jobs on the node once (:mod:`.sampler`) and
spools one ``node-usage`` RawRecord per payload, in one transaction: scheduler from the
payload, keyed ``<cluster>:<job id>`` as the scheduler's own records of the job are (the
parser's :func:`~pipeline.parsers.node_usage.job_key_id`: a Flux id in decimal), so that
the samples fold in one hop with the job's lifecycle. The ticks are on the monotonic clock
from the start (tick k at start + k x interval), so the schedule does not drift by the
time a sample takes; a tick missed (a sample longer than the interval, a suspended
process) is skipped, not caught up. A full spool loses that interval's records, said in
the log: every record carries cumulative counters, so the next interval makes it good.

It holds no listener but its metrics port (``edge.node.metrics_port``, loopback only).
"""

from __future__ import annotations

import logging
import math
import socket
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from pipeline.core import jsontext
from pipeline.core.model import RawRecord, job_key
from pipeline.edges.base import EdgeRuntime
from pipeline.edges.node.cgroups import CgroupReader, CgroupRoots
from pipeline.edges.node.gpus import GpuJobs, GpuReader
from pipeline.edges.node.pids import PidJobs
from pipeline.edges.node.procs import ProcReader
from pipeline.edges.node.sampler import Interval, Reader, Sampler
from pipeline.parsers.node_usage import job_key_id
from pipeline.runtime import metrics
from pipeline.runtime.config import Config
from pipeline.runtime.errors import ConfigError, ParseError, SpoolError

__all__ = ["FORMAT", "NodeEdge", "build_sampler", "node_name", "print_payloads", "record_of"]

logger = logging.getLogger(__name__)

FORMAT = "node-usage"
_READERS = ("cgroup", "procs")
_SCHEDULERS = ("slurm", "flux")


def node_name(cfg: Config) -> str:
    """``edge.node.name``, else this host's name up to its first '.'."""
    return cfg.edge.node.name or socket.gethostname().split(".", 1)[0]


def build_sampler(cfg: Config, *, gpu_reader: GpuReader | None = None) -> Sampler:
    """The sampler ``[edge.node]`` describes: its readers in order, the GPUs (unless off;
    ``gpu_reader`` in place of NVML's), the node's name. ConfigError for a reader or a
    scheduler it does not know."""
    node = cfg.edge.node
    for key, names, known in (("readers", node.readers, _READERS),
                              ("schedulers", node.schedulers, _SCHEDULERS)):
        unknown = [n for n in names if n not in known]
        if unknown or not names:
            raise ConfigError(f"edge.node.{key} = {list(names)!r}: each one of "
                              f"{', '.join(known)} (at least one)")
    if not node.interval_s > 0:
        raise ConfigError(f"edge.node.interval_s = {node.interval_s!r}: seconds, over 0")
    readers: list[Reader] = []
    procs: ProcReader | None = None
    for name in dict.fromkeys(node.readers):
        if name == "cgroup":
            readers.append(CgroupReader(CgroupRoots(mount=Path(node.cgroup_root),
                                                    flux_slices=tuple(node.flux_slices))))
        else:
            procs = ProcReader(Path(node.proc_root),
                               schedulers=node.schedulers,  # type: ignore[arg-type]
                               use_pss=node.use_pss)
            readers.append(procs)
    gpus = None
    if node.gpus:
        pids = PidJobs(node.proc_root, procs.job_of if procs is not None else None)
        gpus = GpuJobs(gpu_reader or GpuReader(), pids.job_of)
    else:
        logger.info("GPU usage off: edge.node.gpus = false")
    return Sampler(readers, node_name(cfg), gpus=gpus, schedulers=node.schedulers)


def record_of(cluster: str, payload: dict[str, Any]) -> RawRecord:
    """The RawRecord of one payload, keyed as the scheduler's own records of the job."""
    scheduler = payload["scheduler"]
    key: str | None
    try:
        key = job_key(cluster, job_key_id(scheduler, payload["job_id"])[0])
    except ParseError:  # the readers give none such; the parser dead-letters it
        key = None
    return RawRecord(cluster=cluster, scheduler=scheduler, format=FORMAT,
                     received_at=time.time(), payload=jsontext.dumps(payload), key=key)


class NodeEdge:
    """The sampler on a schedule, its payloads into ``runtime``'s spool."""

    def __init__(self, cfg: Config, sampler: Sampler, runtime: EdgeRuntime, *,
                 interval_s: float | None = None,
                 monotonic: Callable[[], float] = time.monotonic) -> None:
        self.cfg = cfg
        self.sampler = sampler
        self.runtime = runtime
        self.interval_s = interval_s or cfg.edge.node.interval_s
        if not self.interval_s > 0:
            raise ConfigError(f"interval {self.interval_s!r}: seconds, over 0")
        self._monotonic = monotonic
        self.intervals = 0
        self.published = 0
        self.lost = 0
        self.skipped_ticks = 0
        self._samples = metrics.NODE_SAMPLES_PUBLISHED.labels(cluster=cfg.cluster)

    def sample_once(self) -> list[dict[str, Any]]:
        """Sample every job once and spool its record; the payloads."""
        cpu0 = time.thread_time()
        result = self.sampler.sample()
        self._count(result)
        records = [record_of(self.cfg.cluster, p) for p in result.payloads]
        if records:
            try:
                self.runtime.publish_many(records)
            except SpoolError as e:
                self.lost += len(records)
                logger.warning("%d node samples not spooled (the next interval's counters "
                               "include them): %s", len(records), e)
            else:
                self.published += len(records)
                self._samples.inc(len(records))
        self.intervals += 1
        metrics.NODE_INTERVAL_CPU.observe(time.thread_time() - cpu0)
        return result.payloads

    @staticmethod
    def _count(result: Interval) -> None:
        for reader in ("cgroup-v1", "cgroup-v2", "procs"):
            metrics.NODE_JOBS.labels(reader=reader).set(result.jobs.get(reader, 0))
        if result.error_count:
            metrics.NODE_READ_ERRORS.inc(result.error_count)

    def loop(self, stop: threading.Event) -> None:
        """Sample at start + k x interval until ``stop`` is set (the spool's drainer is
        the caller's: see :meth:`run`)."""
        start = self._monotonic()
        tick = 0
        while not stop.is_set():
            self.sample_once()
            elapsed = self._monotonic() - start
            due = math.floor(elapsed / self.interval_s) + 1
            if due > tick + 1:
                self.skipped_ticks += due - tick - 1
                logger.warning("node sample took %.1f s, past %d tick(s) of %g s: skipped",
                               elapsed - tick * self.interval_s, due - tick - 1,
                               self.interval_s)
            tick = max(tick + 1, due)
            stop.wait(max(0.0, start + tick * self.interval_s - self._monotonic()))

    def run(self, stop: threading.Event, *, stop_timeout: float = 10.0) -> None:
        """The drainer and :meth:`loop` until ``stop``; then ``stop_timeout`` seconds for
        the records in flight."""
        self.runtime.start()
        try:
            self.loop(stop)
        finally:
            self.runtime.stop(stop_timeout)

    def deliver(self, timeout: float) -> int:
        """Run the drainer until the spool is empty or ``timeout`` passed; the records
        still waiting (sent by the next start)."""
        self.runtime.start()
        deadline = self._monotonic() + timeout
        try:
            while self.runtime.spool.depth() and self._monotonic() < deadline:
                time.sleep(0.05)
            return self.runtime.spool.depth()
        finally:
            self.runtime.stop()


def print_payloads(sampler: Sampler, write: Callable[[str], Any]) -> Sequence[dict[str, Any]]:
    """One sample of every job, each payload a JSON line through ``write`` (no spool)."""
    result = sampler.sample()
    for payload in result.payloads:
        write(jsontext.dumps_text(payload))
    return result.payloads
