"""A watchdog over the worker's input partitions: finds one that stopped, and restarts it.

Every ``worker.stall_check_s`` it compares, for each partition the agents read, how far
this worker has read and committed and what the broker last said is there (Faust's
monitor and consumer). A partition with records waiting whose commit has not moved since
the previous check is stuck, in one of two ways:

* ``not acknowledged``: records read past the commit, but one never reached the agent or
  never got acknowledged, and Faust commits only up to the first unacknowledged offset.
  Seen on restarts with a backlog (a SIGKILLed worker started again): Faust's fetcher runs
  while recovery seeks the stream partitions back to their commits, and two records went
  missing between the fetcher and the agent, so the partition never committed again;
* ``not fetching``: nothing read past the commit although the partition holds more (the
  consumer stopped asking for it; Faust's flow control has had such bugs, #629).

Either way the watchdog logs it and seeks the partition back to its commit: everything
after it is read again, which the agents take as duplicates (see agents/jobs.py), and the
missing records with it. Nothing is checked while the worker rebalances or recovers.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["PartitionProgress", "register", "stalled"]

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class PartitionProgress:
    read: int | None  # last offset read (None: nothing yet)
    committed: int | None  # next offset to read after a restart
    highwater: int | None  # end offset as the broker last said


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
            out[tp] = (f"not fetching: committed {done}, end {p.highwater}, "
                       f"read up to {p.read}")
        else:
            out[tp] = (f"not acknowledged: committed {done}, read up to {p.read}, "
                       f"end {p.highwater}")
    return out


def register(app: Any, topics: set[str], interval_s: float) -> None:
    """Watch the partitions of ``topics`` (the agents' inputs) every ``interval_s``."""
    last: dict[Any, PartitionProgress] = {}

    @app.timer(interval=interval_s)
    async def partition_watchdog() -> None:
        if app.rebalancing or getattr(app, "in_recovery", False):
            last.clear()
            return
        consumer, monitor = app.consumer, app.monitor
        now = {}
        for tp in consumer.assignment():
            if tp.topic not in topics:
                continue
            # the consumer knows the commit it started from; the monitor the ones since
            committed = monitor.tp_committed_offsets.get(tp)
            if committed is None:
                committed = consumer._committed_offset.get(tp)  # noqa: SLF001
            try:
                highwater = consumer.highwater(tp)
            except Exception:  # noqa: BLE001 - not fetched yet: nothing known
                highwater = None
            now[tp] = PartitionProgress(monitor.tp_read_offsets.get(tp), committed, highwater)
        for tp, why in stalled(last, now).items():
            logger.warning("partition %s[%d] is stuck, %s; reading it again from the commit",
                           tp.topic, tp.partition, why)
            await consumer.seek(tp, now[tp].committed or 0)
            now.pop(tp)  # judged afresh at the next check
        last.clear()
        last.update(now)
