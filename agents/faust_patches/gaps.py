"""Faust 0.15.3 commits past records it never processed after a rebalance; this turns the
loss into a stall, which the watchdog (agents/watchdog.py) mends.

Faust acknowledges records one by one and commits, per partition, the first run of
consecutive acknowledged offsets. Three ways let that run start past a record never
processed, all after a rebalance or a seek:

* **Gaps.** Faust's fetch loop (``Consumer._drain_messages``) keeps the last offset it read
  per partition, and when the next record's offset jumps ahead of it by more than one it
  records a *gap*: offsets it takes as done, so that commits can pass them (meant for
  compacted topics and transaction markers). A rebalance seeks the partitions back to
  their commits, and so sets that last offset back; but a record fetched before the
  rebalance may still be on its way through the loop. It lands after the seek, ahead of
  the new position: the loop takes the records in between as a gap, and drops them when
  they are fetched again (their offsets are now behind). Seen in ``tests/faults`` with
  the worker frozen past its session: 14 raw records never normalized.
* **The head of the run.** Faust checks that the run starts at the commit with
  ``min(acked) - committed > 1``, which passes a run starting one past the commit, and
  skips the check when nothing was committed (or 0).
* **A partition never committed.** aiokafka's ``seek_to_committed`` leaves a partition
  without a commit where its fetcher was. A rebalance clears the agents' buffers of
  records fetched and not processed yet; a partition this worker keeps and never
  committed is then read on after them, and the commit passes them. Seen in
  ``tests/faults`` (two workers, one killed): the survivor's partitions had no commit
  yet (its first outputs waited for the brokers), and 360-616 events were never folded.

The worker's input topics are neither compacted nor written in transactions: their
offsets have no gaps. So here a commit only ever starts at the partition's commit, or at
its first record when it has none (the group reads from the earliest offset): a
partition without a commit is sought to its first record after every rebalance, a gap is
not taken, and a run that does not start at the commit is not committed: the
partition's commit stands still, and the watchdog reads it again from its commit.
Records retention deleted are passed. A site whose raw topic is written by a
transactional producer (markers take offsets) would see every such partition stall;
jobstream's edges do not use transactions.

Patched, process-wide: ``Consumer._add_gap``, ``Consumer._new_offset`` and
``Consumer.perform_seek``. :func:`seek` is how the rest of the worker seeks a partition
(the watchdog), so that the commits know where a partition without one starts.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from typing import Any

from faust.transport.consumer import Consumer

__all__ = ["FAUST_ADD_GAP", "FAUST_NEW_OFFSET", "FAUST_PERFORM_SEEK", "apply", "seek"]

logger = logging.getLogger(__name__)

#: Faust's own, wrapped, and kept for the contract tests that show the loss
FAUST_ADD_GAP = Consumer._add_gap
FAUST_NEW_OFFSET = Consumer._new_offset
FAUST_PERFORM_SEEK = Consumer.perform_seek


def _starts(consumer: Any) -> dict[Any, int]:
    """Where the commit of each partition without one must start (its first record when
    this worker sought it there)."""
    starts: dict[Any, int] = consumer.__dict__.setdefault("_jobstream_starts", {})
    return starts


def _head(consumer: Any, tp: Any) -> int | None:
    """The offset a commit of ``tp`` must start at: its commit, or where it was sought to
    without one (None: not known)."""
    committed = consumer._committed_offset[tp]
    return committed if committed is not None else _starts(consumer).get(tp)


async def _earliest(consumer: Any, *tps: Any) -> Mapping[Any, int]:
    try:
        return await asyncio.wait_for(consumer.earliest_offsets(*tps), 10.0)
    except Exception:  # noqa: BLE001 - not known: nothing is taken as deleted
        return {}


async def seek(consumer: Any, offsets: Mapping[Any, int | None]) -> None:
    """Read each partition again from ``offsets`` (None: from its first record, as the group
    does without a commit), in the consumer's thread as Faust's own seeks (aiokafka's
    fetcher belongs to that thread: ``Consumer.seek`` changes it from this one, which
    once raced the fetcher's ``fetched_records`` and crashed the worker)."""
    fresh = [tp for tp, offset in offsets.items() if offset is None]
    earliest = await consumer.earliest_offsets(*fresh) if fresh else {}
    to = {tp: offset if offset is not None else earliest.get(tp, 0)
          for tp, offset in offsets.items()}
    await consumer._thread.seek_wait(to)
    _starts(consumer).update({tp: to[tp] for tp in fresh})


async def _perform_seek(self: Any) -> None:
    """In place of Faust's ``Consumer.perform_seek`` (after every rebalance): also seek the
    agents' partitions that have no commit to their first record."""
    await FAUST_PERFORM_SEEK(self)
    acks = self.app.topics.acks_enabled_for
    fresh = [tp for tp in self.assignment()
             if acks(tp.topic) and self._committed_offset[tp] is None]
    if fresh:
        await seek(self, dict.fromkeys(fresh))


def _new_offset(self: Any, tp: Any) -> int | None:
    """In place of Faust's ``Consumer._new_offset``: no commit unless the acknowledged
    records start at the partition's commit (or at a gap Faust may pass). Where that is
    not known (the seek after a rebalance failed), nothing is committed: the watchdog
    seeks the partition, and so learns it."""
    acked = self._acked[tp]
    if acked:
        head = _head(self, tp)
        if head is None or (min(acked) > head and not self._gap[tp].overlaps_point(head)):
            return None
    new: int | None = FAUST_NEW_OFFSET(self, tp)
    return new


async def _refuse_gap(self: Any, tp: Any, offset_from: int, offset_to: int) -> None:
    """In place of Faust's ``Consumer._add_gap``: ``offset_to`` is the record being read,
    and none before it since the commit has been (``offset_from`` is Faust's idea of the
    first one skipped, one past the commit after a seek). Records retention has deleted
    (a commit older than the log's start) are a gap indeed: those may be passed, or the
    partition would never commit again."""
    head = _head(self, tp)
    start = offset_from if head is None else min(head, offset_from)
    earliest = (await _earliest(self, tp)).get(tp, 0)
    if earliest > start:
        gaps = self._gap[tp]
        gaps.addi(start, min(offset_to, earliest))
        gaps.merge_overlaps()
        start = earliest
    if start < offset_to:
        logger.warning("%s[%d]: offsets %d-%d skipped by the fetcher (a rebalance raced "
                       "it); not committed past them: the partition is read again from its "
                       "commit", tp.topic, tp.partition, start, offset_to - 1)


def apply() -> None:
    """Keep Faust from committing past unprocessed records in this process (idempotent)."""
    Consumer._add_gap = _refuse_gap  # type: ignore[method-assign]
    Consumer._new_offset = _new_offset  # type: ignore[method-assign]
    Consumer.perform_seek = _perform_seek  # type: ignore[method-assign]
