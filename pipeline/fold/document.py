"""The job document of one incarnation: its fields, their order, its id.

:func:`document` reads what an incarnation holds (identity facts, its latest run, the
hours of the runs before it, its exceptions) and its job's user annotations into the
fields of the ``JobState`` schema (:data:`DOC_FIELDS`), then derives the
presentation-only ones in one step (:func:`pipeline.fold.presentation.present`): what is
here is what the job did, what is there is computed from it for Elasticsearch and the
panels.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pipeline.fold.incarnation import Incarnation
from pipeline.fold.presentation import present
from pipeline.fold.run_state import (
    STATE_NAMES,
    USAGE_FACTS,
    ms,
    pending_reason,
    result,
    run_hours,
    run_started,
    span_s,
    times,
)
from pipeline.fold.usage import USAGE_FIELDS, usage_figures

__all__ = ["DOC_FIELDS", "doc_id", "document"]

#: Every field of a job document, in output order (unknown values are None): the fields of
#: the ``JobState`` schema, plus ``incarnation`` (0 but for a reused Slurm job id).
DOC_FIELDS: tuple[str, ...] = (
    "cluster", "scheduler", "job_id", "job_id_f58", "incarnation", "job_name",
    "array_id", "array_task", "het_id", "het_offset",
    "user", "uid", "group", "gid", "bank", "queue", "qos",
    "bank_path", "reservation", "wckey", "dependency", "cwd",
    "state", "result", "exit_code", "signal", "cancelled_before_start", "derived_exit_code",
    "exceptions", "requeue_count", "restart_count",
    "t_submit", "t_eligible", "t_alloc", "t_start", "t_end", "t_clean", "expiration",
    "wait_s", "eligible_wait_s", "run_s", "prolog_s", "epilog_s",
    "timelimit_s", "nodes_req", "cores_req", "gpus_req", "mem_req_mb", "tres_req",
    "nnodes", "ncores", "ngpus", "mem_alloc_mb", "tres_alloc", "nodelist", "first_node",
    "failed_node",
    "node_hours", "core_hours", "gpu_hours",
    "timelimit_used_pct", "expansion_factor", "ef_x_nh",
    "size_bucket", "gpu_bucket", "wait_bucket", "runtime_bucket",
    "run_interval", "pending_interval",
    "cpu_time_s", "cpu_eff_pct", "mem_max_mb", "mem_max_pct", "gpu_util_pct",
    "cpu_eff_x_nh", "mem_eff_x_nh", "usage_source",
    *USAGE_FIELDS, "usage_dropped",
    "pending_reason",
    "events_dropped", "exceptions_dropped",
    "user_annotations", "user_annotations_dropped",
    "revision", "updated_at",
)

#: Facts copied to the document as they are (latest value wins).
_IDENTITY_FACTS: tuple[str, ...] = (
    "job_name", "array_id", "array_task", "het_id", "het_offset", "user", "uid", "group",
    "gid", "bank", "queue", "qos", "cwd", "timelimit_s", "nodes_req", "cores_req",
    "gpus_req", "mem_req_mb",
)


def doc_id(doc: Mapping[str, Any]) -> str:
    """Elasticsearch id of a job document: ``cluster:job_id``.

    A later incarnation of a reused Slurm job id adds ``@<t_submit in ms>``.
    """
    base = f"{doc['cluster']}:{doc['job_id']}"
    if doc.get("incarnation"):
        return f"{base}@{doc['t_submit']}"
    return base


def _usage(doc: dict[str, Any], inc: Incarnation, figures: dict[str, Any] | None) -> None:
    """The run's usage so far from the node samples (``figures``), and its final usage:
    the run's accounting records' (sacct) where they state any, else, once the run has
    ended, the node samples' (:mod:`pipeline.fold.usage`)."""
    run = inc.run
    accounted = {name: run.fact(name) for name in USAGE_FACTS}
    if figures is not None:
        doc.update(figures)
    doc["usage_dropped"] = inc.jf.usage.dropped or None
    if any(v is not None for v in accounted.values()):
        doc.update(accounted, usage_source="sacct")
    elif figures is not None and doc["t_end"] is not None:
        run_s, ncores = doc["run_s"], doc["ncores"]
        doc.update(cpu_time_s=figures["usage_cpu_s"],
                   cpu_eff_pct=100.0 * figures["usage_cpu_s"] / (run_s * ncores)
                   if run_s and ncores else None,
                   mem_max_mb=figures["usage_mem_peak_mb"],
                   mem_max_pct=figures["usage_mem_peak_pct"],
                   gpu_util_pct=figures["usage_gpu_util_pct"], usage_source="node")


def document(inc: Incarnation, runs: int) -> dict[str, Any]:
    """The document of ``inc``, whose latest run is its ``runs``-th."""
    jf, run = inc.jf, inc.run
    scheduler = jf.scheduler
    doc: dict[str, Any] = dict.fromkeys(DOC_FIELDS)
    doc.update(cluster=jf.cluster, scheduler=scheduler, job_id=jf.job_id,
               job_id_f58=jf.job_id_f58, incarnation=inc.number)
    for name in _IDENTITY_FACTS:
        entry = inc.identity.get(name)
        if entry is not None:
            doc[name] = entry[1]

    run_times = times(run, scheduler)
    usage = jf.usage
    figures = usage_figures(usage, begin=run_times.run_begin, ncores=run.fact("ncores"),
                            nnodes=run.fact("nnodes"), mem_alloc_mb=run.fact("mem_alloc_mb")
                            ) if len(usage) else None
    if figures is not None:  # the run's newest sample is something the job did then
        inc.updated_at = max(inc.updated_at, figures["usage_sampled_at"] / 1000)
    ended = result(run, inc.tracked)
    requeues = max(runs - 1, inc.restart_count or 0,
                   max(inc.requeues_by_source.values(), default=0))
    doc.update(
        state=STATE_NAMES[run.state], result=ended,
        exit_code=run.fact("exit_code"), signal=run.fact("signal"),
        cancelled_before_start=None if ended is None else (
            ended == "cancelled" and not (inc.started_any or run_started(run, scheduler))),
        exceptions=[{"type": e.type, "severity": e.severity, "note": e.note,
                     "timestamp": ms(e.timestamp)} for e in inc.exceptions],
        requeue_count=requeues, restart_count=inc.restart_count,
    )

    t_submit, updated_at = ms(inc.t_submit), ms(inc.updated_at)
    t_eligible, t_start = ms(run_times.t_eligible), ms(run_times.t_start)
    t_end, begin = ms(run_times.t_end), ms(run_times.run_begin)
    doc.update(t_submit=t_submit, t_eligible=t_eligible, t_alloc=ms(run_times.t_alloc),
               t_start=t_start, t_end=t_end, t_clean=ms(run_times.t_clean),
               expiration=ms(run.fact("expiration")))
    doc.update(
        wait_s=span_s(t_submit, t_start), eligible_wait_s=span_s(t_eligible, t_start),
        run_s=span_s(begin, t_end if t_end is not None else updated_at),
        prolog_s=span_s(ms(run.prolog[0]), ms(run.prolog[1])),
        epilog_s=span_s(ms(run.epilog[0]), ms(run.epilog[1])),
    )

    nodelist = run.fact("nodelist")
    doc.update(nnodes=run.fact("nnodes"), ncores=run.fact("ncores"),
               ngpus=run.fact("ngpus"), mem_alloc_mb=run.fact("mem_alloc_mb"),
               nodelist=list(nodelist) if nodelist else None,
               first_node=nodelist[0] if nodelist else None)
    hours = run_hours(run, run_times, end_fallback=inc.updated_at)
    for i, name in enumerate(("node_hours", "core_hours", "gpu_hours")):
        prior, current = inc.prior_hours[i], hours[i]
        if prior is not None or current is not None:
            doc[name] = (prior or 0.0) + (current or 0.0)
    _usage(doc, inc, figures)

    doc["pending_reason"] = pending_reason(run, scheduler)
    dropped = jf.dropped
    if dropped:
        doc["events_dropped"] = sum(dropped.values())
        doc["exceptions_dropped"] = sum(
            n for name, n in dropped.items() if name.startswith("exception/")) or None
    # the job key's, so every incarnation's (memos are Flux's, whose ids never repeat)
    notes = jf.annotations
    doc["user_annotations"] = notes.view()
    doc["user_annotations_dropped"] = notes.dropped or None
    doc.update(revision=inc.revision, updated_at=updated_at)
    present(doc)
    return doc
