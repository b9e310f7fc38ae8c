"""Which job a process is of, for the GPUs: NVML names the processes on each GPU by pid
only, and the jobs are known by their cgroups or their processes' environment.

A process in a job's cgroup says so in ``/proc/<pid>/cgroup``, in the names the readers
of :mod:`.cgroups` look for: a Slurm job's directory ``job_<id>`` under ``uid_<uid>``
(cgroup/v1) or under slurmstepd's scope (cgroup/v2), a Flux job shell's systemd unit
``[imp-]shell-<rank>-<f58>.service``. A process of a job without a cgroup is known to the
process reader, which read its environment (:meth:`.procs.ProcReader.job_of`): that is
asked second. A GPU process of neither (a system daemon's, a process the scan has not yet
seen) belongs to no job.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from pipeline.core.fluid import decode_jobid, f58_encode
from pipeline.edges.node.cgroups import _FLUX_UNIT
from pipeline.edges.node.usage import Scheduler

__all__ = ["JobKey", "PidJobs", "job_of_cgroup_file"]

JobKey = tuple[Scheduler, str]

_SLURM_JOB = re.compile(r"job_([0-9]+)")
_UID = re.compile(r"uid_[0-9]+")


def _job_of_path(path: str) -> JobKey | None:
    parts = path.split("/")
    for above, name in zip(parts, parts[1:], strict=False):
        slurm = _SLURM_JOB.fullmatch(name)
        if slurm and (_UID.fullmatch(above) or above.endswith("slurmstepd.scope")):
            return "slurm", slurm.group(1)
        flux = _FLUX_UNIT.fullmatch(name)
        if flux:
            try:
                return "flux", f58_encode(decode_jobid(flux.group(1)))
            except ValueError:
                return None
    return None


def job_of_cgroup_file(text: str) -> JobKey | None:
    """The job a ``/proc/<pid>/cgroup`` (``<id>:<controllers>:<path>`` lines, v1 and v2)
    places its process in, with the job id as the readers write it; None for none."""
    for line in text.splitlines():
        _, _, path = line.partition(":")
        _, _, path = path.partition(":")
        job = _job_of_path(path)
        if job is not None:
            return job
    return None


class PidJobs:
    """``job_of(pid)``: the cgroup the process is in, else what ``known`` (the process
    reader's last scan) says."""

    def __init__(self, proc_root: str = "/proc",
                 known: Callable[[int], JobKey | None] | None = None) -> None:
        self.proc_root = proc_root
        self.known = known

    def job_of(self, pid: int) -> JobKey | None:
        try:
            with open(f"{self.proc_root}/{pid}/cgroup") as fh:
                job = job_of_cgroup_file(fh.read())
        except (OSError, UnicodeDecodeError):
            job = None  # gone, or in another pid namespace than NVML's
        if job is None and self.known is not None:
            job = self.known(pid)
        return job
