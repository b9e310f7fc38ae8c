"""A watchdog over the worker's input partitions: finds one that stopped, and restarts it.

Every ``worker.stall_check_s`` it compares, for each partition the agents read, how far
this worker has read (Faust's monitor) with what the broker says: the group's committed
offset and the partition's end. A partition with records waiting whose commit has not
moved since the previous check is stuck, in one of two ways:

* ``not acknowledged``: records read past the commit, but some never reached the agent,
  and Faust commits only up to the first unacknowledged offset. Seen after rebalances: a
  record fetched before the rebalance goes through Faust's fetch loop after the rebalance
  sought the partition back to its commit, and moves the loop's read position past the
  records in between, which it then drops when they are fetched again (see
  agents/faust_patches/gaps.py, which keeps Faust from committing past them);
* ``not fetching``: nothing read past the commit although the partition holds more. Seen
  when a rebalance hands a running worker more partitions (a dead worker's, once its
  session expired): Faust never fetched them (its flow control has had such bugs, #629).

Either way the watchdog logs it and seeks the partition back to its commit: everything
after it is read again, which the agents take as duplicates (see agents/jobs.py), and the
missing records with it. Nothing is judged while the worker rebalances or recovers (nor
when a rebalance began during the check), while the broker does not answer, nor right
after the process stood still (a timer late by half an interval).

The commit and the end come from the broker, not from Faust's own bookkeeping: Faust
knows no commit for a partition it was handed and never read, and its fetcher knows no
end for a partition it never fetched, which is exactly the stuck case.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from agents import faust_patches
from pipeline.runtime.metrics import WATCHDOG_STALLS, LagReporter

__all__ = ["PartitionProgress", "register", "stalled"]

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class PartitionProgress:
    read: int | None  # last offset read by this worker (None: nothing yet)
    committed: int | None  # the group's next offset to read (None: never committed)
    highwater: int | None  # end offset (None: unknown)


def stalled(before: Mapping[Any, PartitionProgress], now: Mapping[Any, PartitionProgress]
            ) -> dict[Any, str]:
    """Partitions whose commit did not move between two checks though records wait, with
    why (pure)."""
    out = {}
    for tp, p in now.items():
        prev = before.get(tp)
        if prev is None or p.highwater is None or p.committed != prev.committed:
            continue
        done = p.committed or 0
        if p.highwater <= done:
            continue  # nothing waiting
        if p.read is None or p.read + 1 <= done:
            out[tp] = (f"not fetching: committed {p.committed}, end {p.highwater}, "
                       f"read up to {p.read}")
        else:
            out[tp] = (f"not acknowledged: committed {p.committed}, read up to {p.read}, "
                       f"end {p.highwater}")
    return out


async def _positions(consumer: Any, tps: Sequence[Any]
                     ) -> tuple[Mapping[Any, int], dict[Any, int | None]]:
    """The end offsets of ``tps`` and the group's commits (None: no commit), asked of the
    broker. Faust runs its aiokafka consumer in a thread of its own; calls to it go
    through that thread."""
    if not tps:
        return {}, {}
    ends = await consumer.highwaters(*tps)
    return ends, await faust_patches.committed_offsets(consumer, tps)


async def _restart(consumer: Any, tp: Any, committed: int | None) -> None:
    """Read ``tp`` again from its commit (from its start when it has none: the group reads
    from the earliest offset)."""
    await faust_patches.seek(consumer, {tp: committed})


def register(app: Any, topics: set[str], interval_s: float) -> None:
    """Watch the partitions of ``topics`` (the agents' inputs) every ``interval_s``."""
    last: dict[Any, PartitionProgress] = {}
    checked_at = time.monotonic()
    lag = LagReporter(app.conf.id)
    unsettled_since: float | None = None

    def settled(generation: int) -> bool:
        return not (app.rebalancing or getattr(app, "in_recovery", False)
                    or app.consumer_generation_id != generation)

    @app.timer(interval=interval_s)
    async def partition_watchdog() -> None:
        nonlocal checked_at, unsettled_since
        now_s = time.monotonic()
        late = now_s - checked_at > 1.5 * interval_s
        checked_at = now_s
        generation = app.consumer_generation_id
        # A timer this late means the whole process stood still (a frozen VM, SIGSTOP):
        # nothing could commit, and the group has likely moved on without it.
        if late or not settled(generation):
            last.clear()
            if not late and unsettled_since is None:
                unsettled_since = now_s
            elif unsettled_since is not None and now_s - unsettled_since > 300:
                logger.warning("the worker has been rebalancing or recovering for %.0f s",
                               now_s - unsettled_since)
            return
        unsettled_since = None
        consumer, monitor = app.consumer, app.monitor
        tps = sorted(tp for tp in consumer.assignment() if tp.topic in topics)
        try:
            # bounded: a consumer that does not answer must not stop the watchdog too
            ends, commits = await asyncio.wait_for(_positions(consumer, tps), interval_s)
        except Exception as exc:  # noqa: BLE001 - the broker away: nothing to judge now
            logger.debug("partition watchdog: no answer from the broker (%s)", exc)
            last.clear()
            return
        if not settled(generation):
            # a rebalance began while the broker answered: its own seek is under way, and
            # a seek of ours in the middle of it would fight it
            last.clear()
            return
        now = {tp: PartitionProgress(monitor.tp_read_offsets.get(tp), commits.get(tp),
                                     ends.get(tp)) for tp in tps}
        # the broker's answer is the consumer lag metric too: no second request for it
        lag.report({(tp.topic, tp.partition): p.highwater - (p.committed or 0)
                    for tp, p in now.items() if p.highwater is not None})
        for tp, why in stalled(last, now).items():
            logger.warning("partition %s[%d] is stuck, %s; reading it again from the commit",
                           tp.topic, tp.partition, why)
            WATCHDOG_STALLS.labels(tp.topic, str(tp.partition),
                                  why.split(":", 1)[0].replace(" ", "_")).inc()
            try:
                await _restart(consumer, tp, now[tp].committed)
            except Exception as exc:  # noqa: BLE001 - revoked, or the broker away: next check
                logger.warning("partition %s[%d] not sought back: %s", tp.topic,
                               tp.partition, exc)
            now.pop(tp)  # judged afresh at the next check
        last.clear()
        last.update(now)
