"""A synthetic but realistic cluster workload, seeded, with its own ground truth.

It produces the raw records real sources send — Flux job-manager journal responses (one
event per response, jobspec on ``submit``, R on ``alloc``), and for Slurm a pending
``squeue --json`` document at submission, PrologSlurmctld/EpilogSlurmctld environments and
the jobcomp record at the end — for a mix of queues, banks, users, job sizes, waits and
outcomes (completed, failed, timeouts, cancellations pending and running, node failures,
out-of-memory, exceptions), in time order. ``truth`` says what every job's document must
end up as; the demo, the benchmark and the end-to-end tests check the index against it.

Jobs wait for a mix of reasons (``pending_reason``): Slurm jobs are polled pending with
Priority, Resources, Dependency or JobHeldUser, and a job that waits long enough is
polled again half-way with the next reason along its way (held or dependent -> Priority,
Priority -> Resources); some Flux jobs are submitted held (urgency 0) or with a
dependency, released half-way through their wait. The truth's ``pending_reason`` is what a
final document can be checked for: the last reason of a job cancelled while pending (Flux:
``held`` or ``dependency`` when never released, else ``resources``), None for every job
that ran. The reasons come from their own random stream, so a seed's jobs, times and
outcomes are the same as before reasons were added.

Slurm jobs that ran are reported by accounting after their end too: a ``sacct --json``
document (data_parser v0.0.44, Slurm 25.11) whose steps carry usage (user and system CPU
times, MaxRSS in ``tres.requested.max``, ``gres/gpuutil`` in ``tres.requested.average``
for most GPU jobs) drawn for a usage profile (``USAGE_PROFILES``: efficient, idle, memory
heavy; out-of-memory jobs near their memory). The truth has the ``cpu_eff_pct``,
``mem_max_pct`` and ``gpu_util_pct`` those steps give (None where there is no usage:
Flux, jobs that never ran, GPU jobs without gpuutil accounting). Usage comes from its own
random stream as well: the jobs themselves are unchanged.

While they run, jobs of both schedulers are sampled on each of their nodes as the node
edge (``jobstream edge node``) samples them: one ``node-usage`` record per job per node
every ``usage_interval_s`` (of the jobs' own time: scaled by ``time_scale`` like every
wait and run) and a final one at the end, with the levels of the job's usage profile
(a Slurm job's are those its sacct steps state; a Flux job draws its own, and its GPUs
may sit idle whatever its CPU does). The truth says what the fold makes of them
(``usage_source``, ``usage_nodes``): a Flux job's final ``cpu_eff_pct``, ``mem_max_pct``
and ``gpu_util_pct`` come from its samples, computed here from the very payloads sent
with the definitions of ``schemas/README.md`` (CPU over run_s x ncores, peak over the
node's limit, GPU-busy over GPU seconds); a Slurm job keeps sacct's. The samples draw
from a stream of their own and do not count towards Flux ids or tie order, so a seed's
other records are unchanged; ``usage_interval_s=None`` sends none (the benchmark's feed).

A centre always has jobs running when its monitoring begins, and some still run when one
looks: ``long_jobs`` (off by default; the demo and the dashboards' check turn it on) adds
that many (``LONG_JOBS``: Flux and Slurm, mostly idle, near their memory limit, with GPUs
idle since their start, busy) which started 1 to 2 hours before ``start`` (real hours,
not scaled: the GPU-idle panel's 15 minutes pass whatever ``time_scale``) and never end.
What the edges deliver of their past comes first, due at ``start`` with the times it
states (the Flux journal's backlog when the edge connects; the Slurm poller's first
``squeue``, the job running); then their node samples, every interval on the same
clock as every other job's, from ``start`` to the last record of the other jobs, none
final (the edges sampled them all along: counters, idle streaks and intervals count from
the jobs' start). The truth says they run: state ``running``, no result and no final usage
(``usage_source`` None), ``usage_nodes`` their nodes. They draw from a stream of their
own, are not counted (Flux ids, ties) and come after every other job is drawn, so the
other records are the same with or without them; their Slurm ids are the ones just below
those of jobs submitted from ``start`` on (Slurm numbers jobs in sequence, and a later run
of the generator on the same stack starts above them), their Flux ids carry their submit
time.

Every record comes with the ids of the events it holds (:meth:`Workload.event_ids`),
computed with :func:`~pipeline.core.model.make_event_id` from what the generator put in the
record, not by parsing it: the parts each parser hashes are the ids' contract (stored
downstream, never changed), so a parser that drops or renames an event leaves one of these
ids missing instead of agreeing with itself.

The record shapes are :mod:`pipeline.tooling.workload_records`'s. The rest is one class
because every job, Flux or Slurm, is drawn from the same random streams and clock, in the
order the seed fixes; splitting the schedulers apart would only pass that state around.
"""

from __future__ import annotations

import hashlib
import heapq
import json
import random
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from pipeline.core.fluid import f58_encode
from pipeline.core.model import job_key, make_event_id
from pipeline.tooling.workload_nodes import drained_after_jobs, node_records
from pipeline.tooling.workload_records import (
    GeneratedRecord,
    NodeJob,
    UsageLevels,
    env_bytes,
    flux_jobspec,
    flux_journal_response,
    flux_pending,
    flux_r,
    hostlist_text,
    iso_time,
    node_usage_series,
    pick_weighted,
    sacct_step,
    slurm_job_env,
    slurm_number,
    squeue_pending,
    squeue_running,
    tres_entry,
)

__all__ = ["LONG_JOBS", "EventParts", "GeneratedRecord", "Workload", "WorkloadSpec"]

USERS = [("alice", 1001, "physics"), ("bob", 1002, "chem"), ("carol", 1003, "bio"),
         ("dave", 1004, "physics"), ("erin", 1005, "climate"), ("frank", 1006, "chem"),
         ("grace", 1007, "bio"), ("heidi", 1008, "climate")]
FLUX_QUEUES = {"batch": 24, "debug": 8}
SLURM_PARTITIONS = {"short": 16, "long": 32, "gpu": 8}
CORES_PER_NODE = 32
GPUS_PER_NODE = 4

#: Job ids grow with submit time from this instant (2026-01-01 UTC), as a real scheduler's
#: do, so that runs of the generator on one stack never reuse a job id: a reused id would
#: fold into the earlier job's state (Flux) or become a new incarnation of it (Slurm).
ID_EPOCH = 1_767_225_600
#: Slurm ids handed out per second of submit time (more jobs in a second take the next ids)
SLURM_IDS_PER_S = 10

#: outcome -> weight. On Flux, node_fail and oom are fatal exceptions of those types (the
#: fold refines flux-core's "failed" by them), and "exception" an exec exception (failed).
OUTCOMES = {"completed": 62, "failed": 12, "timeout": 5, "cancelled_pending": 5,
            "cancelled_running": 5, "node_fail": 3, "oom": 4, "exception": 4}

#: Slurm state_reason at a pending job's first poll -> weight, and the reason a second poll
#: half-way through a long enough wait shows (squeue's usual progression).
SLURM_REASONS = {"Priority": 45, "Resources": 30, "Dependency": 12, "JobHeldUser": 8,
                 "QOSMaxJobsPerUserLimit": 5}
SLURM_NEXT_REASON = {"Priority": "Resources", "Dependency": "Priority",
                     "JobHeldUser": "Priority", "QOSMaxJobsPerUserLimit": "Priority"}
#: A second poll only for waits at least this long (seconds, after time_scale)
SLURM_REPOLL_MIN_WAIT_S = 2.0
#: How Flux jobs start to wait -> weight: plain, submitted held (urgency 0) or dependent
FLUX_WAITS = {"plain": 80, "held": 10, "dependency": 10}

#: Usage profile of a Slurm job that ran -> weight, and its (CPU efficiency, peak memory
#: per node) ranges in percent: busy and right-sized, idle (under 10 % of both: the
#: "wasted" panels have jobs to show), or using most of its memory.
USAGE_PROFILES = {"efficient": 55, "idle": 20, "memory_heavy": 25}
_PROFILE_RANGES = {"efficient": ((60.0, 98.0), (15.0, 60.0)),
                   "idle": ((0.5, 9.5), (1.0, 9.0)),
                   "memory_heavy": ((35.0, 90.0), (75.0, 98.0))}
#: Share of GPU jobs whose steps state gres/gpuutil (the rest: a site without it)
GPU_UTIL_ACCOUNTED = 0.75
#: MiB of memory allocated per CPU (the squeue/jobcomp tres_req's mem=<cores x 2000>M)
MEM_PER_CPU_MB = 2000
#: seconds after the end at which the sacct poll reports a job
SACCT_DELAY_S = 2.0
#: The usage of a job without any (a job that never ran; Flux without node samples)
_NO_USAGE: dict[str, Any] = {"cpu_eff_pct": None, "mem_max_pct": None, "gpu_util_pct": None,
                             "usage_source": None, "usage_nodes": None}
#: The reader of a job's node samples -> weight: Slurm's per-job cgroups (v1, as on the
#: integration cluster's kernel, or v2); a Flux job's systemd unit cgroup under sdexec
#: (v2), else its processes, whose reader knows no memory limit
NODE_READERS = {"slurm": {"cgroup-v1": 50, "cgroup-v2": 50},
                "flux": {"cgroup-v2": 60, "procs": 40}}
#: Share of Flux GPU jobs whose GPUs sit idle, busy CPU or not
FLUX_GPU_IDLE = 0.3
#: Flux GPU utilization ranges (percent): idle GPUs stay under the edge's 5 % idle line
_FLUX_GPU_RANGES = {"idle": (0.0, 4.0), "busy": (40.0, 98.0)}
#: A procs reader's epoch: the earliest task starts this long after the job's start
_TASK_START_S = 0.01
_MIB = 2**20

#: The long jobs (``WorkloadSpec.long_jobs``), in this order: (scheduler, profile). On a
#: workload without that scheduler's clusters, the other's. Profiles, by the overview's
#: "now" panels they fill: ``idle`` (cores under 10 % busy), ``memory`` (memory at 90 %
#: or more of the cgroup limit), ``gpu_idle`` (every GPU under 5 % from the start), and
#: ``busy`` (CPU and GPUs busy: in none of them).
LONG_JOBS: tuple[tuple[str, str], ...] = (
    ("slurm", "idle"), ("slurm", "memory"), ("flux", "gpu_idle"), ("slurm", "gpu_idle"),
    ("flux", "busy"), ("flux", "idle"))
#: profile -> ranges of (CPU share, memory share of the allocation per node, GPU
#: utilization in percent, or None: no GPU). The samples scatter CPU by 5 % and memory by
#: 4 % around these, GPUs by 20 %: idle CPU stays under 8.4 %, memory over 91 % of the
#: limit, idle GPUs under 4.8 %.
_LONG_LEVELS: dict[str, tuple[tuple[float, float], tuple[float, float],
                              tuple[float, float] | None]] = {
    "idle": ((0.02, 0.08), (0.05, 0.2), None),
    "memory": ((0.4, 0.7), (0.95, 0.98), None),
    "gpu_idle": ((0.3, 0.6), (0.2, 0.5), (0.0, 4.0)),
    "busy": ((0.85, 0.98), (0.3, 0.6), (60.0, 95.0)),
}
#: how long before the workload's start the long jobs started, and waited before that
#: (seconds of real time: not scaled)
LONG_JOB_AGE_S = (3600.0, 7200.0)
LONG_JOB_WAIT_S = (30.0, 900.0)
#: their time limit (a day: beyond any workload's end)
LONG_JOB_LIMIT_MIN = 1440

#: What identifies one event, in the order ``make_event_id`` hashes it: cluster, scheduler,
#: job id, event name, timestamp (a float: the parsers read every time as one), then for
#: Slurm the source family and what else tells two facts of one moment apart (the reason).
#: A node sample (``usage``) is the exception, as its parser hashes it: cluster, scheduler,
#: job id, ``usage``, node, epoch, edge run, then its time (usage_contract).
EventParts = tuple[Any, ...]


def _flux_event(cluster: str, jobid: int, name: str, ts: float) -> EventParts:
    """A journal entry: the same entry live, in a backlog or an eventlog file is one fact,
    so its id has no format in it."""
    return (cluster, "flux", str(jobid), name, ts)


def _slurm_event(cluster: str, jobid: int, name: str, t: float, family: str,
                 *extra: Any) -> EventParts:
    """A Slurm fact as one source family states it (jobcomp, squeue, sacct, hook: each
    reports the same moment with its own detail, so each has its own id)."""
    return (cluster, "slurm", str(jobid), name, float(t), family, *extra)


@dataclass(frozen=True)
class WorkloadSpec:
    seed: int = 1
    jobs: int = 200
    #: mean job arrivals per second (over all clusters)
    rate: float = 5.0
    flux_clusters: tuple[str, ...] = ("flux-a",)
    slurm_clusters: tuple[str, ...] = ("slurm-b",)
    start: float = field(default_factory=lambda: float(int(time.time())))
    #: scales every wait and run time (0.1 = ten times faster lives)
    time_scale: float = 1.0
    #: seconds between a running job's node samples, in the jobs' own time (scaled by
    #: time_scale like their waits and runs: the node edge's default 30 s); None: none
    usage_interval_s: float | None = 30.0
    #: jobs running since before ``start`` and still at the end (``LONG_JOBS``, in turn)
    long_jobs: int = 0
    #: what the edges say of every cluster's nodes, drains, resumes and downs among it
    #: (:mod:`pipeline.tooling.workload_nodes`; its truth in ``Workload.node_truth``)
    node_events: bool = False


class Workload:
    """The records and the ground truth of one :class:`WorkloadSpec`."""

    def __init__(self, spec: WorkloadSpec) -> None:
        self.spec = spec
        self.truth: dict[str, dict[str, Any]] = {}
        #: ``cluster:node`` -> what its node document must say (``spec.node_events``)
        self.node_truth: dict[str, dict[str, Any]] = {}
        self._rng = random.Random(spec.seed)
        # a stream of its own: the main one, and so every seed's jobs, stay as they were
        self._reasons = random.Random(f"{spec.seed}:pending-reasons")
        self._usage = random.Random(f"{spec.seed}:usage")
        self._node_usage = random.Random(f"{spec.seed}:node-usage")
        self._long = random.Random(f"{spec.seed}:long-jobs")
        self._nodes = random.Random(f"{spec.seed}:nodes")
        #: (cluster, host) -> the times the Flux jobs on it were freed, for the node truth
        self._flux_frees: dict[tuple[str, str], list[float]] = {}
        self._heap: list[tuple[float, int, int, GeneratedRecord]] = []
        self._events: dict[GeneratedRecord, dict[str, EventParts]] = {}
        self._n = 0
        self._aux = 0
        self._slurm_ids: dict[str, int] = {}
        self._long_slurm_ids: dict[str, int] = {}
        self._build()

    def records(self) -> Iterator[GeneratedRecord]:
        """Every record, in time order (ties in creation order)."""
        heap = list(self._heap)
        heapq.heapify(heap)
        while heap:
            yield heapq.heappop(heap)[3]

    def __len__(self) -> int:
        return len(self._heap)

    def event_ids(self, records: Iterable[GeneratedRecord] | None = None
                  ) -> dict[str, EventParts]:
        """The id of every event ``records`` (default: all) hold -> what it is made of: the
        events indices' content once they went through the flow. KeyError for a record this
        workload did not generate (its events are not known here)."""
        out: dict[str, EventParts] = {}
        for rec in self.records() if records is None else records:
            try:
                out.update(self._events[rec])
            except KeyError:
                raise KeyError(f"a {rec.format} record of {rec.key} at {rec.time} is not "
                               "this workload's") from None
        return out

    # -- building ---------------------------------------------------------------------

    def _emit(self, rec: GeneratedRecord, events: Iterable[EventParts], *,
              counted: bool = True) -> None:
        """``events``: the parts of each event ``rec`` holds. ``counted=False`` for records
        added after the original ones (sacct): the count seeds Flux job ids and orders
        ties, so it must not see them, or every later job of a seed would change."""
        self._events[rec] = {make_event_id(*parts): parts for parts in events}
        if counted:
            self._n += 1
        else:
            self._aux += 1
        self._heap.append((rec.time, self._n, self._aux if not counted else 0, rec))

    def _build(self) -> None:
        rng, spec = self._rng, self.spec
        clusters = [("flux", c) for c in spec.flux_clusters] + \
                   [("slurm", c) for c in spec.slurm_clusters]
        t = spec.start
        for i in range(spec.jobs):
            t += rng.expovariate(spec.rate)
            scheduler, cluster = clusters[i % len(clusters)]
            outcome = rng.choices(list(OUTCOMES), weights=list(OUTCOMES.values()))[0]
            user, uid, bank = rng.choice(USERS)
            if scheduler == "flux":
                self._flux_job(cluster, t, outcome, user, uid, bank)
            else:
                self._slurm_job(cluster, t, outcome, user, uid, bank)
        # last: they sample up to the others' last record, and change none of them
        end = max((entry[0] for entry in self._heap), default=spec.start)
        for i in range(spec.long_jobs):
            self._long_job(i, end)
        if spec.node_events:  # after the long jobs: their nodes are never drained
            busy: dict[str, set[str]] = {}
            for want in self.truth.values():
                if "long_job_profile" in want:
                    busy.setdefault(want["cluster"], set()).update(want["nodelist"])
            records, self.node_truth = node_records(self._nodes, clusters, busy,
                                                    spec.start, end)
            drained_after_jobs(self.node_truth, self._flux_frees)
            for rec in records:
                self._emit(rec, (), counted=False)

    def _lifetimes(self, timelimit: float, outcome: str) -> tuple[float, float]:
        rng, scale = self._rng, self.spec.time_scale
        wait = rng.choice([rng.uniform(0.5, 5), rng.uniform(5, 60), rng.uniform(60, 600)])
        run = min(rng.lognormvariate(3.5, 1.0), timelimit * 0.95)
        if outcome == "timeout":
            run = timelimit
        if outcome in ("failed", "node_fail", "oom", "exception"):
            run = rng.uniform(0.5, 30)
        return max(wait * scale, 0.2), max(run * scale, 0.2)

    def _size(self, max_nodes: int) -> tuple[int, int, int]:
        rng = self._rng
        nodes = rng.choices([1, 1, 1, 2, 4, 8, 16], k=1)[0]
        nodes = min(nodes, max_nodes)
        cores = rng.choice([1, 4, 8, CORES_PER_NODE]) if nodes == 1 else nodes * CORES_PER_NODE
        gpus = 0
        return nodes, cores, gpus

    # -- Flux ---------------------------------------------------------------------------

    def _flux_job(self, cluster: str, t0: float, outcome: str, user: str, uid: int,
                  bank: str) -> None:
        rng = self._rng
        queue = rng.choice(list(FLUX_QUEUES))
        nodes, cores, gpus = self._size(FLUX_QUEUES[queue])
        if queue == "debug" and rng.random() < 0.5:
            gpus = nodes * rng.choice([1, 2])
        timelimit = float(rng.choice([60, 300, 900]))
        wait, run = self._lifetimes(timelimit, outcome)
        # FLUID: milliseconds since the instance started, above 22 bits of generator/sequence
        jobid = (int((t0 - ID_EPOCH) * 1000) + 1) << 22 | (self._n & 0x3FFFFF)
        name = rng.choice(["sim", "train", "analysis", "post", "mpi-run"])
        per_node_cores = max(cores // nodes, 1)
        jobspec = flux_jobspec(name, user, queue, bank, nodes, per_node_cores, gpus // nodes,
                               timelimit)
        cancelled_pending = outcome == "cancelled_pending"
        ta = t0 + wait
        events, reason = flux_pending(t0, ta, uid, jobid, cancelled_pending,
                                       pick_weighted(self._reasons, FLUX_WAITS))
        truth: dict[str, Any] = {"cluster": cluster, "scheduler": "flux", "job_id": str(jobid),
                                 "job_id_f58": f58_encode(jobid), "uid": uid, "bank": bank,
                                 "queue": queue, "job_name": name, "state": "done",
                                 "pending_reason": None, **_NO_USAGE}
        if cancelled_pending:
            events += [(ta, "exception", {"type": "cancel", "severity": 0, "userid": uid,
                                          "note": ""}), (ta + 0.01, "clean", None)]
            truth.update(result="cancelled", cancelled_before_start=True,
                         pending_reason=reason)
            self._flux_emit(cluster, jobid, events, jobspec, None, None)
            self.truth[job_key(cluster, str(jobid))] = truth
            return
        first_rank = rng.randrange(0, 64)
        hosts = [f"{cluster}-n{first_rank + i:03d}" for i in range(nodes)]
        r_v1 = flux_r(hosts, first_rank, per_node_cores, gpus // nodes, ta, timelimit)
        ts = ta + 0.05
        te = ts + run
        events += [(ta, "alloc", None), (ta + 0.01, "prolog-start", {"description": "prolog"}),
                   (ta + 0.04, "prolog-finish", {"description": "prolog", "status": 0}),
                   (ts, "start", None)]
        status, result, exit_code = 0, "completed", 0
        if outcome == "failed":
            exit_code = rng.choice([1, 2, 3, 127])
            status, result = exit_code << 8, "failed"
        elif outcome == "timeout":
            events.append((te, "exception", {"type": "timeout", "severity": 0,
                                             "note": "resource allocation expired"}))
            status, result = 9, "timeout"
        elif outcome == "cancelled_running":
            events.append((te, "exception", {"type": "cancel", "severity": 0, "userid": uid,
                                             "note": ""}))
            status, result = 15, "cancelled"
        elif outcome in ("node_fail", "oom", "exception"):
            kind = {"node_fail": "node-failure", "oom": "oom", "exception": "exec"}[outcome]
            events.append((te, "exception", {"type": kind, "severity": 0,
                                             "note": f"{kind} on {hosts[0]}"}))
            status = 9
            result = {"node_fail": "node_fail", "oom": "oom", "exception": "failed"}[outcome]
        events += [(te + 0.01, "finish", {"status": status}),
                   (te + 0.02, "epilog-start", {"description": "epilog"}),
                   (te + 0.03, "release", {"ranks": "all", "final": True}),
                   (te + 0.5, "epilog-finish", {"description": "epilog", "status": 0}),
                   (te + 0.51, "free", None), (te + 0.52, "clean", None)]
        truth.update(result=result, nnodes=nodes, ncores=per_node_cores * nodes,
                     ngpus=gpus, nodelist=hosts, cancelled_before_start=False)
        if status & 0x7F == 0:
            truth["exit_code"] = exit_code
        self._flux_emit(cluster, jobid, events, jobspec, ta, r_v1)
        for host in hosts:
            self._flux_frees.setdefault((cluster, host), []).append(round(te + 0.51, 6))
        if self.spec.usage_interval_s is not None:
            # the run as the fold times it: from the alloc to the finish or the first
            # fatal exception, as the journal states them
            t_end = min(round(t, 6) for t, name, ctx in events if name == "finish" or (
                name == "exception" and ctx is not None and ctx["severity"] == 0))
            series = self._node_samples(cluster, "flux", jobid, hosts, per_node_cores,
                                        gpus // nodes, None, self._flux_levels(outcome, gpus),
                                        ts, te)
            truth.update(_sampled_usage(series, begin=round(ta, 6), end=t_end,
                                        ncores=per_node_cores * nodes))
        self.truth[job_key(cluster, str(jobid))] = truth

    def _flux_levels(self, outcome: str, gpus: int) -> UsageLevels:
        """A Flux job's usage profile, drawn as a Slurm job's sacct usage is (same
        profiles, out-of-memory jobs near their memory), and its GPUs' level."""
        rng = self._node_usage
        profile = "memory_heavy" if outcome == "oom" else pick_weighted(rng, USAGE_PROFILES)
        (cpu_lo, cpu_hi), (mem_lo, mem_hi) = _PROFILE_RANGES[profile]
        if outcome == "oom":
            mem_lo, mem_hi = 96.0, 100.0
        cpu, mem = rng.uniform(cpu_lo, cpu_hi) / 100, rng.uniform(mem_lo, mem_hi) / 100
        idle = bool(gpus) and (profile == "idle" or rng.random() < FLUX_GPU_IDLE)
        return UsageLevels(cpu, mem, rng.uniform(*_FLUX_GPU_RANGES["idle" if idle
                                                                    else "busy"]))

    def _flux_emit(self, cluster: str, jobid: int,
                   events: list[tuple[float, str, dict[str, Any] | None]],
                   jobspec: dict[str, Any], t_alloc: float | None,
                   r_v1: dict[str, Any] | None, *, due: float | None = None,
                   counted: bool = True) -> None:
        """One journal response per event, due at the event's time or at ``due`` (a
        backlog the edge reads when it connects)."""
        for ts, name, context in events:
            at = round(ts, 6)
            response = flux_journal_response(jobid, at, name, context, jobspec, r_v1)
            self._emit(GeneratedRecord(ts if due is None else due, cluster, "flux",
                                       "flux-journal", job_key(cluster, str(jobid)),
                                       response),
                       [_flux_event(cluster, jobid, name, at)], counted=counted)

    # -- Slurm --------------------------------------------------------------------------

    def _slurm_job(self, cluster: str, t0: float, outcome: str, user: str, uid: int,
                   bank: str) -> None:
        rng = self._rng
        partition = rng.choice(list(SLURM_PARTITIONS))
        nodes, cores, gpus = self._size(SLURM_PARTITIONS[partition])
        if partition == "gpu":
            gpus = nodes * rng.choice([1, 2, 4])
        limit_min = rng.choice([1, 5, 15])
        wait, run = self._lifetimes(limit_min * 60.0, outcome)
        jobid = max(self._slurm_ids.get(cluster, 0) + 1,
                    1000 + int((t0 - ID_EPOCH) * SLURM_IDS_PER_S))
        self._slurm_ids[cluster] = jobid
        name = rng.choice(["sim", "train", "analysis", "post", "mpi-run"])
        qos = rng.choice(["normal", "normal", "high"])
        # Slurm's records have whole seconds
        t_submit = int(t0)
        t_start = int(t0 + wait)
        t_end = max(int(t0 + wait + run), t_start + 1)
        key = job_key(cluster, str(jobid))
        first = rng.randrange(0, 64)
        hosts = [f"{cluster}-c{first + i:03d}" for i in range(nodes)]
        tres_req = f"cpu={cores},mem={cores * 2000}M,node={nodes},billing={cores}" + \
                   (f",gres/gpu={gpus}" if gpus else "")
        truth: dict[str, Any] = {"cluster": cluster, "scheduler": "slurm", "job_id": str(jobid),
                                 "user": user, "uid": uid, "bank": bank, "queue": partition,
                                 "qos": qos, "job_name": name, "state": "done",
                                 "pending_reason": None, **_NO_USAGE}
        reason = pick_weighted(self._reasons, SLURM_REASONS)
        polls = [(t_submit, reason)]
        if wait >= SLURM_REPOLL_MIN_WAIT_S:
            # squeue polled again half-way, the job one step further along its wait
            reason = SLURM_NEXT_REASON.get(reason, reason)
            polls.append((t0 + wait / 2, reason))
        for t_poll, poll_reason in polls:
            # a pending job: its submit, its eligibility (at the submit time) and its reason
            self._emit(GeneratedRecord(float(t_poll), cluster, "slurm", "slurm-squeue", key,
                                       squeue_pending(cluster, jobid, name, user, uid, bank,
                                                       partition, qos, t_submit, limit_min,
                                                       nodes, cores, tres_req, poll_reason)),
                       [_slurm_event(cluster, jobid, "submit", t_submit, "squeue"),
                        _slurm_event(cluster, jobid, "eligible", t_submit, "squeue"),
                        _slurm_event(cluster, jobid, "reason", t_submit, "squeue",
                                     poll_reason)])
        state, exit_code, signal = {
            "completed": ("COMPLETED", 0, 0), "failed": ("FAILED", rng.choice([1, 2, 3]), 0),
            "timeout": ("TIMEOUT", 0, 0), "cancelled_pending": ("CANCELLED", 0, 0),
            "cancelled_running": ("CANCELLED", 0, 15), "node_fail": ("NODE_FAIL", 0, 0),
            "oom": ("OUT_OF_MEMORY", 0, 9), "exception": ("FAILED", 0, 9),
        }[outcome]
        result = {"COMPLETED": "completed", "FAILED": "failed", "TIMEOUT": "timeout",
                  "CANCELLED": "cancelled", "NODE_FAIL": "node_fail",
                  "OUT_OF_MEMORY": "oom"}[state]
        truth.update(result=result, exit_code=exit_code)
        started = outcome != "cancelled_pending"
        base_env = slurm_job_env(cluster, jobid, bank, user, uid, name, partition, hosts)
        if started:
            truth.update(nnodes=nodes, ncores=cores, ngpus=gpus, nodelist=hosts,
                         cancelled_before_start=False)
            self._emit(GeneratedRecord(float(t_start), cluster, "slurm", "slurm-hook", key,
                                       env_bytes({**base_env, "SLURM_SCRIPT_CONTEXT":
                                             "prolog_slurmctld",
                                             "JOBSTREAM_HOOK_TIME": f"{t_start:.3f}"})),
                       [_slurm_event(cluster, jobid, "alloc", t_start, "hook")])
            self._emit(GeneratedRecord(float(t_end), cluster, "slurm", "slurm-hook", key,
                                       env_bytes({**base_env, "SLURM_SCRIPT_CONTEXT":
                                             "epilog_slurmctld",
                                             "SLURM_JOB_EXIT_CODE":
                                             str(exit_code << 8 | signal),
                                             "SLURM_JOB_EXIT_CODE2": f"{exit_code}:{signal}",
                                             "JOBSTREAM_HOOK_TIME": f"{t_end:.3f}"})),
                       [_slurm_event(cluster, jobid, "end", t_end, "hook")])
        else:
            truth.update(cancelled_before_start=True, pending_reason=reason)
            t_start = t_end = t_submit + max(int(wait), 1)
        record = {
            "jobid": jobid, "username": user, "user_id": uid, "groupname": user,
            "group_id": uid, "@start": iso_time(t_start), "@end": iso_time(t_end),
            "elapsed": t_end - t_start if started else 0, "partition": partition,
            "alloc_node": "login1", "nodes": hostlist_text(hosts) if started else "",
            "total_cpus": cores if started else 0, "total_nodes": nodes if started else 0,
            "derived_ec": "0:0", "exit_code": f"{exit_code}:{signal}", "state": state,
            "cpu_hours": cores * (t_end - t_start) / 3600 if started else 0.0,
            "@submit": iso_time(t_submit), "@eligible": iso_time(t_submit),
            "@queue_wait": t_start - t_submit, "work_dir": f"/home/{user}/{name}",
            "cluster": cluster, "qos": qos, "time_limit": limit_min * 60, "job_name": name,
            "tres_req": tres_req, "account": bank,
            "script": f"#!/bin/bash\nsrun {name}\n",
        }
        if started:
            record["tres_alloc"] = f"cpu={cores},node={nodes},billing={cores}" + \
                                   (f",gres/gpu={gpus}" if gpus else "")
        # submit and eligible (@eligible is the submit time), the start of a job that ran
        # (one cancelled pending has no nodes), and the end
        moments = [("submit", t_submit), ("eligible", t_submit),
                   *([("start", t_start)] if started else []), ("end", t_end)]
        self._emit(GeneratedRecord(float(t_end) + 0.5, cluster, "slurm", "slurm-jobcomp", key,
                                   json.dumps(record, separators=(",", ":")).encode()),
                   [_slurm_event(cluster, jobid, event, t, "jobcomp") for event, t in moments])
        if started:
            job = {"job_id": jobid, "cluster": cluster, "name": name, "user": user,
                   "group": user, "account": bank, "partition": partition, "qos": qos,
                   "working_directory": f"/home/{user}/{name}", "nodes": hostlist_text(hosts),
                   "allocation_nodes": nodes, "restart_cnt": 0, "state": state,
                   "exit_code": (exit_code, signal), "limit_min": limit_min,
                   "times": (t_submit, t_start, t_end), "cores": cores, "gpus": gpus}
            payload, usage, levels = self._sacct(job, outcome)
            truth.update(usage, usage_source="sacct")
            # the job ran and ended, never requeued (restart_cnt 0)
            self._emit(GeneratedRecord(float(t_end) + SACCT_DELAY_S, cluster, "slurm",
                                       "slurm-sacct", key, payload),
                       [_slurm_event(cluster, jobid, event, t, "sacct") for event, t in
                        (("submit", t_submit), ("eligible", t_submit), ("start", t_start),
                         ("end", t_end))], counted=False)
            if self.spec.usage_interval_s is not None:
                # sampled by the node edges with the usage sacct reports after the end;
                # sacct's figures stay the final ones
                series = self._node_samples(cluster, "slurm", jobid, hosts, cores // nodes,
                                            gpus // nodes, cores * MEM_PER_CPU_MB // nodes,
                                            levels, float(t_start), float(t_end))
                truth["usage_nodes"] = len(series)
        self.truth[key] = truth

    # -- long jobs ----------------------------------------------------------------------

    def _long_job(self, i: int, end: float) -> None:
        """The ``i``-th long job (``LONG_JOBS``): running since 1 to 2 hours before the
        workload's start, its past delivered at the start, sampled up to ``end`` (the
        other jobs' last record) and still running then."""
        rng, spec = self._long, self.spec
        scheduler, profile = LONG_JOBS[i % len(LONG_JOBS)]
        clusters = {"flux": spec.flux_clusters, "slurm": spec.slurm_clusters}
        if not clusters[scheduler]:
            scheduler = "slurm" if scheduler == "flux" else "flux"
        if not clusters[scheduler]:
            return
        cluster = clusters[scheduler][i % len(clusters[scheduler])]
        user, uid, bank = rng.choice(USERS)
        cpu, mem, gpu = _LONG_LEVELS[profile]
        nodes = rng.choice([1, 2, 4])
        per_node_gpus = rng.choice([1, 2, 4]) if gpu else 0
        levels = UsageLevels(rng.uniform(*cpu), rng.uniform(*mem),
                             rng.uniform(*gpu) if gpu else 0.0)
        t_start = spec.start - rng.uniform(*LONG_JOB_AGE_S)
        t_submit = t_start - rng.uniform(*LONG_JOB_WAIT_S)
        name = "train" if per_node_gpus else rng.choice(["sim", "analysis", "mpi-run"])
        first = rng.randrange(0, 64)
        cores, gpus = nodes * CORES_PER_NODE, nodes * per_node_gpus
        if scheduler == "flux":
            jobid, hosts, begin, truth = self._long_flux(
                cluster, i, t_submit, t_start, first, nodes, per_node_gpus, name, user, uid,
                bank)
        else:
            jobid, hosts, begin, truth = self._long_slurm(
                cluster, int(t_submit), int(t_start), first, nodes, per_node_gpus, name, user,
                uid, bank)
        # running: no result, exit code or final usage yet, nor whether it was cancelled
        # before it started (the end says)
        truth.update(state="running", result=None, exit_code=None, pending_reason=None,
                     cancelled_before_start=None, nnodes=nodes, ncores=cores, ngpus=gpus,
                     nodelist=hosts, long_job_profile=profile, **_NO_USAGE)
        if spec.usage_interval_s is not None:
            # the node's memory limit: Slurm's cgroup, the job's cores' share; a Flux job's
            # systemd unit cgroup (a process reader would know no limit, and the memory
            # panel none of its memory)
            series = self._node_samples(
                cluster, scheduler, jobid, hosts, CORES_PER_NODE, per_node_gpus,
                CORES_PER_NODE * MEM_PER_CPU_MB if scheduler == "slurm" else None, levels,
                begin, end, rng=rng, since=spec.start, final=False,
                reader="cgroup-v2" if scheduler == "flux" else None)
            truth["usage_nodes"] = sum(1 for samples in series if samples) or None
        self.truth[job_key(cluster, str(jobid))] = truth

    def _long_flux(self, cluster: str, i: int, t_submit: float, t_start: float, first: int,
                   nodes: int, per_node_gpus: int, name: str, user: str, uid: int, bank: str
                   ) -> tuple[int, list[str], float, dict[str, Any]]:
        """A long Flux job's journal, every event of it due at the workload's start (the
        journal's backlog); its id, hosts, tasks' start and truth so far. Its id's
        generator bits count down from the top, where no other job's are."""
        jobid = (int((t_submit - ID_EPOCH) * 1000) + 1) << 22 | (0x3FFFFF - i)
        queue = "debug" if per_node_gpus else "batch"
        limit = float(LONG_JOB_LIMIT_MIN * 60)
        hosts = [f"{cluster}-n{first + k:03d}" for k in range(nodes)]
        events, _ = flux_pending(t_submit, t_start, uid, jobid, False, "plain")
        events += [(t_start, "alloc", None),
                   (t_start + 0.01, "prolog-start", {"description": "prolog"}),
                   (t_start + 0.04, "prolog-finish", {"description": "prolog", "status": 0}),
                   (t_start + 0.05, "start", None)]
        self._flux_emit(cluster, jobid, events,
                        flux_jobspec(name, user, queue, bank, nodes, CORES_PER_NODE,
                                     per_node_gpus, limit), t_start,
                        flux_r(hosts, first, CORES_PER_NODE, per_node_gpus, t_start, limit),
                        due=self.spec.start, counted=False)
        truth = {"cluster": cluster, "scheduler": "flux", "job_id": str(jobid),
                 "job_id_f58": f58_encode(jobid), "uid": uid, "bank": bank, "queue": queue,
                 "job_name": name}
        return jobid, hosts, t_start + 0.05, truth

    def _long_slurm(self, cluster: str, t_submit: int, t_start: int, first: int, nodes: int,
                    per_node_gpus: int, name: str, user: str, uid: int, bank: str
                    ) -> tuple[int, list[str], float, dict[str, Any]]:
        """A long Slurm job as the poller's first ``squeue`` shows it, due at the
        workload's start: running, with its submit and start times; its id (the ones just
        below those the start gives: Slurm numbers jobs in sequence), hosts, start and
        truth so far."""
        spec = self.spec
        below = self._long_slurm_ids[cluster] = self._long_slurm_ids.get(cluster, 0) + 1
        jobid = 1000 + int((spec.start - ID_EPOCH) * SLURM_IDS_PER_S) - below
        partition = "gpu" if per_node_gpus else "long"
        cores, gpus = nodes * CORES_PER_NODE, nodes * per_node_gpus
        hosts = [f"{cluster}-c{first + k:03d}" for k in range(nodes)]
        tres_req = f"cpu={cores},mem={cores * MEM_PER_CPU_MB}M,node={nodes},billing={cores}" \
            + (f",gres/gpu={gpus}" if gpus else "")
        self._emit(GeneratedRecord(spec.start, cluster, "slurm", "slurm-squeue",
                                   job_key(cluster, str(jobid)),
                                   squeue_running(cluster, jobid, name, user, uid, bank,
                                                  partition, "normal", t_submit, t_start,
                                                  LONG_JOB_LIMIT_MIN, hosts, cores, gpus,
                                                  tres_req)),
                   [_slurm_event(cluster, jobid, "submit", t_submit, "squeue"),
                    _slurm_event(cluster, jobid, "eligible", t_submit, "squeue"),
                    _slurm_event(cluster, jobid, "start", t_start, "squeue")], counted=False)
        truth = {"cluster": cluster, "scheduler": "slurm", "job_id": str(jobid), "user": user,
                 "uid": uid, "bank": bank, "queue": partition, "qos": "normal",
                 "job_name": name}
        return jobid, hosts, float(t_start), truth

    # -- node samples -------------------------------------------------------------------

    def _node_samples(self, cluster: str, scheduler: str, jobid: int, hosts: list[str],
                      cores: int, gpus: int, limit_mb: int | None, levels: UsageLevels,
                      begin: float, end: float, *, rng: random.Random | None = None,
                      reader: str | None = None, since: float | None = None,
                      final: bool = True) -> list[list[dict[str, Any]]]:
        """Emit the node-usage records of a job whose tasks run from ``begin`` to ``end``
        on ``hosts`` (``cores`` and ``gpus`` on each; ``limit_mb``: its memory per node,
        the cgroup limit; None: as much as its cores' share) and return each node's
        payloads. Not counted: Flux ids and tie order stay as they were. ``rng`` (default:
        the node samples' stream), ``reader`` (default: drawn), ``since`` and ``final``:
        the long jobs' (``node_usage_series``)."""
        spec = self.spec
        rng = self._node_usage if rng is None else rng
        assert spec.usage_interval_s is not None
        interval = spec.usage_interval_s * spec.time_scale
        if reader is None:
            reader = pick_weighted(rng, NODE_READERS[scheduler])
        base_mb = limit_mb if limit_mb is not None else cores * MEM_PER_CPU_MB
        key = job_key(cluster, str(jobid))
        seen_id = f58_encode(jobid) if scheduler == "flux" else str(jobid)
        out = []
        for host in hosts:
            epoch = (f"cg{rng.randrange(4026531840, 4026531840 + 2**24)}"
                     if reader != "procs" else f"p{begin + _TASK_START_S:.2f}")
            job = NodeJob(scheduler=scheduler, job_id=seen_id, node=host, reader=reader,
                          run=_edge_run(spec.seed, cluster, host), epoch=epoch, cores=cores,
                          gpus=gpus, mem_limit_bytes=base_mb * _MIB if reader != "procs"
                          else None, mem_base_bytes=base_mb * _MIB,
                          gpu_uuid=f"GPU-{_edge_run(spec.seed, cluster, host, 'gpu')}")
            series = node_usage_series(rng, job, levels, begin, end, interval, since=since,
                                       final=final)
            for sample in series:
                self._emit(GeneratedRecord(sample["sampled_at"], cluster, scheduler,
                                           "node-usage", key,
                                           json.dumps(sample, separators=(",", ":")).encode()),
                           [(cluster, scheduler, str(jobid), "usage", host, epoch, job.run,
                             float(sample["sampled_at"]))], counted=False)
            out.append(series)
        return out

    def _sacct(self, job: dict[str, Any], outcome: str
               ) -> tuple[bytes, dict[str, Any], UsageLevels]:
        """The sacct document of a Slurm job that ran, the usage figures its steps
        give (what parse_sacct computes from them, so the truth is exact up to float
        rounding) and the levels they were drawn at (its node samples', GPU utilization
        included where sacct does not account it)."""
        rng = self._usage
        profile = "memory_heavy" if outcome == "oom" else pick_weighted(rng, USAGE_PROFILES)
        (cpu_lo, cpu_hi), (mem_lo, mem_hi) = _PROFILE_RANGES[profile]
        if outcome == "oom":
            mem_lo, mem_hi = 96.0, 100.0
        t_submit, t_start, t_end = job["times"]
        elapsed, cores, gpus, nodes = t_end - t_start, job["cores"], job["gpus"], \
            job["allocation_nodes"]
        # CPU microseconds over all steps, split between the batch step (a little) and
        # the srun step (the rest), each into user and system time
        cpu_us = round(rng.uniform(cpu_lo, cpu_hi) / 100 * elapsed * cores * 1e6)
        batch_us = cpu_us // 50
        mem_node_mb = cores * MEM_PER_CPU_MB / nodes
        rss = int(rng.uniform(mem_lo, mem_hi) / 100 * mem_node_mb * 2**20)
        gpu_util = round(rng.uniform(*((0.0, 9.0) if profile == "idle" else (40.0, 98.0))))
        gpu_accounted = bool(gpus) and rng.random() < GPU_UTIL_ACCOUNTED
        steps = [sacct_step(f"{job['job_id']}.batch", "batch", elapsed, batch_us,
                             rss // 8, None),
                 sacct_step(f"{job['job_id']}.0", job["name"], elapsed, cpu_us - batch_us,
                             rss, gpu_util if gpu_accounted else None)]
        code, sig = job["exit_code"]
        alloc = [tres_entry("cpu", cores, 1), tres_entry("mem", cores * MEM_PER_CPU_MB, 2),
                 tres_entry("node", nodes, 4), tres_entry("billing", cores, 5)]
        if gpus:
            alloc.append({"type": "gres", "name": "gpu", "id": 1001, "count": gpus})
        record = {
            "job_id": job["job_id"], "cluster": job["cluster"], "name": job["name"],
            "user": job["user"], "group": job["group"], "account": job["account"],
            "partition": job["partition"], "qos": job["qos"],
            "working_directory": job["working_directory"], "nodes": job["nodes"],
            "allocation_nodes": nodes, "restart_cnt": 0,
            "array": {"job_id": 0, "task_id": slurm_number(None), "task": ""},
            "het": {"job_id": 0, "job_offset": slurm_number(None)},
            "state": {"current": [job["state"]], "reason": "None"},
            "exit_code": {"status": ["SIGNALED" if sig else "SUCCESS" if code == 0
                                     else "ERROR"],
                          "return_code": slurm_number(code),
                          "signal": {"id": slurm_number(sig or None), "name": ""}},
            "time": {"elapsed": elapsed, "submission": t_submit, "eligible": t_submit,
                     "start": t_start, "end": t_end, "suspended": 0,
                     "limit": slurm_number(job["limit_min"])},
            "required": {"CPUs": cores, "memory_per_cpu": slurm_number(MEM_PER_CPU_MB),
                         "memory_per_node": slurm_number(None)},
            "tres": {"allocated": alloc, "requested": alloc},
            "steps": steps,
        }
        doc = {"meta": {"plugin": {"type": "", "name": "",
                                   "data_parser": "data_parser/v0.0.44",
                                   "accounting_storage": "accounting_storage/slurmdbd"},
                        "slurm": {"version": {"major": "25", "micro": "7", "minor": "11"},
                                  "release": "25.11.7", "cluster": job["cluster"]}},
               "jobs": [record], "warnings": [], "errors": []}
        usage = {"cpu_eff_pct": 100.0 * (cpu_us / 1e6) / (elapsed * cores),
                 "mem_max_pct": 100.0 * (rss / 2**20) / mem_node_mb,
                 "gpu_util_pct": float(gpu_util) if gpu_accounted else None}
        levels = UsageLevels(usage["cpu_eff_pct"] / 100, usage["mem_max_pct"] / 100,
                             float(gpu_util))
        return json.dumps(doc, separators=(",", ":")).encode(), usage, levels


def _edge_run(seed: int, cluster: str, host: str, what: str = "run") -> str:
    """The run id of a node's edge process (random hex at its start; here the same for
    every job of the node in one workload)."""
    return hashlib.sha256(f"{seed}:{cluster}:{host}:{what}".encode()).hexdigest()[:6]


def _sampled_usage(series: list[list[dict[str, Any]]], *, begin: float, end: float,
                   ncores: int) -> dict[str, Any]:
    """The final usage of a run from ``begin`` (its allocation) to ``end`` as the fold
    must make it of the run's node samples (``series``: each node's, in time order), by
    schemas/README.md's definitions: per node its latest sample (one counter a node here:
    one epoch, one edge run), CPU summed over nodes over run_s x ncores, the largest
    node's peak over its limit, GPU-busy over GPU seconds. run_s in milliseconds, as the
    document's."""
    finals = [samples[-1] for samples in series]
    run_s = (round(end * 1000) - round(begin * 1000)) / 1000
    cpu = sum(s["cpu_s"] for s in finals)
    peaks = [100.0 * max(s["mem_peak_bytes"] or 0, s["mem_bytes"]) / s["mem_limit_bytes"]
             for s in finals if s["mem_limit_bytes"]]
    busy, gpu_s = sum(s["gpu_busy_s"] for s in finals), sum(s["gpu_s"] for s in finals)
    return {"cpu_eff_pct": 100.0 * cpu / (run_s * ncores) if run_s > 0 else None,
            "mem_max_pct": max(peaks, default=None),
            "gpu_util_pct": 100.0 * busy / gpu_s if gpu_s > 0 else None,
            "usage_source": "node", "usage_nodes": len(finals)}
