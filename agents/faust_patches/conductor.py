"""Messages of chosen topics handed by the conductor to a handler of the worker's own.

Faust delivers a fetched message to an agent through its conductor: a handler per
partition, which the conductor builds in ``Conductor._build_handler``, decodes the message
into an event, puts that in the agent's channel and wakes the agent's stream. The jobs
stage needs none of it (:mod:`agents.intake`), and Faust has no setting for a handler of
one's own.

Patched, per app: its conductor's ``_build_handler`` (an attribute of that one object, not
of the class), which gives the handler :func:`hand_over` registered for a partition's
topic, and Faust's own handler to every other topic (the table's changelog, the
assignor's).
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from typing import Any

__all__ = ["Handler", "apply", "hand_over"]

#: what the fetch loop calls with each message of a partition
Handler = Callable[[Any], Coroutine[Any, Any, None]]


def apply(app: Any) -> dict[str, Handler]:
    """Make ``app``'s conductor build its partitions' handlers from the registry this
    returns, topic -> handler (idempotent: the same registry each time)."""
    conductor = app.topics
    handlers: dict[str, Handler] | None = getattr(conductor, "jobstream_handlers", None)
    if handlers is not None:
        return handlers
    handlers = conductor.jobstream_handlers = {}
    faust_build = conductor._build_handler

    def build_handler(tp: Any, channels: Any) -> Handler:
        handler = handlers.get(tp.topic)
        return handler if handler is not None else faust_build(tp, channels)

    conductor._build_handler = build_handler
    return handlers


def hand_over(app: Any, topics: set[str], handler: Handler) -> None:
    """Hand every message of ``topics`` that ``app`` fetches to ``handler``, as the fetch
    loop reads it (the handler then does what Faust's did: :mod:`agents.intake`)."""
    apply(app).update(dict.fromkeys(topics, handler))
