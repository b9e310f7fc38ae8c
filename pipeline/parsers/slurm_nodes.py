"""``slurm-nodes``: one ``scontrol show nodes --json`` / ``sinfo --json`` document -> node
events.

A document lists nodes (``nodes``); each gives one ``state`` event
(:class:`~pipeline.core.nodes.NodeEvent`): what this poll saw of the node. Shapes read side
by side (Slurm's openapi/data_parser node schema):

* v0.0.38 (22.05, ``sinfo --json``; that Slurm has no ``scontrol --json``): ``state`` a
  lower-case base state (``"idle"``), ``state_flags`` a list (``["DRAIN"]``),
  ``reason_changed_at`` an epoch integer (0: none), ``reason_set_by_user`` a name or null;
* v0.0.39 (23.02): ``state`` one list, base first (``["IDLE", "DRAIN"]``), the rest as
  above;
* v0.0.40+ (23.11, 24.05, 24.11, ...): the same with ``reason_changed_at`` a ``{set,
  infinite, number}`` object, and the document's ``last_update``.

Newer ``sinfo --json`` prints ``sinfo`` records instead (nodes grouped by state, one
reason time per group): refused whole (``unsupported-shape``), poll ``scontrol show nodes
--json`` there.

The event: ``node`` is the ``NodeName`` (``name``: what job node lists say; ``hostname``
is kept in the context where it differs); ``reason`` and ``by`` the node's reason and
``reason_set_by_user`` (who drained or downed it; ``slurm`` when slurmctld did); the
context holds ``state`` (the list, upper case, base first), ``reason_changed_at`` (epoch
seconds, null when unset), ``partitions`` (a list) and ``observed`` (which time the
event has, below).

When. A poll says what holds now, not since when: the event's time is the document's
``last_update`` (slurmctld's newest change to any node, so no later than the poll and no
earlier than this node's own last change), else, before it existed, the record's receive
time; neither is refused (``missing-field``). The fold starts a state at the first poll
that saw it, or at ``reason_changed_at`` where that tells when its reason was set
(:mod:`pipeline.fold.nodes`).

Idempotence. ``event_id`` hashes (cluster, node, state, reason, reason_changed_at) *and*
the event's time: polls that see no change in the cluster have the same ``last_update``,
so their events are the same ids and copies. The time cannot be left out: when a drained
node is resumed, slurmctld clears its reason and sets its reason time to 0
(``clusteracct_storage_g_node_up``), so "idle" after the drain would have the id of "idle"
before it, and a deduplicating stage would drop the resume as a copy, the node drained
for ever. A state seen again by a later poll of a changed cluster is a new event, which
the fold reads as the same state going on (it moves no ``since``).

Each node is parsed on its own (:func:`nodes_parts`, as ``squeue_parts`` takes jobs): a bad
node is refused as a :class:`~pipeline.parsers.Part` with its error and its own JSON, the
others keep their events. Only a bad document (not JSON, no ``nodes``, no time) is refused
whole.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pipeline.core.model import make_event_id
from pipeline.core.nodes import SLURM_BASE_STATES, NodeEvent
from pipeline.parsers import Part, strict_events
from pipeline.parsers.slurm_common import decode_json, epoch, opt_str, require_object
from pipeline.parsers.slurm_json import read_meta
from pipeline.runtime.errors import ParseError

__all__ = ["SOURCE", "nodes_parts", "parse_slurm_nodes", "state_list"]

SOURCE = "slurm-nodes"


def parse_slurm_nodes(payload: bytes, *, cluster: str,
                      received_at: float | None = None) -> list[NodeEvent]:
    """Events of every node of one document; the first bad node's ParseError if any is
    bad."""
    return strict_events(nodes_parts(payload, cluster=cluster, received_at=received_at))


def nodes_parts(payload: bytes, *, cluster: str, received_at: float | None = None
                ) -> list[Part]:
    """Every node of one document, each with its event or its error."""
    what = "slurm nodes document"
    doc = require_object(decode_json(payload, what=what), what=what)
    meta = read_meta(doc.get("meta"))
    nodes = doc.get("nodes")
    if nodes is None:
        if "sinfo" in doc:
            raise ParseError("unsupported-shape", f"{what} holds sinfo records (nodes grouped "
                             "by state): poll scontrol show nodes --json for one record per "
                             "node")
        errors = doc.get("errors")
        if isinstance(errors, list) and errors:
            raise ParseError("source-error", f"{what} has no nodes, only errors: "
                             f"{str(errors[0])[:200]}")
        raise ParseError("missing-field", f"{what} has no nodes")
    if not isinstance(nodes, list):
        raise ParseError("bad-type", f"{what}: nodes must be an array")
    at, observed = _observed(doc, received_at, what)
    name = meta.cluster or cluster
    return [_part(i, node, name, at, observed) for i, node in enumerate(nodes)]


def _observed(doc: Mapping[str, Any], received_at: float | None, what: str
              ) -> tuple[float, str]:
    """The time of the document's events and which it is (module docstring, "When")."""
    updated = epoch(doc.get("last_update"), "last_update")
    if updated is not None:
        return updated, "last_update"
    if received_at:
        return float(received_at), "received_at"
    raise ParseError("missing-field", f"{what} has no last_update and the record no receive "
                     "time: the poll's time is unknown")


def _part(index: int, node: Any, cluster: str, at: float, observed: str) -> Part:
    """One node's part; a parser bug met in one node is that node's ``internal-error``."""
    where = f"nodes[{index}]."
    try:
        require_object(node, what=f"slurm nodes document nodes[{index}]")
        return Part(index, [_event(node, where, cluster, at, observed)],  # type: ignore[list-item]
                    source=node)
    except ParseError as exc:
        return Part(index, error=exc, source=node)
    except Exception as exc:  # noqa: BLE001 - the caller logs it with its traceback
        error = ParseError("internal-error", f"nodes[{index}]: {type(exc).__name__}: {exc}")
        error.__cause__ = exc
        return Part(index, error=error, source=node)


def state_list(node: Mapping[str, Any], where: str) -> list[str]:
    """The node's state as one upper-case list, base first: v0.0.38's ``state`` string and
    ``state_flags``, or v0.0.39+'s ``state`` list (whose base Slurm writes first; found
    wherever it is, flags kept in their order)."""
    value = node.get("state")
    if value is None:
        raise ParseError("missing-field", f"{where}state is missing")
    if isinstance(value, str):
        words = [value]
        flags = node.get("state_flags") or []
        if not isinstance(flags, list) or not all(isinstance(f, str) for f in flags):
            raise ParseError("bad-type", f"{where}state_flags must be a list of names")
        words += flags
    elif isinstance(value, list) and value and all(isinstance(v, str) for v in value):
        words = list(value)
    else:
        raise ParseError("bad-type", f"{where}state must be a state name or a non-empty "
                         "list of them")
    words = [w.strip().upper() for w in words if w.strip()]
    if not words:
        raise ParseError("bad-value", f"{where}state is empty")
    base = [w for w in words if w in SLURM_BASE_STATES][:1]
    return base + [w for w in words if w not in base]


def _partitions(value: Any, where: str) -> list[str]:
    if value is None:
        return []
    if isinstance(value, str):  # a CSV list, as slurm.conf and the C API give it
        return [p for p in (s.strip() for s in value.split(",")) if p]
    if not isinstance(value, list) or not all(isinstance(p, str) for p in value):
        raise ParseError("bad-type", f"{where}partitions must be a list of names")
    return [p for p in value if p]


def _event(node: Mapping[str, Any], where: str, cluster: str, at: float,
           observed: str) -> NodeEvent:
    name = node.get("name")
    if name is None:
        raise ParseError("missing-field", f"{where}name is missing")
    if not isinstance(name, str) or not name.strip():
        raise ParseError("bad-type", f"{where}name must be a non-empty string")
    states = state_list(node, where)
    reason = opt_str(node, "reason", what=where)
    changed = epoch(node.get("reason_changed_at"), f"{where}reason_changed_at")
    by = opt_str(node, "reason_set_by_user", what=where) if reason else None
    context: dict[str, Any] = {
        "state": states, "reason_changed_at": changed,
        "partitions": _partitions(node.get("partitions"), where), "observed": observed,
    }
    hostname = opt_str(node, "hostname", what=where)
    if hostname is not None and hostname != name:
        context["hostname"] = hostname
    return NodeEvent(
        cluster=cluster, scheduler="slurm", node=name, event="state", timestamp=at,
        source=SOURCE, reason=reason, by=by, context=context,
        event_id=make_event_id(cluster, "slurm", "node", name, "state", "+".join(states),
                               reason or "", changed or 0.0, at))
