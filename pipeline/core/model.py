"""The canonical model: raw records as the edges publish them, and canonical job events.

Every parser turns source records into :class:`JobEvent`. An event carries two kinds of
payload:

* ``context`` -- the event's own fields, exactly as the source gave them (Flux RFC 21
  context, a Slurm record's relevant keys);
* ``facts`` -- what the event tells about the *job*, already normalized to the field names
  of the job document (``FACT_FIELDS``). The fold merges facts; it never has to know the
  source format. Parsers only put keys of ``FACT_FIELDS`` there, and never ``None``.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from json.encoder import encode_basestring_ascii
from typing import Any, Literal

__all__ = [
    "CANONICAL_EVENTS",
    "EVENT_FIELDS",
    "EVENT_JSON_FIELDS",
    "EVENT_OBJECTS",
    "EVENT_PAYLOADS",
    "FACT_FIELDS",
    "RESULTS",
    "JobEvent",
    "RawRecord",
    "Scheduler",
    "make_event_id",
    "job_key",
]

Scheduler = Literal["flux", "slurm"]

#: Flux RFC 21 names, plus the Slurm-only ones (docs/design.md, section 4).
CANONICAL_EVENTS: frozenset[str] = frozenset(
    {
        "submit", "validate", "invalidate", "depend", "priority", "urgency", "jobspec-update",
        "resource-update", "alloc", "prolog-start", "prolog-finish", "start", "finish",
        "release", "epilog-start", "epilog-finish", "free", "clean", "exception", "memo",
        "dependency-add", "dependency-remove", "set-flags", "flux-restart",
        # Slurm only ("reason": squeue/sacct saw the pending job wait for a state_reason)
        "eligible", "requeue", "preempt", "end", "reason",
        # node samples of a running job (pipeline.parsers.node_usage)
        "usage",
    }
)

#: Final results of a job document (``result`` field).
RESULTS: frozenset[str] = frozenset(
    {"completed", "failed", "cancelled", "timeout", "node_fail", "oom", "preempted", "exception"}
)

#: Keys a parser may put in ``JobEvent.facts``: job document fields with their types.
FACT_FIELDS: Mapping[str, type | tuple[type, ...]] = {
    "job_name": str,
    "array_id": str,
    "array_task": int,
    "het_id": str,
    "het_offset": int,
    "user": str,
    "uid": int,
    "group": str,
    "gid": int,
    "bank": str,
    "queue": str,
    "qos": str,
    "cwd": str,
    "timelimit_s": (int, float),
    "nodes_req": int,
    "cores_req": int,
    "gpus_req": int,
    "nnodes": int,
    "ncores": int,
    "ngpus": int,
    "nodelist": list,
    "exit_code": int,
    "signal": int,
    # A result stated by the source itself (Slurm job state); Flux results are derived.
    "result": str,
    # Lifecycle times stated by a record (epoch seconds). Events also carry their own
    # timestamp; these are for records that describe several moments at once.
    "t_submit": (int, float),
    "t_eligible": (int, float),
    "t_start": (int, float),
    "t_end": (int, float),
    "expiration": (int, float),
    "restart_count": int,
    # Memory asked for and given (MiB, the whole job), and the run's usage from accounting
    # (sacct's steps, after the end; pipeline.parsers.slurm_json and the fold's docstring)
    "mem_req_mb": int,
    "mem_alloc_mb": int,
    "cpu_time_s": (int, float),
    "cpu_eff_pct": (int, float),
    "mem_max_mb": (int, float),
    "mem_max_pct": (int, float),
    "gpu_util_pct": (int, float),
}


@dataclass(frozen=True, slots=True)
class RawRecord:
    """One record of ``hpc.jobs.raw``: the source bytes, untouched, with where they came from."""

    cluster: str
    scheduler: Scheduler
    format: str
    received_at: float
    payload: bytes
    #: The Kafka key, ``cluster:job_id``; None when the edge could not tell the job.
    key: str | None = None


@dataclass(frozen=True, slots=True)
class JobEvent:
    """A canonical job event (docs/design.md, section 4)."""

    cluster: str
    scheduler: Scheduler
    job_id: str
    event: str
    timestamp: float
    source: str
    event_id: str
    seq: int | None = None
    context: Mapping[str, Any] = field(default_factory=dict)
    facts: Mapping[str, Any] = field(default_factory=dict)
    job_id_f58: str | None = None
    jobspec: Mapping[str, Any] | None = None
    R: Mapping[str, Any] | None = None
    record: Mapping[str, Any] | None = None

    @property
    def key(self) -> str:
        """The Kafka key and state-table key of the job: ``cluster:job_id``."""
        return job_key(self.cluster, self.job_id)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict (what ``jobstream parse`` prints)."""
        out: dict[str, Any] = {
            "cluster": self.cluster,
            "scheduler": self.scheduler,
            "job_id": self.job_id,
            "event": self.event,
            "timestamp": self.timestamp,
            "source": self.source,
            "event_id": self.event_id,
            "seq": self.seq,
            "context": dict(self.context),
            "facts": dict(self.facts),
        }
        # Written out, not a getattr loop: this runs for every event on the hot path.
        if self.job_id_f58 is not None:
            out["job_id_f58"] = self.job_id_f58
        if self.jobspec is not None:
            out["jobspec"] = self.jobspec
        if self.R is not None:
            out["R"] = self.R
        if self.record is not None:
            out["record"] = self.record
        return out

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> JobEvent:
        return cls(
            cluster=d["cluster"],
            scheduler=d["scheduler"],
            job_id=str(d["job_id"]),
            event=d["event"],
            timestamp=float(d["timestamp"]),
            source=d["source"],
            event_id=d["event_id"],
            seq=d.get("seq"),
            context=d.get("context") or {},
            facts=d.get("facts") or {},
            job_id_f58=d.get("job_id_f58"),
            jobspec=d.get("jobspec"),
            R=d.get("R"),
            record=d.get("record"),
        )


# JobEvent's fields by kind, read off the dataclass so that a field added there is in every
# list that names fields of its kind (the Avro codec, the wire's size bound, the sink).
#: every field, in the dataclass's order (the Avro schema's too)
EVENT_FIELDS: tuple[str, ...] = tuple(f.name for f in fields(JobEvent))
#: the fields holding a JSON object (text in Avro)
EVENT_JSON_FIELDS: tuple[str, ...] = tuple(
    f.name for f in fields(JobEvent) if str(f.type).startswith("Mapping"))
#: of those, the ones always there (``{}`` when empty): what the parsers found
EVENT_OBJECTS: tuple[str, ...] = tuple(
    f.name for f in fields(JobEvent) if f.name in EVENT_JSON_FIELDS and f.default_factory is dict)
#: and the ones that may be missing (``None``): the scheduler's own payloads, the biggest
EVENT_PAYLOADS: tuple[str, ...] = tuple(
    name for name in EVENT_JSON_FIELDS if name not in EVENT_OBJECTS)


def job_key(cluster: str, job_id: str) -> str:
    return f"{cluster}:{job_id}"


#: What ``json.dumps(parts, sort_keys=True, separators=(",", ":"), default=str)`` uses,
#: built once: ``json.dumps`` with arguments builds a new encoder on every call.
_ID_ENCODER = json.JSONEncoder(sort_keys=True, separators=(",", ":"), default=str)


def make_event_id(*parts: Any) -> str:
    """A deterministic id for one fact: a hash of the parts that identify it.

    Parsers pass what makes the fact unique (cluster, job id, event name, timestamp, and
    where the same moment can be reported by several sources with different detail, the
    source family). Floats go through ``repr`` so the exact source value is kept.

    The hashed text is ``json.dumps`` of the list of parts (ASCII, compact, sorted keys,
    ``str`` of what JSON cannot hold); ids are stored downstream, so it never changes.
    Parts that are all strings, floats and plain ints (every parser's ids but those of
    the submit plugins) are written here directly, as that encoder writes them: this is
    on the hot path, once per event.
    """
    texts: list[str] = []
    for p in parts:
        kind = type(p)
        if kind is str:
            texts.append(encode_basestring_ascii(p))
        elif kind is float:
            texts.append(encode_basestring_ascii(repr(p)))
        elif kind is int:
            texts.append(int.__repr__(p))
        else:
            text = _ID_ENCODER.encode([repr(p) if isinstance(p, float) else p for p in parts])
            break
    else:
        text = "[" + ",".join(texts) + "]"
    return hashlib.blake2b(text.encode(), digest_size=12).hexdigest()
