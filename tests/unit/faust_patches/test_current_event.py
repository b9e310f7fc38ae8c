"""Contract of agents.faust_patches.current_event: Faust's current event is the context
variable ``faust.streams._current_event`` holding a weak reference, and a table takes the
partition of its ``.message``."""

from __future__ import annotations

import weakref
from types import SimpleNamespace

import faust
import pytest
from faust.streams import _current_event, current_event

from agents.faust_patches import reset_current_event, set_current_event


class Event:
    def __init__(self, topic: str, partition: int) -> None:
        self.message = SimpleNamespace(topic=topic, partition=partition)


def test_fausts_current_event_is_a_weak_reference_in_a_context_variable() -> None:
    event = Event("raw", 3)
    token = _current_event.set(weakref.ref(event))
    try:
        assert current_event() is event
    finally:
        _current_event.reset(token)


def test_the_event_set_is_the_one_a_table_writes_to() -> None:
    app = faust.App("current-event", store="memory://", autodiscover=False)
    table = app.Table("jobs", default=None, partitions=4, key_type=bytes, value_type=bytes)
    assert current_event() is None
    with pytest.raises(TypeError, match="outside of stream"):
        table.partition_for_key(b"k")
    event = Event("raw", 3)
    token = set_current_event(event)
    try:
        assert current_event() is event
        assert table.partition_for_key(b"k") == 3
    finally:
        reset_current_event(token)
    assert current_event() is None
