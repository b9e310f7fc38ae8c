"""Contract of agents.faust_patches.changelog: Faust's table sends its changelog with the
app's producer and reads ``.message.partition`` of what the send hands back; with the
patch, the records go to ``queue_changelog`` and the table goes on as before."""

from __future__ import annotations

import inspect
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import faust
import pytest
from faust.types import TP

from agents.faust_patches import ChangelogTable, reset_current_event, set_current_event


class Event:
    def __init__(self, topic: str, partition: int) -> None:
        self.message = SimpleNamespace(topic=topic, partition=partition)


class Recording(ChangelogTable):
    def __init__(self, app: faust.App, **kwargs: Any) -> None:
        super().__init__(app, beacon=app.tables.beacon, **kwargs)
        self.queued: list[tuple[int, Any, Any]] = []

    def queue_changelog(self, partition: int, key: Any, value: Any) -> None:
        self.queued.append((partition, key, value))


def _app(name: str) -> faust.App:
    return faust.App(name, store="memory://", autodiscover=False)


def _table(app: faust.App, cls: Any = faust.Table) -> Any:
    kwargs = dict(name="jobs", default=None, partitions=4, key_type=bytes, value_type=bytes)
    if cls is faust.Table:
        return app.Table(**kwargs)
    return app.tables.add(cls(app, **kwargs))


def test_fausts_send_changelog_sends_with_the_apps_producer() -> None:
    table = _table(_app("changelog-contract"))
    sent: list[dict[str, Any]] = []

    class Topic:
        def send_soon(self, **kwargs: Any) -> Any:
            sent.append(kwargs)
            return SimpleNamespace(message=SimpleNamespace(partition=kwargs["partition"]))

    table.changelog_topic = Topic()
    table.send_changelog(2, b"k", b"v")
    assert sent[0]["partition"] == 2 and sent[0]["callback"] == table._on_changelog_sent
    # ... whose callback keeps the offset recovery starts from
    assert "self.data.set_persisted_offset(" in inspect.getsource(table._on_changelog_sent)


@pytest.mark.parametrize("change", ["set", "del"])
def test_a_table_change_sends_to_the_current_events_partition_and_reads_the_result(
        change: str) -> None:
    """``on_key_set`` / ``on_key_del`` take the partition of the current event and read
    ``.message.partition`` of what ``send_changelog`` hands back."""
    table = _table(_app(f"changelog-{change}"), Recording)
    event = Event("raw", 3)  # held: Faust keeps a weak reference only
    token = set_current_event(event)
    try:
        if change == "set":
            table.on_key_set(b"k", b"v")
        else:
            table.on_key_del(b"k")
    finally:
        reset_current_event(token)
    assert table.queued == [(3, b"k", b"v" if change == "set" else None)]


def test_a_change_outside_a_record_of_a_partition_is_refused() -> None:
    table = _table(_app("changelog-none"), Recording)
    with pytest.raises(RuntimeError, match="outside a record"):
        table.send_changelog(None, b"k", b"v")


def test_the_persisted_offset_is_the_stores(tmp_path: Path) -> None:
    """Where Faust's send callback keeps it: recovery reads the changelog from there."""
    app = faust.App("changelog-offset", store="rocksdb://", datadir=str(tmp_path),
                    autodiscover=False)
    table = _table(app, Recording)
    table.persist_offset(1, 41)
    tp = TP(table.changelog_topic.get_topic_name(), 1)
    assert table.data.persisted_offset(tp) == 41
