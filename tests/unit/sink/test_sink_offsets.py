"""Contiguous acknowledged offsets per partition."""

from __future__ import annotations

import pytest

from pipeline.sink.offsets import OffsetTracker


def tracked(*offsets: int, topic: str = "t", partition: int = 0) -> OffsetTracker:
    tr = OffsetTracker()
    for o in offsets:
        tr.track(topic, partition, o)
    return tr


class TestOffsetTracker:
    def test_commit_is_last_contiguous_ack_plus_one(self) -> None:
        tr = tracked(10, 11, 12)
        tr.ack("t", 0, 10)
        tr.ack("t", 0, 11)
        assert tr.committable() == {("t", 0): 12}

    def test_a_gap_holds_back_everything_after_it(self) -> None:
        tr = tracked(10, 11, 12)
        tr.ack("t", 0, 11)
        tr.ack("t", 0, 12)
        assert tr.committable() == {}
        tr.ack("t", 0, 10)
        assert tr.committable() == {("t", 0): 13}

    def test_offsets_need_not_be_consecutive_numbers(self) -> None:
        tr = tracked(5, 9, 20)  # compaction and transaction markers leave holes
        tr.ack("t", 0, 5)
        tr.ack("t", 0, 9)
        assert tr.committable() == {("t", 0): 10}

    def test_partitions_are_independent(self) -> None:
        tr = tracked(1, 2)
        tr.track("t", 1, 7)
        tr.track("u", 0, 3)
        tr.ack("t", 1, 7)
        assert tr.committable() == {("t", 1): 8}

    def test_only_partitions_that_moved_are_committed_again(self) -> None:
        tr = tracked(1, 2)
        tr.ack("t", 0, 1)
        tr.committed(tr.committable())
        assert tr.committable() == {}
        tr.ack("t", 0, 2)
        assert tr.committable() == {("t", 0): 3}

    def test_committed_offsets_must_grow(self) -> None:
        tr = tracked(1)
        tr.ack("t", 0, 1)
        tr.committed({("t", 0): 2})
        with pytest.raises(ValueError, match="did not increase"):
            tr.committed({("t", 0): 2})

    def test_offsets_going_back_are_refused(self) -> None:
        tr = tracked(4)
        with pytest.raises(ValueError, match="went back"):
            tr.track("t", 0, 4)

    def test_ack_of_unknown_offset_is_refused(self) -> None:
        tr = tracked(4)
        with pytest.raises(ValueError, match="not in flight"):
            tr.ack("t", 0, 5)
        with pytest.raises(ValueError, match="not in flight"):
            tr.ack("t", 9, 4)

    def test_in_flight_counts_unacked_and_held_back(self) -> None:
        tr = tracked(1, 2, 3)
        tr.ack("t", 0, 2)
        assert tr.in_flight() == 3
        tr.ack("t", 0, 1)
        assert tr.in_flight() == 1

    def test_forget_allows_reading_again_after_revoke(self) -> None:
        tr = tracked(1, 2)
        tr.forget([("t", 0)])
        assert tr.in_flight() == 0 and tr.committable() == {}
        tr.track("t", 0, 1)  # read again from the committed offset by a new assignment
        tr.ack("t", 0, 1)
        assert tr.committable() == {("t", 0): 2}
