"""What a node edge reads of one job, and the CPU the job used between two reads.

Every reader (:mod:`.cgroups`, :mod:`.procs`) returns, per job, one of three values:

- :class:`JobSample`: what the kernel has accounted for the job on this node so far;
- :class:`JobGone`: the job's cgroup or last process went away (the job ended here), the
  cue for the final record;
- :class:`SampleError`: what was there could not be read or parsed (a job id that does not
  parse, a file the kernel would never write so); the caller logs it or sends it to the
  DLQ and goes on with the other jobs.

Counters are cumulative (CPU seconds since the cgroup or the process began), so the CPU of
one interval is a difference of two samples: :func:`cpu_delta`, and :class:`CounterTracker`
to hold the previous sample of one job. A counter that went backwards means the counter
itself began again (the job's cgroup was re-created, a requeued job ran again on this
node): the interval's CPU is then the new value, flagged ``reset``, never a negative
number. A wall clock that stepped back gives no interval, flagged ``clock_back``, rather
than a negative or infinite rate; the CPU delta does not depend on the wall clock.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

__all__ = [
    "CounterTracker",
    "CpuDelta",
    "JobGone",
    "JobSample",
    "Reading",
    "SampleError",
    "Scheduler",
    "Source",
    "cpu_delta",
]

Scheduler = Literal["slurm", "flux"]
#: where a sample's figures come from: the job's cgroup (v1 or v2) or its processes
Source = Literal["cgroup-v1", "cgroup-v2", "procs"]


@dataclass(frozen=True)
class JobSample:
    """One job's usage on this node, cumulative, as the kernel accounts it.

    ``job_id`` is written as the scheduler writes it: Slurm's numeric string, Flux's F58
    with its ``ƒ`` prefix (``ƒ2bfE7Z1``), as flux-shell sets ``FLUX_JOB_ID``.
    ``mem_current_bytes`` is the memory charged now (cgroup) or the sum of the processes'
    resident sets (procs); ``mem_rss_bytes`` its anonymous part (``total_rss`` in v1,
    ``anon`` in v2) and ``mem_file_bytes`` its page cache, where the source tells them
    apart. ``mem_limit_bytes`` is None when there is no limit (never the kernel's 2**63).

    ``epoch`` names the counter ``cpu_usage_s`` belongs to, so that a consumer can tell a
    counter that began again from one that went on: ``cg<inode>`` of the cgroup directory
    the CPU is read from (kernfs gives a re-created cgroup a new inode), ``p<start>`` for
    the process path (the wall start, 2 decimals, of the earliest process of the job the
    reader saw when it first found the job). Within one epoch of one reader the counter
    does not go back, except when the kernel's own counter is reset (a write of 0 to
    ``cpuacct.usage``), which the sampler turns into an epoch of its own.
    """

    scheduler: Scheduler
    job_id: str
    source: Source
    sampled_at: float
    cpu_usage_s: float
    cpu_user_s: float
    cpu_system_s: float
    mem_current_bytes: int
    mem_peak_bytes: int | None
    mem_rss_bytes: int | None
    mem_file_bytes: int | None
    mem_limit_bytes: int | None
    processes: int
    epoch: str


@dataclass(frozen=True)
class JobGone:
    """The job's cgroup or its last process on this node is gone: the job ended here."""

    scheduler: Scheduler
    job_id: str
    source: Source
    sampled_at: float
    reason: str


@dataclass(frozen=True)
class SampleError:
    """Something of the job could not be read or parsed; ``path`` says where, ``reason``
    what, in words a person can act on. ``job_id`` is the raw text when it is the job id
    itself that does not parse."""

    scheduler: Scheduler
    job_id: str
    source: Source
    path: str
    reason: str


Reading = JobSample | JobGone | SampleError


@dataclass(frozen=True)
class CpuDelta:
    """The CPU a job used between two samples.

    ``cpu_s`` is never negative. ``interval_s`` is None on the first sample of a job (its
    ``cpu_s`` is then all the CPU accounted so far) and when the wall clock did not move
    forward (``clock_back`` when it went backwards).
    """

    cpu_s: float
    interval_s: float | None
    first: bool = False
    reset: bool = False
    clock_back: bool = False

    @property
    def cores(self) -> float | None:
        """CPU seconds per wall second over the interval (1.0 = one busy core), if known."""
        return None if self.interval_s is None else self.cpu_s / self.interval_s


def cpu_delta(previous: JobSample | None, current: JobSample) -> CpuDelta:
    """The CPU ``current`` adds to ``previous``, a sample of the same job (or None)."""
    if previous is None:
        return CpuDelta(cpu_s=current.cpu_usage_s, interval_s=None, first=True)
    if (previous.scheduler, previous.job_id) != (current.scheduler, current.job_id):
        raise ValueError(f"samples of two jobs: {previous.scheduler} {previous.job_id} "
                         f"and {current.scheduler} {current.job_id}")
    reset = current.cpu_usage_s < previous.cpu_usage_s
    cpu = current.cpu_usage_s if reset else current.cpu_usage_s - previous.cpu_usage_s
    elapsed = current.sampled_at - previous.sampled_at
    return CpuDelta(cpu_s=cpu, interval_s=elapsed if elapsed > 0 else None,
                    reset=reset, clock_back=elapsed < 0)


class CounterTracker:
    """The previous sample of one job, so that each new sample gives its interval's CPU."""

    def __init__(self) -> None:
        self._previous: JobSample | None = None

    def update(self, sample: JobSample) -> CpuDelta:
        delta = cpu_delta(self._previous, sample)
        self._previous = sample
        return delta
