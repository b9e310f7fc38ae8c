"""The jobs stage's timers, from this worker's view of its jobs (:mod:`agents.active_jobs`)
and nodes (:mod:`agents.active_nodes`): the snapshots of its partitions every
``worker.snapshot_interval_s`` (the queues', and the node rows of its nodes, at the same
instant), and the expiry of the jobs done for ``worker.done_grace_s``.

An expiry is a control word sent through the canonical topic to the job's own partition,
where the stage deletes the job's state (a table may only change inside its stream).
"""

from __future__ import annotations

import logging
import time

from agents.active_jobs import ActiveJobs
from agents.active_nodes import ActiveNodes
from agents.context import WorkerContext
from agents.states import stored_nodes
from pipeline.codecs.wire import EXPIRE, encode_control
from pipeline.core.snapshots import build_node_snapshots, build_snapshots
from pipeline.runtime.metrics import WORKER_RECORDS_PUBLISHED

__all__ = ["JobTimers"]

logger = logging.getLogger(__name__)


class JobTimers:
    """The bodies of the timers :func:`agents.jobs.register` schedules; ``canonical`` is
    the canonical topic, whose partitions are the table's."""

    def __init__(self, context: WorkerContext, active: ActiveJobs, canonical: str,
                 nodes: ActiveNodes) -> None:
        # ``nodes`` is the stage's view, which it updates as it writes nodes: one of its
        # own would be rebuilt once and never see a change after
        self.context, self.active, self.canonical = context, active, canonical
        self.nodes = nodes
        self._sent_snapshots = WORKER_RECORDS_PUBLISHED.labels(context.cfg.topics.snapshots)

    def queue_snapshots(self) -> None:
        """Send the snapshots of the partitions this worker holds now."""
        assigned = {tp.partition for tp in self.context.app.assignor.assigned_actives()
                    if tp.topic == self.canonical}
        self.send_snapshots(assigned, time.time())

    def send_snapshots(self, assigned: set[int], now: float) -> int:
        """The queue snapshots and node rows of the ``assigned`` partitions at ``now``
        (the views rebuilt from the tables first when the partitions moved); how many
        were sent."""
        ctx, active, nodes = self.context, self.active, self.nodes
        cfg = ctx.cfg
        interval = cfg.worker.snapshot_interval_s
        if assigned != active.partitions or active.stale:
            active.rebuild(ctx.jobs.items(), cfg.kafka.partitions, assigned)
        if assigned != nodes.partitions or nodes.stale:
            nodes.rebuild(stored_nodes(ctx.nodes), cfg.kafka.partitions, assigned,
                          ctx.anonymizer.node_document)
        snaps = build_snapshots(active.summaries(assigned), now, ctx.name, assigned, interval)
        rows = build_node_snapshots(nodes.summaries(assigned), now, ctx.name, assigned,
                                    interval)
        logger.info("queue snapshots: partitions=%s jobs=%d queues=%d nodes=%d "
                    "node_rows=%d", sorted(assigned), len(active), len(snaps), len(nodes),
                    len(rows))
        for snap in snaps:
            key = f"{snap['cluster']}:{snap['queue']}".encode()
            ctx.outputs.send(cfg.topics.snapshots, key, ctx.wire.encode_snapshot(snap))
        for row in rows:
            key = f"{row['cluster']}:nodes".encode()
            ctx.outputs.send(cfg.topics.snapshots, key, ctx.wire.encode_snapshot(row))
        ctx.outputs.poll()
        self._sent_snapshots.inc(len(snaps) + len(rows))
        return len(snaps) + len(rows)

    def expire_done(self) -> None:
        """Send the expiry of every job done for ``worker.done_grace_s``."""
        ctx = self.context
        for key in self.active.expired(time.time(), ctx.cfg.worker.done_grace_s):
            ctx.outputs.send(self.canonical, key, encode_control(EXPIRE))
        ctx.outputs.poll()
