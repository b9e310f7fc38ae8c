"""A watchdog over the worker's input partitions: says so when one stops moving.

Every ``STALL_CHECK_S`` it compares, for each partition this worker reads, how far it has
read, committed and what the broker last said is there (Faust's monitor and consumer).
A partition with records waiting whose commit has not moved since the previous check is
logged as a warning, with which of two ways it is stuck:

* ``not fetching``: nothing read past the commit although the partition holds more (the
  consumer stopped asking for it; Faust's flow control has had such bugs, #629);
* ``not acknowledged``: records read but one of them never acknowledged (an agent that
  lost an event: Faust commits only up to the first unacknowledged offset).

It only reports; what to do about it is the operator's call (a restart re-reads from the
commit, losing nothing).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["STALL_CHECK_S", "PartitionProgress", "stalled"]

logger = logging.getLogger(__name__)

#: seconds between checks: long enough for a busy worker to commit in between
STALL_CHECK_S = 60.0


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


def register(app: Any, topics: set[str]) -> None:
    """Check the partitions of ``topics`` (the agents' inputs) on a timer of ``app``."""
    last: dict[Any, PartitionProgress] = {}

    @app.timer(interval=STALL_CHECK_S)
    async def partition_watchdog() -> None:
        consumer, monitor = app.consumer, app.monitor
        now = {}
        for tp in consumer.assignment():
            if tp.topic not in topics:
                continue
            committed = monitor.tp_committed_offsets.get(tp)
            try:
                highwater = consumer.highwater(tp)
            except Exception:  # noqa: BLE001 - not fetched yet: nothing known
                highwater = None
            now[tp] = PartitionProgress(monitor.tp_read_offsets.get(tp), committed, highwater)
        for tp, why in stalled(last, now).items():
            logger.warning("partition %s[%d] is stuck, %s", tp.topic, tp.partition, why)
        last.clear()
        last.update(now)
