"""Three real jobs whose usage is known, on the Slurm test cluster, and what Slurm's own
accounting says of them (issue 33, section 4).

:func:`submit_usage_jobs` submits, as alice, a job keeping one core busy, a sleeping job and
one touching a known amount of memory against a larger ``--mem``, each on one CPU, all
ending after about ``run_s`` seconds. Usage is known only by construction (a busy loop uses
its core, a sleep none, ``bytes * n`` writes every page) and by Slurm's ``sstat`` (while
running) and ``sacct`` (after the end), the independent sources a node reader is checked
against: :func:`sstat_usage`, :func:`sacct_usage`, and :func:`agree` for the tolerance.

Where the jobs' cgroups are: the test cluster runs ``cgroup/v1`` (``cgroup.conf``), and
Debian's slurm-wlm is built with multiple-slurmd support, whose cgroup prefix is
``/slurm_<NodeName>`` (Slurm 22.05 ``xcgroup_create_slurm_cg`` substitutes ``%n`` in the
compiled-in ``/slurm_%n``; there is no cgroup.conf key for it), not ``/slurm``:
:func:`cgroup_roots` says so to the readers.
"""

from __future__ import annotations

import math
import pwd
import re
from dataclasses import dataclass
from pathlib import Path

from slurm_cluster import SlurmCluster

from pipeline.edges.node.cgroups import CgroupRoots

__all__ = [
    "SlurmUsage",
    "UsageJobs",
    "agree",
    "cgroup_roots",
    "job_cgroup",
    "parse_duration",
    "parse_size",
    "sacct_usage",
    "sstat_usage",
    "submit_usage_jobs",
    "tolerance",
]

MIB = 2**20
#: how often jobacct_gather samples the jobs' steps (``--acctg-freq=task=``): its default
#: (30 s) would leave a short job without MaxRSS and sstat's AveCPU far behind
ACCTG_FREQ_S = 1


@dataclass(frozen=True)
class UsageJobs:
    """The ids of the three jobs and what they were asked to do."""

    busy: str
    sleeping: str
    memory: str
    user: str
    run_s: int
    touched_mib: int
    asked_mib: int

    def by_name(self) -> dict[str, str]:
        return {"busy": self.busy, "sleeping": self.sleeping, "memory": self.memory}

    def ids(self) -> list[str]:
        return [self.busy, self.sleeping, self.memory]


def submit_usage_jobs(cluster: SlurmCluster, *, run_s: int = 20, touched_mib: int = 200,
                      asked_mib: int = 400, user: str = "alice") -> UsageJobs:
    """Submit the three jobs (one CPU each, sampled by jobacct_gather every second).

    The busy job is ``timeout`` around a shell loop (``|| true``: it ends COMPLETED, not
    with timeout's 124); the memory job allocates ``touched_mib`` MiB with ``bytes * n``,
    which writes every page, and sleeps with all of it resident until ``run_s``.
    """
    sampled = [f"--acctg-freq=task={ACCTG_FREQ_S}", "--ntasks=1", "--cpus-per-task=1"]
    busy = cluster.submit(f"timeout {run_s} sh -c 'while :; do :; done' || true",
                          user=user, name="usage-busy", extra=sampled)
    sleeping = cluster.submit(f"sleep {run_s}", user=user, name="usage-sleep", extra=sampled)
    memory = cluster.submit(
        f"python3 -c 'import time; t = time.monotonic(); b = bytes([1]) * ({touched_mib} * "
        f"2**20); time.sleep(max(0.0, {run_s} - (time.monotonic() - t)))'",
        user=user, name="usage-mem", extra=[*sampled, f"--mem={asked_mib}M"])
    return UsageJobs(busy, sleeping, memory, user, run_s, touched_mib, asked_mib)


# -- where the jobs' cgroups are ------------------------------------------------------------

def cgroup_roots(cluster: SlurmCluster) -> CgroupRoots:
    """The readers' roots for this cluster's slurmd: Debian's ``slurm_<NodeName>`` prefix."""
    return CgroupRoots(slurm_prefix=f"slurm_{cluster.spec.host}")  # as discovery finds it


def job_cgroup(roots: CgroupRoots, controller: str, user: str, job_id: str) -> Path:
    """``<mount>/<controller>/<prefix>/uid_<uid>/job_<id>``, where cgroup/v1 puts a job."""
    uid = pwd.getpwnam(user).pw_uid
    return roots.mount / controller / roots.slurm_prefix / f"uid_{uid}" / f"job_{job_id}"


# -- Slurm's accounting -----------------------------------------------------------------------

@dataclass(frozen=True)
class SlurmUsage:
    """One job's usage as Slurm accounts it. ``cpu_s``: sacct's TotalCPU (user + system of
    every step) or sstat's AveCPU of the batch step; ``max_rss_bytes``: the largest MaxRSS
    of its steps; ``elapsed_s``: sacct's Elapsed (None from sstat)."""

    cpu_s: float
    max_rss_bytes: int | None
    elapsed_s: float | None = None


_DURATION = re.compile(r"(?:(\d+)-)?(?:(\d+):)?(\d+):(\d+(?:\.\d+)?)")
_SIZE = re.compile(r"(\d+(?:\.\d+)?)([KMGTP]?)")
_UNITS = {"": 1, "K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40, "P": 2**50}


def parse_duration(text: str) -> float:
    """Seconds of a Slurm duration as sacct/sstat print it: ``[D-][HH:]MM:SS[.mmm]``
    (TotalCPU ``00:19.841``, Elapsed and AveCPU ``00:00:20``, ``1-02:03:04``)."""
    m = _DURATION.fullmatch(text.strip())
    if m is None:
        raise ValueError(f"not a Slurm duration: {text!r}")
    days, hours, minutes, seconds = m.groups()
    return (int(days or 0) * 86400 + int(hours or 0) * 3600 + int(minutes) * 60
            + float(seconds))


def parse_size(text: str) -> int | None:
    """Bytes of a Slurm size (MaxRSS ``207692K``, ``1.50M``); None when empty (a job's own
    line, which has no MaxRSS of its own)."""
    value = text.strip()
    if not value:
        return None
    m = _SIZE.fullmatch(value)
    if m is None:
        raise ValueError(f"not a Slurm size: {text!r}")
    return round(float(m.group(1)) * _UNITS[m.group(2)])


def sacct_usage(cluster: SlurmCluster, job_id: str) -> SlurmUsage | None:
    """``sacct -j <id> --format=JobID,TotalCPU,Elapsed,MaxRSS,State``: TotalCPU and Elapsed
    of the job's own line, the largest MaxRSS of its steps; None until the database has the
    job ended with its batch step's MaxRSS (slurmctld sends it to slurmdbd after the end)."""
    out = cluster.run(["sacct", "-a", "-j", job_id, "--format=JobID,TotalCPU,Elapsed,MaxRSS,"
                       "State", "-P", "-n"], check=False).stdout
    lines = [line.split("|") for line in out.splitlines() if line.count("|") == 4]
    job = next((f for f in lines if f[0] == job_id), None)
    steps = [parse_size(f[3]) for f in lines if f[0].startswith(f"{job_id}.")]
    rss = [r for r in steps if r is not None]
    if job is None or job[4].split()[0] in ("PENDING", "RUNNING") or not rss:
        return None
    return SlurmUsage(parse_duration(job[1]), max(rss), parse_duration(job[2]))


def sstat_usage(cluster: SlurmCluster, job_id: str) -> SlurmUsage | None:
    """``sstat -j <id>.batch --format=AveCPU,MaxRSS -P -n`` while the job runs (AveCPU is
    printed in whole seconds, truncated); None when sstat has nothing (yet, or any more)."""
    done = cluster.run(["sstat", "-j", f"{job_id}.batch", "--format=AveCPU,MaxRSS", "-P",
                        "-n"], check=False)
    fields = done.stdout.strip().split("|")
    if done.returncode != 0 or len(fields) != 2 or not fields[0]:
        return None
    return SlurmUsage(parse_duration(fields[0]), parse_size(fields[1]))


def tolerance(value: float, *, rel: float = 0.05, floor: float) -> float:
    """How far two measures of ``value`` may be apart: ``rel`` of it or ``floor``, whichever
    is larger (5 % of the value, or 2 s of CPU / 10 MiB of memory)."""
    return max(rel * abs(value), floor)


def agree(ours: float, theirs: float, *, floor: float, rel: float = 0.05) -> bool:
    """True when ``ours`` is within :func:`tolerance` of ``theirs`` (NaN never agrees)."""
    if math.isnan(ours) or math.isnan(theirs):
        return False
    return abs(ours - theirs) <= tolerance(theirs, rel=rel, floor=floor)
