"""The presentation-only fields of a job document, derived in one step from its others.

Elasticsearch date ranges (``run_interval``, ``pending_interval``), XDMoD buckets, the
ratios a panel would divide for (``timelimit_used_pct``, ``expansion_factor``) and the
node-hour weights of the efficiencies (``ef_x_nh``, ``cpu_eff_x_nh``, ``mem_eff_x_nh``)
say nothing the document does not: they are stored because Grafana panels and
Elasticsearch queries may not compute them (no scripts). :func:`present` reads only the
document's own fields, so it is the one place they are made, after every other field.
"""

from __future__ import annotations

from typing import Any

from pipeline.core.buckets import duration_bucket, gpu_bucket, size_bucket

__all__ = ["PRESENTATION_FIELDS", "present"]

#: The fields :func:`present` derives; a document's other fields are what it reads.
PRESENTATION_FIELDS: tuple[str, ...] = (
    "timelimit_used_pct", "expansion_factor", "ef_x_nh",
    "size_bucket", "gpu_bucket", "wait_bucket", "runtime_bucket",
    "run_interval", "pending_interval",
    "cpu_eff_x_nh", "mem_eff_x_nh",
)


def present(doc: dict[str, Any]) -> None:
    """Set ``doc``'s presentation fields (left None where their inputs are unknown)."""
    _ratios_and_buckets(doc)
    _usage_weights(doc)
    _intervals(doc)


def _ratios_and_buckets(doc: dict[str, Any]) -> None:
    """Ratios and XDMoD buckets, stored because panels may not compute them."""
    wait_s, run_s = doc["wait_s"], doc["run_s"]
    timelimit = doc["timelimit_s"]
    if run_s is not None and isinstance(timelimit, int | float) and timelimit > 0:
        doc["timelimit_used_pct"] = run_s / timelimit * 100
    if run_s and wait_s is not None:
        doc["expansion_factor"] = (wait_s + run_s) / run_s
        if doc["node_hours"] is not None:
            doc["ef_x_nh"] = doc["expansion_factor"] * doc["node_hours"]
    cores = doc["ncores"] if doc["ncores"] is not None else doc["cores_req"]
    gpus = doc["ngpus"] if doc["ngpus"] is not None else doc["gpus_req"]
    for name, bucket in (("size_bucket", size_bucket(cores)),
                         ("gpu_bucket", gpu_bucket(gpus)),
                         ("wait_bucket", duration_bucket(wait_s)),
                         ("runtime_bucket", duration_bucket(run_s))):
        if bucket is not None:
            doc[name] = bucket[1]


def _usage_weights(doc: dict[str, Any]) -> None:
    """Efficiencies times node-hours: panels may not divide (no scripts), so a
    node-hour weighted mean is sum(product) / sum(node_hours) of the jobs that have
    the efficiency, two sums and a Grafana expression, as ``ef_x_nh`` does."""
    hours = doc["node_hours"]
    if hours is None:
        return
    for eff, product in (("cpu_eff_pct", "cpu_eff_x_nh"), ("mem_max_pct", "mem_eff_x_nh")):
        if doc[eff] is not None:
            doc[product] = doc[eff] * hours


def _intervals(doc: dict[str, Any]) -> None:
    """The run and the wait as Elasticsearch date ranges, for time-bucketed panels."""
    t_submit, t_start, t_end = doc["t_submit"], doc["t_start"], doc["t_end"]
    begin = doc["t_alloc"] if doc["t_alloc"] is not None else t_start
    if begin is not None:
        doc["run_interval"] = _interval(begin, t_end)
    if t_submit is not None:
        left_queue = next((t for t in (t_start, begin, t_end) if t is not None), None)
        doc["pending_interval"] = _interval(t_submit, left_queue)


def _interval(gte: int, lt: int | None) -> dict[str, int | None] | None:
    """An Elasticsearch date_range value; open-ended while the end is unknown.

    None when it is empty (end = start, e.g. a Slurm job started in its submit second):
    Elasticsearch refuses a range whose exclusive end is its start, and an empty interval
    overlaps no time bucket anyway.
    """
    if lt == gte:
        return None
    return {"gte": gte, "lt": lt if lt is not None and lt >= gte else None}
