"""Faust 0.15.3 commits past records it never processed after a rebalance; this turns the
loss into a stall, which the watchdog (agents/watchdog.py) mends.

Faust's fetch loop (``Consumer._drain_messages``) keeps the last offset it read per
partition, and when the next record's offset jumps ahead of it by more than one it
records a *gap*: offsets it takes as done, so that commits can pass them (meant for
compacted topics and transaction markers). A rebalance seeks the partitions back to
their commits, and so sets that last offset back; but a record fetched before the
rebalance may still be on its way through the loop. It lands after the seek, ahead of
the new position: the loop takes the records in between as a gap, drops them when they
are fetched again (their offsets are now behind), and the commit passes them. Seen in
``tests/faults`` with the worker frozen past its session: 14 raw records of two
partitions never normalized, 39 events and 7 job states lost.

The worker's input topics are neither compacted nor written in transactions: their
offsets have no gaps. So a gap is only ever this race, and is not taken: the records
stay uncommitted, the partition's commit stands still, and the watchdog reads it again
from its commit. (Records retention deleted are still passed.) A site whose raw topic is
written by a transactional producer (markers take offsets) would see every such
partition stall; jobstream's edges do not use transactions.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from faust.transport.consumer import Consumer

__all__ = ["FAUST_ADD_GAP", "apply"]

logger = logging.getLogger(__name__)

#: Faust's own, kept for the test that shows the loss
FAUST_ADD_GAP = Consumer._add_gap  # noqa: SLF001


async def _refuse_gap(self: Any, tp: Any, offset_from: int, offset_to: int) -> None:
    """In place of Faust's ``Consumer._add_gap``: ``offset_from`` is the one after the
    last read, ``offset_to`` the record being read, so the records skipped are the ones
    in between. Records retention has deleted (a commit older than the log's start) are
    a gap indeed: those Faust may pass, or the partition would never commit again."""
    try:
        earliest = (await asyncio.wait_for(self.earliest_offsets(tp), 10.0)).get(tp, 0)
    except Exception:  # noqa: BLE001 - not known: nothing is taken as deleted
        earliest = 0
    if earliest > offset_from:
        await FAUST_ADD_GAP(self, tp, offset_from, min(offset_to, earliest - 1))
        offset_from = earliest
    if offset_from < offset_to:
        logger.warning("%s[%d]: offsets %d-%d skipped by the fetcher (a rebalance raced "
                       "it); not committed past them: the partition is read again from its "
                       "commit", tp.topic, tp.partition, offset_from, offset_to - 1)


def apply() -> None:
    """Refuse Faust's gaps in this process (idempotent)."""
    Consumer._add_gap = _refuse_gap  # type: ignore[method-assign]  # noqa: SLF001
