"""The jobs table: Faust's table, its changelog written through the worker's outputs.

Faust sends each changelog record with its own producer (aiokafka, in Python): a future,
a buffer task and a batch builder per record, about 6 % of the worker's main thread, and
when its buffer fills the agent waits for it ("producer buffer full"). Here a changelog
record is queued in librdkafka like every other output of the worker (:mod:`agents.outputs`)
and confirmed with the batch's other outputs before the batch's records are acknowledged,
so a crash loses no more than it did: the records are read again.

Faust keeps, in each partition's RocksDB, the offset of the last changelog record written:
recovery reads the changelog from there. It sets it in the send's callback; here
:meth:`JobsTable.persist_offsets` sets it after a batch's confirmation, from the offsets
Kafka gave in its delivery reports. Missing one only makes a recovery read more of the changelog.

The part of this that replaces Faust's ``send_changelog`` is
:class:`agents.faust_patches.ChangelogTable`, with what it relies on of Faust.
"""

from __future__ import annotations

from typing import Any

import faust

from agents.faust_patches import ChangelogTable
from agents.outputs import Outputs

__all__ = ["JobsTable"]


class JobsTable(ChangelogTable):
    """A Faust table whose changelog goes through ``outputs`` (module docstring)."""

    outputs: Outputs

    def __init__(self, app: faust.App, *, outputs: Outputs, **kwargs: Any) -> None:
        super().__init__(app, beacon=app.tables.beacon, **kwargs)
        self.outputs = outputs
        self._delivered: dict[int, int] = {}  # partition -> last offset Kafka confirmed

    def queue_changelog(self, partition: int, key: Any, value: Any) -> None:
        """Queue the changelog record of one change (keys and values are raw bytes)."""
        self.outputs.send(self.changelog_topic.get_topic_name(), key, value,
                          partition=partition, on_delivery=self._on_delivery)

    def _on_delivery(self, msg: Any) -> None:
        # librdkafka's thread of the confirmation: only a dict write here
        partition, offset = msg.partition(), msg.offset()
        if offset > self._delivered.get(partition, -1):
            self._delivered[partition] = offset

    def persist_offsets(self) -> None:
        """Keep the offsets of the changelog records Kafka confirmed in the store (after a
        batch's confirmation, in the event loop: RocksDB is the loop's)."""
        delivered, self._delivered = self._delivered, {}
        for partition, offset in delivered.items():
            self.persist_offset(partition, offset)
