"""What the jobs stage emits: each event to ``hpc.jobs.events`` as it is folded, each
document of a job's state to ``hpc.jobs.state`` and each changed node's document to
``hpc.nodes.state`` at the batch's end (node samples to
``hpc.jobs.events`` thinned to ``worker.usage_series_s``, the site's bound on the usage
series); both enriched
(:mod:`pipeline.core.enrich`), anonymized (:mod:`pipeline.core.anonymize`) and encoded
with the topic's schema (:class:`pipeline.codecs.wire.Wire`).

An event's free text is anonymized with every identity its job's events state, so the
job's fold is asked for only when the anonymizer is active. A job state over
``worker.max_event_bytes``, or one the state topic's schema cannot hold, goes to the DLQ
(:meth:`agents.dead_letters.DeadLetters.state`) and the job's other documents go on.
A node document is anonymized by the policy of a job's ``user`` (its ``reason_by``), and
encoded with the ``NodeState`` schema, framed as a job state is; one it cannot hold goes
to the DLQ the same way. Each node event folded goes to ``hpc.nodes.events`` as it is
folded, as a job's to ``hpc.jobs.events``: its document
(:func:`pipeline.fold.nodes.event_document`, a function of the event alone) anonymized as
a node document is, context included, with the ``NodeEvent`` schema.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from agents.context import Sender
from agents.dead_letters import DeadLetters
from pipeline.codecs.wire import Wire
from pipeline.core.anonymize import IDENTITY_FIELDS, Anonymizer
from pipeline.core.enrich import Enricher
from pipeline.core.model import JobEvent
from pipeline.core.nodes import NodeEvent
from pipeline.fold import JobFold
from pipeline.fold.node_state import NodeFold
from pipeline.fold.nodes import event_document
from pipeline.fold.usage import USAGE_EVENT, keeps_point
from pipeline.runtime.errors import ParseError

__all__ = ["Emitter"]


class Emitter:
    """Sends a job's events and states to ``events`` and ``state`` (module docstring)."""

    def __init__(self, wire: Wire, enricher: Enricher, anonymizer: Anonymizer,
                 outputs: Sender, dead: DeadLetters, *, events: str, state: str, nodes: str,
                 node_events: str, max_bytes: int, usage_series_s: float = 0.0) -> None:
        self.wire, self.enricher, self.anonymizer = wire, enricher, anonymizer
        self.outputs, self.dead = outputs, dead
        self.events, self.state, self.nodes, self.max_bytes = events, state, nodes, max_bytes
        self.node_events = node_events
        self.usage_series_s = usage_series_s

    def event(self, key: bytes, ev: JobEvent, job: Callable[[bytes], JobFold]) -> None:
        """One event of the job ``key`` (``job(key)``: its fold, for the identities)."""
        if ev.event == USAGE_EVENT and not keeps_point(ev.context, self.usage_series_s):
            return
        event = ev.to_dict()
        event["facts"] = self.enricher.facts(event["facts"])
        known = self._identities(job(key)) if self.anonymizer.active else ()
        event = self.anonymizer.event(event, known)
        self.outputs.send(self.events, key, self.wire.encode_event(event))

    def node_event(self, key: bytes, ev: NodeEvent) -> None:
        """One event of the node ``key`` (``cluster:node``); ParseError if the schema cannot
        hold it (the stage sends the event to the DLQ)."""
        event = self.anonymizer.node_event(event_document(ev))
        self.outputs.send(self.node_events, key, self.wire.encode_node_event(event))

    def states(self, key: bytes, message: Any, fold: JobFold
               ) -> tuple[int, dict[str, Any] | None]:
        """Every document of the job's state (``message``: the job's last record read, for
        a DLQ record); the number sent and the last document sent (None: none)."""
        sent = 0
        written = None
        for doc in fold.documents():
            doc = self.anonymizer.document(self.enricher.facts(doc))
            value = self._encoded(key, message, doc, self.wire.encode_state, "job")
            if value is None:
                continue
            self.outputs.send(self.state, key, value)
            sent += 1
            written = doc
        return sent, written

    def node_state(self, key: bytes, message: Any, fold: NodeFold
                   ) -> tuple[int, dict[str, Any] | None]:
        """The node's document (``message``: the node's last record read, for a DLQ
        record): the number sent (0 or 1) and the document sent (None: none)."""
        doc = fold.document()
        if doc is None:
            return 0, None
        doc = self.anonymizer.node_document(doc)
        value = self._encoded(key, message, doc, self.wire.encode_node_state, "node")
        if value is None:
            return 0, None
        self.outputs.send(self.nodes, key, value)
        return 1, doc

    def _encoded(self, key: bytes, message: Any, doc: dict[str, Any],
                 encode: Callable[[dict[str, Any]], bytes], what: str) -> bytes | None:
        """A job's or node's (``what``) state document encoded; None once it went to the
        DLQ, its schema unable to hold it or its value over ``worker.max_event_bytes``."""
        try:
            value = encode(doc)
            if len(value) > self.max_bytes:
                raise ParseError("too-large", f"the {what} state is {len(value)} bytes, over "
                                              f"worker.max_event_bytes ({self.max_bytes})")
        except ParseError as exc:
            self.dead.state(key, message, doc, exc, what=what)
            return None
        return value

    def _identities(self, fold: JobFold) -> set[tuple[str, Any]]:
        """(field, value) of every identity a job's events state (enriched), for the
        anonymization of free text."""
        facts = self.enricher.facts
        return {(f, v) for ev in fold.events() for f, v in facts(ev.facts).items()
                if f in IDENTITY_FIELDS and v is not None}
