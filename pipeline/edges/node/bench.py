"""What one interval of the node edge costs: CPU seconds and resident memory of the
sampling process, with real jobs' processes on the node (issue 33's goal: at most 20 ms
of CPU per interval and 40 MiB at 64 jobs and 2,000 processes).

:func:`measure` starts the processes itself, ``sleep`` children each with the
``SLURM_JOB_ID`` of one of the jobs, as slurmstepd starts tasks, and samples the whole
node through the sampler the daemon runs by default (cgroups, then processes, GPUs
through NVML where there are any), each payload encoded as the daemon encodes it. The
spool's write (one SQLite transaction per interval) is not in the figures. The first
interval reads every new process's environment once; the others are what a node pays
every interval, reported apart.
"""

from __future__ import annotations

import os
import random
import shutil
import statistics
import time
from pathlib import Path
from typing import Any

from pipeline.core import jsontext
from pipeline.edges.node.cgroups import CgroupReader
from pipeline.edges.node.gpus import GpuJobs, GpuReader
from pipeline.edges.node.pids import PidJobs
from pipeline.edges.node.procs import ProcReader
from pipeline.edges.node.sampler import Sampler

__all__ = ["measure", "spawn_jobs"]

MiB = 1 << 20


def _status_kib(key: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1])
    return 0


def spawn_jobs(jobs: int, processes: int, seconds: int = 3600) -> tuple[list[str], list[int]]:
    """``processes`` sleeping children spread round-robin over ``jobs`` Slurm job ids (of
    a range no real job of this host is likely to have); (job ids, pids). The caller
    kills them."""
    sleep = shutil.which("sleep")
    if sleep is None:
        raise RuntimeError("no sleep executable on PATH")
    base = random.randint(10**8, 10**9 - jobs - 1)
    ids = [str(base + j) for j in range(jobs)]
    pids: list[int] = []
    try:
        for i in range(processes):
            env = {"PATH": os.environ.get("PATH", ""), "SLURM_JOB_ID": ids[i % jobs]}
            pids.append(os.posix_spawn(sleep, ["sleep", str(seconds)], env))
    except BaseException:
        reap(pids)
        raise
    return ids, pids


def reap(pids: list[int]) -> None:
    """Kill and wait for the children :func:`spawn_jobs` started."""
    for pid in pids:
        try:
            os.kill(pid, 9)
        except ProcessLookupError:
            pass
    for pid in pids:
        try:
            os.waitpid(pid, 0)
        except ChildProcessError:
            pass


def measure(jobs: int, processes: int, intervals: int) -> dict[str, Any]:
    """Sample a node running ``processes`` processes of ``jobs`` jobs ``intervals`` times
    (at least 2); CPU seconds per interval (first, and the others' median and max) and the
    sampler process's resident memory (MiB: now, its high-water mark, and what the
    sampler added to what the process had before it)."""
    if jobs < 1 or processes < jobs or intervals < 2:
        raise ValueError("at least one job, a process per job and two intervals")
    rss_before = _status_kib("VmRSS")
    ids, pids = spawn_jobs(jobs, processes)
    try:
        time.sleep(0.2)  # past the exec: the environment a scan reads is the task's
        procs = ProcReader()
        sampler = Sampler([CgroupReader(), procs], "bench",
                          gpus=GpuJobs(GpuReader(), PidJobs(known=procs.job_of).job_of))
        cpu: list[float] = []
        found: list[int] = []
        wanted = set(ids)
        for _ in range(intervals):
            t0 = time.process_time()
            result = sampler.sample()
            for payload in result.payloads:
                jsontext.dumps(payload)
            cpu.append(time.process_time() - t0)
            found.append(sum(1 for p in result.payloads if p["job_id"] in wanted))
        rss, hwm = _status_kib("VmRSS"), _status_kib("VmHWM")
    finally:
        reap(pids)
    steady = cpu[1:]
    return {
        "jobs": jobs, "processes": processes, "intervals": intervals,
        "node_processes": procs.stats.processes,
        "jobs_found": min(found),
        "cpu_first_s": round(cpu[0], 6),
        "cpu_median_s": round(statistics.median(steady), 6),
        "cpu_max_s": round(max(steady), 6),
        "rss_mib": round(rss * 1024 / MiB, 1),
        "rss_hwm_mib": round(hwm * 1024 / MiB, 1),
        "rss_added_mib": round((rss - rss_before) * 1024 / MiB, 1),
    }
