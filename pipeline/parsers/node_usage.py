"""``node-usage``: one sample of a job on one node, as ``jobstream edge node`` reads it -> one
``usage`` event.

A record is a JSON object: what the kernel accounted for the job on the node so far (its
cgroup's or its processes' cumulative CPU, its memory now and at its peak, its GPUs), when
it was read, and which counter the figures belong to (``epoch``: a re-created cgroup or a
requeued job's new processes start a new one; ``run``: the edge process, whose GPU sums
start again with it). The fields and their units are defined in ``schemas/README.md``
("Usage while jobs run"); the edge writes them in :mod:`pipeline.edges.node.sampler`.

The event is keyed like the scheduler's own events of the job: a Slurm job by its numeric
id, a Flux job by its decimal id, whatever form the node saw (``FLUX_JOB_ID`` is F58,
``ƒ2bfE7Z1``, in current flux-shells), so that it folds in one hop with the job's
lifecycle. Its context is the sample (everything but the id and the scheduler), which the
fold folds apart from the job's other events (:mod:`pipeline.fold.usage`); it states no
facts. The id of the event is the sample's identity (node, counter, edge run, time), so a
copy sent twice by the spool is one event.

Refused (:class:`~pipeline.runtime.errors.ParseError`): not JSON (``invalid-json``), not
an object (``bad-type``),
a field missing (``missing-field``), a job id that does not parse (``bad-job-id``), a
scheduler other than Flux or Slurm (``unknown-scheduler``), a counter that is negative,
not finite or of the wrong type (``bad-value``).
"""

from __future__ import annotations

import json
import math
from typing import Any

from pipeline.core.fluid import decode_jobid, f58_encode
from pipeline.core.model import JobEvent, make_event_id
from pipeline.runtime.errors import ParseError

__all__ = ["EVENT", "READERS", "SOURCE", "parse_node_usage"]

SOURCE = "node"
EVENT = "usage"
#: where a sample's figures come from (:mod:`pipeline.edges.node.usage`)
READERS = frozenset({"cgroup-v1", "cgroup-v2", "procs"})
#: payload versions this parser reads
_VERSIONS = frozenset({1})

#: counters: float seconds or bytes, never negative; ``None`` allowed where marked
_NUMBERS: dict[str, bool] = {
    "cpu_s": False, "cpu_user_s": True, "cpu_system_s": True, "interval_s": True,
    "cpu_interval_s": True, "mem_bytes": False, "mem_peak_bytes": True,
    "mem_rss_bytes": True, "mem_file_bytes": True, "mem_limit_bytes": True,
    "processes": True, "gpu_busy_s": True, "gpu_s": True, "gpu_idle_since": True,
}
_GPU_NUMBERS = ("util_pct", "mem_bytes", "mem_total_bytes")


def _number(sample: dict[str, Any], name: str, nullable: bool) -> float | int | None:
    value = sample.get(name)
    if value is None:
        if nullable:
            return None
        raise ParseError("missing-field", f"node-usage sample without {name!r}")
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ParseError("bad-value", f"{name} is {type(value).__name__}, not a number")
    if not math.isfinite(value) or value < 0:
        raise ParseError("bad-value", f"{name} is {value!r}: a counter is finite and "
                                      "never negative")
    return value


def _text(sample: dict[str, Any], name: str) -> str:
    value = sample.get(name)
    if not isinstance(value, str) or not value:
        raise ParseError("missing-field", f"node-usage sample without text {name!r}")
    return value


def _gpus(value: Any) -> list[dict[str, Any]]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise ParseError("bad-value", "gpus is not a list")
    out = []
    for i, gpu in enumerate(value):
        if not isinstance(gpu, dict):
            raise ParseError("bad-value", f"gpus[{i}] is not an object")
        for name in _GPU_NUMBERS:
            _number(gpu, name, True)
        util = gpu.get("util_pct")
        if util is not None and util > 100:
            raise ParseError("bad-value", f"gpus[{i}].util_pct is {util!r}, over 100")
        out.append({k: gpu[k] for k in ("index", "uuid", *_GPU_NUMBERS) if k in gpu})
    return out


def job_key_id(scheduler: str, raw: str) -> tuple[str, str | None]:
    """The job id the scheduler's other events key the job by, and its F58 (Flux), from
    the id as a node saw it; ParseError ``bad-job-id``."""
    if scheduler == "slurm":
        text = raw.strip()
        if not text.isdigit() or int(text) <= 0 or int(text) >= 2**32:
            raise ParseError("bad-job-id", f"Slurm job id {raw!r} is not a job number")
        return str(int(text)), None
    try:
        n = decode_jobid(raw)
    except ValueError as exc:
        raise ParseError("bad-job-id", f"Flux job id {raw!r}: {exc}") from None
    return str(n), f58_encode(n)


def parse_node_usage(payload: bytes, *, cluster: str, received_at: float | None = None
                     ) -> list[JobEvent]:
    """The ``usage`` event of one node-usage record."""
    try:
        sample = json.loads(payload)
    except (ValueError, UnicodeDecodeError) as exc:
        raise ParseError("invalid-json", f"node-usage record is not JSON: {exc}") from None
    if not isinstance(sample, dict):
        raise ParseError("bad-type", "node-usage record is not a JSON object")
    version = sample.get("v", 1)
    if version not in _VERSIONS:
        raise ParseError("bad-value", f"node-usage payload version {version!r}; this "
                                      f"parser reads {sorted(_VERSIONS)}")
    scheduler = sample.get("scheduler")
    if scheduler not in ("flux", "slurm"):
        raise ParseError("unknown-scheduler", f"node-usage sample of scheduler "
                                              f"{scheduler!r}, not flux or slurm")
    raw_id = sample.get("job_id")
    if isinstance(raw_id, int) and not isinstance(raw_id, bool):
        raw_id = str(raw_id)
    if not isinstance(raw_id, str):
        raise ParseError("bad-job-id", f"node-usage job id {raw_id!r} is not text")
    job_id, f58 = job_key_id(scheduler, raw_id)
    node, epoch, run = _text(sample, "node"), _text(sample, "epoch"), _text(sample, "run")
    reader = sample.get("reader")
    if reader not in READERS:
        raise ParseError("bad-value", f"node-usage reader {reader!r}; known: "
                                      + ", ".join(sorted(READERS)))
    sampled_at = _number(sample, "sampled_at", False)
    context: dict[str, Any] = {"node": node, "epoch": epoch, "run": run, "reader": reader,
                               "sampled_at": float(sampled_at or 0.0)}
    for name, nullable in _NUMBERS.items():
        context[name] = _number(sample, name, nullable)
    context["gpus"] = _gpus(sample.get("gpus"))
    context["final"] = bool(sample.get("final", False))
    reason = sample.get("reason")
    context["reason"] = reason if isinstance(reason, str) else None
    timestamp = context["sampled_at"]
    return [JobEvent(
        cluster=cluster, scheduler=scheduler, job_id=job_id, event=EVENT,
        timestamp=timestamp, source=SOURCE,
        event_id=make_event_id(cluster, scheduler, job_id, EVENT, node, epoch, run, timestamp),
        context=context, job_id_f58=f58)]
