"""How the jobs topics' records reach the jobs stage: from Faust's fetch loop, each handed
to the stage as it is read, without a Faust event, channel and stream per record.

Faust delivers a fetched message to an agent through its conductor: a handler per
partition decodes it into an event, puts that in the agent's queue and wakes the agent's
task, whose stream sets the current event, calls the sensors and acknowledges. The jobs
stage needs none of it (its records are bytes, it acknowledges them itself once their
batch is written), and it cost a sixth of the worker's main thread, most of it per
record (docs/benchmarks-history.md). Here the conductor's handler of each jobs-topic partition is
:meth:`Intake.on_message`, which gives the message to :meth:`JobsStage.take` at once.
Faust has no setting for a handler of one's own; :func:`agents.faust_patches.hand_over`
gives it one for this app's conductor only, and every other topic (the table's
changelog, the assignor's) keeps Faust's.

What Faust's way did that matters stays:

* **Flow control.** No message is taken while a rebalance has suspended the flow, and one
  fetched for an earlier generation of the group (before the rebalance) is dropped, not
  taken and not acknowledged: its partition is read again from its commit
  (:mod:`agents.faust_patches.gaps`).
* **Tracking.** The consumer counts a taken message as unacknowledged (a rebalance and
  stopping wait until none is) and its monitor as read (the watchdog compares those read
  offsets with the group's commits); the acknowledgement tells both it is done. The
  monitor also notes when its partition's records last came in
  (``Monitor.stream_inbound_time``, a stream's event would): Faust's consumer checks it
  every ``stream_processing_timeout`` on each partition that has records to read, and
  without it logs ``Stream has not started processing`` at ERROR for every partition of
  a worker that is not at the very end of its topics, however well it keeps up, and
  would never say so when the intake really has stopped taking records.
* **A delivery may be abandoned.** The fetch loop stops waiting for a delivery when the
  flow is suspended. What the stage hands back to await (a full batch's end, an
  expiry) is shielded: a batch's end cut in half would leave its records never
  acknowledged, and the rebalance waiting for them.

The agent ``jobs`` stays: Faust subscribes the topics its agents read, and the table is
partitioned like them. Its stream receives nothing.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable
from typing import Any, Protocol

from agents.faust_patches import hand_over

__all__ = ["Intake", "acknowledge"]


class Taker(Protocol):
    def take(self, message: Any) -> Awaitable[None] | None: ...


class Intake:
    """The conductor's handler of the jobs topics' partitions (module docstring)."""

    def __init__(self, app: Any, topics: set[str], stage: Taker) -> None:
        self.app, self.topics, self.stage = app, topics, stage

    def install(self) -> None:
        """Make the app's conductor hand this app's messages of ``topics`` to the stage."""
        hand_over(self.app, self.topics, self.on_message)

    async def on_message(self, message: Any) -> None:
        """One message as the fetch loop read it."""
        app = self.app
        flow = app.flow_control
        if not flow.is_active():
            await flow.acquire()
        if message.generation_id != app.consumer_generation_id:
            return  # fetched before a rebalance: read again from the commit
        message.tracked = True
        app.consumer.track_message(message)
        app.monitor.stream_inbound_time[message.tp] = time.monotonic()
        wait = self.stage.take(message)
        if wait is not None:
            await asyncio.shield(wait)


def acknowledge(app: Any, message: Any) -> None:
    """``message``'s outputs are confirmed: it may be committed (the stage's
    ``acknowledge``, with ``app`` bound).

    A message taken before the group's last rebalance is only marked done, so that
    nothing waits for it: its partition was read again from its commit since, maybe by
    another worker, and this worker's offsets of it now belong to the new assignment,
    whose commit must not skip what that assignment has not folded yet."""
    if message.generation_id != app.consumer_generation_id:
        message.acked = True
        return
    if app.consumer.ack(message):
        app.sensors.on_message_out(message.tp, message.offset, message)
