"""One interval of the readers -> the ``node-usage`` payloads of the jobs on this node.

The readers are asked in order, cgroups first: a job is taken from the first reader that
found it and stays that reader's (its *owner*) until it ends, so that one job is never
counted by two readers, nor hops between two counters; a job whose cgroup cannot be read
from the start (a SampleError) is left to the process reader. Per job (scheduler, job id)
the sampler keeps what the payload carries beyond one reading:

- ``interval_s`` / ``cpu_interval_s``: the wall time and CPU since this edge's previous
  sample of the job (:class:`~.usage.CounterTracker`); null on the first sample and when
  the wall clock went back. The CPU is never negative: a new epoch, or a counter that went
  back within one, starts the new counter, whose value is the interval's CPU.
- ``epoch``: the reader's (``cg<inode>``, ``p<start>``); a counter that went back within
  one reader epoch (the kernel's counter reset in place) gets ``<epoch>.<n>``, so that the
  counter is monotone within every (epoch, run), as the fold takes it.
- ``mem_peak_bytes``: the kernel's peak where the reader has one, else the largest
  ``mem_bytes`` this edge saw in the epoch.
- ``gpu_busy_s`` / ``gpu_s``: the sums over the job's GPUs of utilization x interval and
  of the interval, since the epoch began in this edge run; ``gpu_idle_since``: when the
  job's GPUs were first all seen under 5 %, null while any is busier (or none is known).
  The utilization is NVML's of the moment of the sample, taken for the whole interval.
- ``final``: once, when the owner reports the job gone or stops finding it. The final
  record repeats the job's last figures (its counters, peaks and memory as last seen), with
  no process, no GPU, no interval, and the reason.

A reading the readers could not make (:class:`~.usage.SampleError`), and a reader that
raised, is one log line per job and reason while it lasts (again once it comes back after
a clean interval) and is counted; nothing raises out of :meth:`Sampler.sample`.
"""

from __future__ import annotations

import logging
import secrets
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from pipeline.edges.node.gpus import GpuReading
from pipeline.edges.node.pids import JobKey
from pipeline.edges.node.usage import (
    CounterTracker,
    JobGone,
    JobSample,
    Reading,
    SampleError,
    Source,
)

__all__ = ["IDLE_PCT", "PAYLOAD_VERSION", "Interval", "Reader", "Sampler"]

logger = logging.getLogger(__name__)

PAYLOAD_VERSION = 1
#: a GPU under this utilization (percent) is idle
IDLE_PCT = 5.0
#: the reason of a final record, by the kind of reader that owned the job
_GONE = {"cgroup-v1": "cgroup removed", "cgroup-v2": "cgroup removed",
         "procs": "no process left"}

GpuMap = Callable[[], Mapping[JobKey, Sequence[GpuReading]]]


class Reader(Protocol):
    """A reader of the jobs of this node (:class:`~.cgroups.CgroupReader`,
    :class:`~.procs.ProcReader`)."""

    def sample(self) -> list[Reading]: ...


@dataclass
class Interval:
    """What one :meth:`Sampler.sample` made: the payloads, this interval's read errors
    (``errors`` of jobs, ``failures`` of whole readers or of the GPUs), and the jobs
    sampled per reader source."""

    payloads: list[dict[str, Any]]
    errors: list[SampleError]
    failures: list[str] = field(default_factory=list)
    jobs: dict[str, int] = field(default_factory=dict)

    @property
    def error_count(self) -> int:
        return len(self.errors) + len(self.failures)


@dataclass
class _Job:
    owner: int
    source: Source
    reader_epoch: str
    counter: CounterTracker
    last: JobSample
    resets: int = 0
    mem_max: int = 0
    gpu_busy_s: float = 0.0
    gpu_s: float = 0.0
    gpu_idle_since: float | None = None

    @property
    def epoch(self) -> str:
        return self.reader_epoch if not self.resets else f"{self.reader_epoch}.{self.resets}"


class Sampler:
    """The jobs of this node through ``readers`` (in order of precedence), as payloads.

    :param node: the node's name in every payload.
    :param gpus: each job's GPUs now, asked after the readers; None: no GPU.
    :param schedulers: the schedulers whose jobs are sampled; others' are left out.
    :param run: this edge process's id (random hex by default).
    """

    def __init__(self, readers: Sequence[Reader], node: str, *, gpus: GpuMap | None = None,
                 schedulers: Iterable[str] = ("slurm", "flux"), run: str | None = None,
                 clock: Callable[[], float] = time.time) -> None:
        self.readers = list(readers)
        self.node = node
        self.gpus = gpus
        self.schedulers = frozenset(schedulers)
        self.run = run or secrets.token_hex(6)
        self.errors_total = 0
        self._clock = clock
        self._jobs: dict[JobKey, _Job] = {}
        self._logged: set[tuple[str, ...]] = set()

    # -- one interval ------------------------------------------------------------------

    def sample(self) -> Interval:
        """Read every reader once; the payloads of this interval."""
        per_reader: list[list[Reading] | None] = []
        failures: list[str] = []
        for reader in self.readers:
            try:
                per_reader.append(reader.sample())
            except Exception as e:  # noqa: BLE001 - one reader's failure is not the edge's
                per_reader.append(None)
                failures.append(f"{type(reader).__name__} failed: {type(e).__name__}: {e}")
        gpus: Mapping[JobKey, Sequence[GpuReading]] = {}
        if self.gpus is not None:
            try:
                gpus = self.gpus()
            except Exception as e:  # noqa: BLE001 - the CPU figures go out all the same
                failures.append(f"GPUs not read: {type(e).__name__}: {e}")
        return self.take(per_reader, gpus, failures)

    def take(self, per_reader: Sequence[Sequence[Reading] | None],
             gpus: Mapping[JobKey, Sequence[GpuReading]],
             failures: Sequence[str] = ()) -> Interval:
        """Fold one interval's readings (per reader, in reader order; None for a reader
        that failed, whose jobs are then neither sampled nor ended) into payloads."""
        errors: list[SampleError] = []
        payloads: list[dict[str, Any]] = []
        jobs: dict[str, int] = {}
        claimed: set[JobKey] = set()
        found: set[JobKey] = set()
        for i, readings in enumerate(per_reader):
            for r in readings or ():
                key: JobKey = (r.scheduler, r.job_id)
                if isinstance(r, SampleError):
                    errors.append(r)
                    job = self._jobs.get(key)
                    if job is not None and job.owner == i:
                        found.add(key)  # there, not readable now: not ended
                    continue
                if r.scheduler not in self.schedulers:
                    continue
                job = self._jobs.get(key)
                if (job is not None and job.owner != i) or (job is None and key in claimed):
                    continue  # another reader's job
                claimed.add(key)
                if isinstance(r, JobGone):
                    if job is not None:
                        payloads.append(self._final(job, r.sampled_at))
                        del self._jobs[key]
                    continue
                found.add(key)
                payloads.append(self._sample(key, i, r, gpus.get(key, ())))
                jobs[r.source] = jobs.get(r.source, 0) + 1
        failed = {i for i, readings in enumerate(per_reader) if readings is None}
        now = self._clock()
        for key, job in list(self._jobs.items()):
            if key not in found and job.owner not in failed:
                payloads.append(self._final(job, now))
                del self._jobs[key]
        result = Interval(payloads, errors, list(failures), jobs)
        self._log(result)
        self.errors_total += result.error_count
        return result

    # -- per job -----------------------------------------------------------------------

    def _sample(self, key: JobKey, owner: int, s: JobSample,
                gpus: Sequence[GpuReading]) -> dict[str, Any]:
        job = self._jobs.get(key)
        fresh = job is None or s.epoch != job.reader_epoch
        if job is None:
            job = self._jobs[key] = _Job(owner, s.source, s.epoch, CounterTracker(), s)
        elif fresh:
            job.reader_epoch, job.resets = s.epoch, 0
        delta = job.counter.update(s)
        if delta.reset and not fresh:
            job.resets += 1
            fresh = True
        if fresh:
            job.mem_max, job.gpu_busy_s, job.gpu_s, job.gpu_idle_since = 0, 0.0, 0.0, None
        job.last = s
        job.mem_max = max(job.mem_max, s.mem_current_bytes)
        interval = delta.interval_s
        cpu = s.cpu_usage_s if fresh else delta.cpu_s
        known = [g.util_pct for g in gpus if g.util_pct is not None]
        if interval is not None:
            job.gpu_busy_s += sum(u / 100.0 * interval for u in known)
            job.gpu_s += interval * len(known)
        if known and len(known) == len(gpus) and all(u < IDLE_PCT for u in known):
            job.gpu_idle_since = job.gpu_idle_since or s.sampled_at
        else:
            job.gpu_idle_since = None
        return self._payload(job, s, sampled_at=s.sampled_at, interval_s=interval,
                             cpu_interval_s=None if interval is None else cpu,
                             processes=s.processes, gpus=[g.payload() for g in gpus],
                             final=False, reason=None)

    def _final(self, job: _Job, at: float) -> dict[str, Any]:
        return self._payload(job, job.last, sampled_at=at, interval_s=None,
                             cpu_interval_s=None, processes=0, gpus=[], final=True,
                             reason=_GONE[job.source])

    def _payload(self, job: _Job, s: JobSample, *, sampled_at: float,
                 interval_s: float | None, cpu_interval_s: float | None, processes: int,
                 gpus: list[dict[str, Any]], final: bool, reason: str | None
                 ) -> dict[str, Any]:
        return {
            "v": PAYLOAD_VERSION, "scheduler": s.scheduler, "job_id": s.job_id,
            "node": self.node, "reader": s.source, "sampled_at": sampled_at,
            "epoch": job.epoch, "run": self.run,
            "cpu_s": s.cpu_usage_s, "cpu_user_s": s.cpu_user_s,
            "cpu_system_s": s.cpu_system_s,
            "interval_s": interval_s, "cpu_interval_s": cpu_interval_s,
            "mem_bytes": s.mem_current_bytes,
            "mem_peak_bytes": s.mem_peak_bytes if s.mem_peak_bytes is not None
            else job.mem_max,
            "mem_rss_bytes": s.mem_rss_bytes, "mem_file_bytes": s.mem_file_bytes,
            "mem_limit_bytes": s.mem_limit_bytes, "processes": processes, "gpus": gpus,
            "gpu_busy_s": job.gpu_busy_s, "gpu_s": job.gpu_s,
            "gpu_idle_since": None if final else job.gpu_idle_since,
            "final": final, "reason": reason,
        }

    # -- errors ------------------------------------------------------------------------

    def _log(self, result: Interval) -> None:
        """One line per job and reason while the error lasts: the keys of this interval
        replace the last one's, so the memory is as large as the errors of one interval."""
        keys: set[tuple[str, ...]] = set()
        for e in result.errors:
            key = (e.scheduler, e.job_id, e.source, e.reason)
            if key not in self._logged and key not in keys:
                logger.warning("%s job %s not sampled (%s): %s [%s]", e.scheduler,
                               e.job_id, e.source, e.reason, e.path)
            keys.add(key)
        for failure in result.failures:
            if (failure,) not in self._logged and (failure,) not in keys:
                logger.warning("node sample incomplete: %s", failure)
            keys.add((failure,))
        self._logged = keys
