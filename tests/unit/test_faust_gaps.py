"""Faust's gap after a rebalance race: committed past unread records by Faust's own code,
not with agents.faust_gaps applied."""

from __future__ import annotations

import asyncio
from collections import defaultdict
from types import SimpleNamespace
from typing import Any

from faust.transport.consumer import Consumer
from faust.types import TP
from intervaltree import IntervalTree

from agents import faust_gaps

RAW = TP("hpc.jobs.raw", 0)


def consumer_after_the_race(add_gap: Any, earliest: int = 0) -> Any:
    """The consumer's bookkeeping as the faults suite left it: committed 323; a record at
    337, fetched before the rebalance, went through after the seek (so 324-336 look
    skipped); 323-336 fetched again were dropped as behind; 337-399 read and acked.
    ``earliest``: the partition's first offset still kept."""

    async def earliest_offsets(*tps: TP) -> dict[TP, int]:
        return dict.fromkeys(tps, earliest)

    c = SimpleNamespace(_gap=defaultdict(IntervalTree), _acked=defaultdict(list),
                        _acked_index=defaultdict(set),
                        _committed_offset=defaultdict(lambda: None),
                        earliest_offsets=earliest_offsets)
    c._committed_offset[RAW] = 323
    asyncio.run(add_gap(c, RAW, 324, 336))
    c._acked[RAW].extend(range(337, 400))
    c._acked_index[RAW].update(range(337, 400))
    return c


def test_faust_commits_past_the_unread_records() -> None:
    c = consumer_after_the_race(faust_gaps.FAUST_ADD_GAP)
    assert Consumer._new_offset(c, RAW) == 400  # 323-336 never processed: lost


def test_with_the_gap_refused_the_commit_stands() -> None:
    faust_gaps.apply()
    c = consumer_after_the_race(Consumer._add_gap)
    assert Consumer._new_offset(c, RAW) is None
    assert not c._gap[RAW]


def test_records_retention_deleted_are_passed() -> None:
    """A commit older than the log's start: the records in between are gone for good, and
    only the ones still kept hold the commit back."""
    faust_gaps.apply()
    c = consumer_after_the_race(Consumer._add_gap, earliest=400)
    assert Consumer._new_offset(c, RAW) == 400
    c = consumer_after_the_race(Consumer._add_gap, earliest=330)
    assert Consumer._new_offset(c, RAW) == 330  # up to the first record still kept
