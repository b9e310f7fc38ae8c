"""The job documents of a demo workload folded offline up to an instant: what the worker
would have written by then (normalize and fold, no Kafka)."""

from __future__ import annotations

from typing import Any

from pipeline.core.model import RawRecord
from pipeline.fold import fold
from pipeline.parsers.normalize import normalize
from pipeline.tooling.workload import Workload, WorkloadSpec


def documents_at(spec: WorkloadSpec, now: float) -> list[dict[str, Any]]:
    """The documents of the workload's jobs from its records due by ``now``."""
    events = [ev for r in Workload(spec).records() if r.time <= now
              for ev in normalize(RawRecord(r.cluster, r.scheduler, r.format,  # type: ignore[arg-type]
                                            r.time, r.payload, r.key))]
    return fold(events)
