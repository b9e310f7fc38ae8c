"""Where a record the sink cannot write goes: each bulk item's fate, and its dead letter.

A document Elasticsearch wrote or already had is counted; one it rejected for its content,
a record that could not be converted and one set aside because handling it killed the sink
(``crashed-sink``) are dead-lettered with their original key and value
(:class:`~pipeline.sink.deadletter.DeadLetters` makes sure the DLQ can take them); one
that failed otherwise is kept, so that its input is not committed and the flush raises.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from pipeline.sink.client import ItemResult, Outcome
from pipeline.sink.consumer import Record
from pipeline.sink.deadletter import DeadLetters
from pipeline.sink.stats import SinkStats

__all__ = ["CRASHED", "Router"]

logger = logging.getLogger(__name__)

#: DLQ reason of a record set aside because handling it killed the sink.
CRASHED = "crashed-sink"


class Router:
    """Counts each record's fate in ``stats``; sends the dead letters to ``dead``."""

    def __init__(self, dead: DeadLetters, stats: SinkStats) -> None:
        self._dead = dead
        self._stats = stats

    def settle(self, result: ItemResult, failed: dict[str, str]) -> None:
        """One bulk item's fate; a failed one is added to ``failed`` (where -> error)."""
        rec: Record = result.action.origin
        if result.outcome is Outcome.OK:
            self._stats.written += 1
        elif result.outcome is Outcome.DUPLICATE:
            self._stats.duplicates += 1
            logger.debug("already applied %s id=%s", rec.where, result.action.doc_id)
        elif result.outcome is Outcome.REJECT:
            self.dead_letter(rec, result.error_type, result.error)
        else:
            logger.error("write failed %s index=%s id=%s status=%d %s: %s", rec.where,
                         result.action.index, result.action.doc_id, result.status,
                         result.error_type, result.error)
            failed[rec.where] = f"{result.status} {result.error_type}: {result.error}"

    def dead_letter(self, rec: Record, reason: str, error: str, *,
                    drop_value: str = "") -> None:
        logger.warning("dead letter %s reason=%s: %s", rec.where, reason,
                       error[:300].encode("utf-8", "backslashreplace").decode())
        self._stats.dead_lettered += 1
        self._dead.send(rec.msg.key(), rec.msg.value(), reason, error,
                        {"origin": rec.where}, drop_value=drop_value)

    def dead_letter_crashed(self, rec: Record, deaths: int, doing: str,
                            needed: int) -> None:
        """Set aside a record that killed the sink; if dead-lettering it killed the sink
        too (more deaths than it took to get here), without its value."""
        drop = "dead-lettering it whole killed the sink" if deaths > needed else ""
        self.dead_letter(rec, CRASHED, f"the sink died {deaths} time(s) in a row while "
                                       f"{doing} this record: it is set aside so that the "
                                       "stream goes on", drop_value=drop)

    def deliver(self, wait: Callable[[float], None]) -> None:
        """Step 6: a DLQ record not yet in Kafka must not have its input committed."""
        self._dead.deliver(lambda: wait(0.0))
