"""Contract of agents.faust_patches.gaps: Faust committing past records it never processed
(after a rebalance race, at the head of the acknowledged run, on a partition never
committed), shown by Faust's own ``Consumer._add_gap``, ``_new_offset`` and
``perform_seek``; and the patched ones holding the commit back."""

from __future__ import annotations

import asyncio
from collections import defaultdict
from types import SimpleNamespace
from typing import Any

from faust.transport.consumer import Consumer
from faust.types import TP
from intervaltree import IntervalTree

from agents.faust_patches import gaps

RAW = TP("hpc.jobs.raw", 0)
RAW_1 = TP("hpc.jobs.raw", 1)


def bookkeeping(earliest_offsets: Any = None, **more: Any) -> Any:
    """Faust's per-partition bookkeeping of acknowledged records, nothing committed."""
    return SimpleNamespace(_gap=defaultdict(IntervalTree), _acked=defaultdict(list),
                           _acked_index=defaultdict(set),
                           _committed_offset=defaultdict(lambda: None),
                           earliest_offsets=earliest_offsets, **more)


def acked(c: Any, offsets: range) -> Any:
    c._acked[RAW].extend(offsets)
    c._acked_index[RAW].update(offsets)
    return c


def consumer_after_the_race(add_gap: Any, earliest: int = 0) -> Any:
    """The consumer's bookkeeping as the faults suite left it: committed 323; a record at
    337, fetched before the rebalance, went through after the seek (so 324-336 look
    skipped); 323-336 fetched again were dropped as behind; 337-399 read and acked.
    ``earliest``: the partition's first offset still kept."""

    async def earliest_offsets(*tps: TP) -> dict[TP, int]:
        return dict.fromkeys(tps, earliest)

    c = bookkeeping(earliest_offsets)
    c._committed_offset[RAW] = 323
    asyncio.run(add_gap(c, RAW, 324, 337))  # as the fetch loop calls it
    return acked(c, range(337, 400))


def test_faust_commits_past_the_unread_records() -> None:
    c = consumer_after_the_race(gaps.FAUST_ADD_GAP)
    # 323-336 never processed, passed (338: Faust's gap also holds 337, acked twice)
    assert gaps.FAUST_NEW_OFFSET(c, RAW) == 338


def test_with_the_gap_refused_the_commit_stands() -> None:
    gaps.apply()
    c = consumer_after_the_race(Consumer._add_gap)
    assert Consumer._new_offset(c, RAW) is None
    assert not c._gap[RAW]


def test_records_retention_deleted_are_passed() -> None:
    """A commit older than the log's start: the records in between are gone for good, and
    only the ones still kept hold the commit back."""
    gaps.apply()
    c = consumer_after_the_race(Consumer._add_gap, earliest=400)
    assert Consumer._new_offset(c, RAW) == 400
    c = consumer_after_the_race(Consumer._add_gap, earliest=330)
    assert Consumer._new_offset(c, RAW) == 330  # up to the first record still kept


def test_a_run_starting_one_past_the_commit_is_not_committed() -> None:
    """Record 323 dropped without a gap (the record read after the seek was 324): Faust's
    ``min(acked) - committed > 1`` lets the commit pass it."""
    def after_the_seek() -> Any:
        c = bookkeeping()
        c._committed_offset[RAW] = 323
        return acked(c, range(324, 400))

    assert gaps.FAUST_NEW_OFFSET(after_the_seek(), RAW) == 400
    gaps.apply()
    c = after_the_seek()
    assert Consumer._new_offset(c, RAW) is None
    acked(c, range(323, 324))
    assert Consumer._new_offset(c, RAW) == 400


def test_a_partition_never_committed_commits_from_its_first_record() -> None:
    """The agents' buffers cleared by a rebalance held records 0-429 of a partition never
    committed: Faust commits the rest and passes them; sought to its first record, the
    partition commits only once they were read again."""
    assert gaps.FAUST_NEW_OFFSET(acked(bookkeeping(), range(430, 500)), RAW) == 500
    c = acked(bookkeeping(_jobstream_starts={RAW: 0}), range(430, 500))
    gaps.apply()
    # not sought since the rebalance: where it starts is not known, nothing is committed
    assert Consumer._new_offset(acked(bookkeeping(), range(0, 500)), RAW) is None
    assert Consumer._new_offset(c, RAW) is None
    acked(c, range(0, 430))
    assert Consumer._new_offset(c, RAW) == 500


def test_after_a_rebalance_partitions_never_committed_are_read_from_their_start() -> None:
    """aiokafka's seek to the commits leaves a partition without one where it was."""
    changelog = TP("jobs-changelog", 0)
    sought: dict[TP, int] = {}

    async def seek_to_committed() -> dict[TP, int | None]:
        return {RAW: None, RAW_1: 57, changelog: None}

    async def earliest_offsets(*tps: TP) -> dict[TP, int]:
        return dict.fromkeys(tps, 12)

    async def seek_wait(offsets: dict[TP, int]) -> None:
        sought.update(offsets)

    c = bookkeeping(earliest_offsets, _read_offset={}, seek_to_committed=seek_to_committed,
                    assignment=lambda: {RAW, RAW_1, changelog},
                    _thread=SimpleNamespace(seek_wait=seek_wait),
                    app=SimpleNamespace(topics=SimpleNamespace(
                        acks_enabled_for=lambda topic: topic == RAW.topic)))
    gaps.apply()
    asyncio.run(Consumer.perform_seek(c))
    assert sought == {RAW: 12}  # the commit of RAW_1 stands; the changelog is the table's
    assert c._committed_offset[RAW_1] == 57 and c._jobstream_starts == {RAW: 12}
    acked(c, range(13, 20))
    assert Consumer._new_offset(c, RAW) is None


def test_fausts_perform_seek_leaves_a_partition_without_a_commit_where_it_was() -> None:
    """Faust's own seek after a rebalance: a partition the group never committed is not
    sought (and has no commit of Faust's), which is what the patched one mends."""
    sought: list[Any] = []

    async def seek_to_committed() -> dict[TP, int | None]:
        return {RAW: None, RAW_1: 57}

    c = bookkeeping(_read_offset={RAW: 430}, seek_to_committed=seek_to_committed,
                    _thread=SimpleNamespace(seek_wait=lambda offsets: sought.append(offsets)))
    asyncio.run(gaps.FAUST_PERFORM_SEEK(c))
    assert sought == []
    assert c._read_offset == {RAW: None, RAW_1: 57}
    assert c._committed_offset[RAW] is None and c._committed_offset[RAW_1] == 57
