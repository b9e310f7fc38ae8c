"""The node readers on real Slurm jobs, checked against Slurm's own accounting (issue 33 §4).

The session's test cluster runs every job in cgroups of its own (``proctrack/cgroup``,
``task/cgroup`` with ``ConstrainCores`` and ``ConstrainRAMSpace``, ``jobacct_gather/cgroup``
under ``cgroup/v1``: ``tests/integration/slurm/``). Three jobs run at once as alice
(:mod:`slurm_usage`): one core kept busy, a sleep, 200 MiB touched against ``--mem=400M``.
While they run, the node edge's two readers, :class:`~pipeline.edges.node.cgroups.
CgroupReader` (their ``slurm_<node>/uid_<uid>/job_<id>`` cgroups) and
:class:`~pipeline.edges.node.procs.ProcReader` (their processes, by ``SLURM_JOB_ID``), read
them every half second, and ``sstat`` is asked once half-way; after the end ``sacct``.

Checked: each job is found where cgroup/v1 puts it, constrained to one core and to the
memory it was given; the CPU between two reads is a whole core for the busy job and
nothing for the sleeper; the memory job holds what it touched; and what the readers saw
agrees with sstat while running and with sacct after the end within 5 % of the value or
2 s of CPU / 10 MiB, whichever is larger. The measured differences are printed (terminal
summary, ``usage_*``) and written to ``<slurm root>/usage-figures.json``.
"""

from __future__ import annotations

import json
import math
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from slurm_cluster import SlurmCluster
from slurm_usage import (
    MIB,
    SlurmUsage,
    UsageJobs,
    agree,
    cgroup_roots,
    job_cgroup,
    sacct_usage,
    sstat_usage,
    submit_usage_jobs,
)
from waiting import wait_until

from pipeline.edges.node.cgroups import CgroupReader, CgroupRoots, JobCgroup, discover
from pipeline.edges.node.procs import ProcReader
from pipeline.edges.node.usage import JobGone, JobSample, SampleError, cpu_delta

pytest_plugins = ["conftest_slurm"]

RUN_S = 20
TOUCHED_MIB = 200
ASKED_MIB = 400
#: DefMemPerCPU of the test cluster's slurm.conf: the limit of a job that asks for none
DEFAULT_MEM_MIB = 100
#: how often the readers read (the edge's interval, shortened for the test)
POLL_S = 0.5
#: guards against a hang, never assertions about speed
START_WAIT_S = 60.0
SACCT_WAIT_S = 60.0
CPU_FLOOR_S = 2.0
MEM_FLOOR_B = 10 * MIB
READERS = ("cgroup", "procs")


@dataclass
class Observed:
    """What the readers and Slurm said of the three jobs."""

    jobs: UsageJobs
    roots: CgroupRoots
    #: reader -> job id -> its samples, in order
    samples: dict[str, dict[str, list[JobSample]]] = field(
        default_factory=lambda: defaultdict(lambda: defaultdict(list)))
    gone: dict[str, dict[str, list[JobGone]]] = field(
        default_factory=lambda: defaultdict(lambda: defaultdict(list)))
    errors: list[SampleError] = field(default_factory=list)
    #: job id -> its cgroup as discovered, and its cpuset.cpus, when first seen
    cgroups: dict[str, JobCgroup] = field(default_factory=dict)
    cpusets: dict[str, str] = field(default_factory=dict)
    #: job id -> (wall time, seconds its processes have waited for a CPU so far), each read
    waits: dict[str, list[tuple[float, float]]] = field(
        default_factory=lambda: defaultdict(list))
    #: job id -> (sstat, the cgroup reader's sample taken just before it)
    sstat: dict[str, tuple[SlurmUsage, JobSample]] = field(default_factory=dict)
    sacct: dict[str, SlurmUsage] = field(default_factory=dict)
    figures: dict[str, float] = field(default_factory=dict)

    def name(self, job_id: str) -> str:
        return next(n for n, j in self.jobs.by_name().items() if j == job_id)

    def of(self, reader: str, name: str) -> list[JobSample]:
        return self.samples[reader][self.jobs.by_name()[name]]


def _observe(cluster: SlurmCluster, jobs: UsageJobs, roots: CgroupRoots) -> Observed:
    """Read the jobs with both readers every POLL_S until both saw every job go, asking
    sstat once half-way through the run."""
    obs = Observed(jobs, roots)
    ids = set(jobs.ids())
    readers = {"cgroup": CgroupReader(roots), "procs": ProcReader(schedulers=("slurm",))}
    for job_id in jobs.ids():
        cluster.wait_for(job_id, {"RUNNING"}, timeout=START_WAIT_S)
    began = time.monotonic()
    while time.monotonic() < began + jobs.run_s + 60:
        for name, reader in readers.items():
            for r in reader.sample():
                if r.job_id not in ids:
                    continue
                if isinstance(r, JobSample):
                    obs.samples[name][r.job_id].append(r)
                elif isinstance(r, JobGone):
                    obs.gone[name][r.job_id].append(r)
                else:
                    obs.errors.append(r)
        if obs.samples["cgroup"].keys() - obs.cgroups.keys():
            for found in discover(roots):
                if isinstance(found, JobCgroup) and found.job_id in ids - obs.cgroups.keys():
                    obs.cgroups[found.job_id] = found
                    obs.cpusets[found.job_id] = _cpuset(roots, jobs.user, found.job_id)
        for job_id, where in obs.cgroups.items():
            waited = _waited_s(where.cpu_dir)
            if waited is not None:
                obs.waits[job_id].append((time.time(), waited))
        elapsed = time.monotonic() - began
        if len(obs.sstat) < len(ids) and jobs.run_s / 2 <= elapsed < jobs.run_s - 3:
            for job_id in ids - obs.sstat.keys():
                stat = sstat_usage(cluster, job_id)
                if stat is not None and obs.samples["cgroup"][job_id]:
                    obs.sstat[job_id] = (stat, obs.samples["cgroup"][job_id][-1])
        if all(obs.gone[name][j] for name in READERS for j in ids):
            break
        time.sleep(POLL_S)

    def accounted() -> bool:
        for job_id in ids - obs.sacct.keys():
            usage = sacct_usage(cluster, job_id)
            if usage is not None:
                obs.sacct[job_id] = usage
        return obs.sacct.keys() == ids

    wait_until(accounted, timeout=SACCT_WAIT_S, what="sacct of the three jobs", interval=0.5)
    return obs


def _cpuset(roots: CgroupRoots, user: str, job_id: str) -> str:
    """The job's ``cpuset.cpus``, or why there is none (no cpuset cgroup without
    ConstrainCores)."""
    path = job_cgroup(roots, "cpuset", user, job_id) / "cpuset.cpus"
    try:
        return path.read_text().strip()
    except OSError as e:
        return f"unreadable: {e.strerror}"


def _waited_s(cgroup: Path) -> float | None:
    """Seconds the processes of a cgroup's subtree have spent runnable but waiting for a CPU
    (``/proc/<pid>/task/<tid>/schedstat``, second field, ns), None once it is gone: what
    other work on the host took from the job's core."""
    total_ns = 0
    try:
        dirs = [cgroup, *(d for d in cgroup.rglob("*") if d.is_dir())]
        pids = [pid for d in dirs for pid in (d / "cgroup.procs").read_text().split()]
    except OSError:
        return None
    for pid in pids:
        for stat in Path("/proc", pid, "task").glob("*/schedstat"):
            try:
                total_ns += int(stat.read_text().split()[1])
            except (OSError, IndexError, ValueError):
                continue  # the task ended meanwhile: its wait is no longer counted
    return total_ns / 1e9


def _waited_between(waits: list[tuple[float, float]], a: JobSample, b: JobSample) -> float:
    """The job's wait for a CPU between two samples, from the wait reads nearest them."""
    def at(t: float) -> float:
        return min(waits, key=lambda w: abs(w[0] - t))[1]
    return at(b.sampled_at) - at(a.sampled_at)


def _mid_run(samples: list[JobSample], run_s: float) -> tuple[JobSample, JobSample]:
    """Two reads a good part of the run apart, away from its start and its end."""
    t0 = samples[0].sampled_at
    window = [s for s in samples if t0 + 0.25 * run_s <= s.sampled_at <= t0 + 0.75 * run_s]
    assert len(window) >= 2, f"{len(window)} reads in the middle of the run"
    return window[0], window[-1]


def _peak(samples: list[JobSample]) -> int:
    """The job's peak as the edge states it: the kernel's where it has one, else the
    largest memory seen."""
    return max(s.mem_peak_bytes if s.mem_peak_bytes is not None else s.mem_current_bytes
               for s in samples)


def _figures(obs: Observed) -> dict[str, float]:
    out: dict[str, float] = {}
    for name, job_id in obs.jobs.by_name().items():
        acct = obs.sacct.get(job_id)
        for reader in READERS:
            samples = obs.samples[reader][job_id]
            if not samples:
                continue
            key = f"usage_{name}_{reader}"
            a, b = _mid_run(samples, obs.jobs.run_s) if len(samples) > 4 else (samples[0],
                                                                               samples[-1])
            delta = cpu_delta(a, b)
            out[f"{key}_cpu_pct"] = math.nan if delta.cores is None else 100 * delta.cores
            if delta.interval_s and obs.waits[job_id]:
                waited = _waited_between(obs.waits[job_id], a, b)
                out[f"{key}_waited_pct"] = 100 * waited / delta.interval_s
                out[f"{key}_cpu_pct_of_runnable"] = (100 * delta.cpu_s
                                                     / (delta.interval_s - waited))
            out[f"{key}_cpu_s"] = samples[-1].cpu_usage_s
            out[f"{key}_peak_mib"] = _peak(samples) / MIB
            if acct is not None:
                out[f"{key}_cpu_minus_sacct_s"] = samples[-1].cpu_usage_s - acct.cpu_s
                if acct.max_rss_bytes is not None:
                    out[f"{key}_peak_minus_sacct_mib"] = (_peak(samples)
                                                          - acct.max_rss_bytes) / MIB
        if acct is not None:
            out[f"usage_{name}_sacct_cpu_s"] = acct.cpu_s
            out[f"usage_{name}_sacct_elapsed_s"] = acct.elapsed_s or math.nan
            out[f"usage_{name}_sacct_maxrss_mib"] = (acct.max_rss_bytes or 0) / MIB
        if job_id in obs.sstat:
            stat, sample = obs.sstat[job_id]
            out[f"usage_{name}_sstat_avecpu_s"] = stat.cpu_s
            out[f"usage_{name}_cgroup_cpu_minus_sstat_s"] = (math.floor(sample.cpu_usage_s)
                                                             - stat.cpu_s)
            if stat.max_rss_bytes is not None:
                out[f"usage_{name}_sstat_maxrss_mib"] = stat.max_rss_bytes / MIB
                out[f"usage_{name}_cgroup_peak_minus_sstat_mib"] = (
                    (sample.mem_peak_bytes or 0) - stat.max_rss_bytes) / MIB
                out[f"usage_{name}_cgroup_rss_minus_sstat_mib"] = (
                    (sample.mem_rss_bytes or 0) - stat.max_rss_bytes) / MIB
    return out


def _report(cluster: SlurmCluster, obs: Observed) -> None:
    for key, value in obs.figures.items():
        cluster.timings[key] = value
    (cluster.root / "usage-figures.json").write_text(json.dumps(
        {"jobs": obs.jobs.by_name(), "cpusets": obs.cpusets, "figures": obs.figures},
        indent=2) + "\n")
    for key, value in sorted(obs.figures.items()):
        print(f"{key} = {value:.3f}")


@pytest.fixture(scope="module")
def observed(slurm_cluster: SlurmCluster) -> Observed:
    t0 = time.monotonic()
    jobs = submit_usage_jobs(slurm_cluster, run_s=RUN_S, touched_mib=TOUCHED_MIB,
                             asked_mib=ASKED_MIB)
    obs = _observe(slurm_cluster, jobs, cgroup_roots(slurm_cluster))
    obs.figures = _figures(obs)
    obs.figures["usage_module_s"] = time.monotonic() - t0
    _report(slurm_cluster, obs)
    return obs


def _detail(obs: Observed) -> dict[str, Any]:
    """What to show when an assertion fails: the figures and the errors."""
    return {"figures": obs.figures, "errors": obs.errors}


def test_each_job_runs_in_a_cgroup_of_its_own_found_where_cgroup_v1_puts_it(
        observed: Observed) -> None:
    assert not observed.errors, _detail(observed)
    for name, job_id in observed.jobs.by_name().items():
        samples = observed.of("cgroup", name)
        assert len(samples) >= RUN_S, (name, len(samples))  # read all along, every POLL_S
        assert {s.source for s in samples} == {"cgroup-v1"}
        # <prefix>/uid_<alice>/job_<id> in the cpuacct and memory trees, removed at the end
        where = observed.cgroups[job_id]
        user = observed.jobs.user
        assert where.cpu_dir == job_cgroup(observed.roots, "cpuacct", user, job_id), name
        assert where.memory_dir == job_cgroup(observed.roots, "memory", user, job_id), name
        assert not where.cpu_dir.exists() and not where.memory_dir.exists(), name
        # the job's batch shell and its command were in it
        assert max(s.processes for s in samples) >= 2, name


def test_jobs_are_constrained_to_one_core_and_to_the_memory_they_were_given(
        observed: Observed) -> None:
    """ConstrainCores: the job's cpuset is the one CPU it was given; ConstrainRAMSpace: its
    memory limit is its allocation (``--mem``, else DefMemPerCPU)."""
    for name, job_id in observed.jobs.by_name().items():
        cpus = observed.cpusets[job_id]
        assert cpus.isdigit(), (name, cpus)
        limits = {s.mem_limit_bytes for s in observed.of("cgroup", name)}
        asked = ASKED_MIB if name == "memory" else DEFAULT_MEM_MIB
        assert limits == {asked * MIB}, (name, limits)


@pytest.mark.parametrize("reader", READERS)
def test_cpu_between_two_reads_is_a_core_for_the_busy_job_and_none_for_the_sleeper(
        observed: Observed, reader: str) -> None:
    """Between two reads half the run apart, the busy loop used its core whenever the host
    let it run: the time it waited on a run queue for other work on the host's two CPUs
    (another session's tests, this test itself) is left out, and printed (``waited_pct``);
    on an idle host it is about 0 and this is the whole interval."""
    fig = observed.figures
    busy = fig[f"usage_busy_{reader}_cpu_pct_of_runnable"]
    assert busy >= 80, _detail(observed)
    assert fig[f"usage_busy_{reader}_cpu_pct"] <= 105, _detail(observed)  # one CPU, not two
    assert fig[f"usage_busy_{reader}_waited_pct"] < 75, _detail(observed)  # a core, mostly
    assert fig[f"usage_sleeping_{reader}_cpu_pct"] < 5, _detail(observed)


@pytest.mark.parametrize("reader", READERS)
def test_the_memory_job_holds_what_it_touched(observed: Observed, reader: str) -> None:
    a, b = _mid_run(observed.of(reader, "memory"), RUN_S)
    for sample in (a, b):
        assert sample.mem_current_bytes >= TOUCHED_MIB * MIB, sample
        assert sample.mem_rss_bytes is not None and sample.mem_rss_bytes >= TOUCHED_MIB * MIB
    # and not much more: the interpreter and the batch shell
    assert _peak(observed.of(reader, "memory")) <= (TOUCHED_MIB + 40) * MIB
    assert _peak(observed.of(reader, "sleeping")) < 20 * MIB


@pytest.mark.parametrize("reader", READERS)
def test_each_reader_says_once_that_each_job_is_gone(observed: Observed, reader: str) -> None:
    for name, job_id in observed.jobs.by_name().items():
        gone = observed.gone[reader][job_id]
        assert len(gone) == 1, (name, gone)
        assert gone[0].sampled_at >= observed.samples[reader][job_id][-1].sampled_at


def test_the_cgroup_reader_agrees_with_sstat_while_the_jobs_run(observed: Observed) -> None:
    """sstat's AveCPU is in whole seconds, truncated, so the reader's CPU is compared
    truncated too; MaxRSS (the batch task's ``total_rss``, as jobacct_gather/cgroup reads
    it) against the reader's peak (``memory.max_usage_in_bytes``, page cache and kernel
    memory included) and its ``total_rss``."""
    assert observed.sstat.keys() == set(observed.jobs.ids()), observed.sstat
    for job_id, (stat, sample) in observed.sstat.items():
        name = observed.name(job_id)
        assert agree(math.floor(sample.cpu_usage_s), stat.cpu_s, floor=CPU_FLOOR_S), (
            name, sample.cpu_usage_s, stat)
        assert stat.max_rss_bytes is not None, name
        assert sample.mem_peak_bytes is not None and sample.mem_rss_bytes is not None
        assert agree(sample.mem_peak_bytes, stat.max_rss_bytes, floor=MEM_FLOOR_B), (
            name, sample, stat)
        assert agree(sample.mem_rss_bytes, stat.max_rss_bytes, floor=MEM_FLOOR_B), (
            name, sample, stat)
    busy, _ = observed.sstat[observed.jobs.busy]
    # asked half-way: the comparison is not of zeros (a loaded host may halve the core)
    assert busy.cpu_s >= 0.1 * RUN_S


@pytest.mark.parametrize("reader", READERS)
def test_the_readers_agree_with_sacct_after_the_end(observed: Observed, reader: str) -> None:
    """The reader's last sample before the job went (at most POLL_S before its end) against
    sacct's TotalCPU, and its peak against the largest step MaxRSS; the CPU efficiency over
    sacct's Elapsed within 5 points."""
    for name, job_id in observed.jobs.by_name().items():
        acct, samples = observed.sacct[job_id], observed.samples[reader][job_id]
        cpu = samples[-1].cpu_usage_s
        assert agree(cpu, acct.cpu_s, floor=CPU_FLOOR_S), (name, cpu, acct, _detail(observed))
        assert acct.max_rss_bytes is not None
        assert agree(_peak(samples), acct.max_rss_bytes, floor=MEM_FLOOR_B), (
            name, _peak(samples), acct, _detail(observed))
        assert acct.elapsed_s is not None and acct.elapsed_s >= RUN_S - 1, acct
        eff, sacct_eff = (100 * c / acct.elapsed_s for c in (cpu, acct.cpu_s))
        assert abs(eff - sacct_eff) <= 5, (name, eff, sacct_eff)
    # the comparison is of real work (a core, shared with what else the host runs) and the
    # touched memory
    assert observed.sacct[observed.jobs.busy].cpu_s >= 0.25 * RUN_S
    memory = observed.sacct[observed.jobs.memory].max_rss_bytes
    assert memory is not None and memory >= TOUCHED_MIB * MIB
