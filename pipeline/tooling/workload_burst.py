"""A job array submitted at once, as the edges would publish it (issue 35, the ``burst``
bench phase): pure builders, the records in publishing (time) order.

**Flux**: ``flux submit --cc=1-N`` (or ``flux bulksubmit``) makes N jobs, one FLUID each;
each task is a job of its own in the job-manager journal, one response per event as
:class:`~pipeline.tooling.workload.Workload` writes its Flux jobs: ``submit`` (with the
jobspec), ``validate``, ``depend``, ``priority``, ``alloc`` (with R), ``start``. No
``prolog-start``/``prolog-finish``: a job-manager prolog is configured per site
(``job-manager.prolog``), and the burst is the six events the brief names. Submissions
come :data:`FLUX_SUBMIT_GAP_S` apart (job-ingest takes about a thousand a second), each
task allocated one core :data:`FLUX_ALLOC_AFTER_S` after its submit, packed
:data:`~pipeline.tooling.workload.CORES_PER_NODE` to a node.

**Slurm**: ``sbatch --array=1-N`` makes one array job; what the Slurm edge sees of it is
what the real 22.05 cluster showed for ``--array=1-3`` (tests/data/slurm/real-22.05, job
81: its tasks 1 and 2 got raw ids 82 and 83, the last task kept 81):

* the poller's ``squeue --json`` while it is pending: one meta record of the array
  (``array_job_id`` = its id, ``array_task_id`` null, ``array_task_string`` ``"1-N"``),
  waiting for ``Resources`` as the recorded pending array does;
* as the scheduler starts the tasks (:data:`SLURM_STARTS_PER_S` a second), each is split
  off with a raw job id of its own (task t < N: the array's id + t; task N keeps the
  array's id, so its document also holds the meta record's events) and PrologSlurmctld
  runs for it (``alloc``, with ``SLURM_ARRAY_*`` as in the recorded prolog);
* the next poll: every task running, ``array_job_id``/``array_task_id`` set.

Each task is a job document of its own (the key is the raw id), N per array. Nothing ends:
the phase measures how fast a burst of new jobs becomes searchable. Ids follow the
workload's clocks (``ID_EPOCH``), on clusters of their own, so the arrays never meet
the live feed's jobs.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pipeline.core.model import job_key
from pipeline.tooling.workload import (
    CORES_PER_NODE,
    ID_EPOCH,
    MEM_PER_CPU_MB,
    SLURM_IDS_PER_S,
    USERS,
)
from pipeline.tooling.workload_records import (
    GeneratedRecord,
    SqueueArray,
    env_bytes,
    flux_jobspec,
    flux_journal_response,
    flux_pending,
    flux_r,
    slurm_job_env,
    squeue_pending,
    squeue_running,
)

__all__ = ["FLUX_EVENTS", "SCHEDULERS", "SLURM_EVENTS", "burst_records", "flux_array",
           "slurm_array", "split_tasks"]

#: the events of one Flux task, in journal order
FLUX_EVENTS = ("submit", "validate", "depend", "priority", "alloc", "start")
#: the events of one Slurm task (the meta record's submit and eligible are task N's too)
SLURM_EVENTS = ("submit", "eligible", "reason", "alloc", "start")
SCHEDULERS = ("flux", "slurm", "both")

FLUX_SUBMIT_GAP_S = 0.001
FLUX_ALLOC_AFTER_S = 0.1
#: start after alloc, as the workload's Flux jobs (without their prolog)
_FLUX_START_AFTER_S = 0.05
SLURM_STARTS_PER_S = 2000
#: the poll that sees the tasks running comes this long after the last one started
SLURM_POLL_AFTER_S = 1.0
#: the task's script, its queue and limit (minutes)
_NAME = "array-task"
_FLUX_QUEUE = "batch"
_SLURM_PARTITION = "short"
_LIMIT_MIN = 15


def split_tasks(tasks: int, scheduler: str) -> dict[str, int]:
    """Tasks per scheduler: all of them on one, or for ``both`` half each (Flux the odd
    one): ``tasks`` stays the burst's size, whichever schedulers take it."""
    if scheduler not in SCHEDULERS:
        raise ValueError(f"scheduler: {scheduler!r} is not one of {', '.join(SCHEDULERS)}")
    if scheduler != "both":
        return {scheduler: tasks}
    return {"flux": tasks - tasks // 2, "slurm": tasks // 2}


def flux_array(cluster: str, tasks: int, t0: float, *, user_index: int = 0
               ) -> list[GeneratedRecord]:
    """The journal responses of ``tasks`` Flux jobs submitted from ``t0`` on, in time order."""
    user, uid, bank = USERS[user_index % len(USERS)]
    limit = _LIMIT_MIN * 60.0
    jobspec = flux_jobspec(_NAME, user, _FLUX_QUEUE, bank, 1, 1, 0, limit)
    out: list[tuple[float, int, GeneratedRecord]] = []
    for i in range(tasks):
        t_submit = t0 + i * FLUX_SUBMIT_GAP_S
        # FLUID: milliseconds since the instance started, above the 22 bits of sequence
        jobid = (int((t_submit - ID_EPOCH) * 1000) + 1) << 22 | (i & 0x3FFFFF)
        ta = t_submit + FLUX_ALLOC_AFTER_S
        node, core = divmod(i, CORES_PER_NODE)
        r_v1 = flux_r([f"{cluster}-n{node:04d}"], node, 1, 0, ta, limit, first_core=core)
        events: list[tuple[float, str, dict[str, Any] | None]]
        events, _ = flux_pending(t_submit, ta, uid, jobid, False, "plain")
        events += [(ta, "alloc", None), (ta + _FLUX_START_AFTER_S, "start", None)]
        key = job_key(cluster, str(jobid))
        for ts, name, context in events:
            at = round(ts, 6)
            payload = flux_journal_response(jobid, at, name, context, jobspec, r_v1)
            out.append((at, len(out), GeneratedRecord(at, cluster, "flux", "flux-journal",
                                                      key, payload)))
    return [rec for _, _, rec in sorted(out)]


def slurm_array(cluster: str, tasks: int, t0: float, *, user_index: int = 0
                ) -> list[GeneratedRecord]:
    """What the Slurm edge publishes of one ``tasks``-task array submitted at ``t0``: the
    pending meta record, each task's prolog, each task running, in time order."""
    user, uid, bank = USERS[user_index % len(USERS)]
    array_id = 1000 + int((t0 - ID_EPOCH) * SLURM_IDS_PER_S)
    t_submit = int(t0)
    tres_req = f"cpu=1,mem={MEM_PER_CPU_MB}M,node=1,billing=1"
    key = job_key(cluster, str(array_id))
    out = [GeneratedRecord(float(t_submit), cluster, "slurm", "slurm-squeue", key,
                           squeue_pending(cluster, array_id, _NAME, user, uid, bank,
                                          _SLURM_PARTITION, "normal", t_submit, _LIMIT_MIN,
                                          1, 1, tres_req, "Resources",
                                          array=SqueueArray(array_id, None,
                                                            f"1-{tasks}")))]
    running = []
    last_start = t_submit
    for task in range(1, tasks + 1):
        raw = array_id if task == tasks else array_id + task
        t_start = t_submit + 1 + (task - 1) // SLURM_STARTS_PER_S
        last_start = t_start
        host = f"{cluster}-c{(task - 1) // CORES_PER_NODE:04d}"
        task_key = job_key(cluster, str(raw))
        env = {**slurm_job_env(cluster, raw, bank, user, uid, _NAME, _SLURM_PARTITION,
                               [host]),
               # as the recorded prolog has them (the workload's hooks leave these out)
               "SLURM_SCRIPT_CONTEXT": "prolog_slurmctld", "SLURM_JOB_CPUS_PER_NODE": "1",
               "SLURM_JOB_WORK_DIR": f"/home/{user}/{_NAME}",
               "SLURM_ARRAY_JOB_ID": str(array_id), "SLURM_ARRAY_TASK_ID": str(task),
               "SLURM_ARRAY_TASK_COUNT": str(tasks), "SLURM_ARRAY_TASK_MIN": "1",
               "SLURM_ARRAY_TASK_MAX": str(tasks), "SLURM_ARRAY_TASK_STEP": "1",
               "JOBSTREAM_HOOK_TIME": f"{t_start:.3f}"}
        out.append(GeneratedRecord(float(t_start), cluster, "slurm", "slurm-hook", task_key,
                                   env_bytes(env)))
        running.append((task_key, raw, task, t_start, host))
    t_poll = last_start + SLURM_POLL_AFTER_S
    for task_key, raw, task, t_start, host in running:
        out.append(GeneratedRecord(t_poll, cluster, "slurm", "slurm-squeue", task_key,
                                   squeue_running(cluster, raw, _NAME, user, uid, bank,
                                                  _SLURM_PARTITION, "normal", t_submit,
                                                  t_start, _LIMIT_MIN, [host], 1, 0,
                                                  tres_req,
                                                  array=SqueueArray(array_id, task))))
    return out


def burst_records(tasks: int, scheduler: str, t0: float, *,
                  clusters: Sequence[str] = ("burst-flux", "burst-slurm")
                  ) -> list[GeneratedRecord]:
    """The array(s) of ``tasks`` tasks (:func:`split_tasks`) submitted at ``t0``, merged in
    time order (each job's records stay in their order: its times grow)."""
    counts = split_tasks(tasks, scheduler)
    flux_cluster, slurm_cluster = clusters
    parts: list[GeneratedRecord] = []
    if counts.get("flux"):
        parts += flux_array(flux_cluster, counts["flux"], t0)
    if counts.get("slurm"):
        parts += slurm_array(slurm_cluster, counts["slurm"], t0)
    # stable: ties keep each array's own order
    return sorted(parts, key=lambda rec: rec.time)
