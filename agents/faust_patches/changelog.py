"""A Faust table whose changelog records someone else sends.

Faust's ``Table.send_changelog`` sends each changelog record with the app's producer
(``changelog_topic.send_soon``: aiokafka, in Python), and hands back the future of that
send, of which the table reads ``.message.partition`` (``Table.on_key_set``,
``on_key_del``) and whose callback keeps, in the partition's store, the offset recovery
starts from. The worker sends its changelog through its own outputs (:mod:`agents.table`,
which says why).

Patched, by subclassing: ``Table.send_changelog``, which here calls
:meth:`ChangelogTable.queue_changelog` and hands back an object with the one thing Faust's
table reads of the future. The subclass keeps the offsets itself, with
:meth:`ChangelogTable.persist_offset`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import faust
from faust.types import TP

__all__ = ["ChangelogTable"]


class ChangelogTable(faust.Table):  # type: ignore[misc]  # Faust's classes are untyped
    """A Faust table whose changelog records go to :meth:`queue_changelog` (module
    docstring)."""

    def send_changelog(self, partition: int | None, key: Any, value: Any,
                       key_serializer: Any = None, value_serializer: Any = None) -> _Queued:
        """In place of Faust's: queue the changelog record of one change."""
        if partition is None:
            raise RuntimeError("a jobs table change outside a record of its partition")
        self.queue_changelog(partition, key, value)
        return _Queued(partition)

    def queue_changelog(self, partition: int, key: Any, value: Any) -> None:
        """Send the changelog record of one change (keys and values as the table holds
        them) to ``partition`` of :attr:`changelog_topic`."""
        raise NotImplementedError

    def persist_offset(self, partition: int, offset: int) -> None:
        """Keep ``offset`` as the last changelog record of ``partition`` the store has
        (where recovery starts reading the changelog), as Faust's send callback does."""
        self.data.set_persisted_offset(TP(self.changelog_topic.get_topic_name(), partition),
                                       offset)


@dataclass(frozen=True, slots=True)
class _Queued:
    """What Faust's table reads of the future a changelog send returns: the partition,
    as ``.message.partition``."""

    partition: int

    @property
    def message(self) -> _Queued:
        return self
