"""The jobs stage's timers, from this worker's view of its jobs (:mod:`agents.active_jobs`):
the queue snapshots of its partitions every ``worker.snapshot_interval_s``, and the expiry
of the jobs done for ``worker.done_grace_s``.

An expiry is a control word sent through the canonical topic to the job's own partition,
where the stage deletes the job's state (a table may only change inside its stream).
"""

from __future__ import annotations

import logging
import time

from agents.active_jobs import ActiveJobs
from agents.context import WorkerContext
from pipeline.codecs.wire import EXPIRE, encode_control
from pipeline.core.snapshots import build_snapshots
from pipeline.runtime.metrics import WORKER_RECORDS_PUBLISHED

__all__ = ["JobTimers"]

logger = logging.getLogger(__name__)


class JobTimers:
    """The bodies of the timers :func:`agents.jobs.register` schedules; ``canonical`` is
    the canonical topic, whose partitions are the table's."""

    def __init__(self, context: WorkerContext, active: ActiveJobs, canonical: str) -> None:
        self.context, self.active, self.canonical = context, active, canonical
        self._sent_snapshots = WORKER_RECORDS_PUBLISHED.labels(context.cfg.topics.snapshots)

    def queue_snapshots(self) -> None:
        """Send the queue snapshots of the partitions this worker holds now (the view
        rebuilt from the table first when they moved)."""
        ctx, active = self.context, self.active
        cfg = ctx.cfg
        assigned = {tp.partition for tp in ctx.app.assignor.assigned_actives()
                    if tp.topic == self.canonical}
        if assigned != active.partitions or active.stale:
            active.rebuild(ctx.jobs.items(), cfg.kafka.partitions, assigned)
        snaps = build_snapshots(active.summaries(assigned), time.time(), ctx.name, assigned,
                                cfg.worker.snapshot_interval_s)
        logger.info("queue snapshots: partitions=%s jobs=%d queues=%d", sorted(assigned),
                    len(active), len(snaps))
        for snap in snaps:
            key = f"{snap['cluster']}:{snap['queue']}".encode()
            ctx.outputs.send(cfg.topics.snapshots, key, ctx.wire.encode_snapshot(snap))
        ctx.outputs.poll()
        self._sent_snapshots.inc(len(snaps))

    def expire_done(self) -> None:
        """Send the expiry of every job done for ``worker.done_grace_s``."""
        ctx = self.context
        for key in self.active.expired(time.time(), ctx.cfg.worker.done_grace_s):
            ctx.outputs.send(self.canonical, key, encode_control(EXPIRE))
        ctx.outputs.poll()
