"""Which Kafka offsets may be committed: the contiguous acknowledged prefix per partition.

Records are *tracked* in the order the consumer hands them out and *acknowledged* once
their fate is sealed (Elasticsearch acknowledged the write, or the record is in the DLQ,
or it needed no write). A partition may be committed up to, not past, its first record
that is not acknowledged: Kafka's committed offset is the next one to read, so it is the
last contiguous acknowledged offset + 1 (as Kafka Connect's AsyncOffsetTracker does).

Offsets within a partition need not be consecutive numbers (compaction, transaction
markers): contiguity is in the order of arrival.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field

__all__ = ["OffsetTracker", "TopicPartition"]

#: (topic, partition)
TopicPartition = tuple[str, int]


@dataclass
class _Partition:
    tracked: deque[int] = field(default_factory=deque)
    acked: set[int] = field(default_factory=set)
    #: highest offset tracked so far (-1: none)
    last_tracked: int = -1
    #: last offset of the contiguous acknowledged prefix (-1: none)
    last_done: int = -1
    #: offset last committed (the next to read); -1: nothing committed by us
    committed: int = -1

    def advance(self) -> None:
        while self.tracked and self.tracked[0] in self.acked:
            offset = self.tracked.popleft()
            self.acked.discard(offset)
            self.last_done = offset


class OffsetTracker:
    """Contiguous acknowledged offsets per partition."""

    def __init__(self) -> None:
        self._parts: dict[TopicPartition, _Partition] = {}

    def track(self, topic: str, partition: int, offset: int) -> None:
        """A record was received; it holds back commits until acknowledged."""
        part = self._parts.setdefault((topic, partition), _Partition())
        if offset <= part.last_tracked:
            raise ValueError(f"offset went back on {topic}[{partition}]: {offset} after "
                             f"{part.last_tracked} (forget the partition after a seek)")
        part.tracked.append(offset)
        part.last_tracked = offset

    def ack(self, topic: str, partition: int, offset: int) -> None:
        """The record's fate is sealed."""
        part = self._parts.get((topic, partition))
        if part is None or offset > part.last_tracked or offset <= part.last_done:
            raise ValueError(f"ack of an offset not in flight: {topic}[{partition}]@{offset}")
        part.acked.add(offset)
        part.advance()

    def committable(self) -> dict[TopicPartition, int]:
        """Per partition that moved since the last commit: the offset to commit."""
        return {tp: p.last_done + 1 for tp, p in self._parts.items()
                if p.last_done >= 0 and p.last_done + 1 > p.committed}

    def committed(self, offsets: dict[TopicPartition, int]) -> None:
        """Record that ``offsets`` were committed."""
        for tp, offset in offsets.items():
            part = self._parts.get(tp)
            if part is None:
                continue
            if offset <= part.committed:
                raise ValueError(f"committed offset did not increase on {tp[0]}[{tp[1]}]: "
                                 f"{offset} after {part.committed}")
            part.committed = offset

    def acknowledged_up_to(self, tp: TopicPartition) -> int | None:
        """The first offset of ``tp`` not acknowledged yet (everything before it is done);
        None when nothing of it was tracked."""
        part = self._parts.get(tp)
        if part is None:
            return None
        if part.tracked:
            return part.tracked[0]
        return part.last_done + 1 if part.last_done >= 0 else None

    def in_flight(self) -> int:
        """Records tracked and not yet acknowledged or passed."""
        return sum(len(p.tracked) for p in self._parts.values())

    def forget(self, partitions: Iterable[TopicPartition]) -> None:
        """Drop partitions (revoked, or about to be re-read from the committed offset)."""
        for tp in partitions:
            self._parts.pop(tp, None)
