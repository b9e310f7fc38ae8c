"""This worker's nodes in memory, for the node rows of its snapshots: per partition, node
key (``cluster:node``) -> the :class:`~pipeline.core.snapshots.NodeSummary` of the document
it last wrote (anonymized, as sent).

The node table holds each node's whole state (up to 256 events); reading and folding
every one at each ``worker.snapshot_interval_s`` would cost that much each time, so the
jobs stage updates this view as it writes a node's document, and the view is rebuilt from
the table only when this worker's partitions move (:meth:`ActiveNodes.rebuild`), as
:class:`agents.active_jobs.ActiveJobs` is. A node costs its key and a tuple of three
strings shared by every node of the same cluster, state and reason (about 150 bytes).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

from agents.routing import job_partition
from pipeline.core.snapshots import NodeSummary, summarize_node
from pipeline.fold.node_state import NodeFold

__all__ = ["ActiveNodes"]

#: a node document as it is sent (the anonymizer's ``node_document``)
Presenter = Callable[[Mapping[str, Any]], Mapping[str, Any]]


class ActiveNodes:
    """In-memory view of this worker's nodes for the node rows of its snapshots."""

    def __init__(self) -> None:
        self.by_partition: dict[int, dict[bytes, NodeSummary]] = {}
        self.partitions: set[int] = set()
        self.stale = True
        # one summary object per distinct (cluster, state, reason): nodes share them
        self._shared: dict[NodeSummary, NodeSummary] = {}

    def __len__(self) -> int:
        return sum(map(len, self.by_partition.values()))

    def update(self, key: bytes, partition: int, doc: Mapping[str, Any]) -> None:
        """The node's document as written (``doc``) replaces what the view had of it."""
        summary = summarize_node(doc)
        self.by_partition.setdefault(partition, {})[key] = self._shared.setdefault(
            summary, summary)

    def keep(self, partitions: set[int]) -> None:
        """Forget the nodes of every other partition."""
        self.by_partition = {p: nodes for p, nodes in self.by_partition.items()
                             if p in partitions}

    def summaries(self, partitions: Iterable[int]) -> Iterator[NodeSummary]:
        for p in partitions:
            yield from self.by_partition.get(p, {}).values()

    def rebuild(self, nodes: Iterable[tuple[bytes, NodeFold]], partitions: int,
                assigned: set[int], present: Presenter = dict) -> None:
        """Re-read the nodes of the assigned partitions from the node table's ``nodes``
        (key, fold: :func:`agents.states.stored_nodes`), each document through ``present``
        (the anonymizer's, so the reasons are those the documents were sent with). A node
        the view already has in its partition keeps what the stage wrote since. The
        partition is the key's under murmur2, of the table's ``partitions``, as
        :meth:`ActiveJobs.rebuild` finds it."""
        self.keep(assigned)
        for key, fold in nodes:
            partition = job_partition(key, partitions)
            if partition not in assigned or key in self.by_partition.get(partition, ()):
                continue
            doc = fold.document()
            if doc is not None:
                self.update(key, partition, present(doc))
        self.partitions = assigned
        self.stale = False
