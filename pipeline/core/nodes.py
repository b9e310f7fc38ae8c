"""Canonical node events: what a scheduler says about one node, beside the job events.

A job event (:class:`pipeline.core.model.JobEvent`) tells about a job; a :class:`NodeEvent`
tells about a node: Flux's resource events (RFC 44: ``restart``, ``online``, ``offline``,
``drain``, ``undrain``, ``torpid``, ``lively``, ...; :mod:`pipeline.parsers.flux_resource`),
one Slurm poll's view of a node (``state``; :mod:`pipeline.parsers.slurm_nodes`), and a
job's allocation or release of a node (``alloc``, ``free``), which tells a drained node
that still runs work (``draining``) from one that does not. They are kept apart from job
events on purpose: they are keyed by node, not by job, and fold into node documents
(:mod:`pipeline.fold.nodes`), never into a job's state.

``node`` is the host name as the *events* name it: Flux's broker host names (the
``restart`` event's nodelist, a drain's own nodelist), Slurm's ``NodeName``. The key of a
node is ``cluster:node`` (:func:`node_key`), as a job's is ``cluster:job_id``.

``reason`` and ``by`` are the reason a node is drained or down and the user who set it,
where the source says (Slurm's ``reason_set_by_user``; Flux's resource events name no
user). ``context`` holds the rest of what the source said of this node, already narrowed
to it (its rank, a Slurm node's state flags and partitions, ...).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from pipeline.core.model import Scheduler

__all__ = ["NODE_EVENTS", "SLURM_BASE_STATES", "NodeEvent", "node_key"]

#: The event names a node document is folded from (others are kept and counted, and
#: change nothing): RFC 44's resource events, Slurm's polled ``state``, and a job's
#: ``alloc`` / ``free`` of the node.
NODE_EVENTS: frozenset[str] = frozenset({
    "restart", "resource-define", "online", "offline", "drain", "undrain", "torpid",
    "lively", "truncate", "state", "alloc", "free",
})


#: Slurm's base node states (``node_state_base_string``); the other words of a node's
#: state list are flags (DRAIN, COMPLETING, NOT_RESPONDING, POWERED_DOWN, ...)
SLURM_BASE_STATES: frozenset[str] = frozenset(
    {"UNKNOWN", "DOWN", "IDLE", "ALLOCATED", "ERROR", "MIXED", "FUTURE"})


def node_key(cluster: str, node: str) -> str:
    """The Kafka key and state key of a node: ``cluster:node``."""
    return f"{cluster}:{node}"


@dataclass(frozen=True, slots=True)
class NodeEvent:
    """One fact about one node (module docstring)."""

    cluster: str
    scheduler: Scheduler
    node: str
    event: str
    timestamp: float
    source: str
    event_id: str
    reason: str | None = None
    by: str | None = None
    context: Mapping[str, Any] = field(default_factory=dict)

    @property
    def key(self) -> str:
        return node_key(self.cluster, self.node)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict (what ``jobstream parse`` prints)."""
        return {
            "cluster": self.cluster, "scheduler": self.scheduler, "node": self.node,
            "event": self.event, "timestamp": self.timestamp, "source": self.source,
            "event_id": self.event_id, "reason": self.reason, "by": self.by,
            "context": dict(self.context),
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> NodeEvent:
        return cls(cluster=d["cluster"], scheduler=d["scheduler"], node=d["node"],
                   event=d["event"], timestamp=float(d["timestamp"]), source=d["source"],
                   event_id=d["event_id"], reason=d.get("reason"), by=d.get("by"),
                   context=d.get("context") or {})
