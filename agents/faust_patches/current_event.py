"""Faust's current event, set by the worker for records that reach it without one.

A Faust table reads and writes the partition of the *current event*
(``faust.streams.current_event()``: ``Table.partition_for_key`` takes
``.message.partition`` and checks ``.message.topic``), and refuses a write outside one.
Faust sets it in its stream, before each event reaches the agent; the jobs stage's records
never go through a stream (:mod:`agents.intake`) and a batch is written after its records
were read. Faust has no public way to set it: it is the context variable
``faust.streams._current_event``, which holds a weak reference to the event.
"""

from __future__ import annotations

import weakref
from contextvars import Token
from typing import Any

from faust.streams import _current_event

__all__ = ["reset_current_event", "set_current_event"]


def set_current_event(event: Any) -> Token[Any]:
    """Make ``event`` (anything with a ``.message`` and weak references) Faust's current
    event in this context, until :func:`reset_current_event` with the token returned."""
    return _current_event.set(weakref.ref(event))


def reset_current_event(token: Token[Any]) -> None:
    """Make the current event again what it was before :func:`set_current_event`."""
    _current_event.reset(token)
