"""The jobs stage's DLQ records: what goes to ``topics.dlq`` when a record, one job of it,
an event or a job state cannot go on, and why (the headers of
:func:`agents.canonical.dlq_headers`, each stage of the jobs stage by its name).

Nothing bad stops the stream: a raw record that gives no events (stage ``normalize``, the
record as it came), one bad job of a multi-job record (its own JSON, with ``part``), an
event that cannot be folded or emitted (stage ``fold``, its canonical JSON), a job state
that cannot be written (stage ``state``, its latest document; a node's state likewise), a
record the worker died
handling in each of its last runs (``crashed-worker``). Each is logged and counted
(``DLQ_RECORDS`` by stage and reason).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from agents.canonical import Event, Rejected, RejectedPart, dlq_headers, encode_item, part_headers
from agents.context import Sender
from pipeline.core.jsontext import dumps
from pipeline.core.model import JobEvent
from pipeline.fold import JobFold, StateTooLarge
from pipeline.fold.node_state import NodeFold
from pipeline.runtime.errors import ParseError
from pipeline.runtime.metrics import DLQ_RECORDS

__all__ = ["DeadLetters"]

logger = logging.getLogger(__name__)


class DeadLetters:
    """Sends the jobs stage's DLQ records through ``outputs`` to ``topic``."""

    def __init__(self, outputs: Sender, topic: str) -> None:
        self.outputs, self.topic = outputs, topic

    def poison(self, message: Any, deaths: int) -> None:
        """A record the worker died handling in each of its last ``deaths`` runs: to the
        DLQ as it came, reason ``crashed-worker``."""
        rejected = Rejected("crashed-worker", f"the worker died while handling this record "
                                              f"in each of its last {deaths} runs")
        logger.error("record %s[%d]@%d: %s; to %s", message.topic, message.partition,
                     message.offset, rejected.error, self.topic)
        self.outputs.send(self.topic, message.key, message.value,
                          dlq_headers(message, rejected))
        DLQ_RECORDS.labels("normalize", rejected.reason).inc()

    def raw(self, message: Any, rejected: Rejected) -> None:
        """A raw record that gives no events: to the DLQ as it came."""
        logger.warning("bad raw record %s[%d]@%d: %s", message.topic, message.partition,
                       message.offset, rejected.error,
                       exc_info=rejected.__cause__ if rejected.reason == "internal-error"
                       else None)
        self.outputs.send(self.topic, message.key, message.value,
                          dlq_headers(message, rejected))
        DLQ_RECORDS.labels("normalize", rejected.reason).inc()

    def part(self, message: Any, part: RejectedPart) -> None:
        """One bad job of a multi-job raw record: that job to the DLQ, its neighbours go
        on."""
        logger.warning("bad job %d of raw record %s[%d]@%d: %s", part.index,
                       message.topic, message.partition, message.offset,
                       part.message, exc_info=part.cause)
        self.outputs.send(self.topic, message.key, part.payload, part_headers(message, part))
        DLQ_RECORDS.labels("normalize", part.reason).inc()

    def event(self, key: bytes, message: Any, ev: Event, exc: Exception) -> None:
        """An event that failed to fold or emit (a bug, a value the events topic's schema
        cannot hold): to the DLQ as its canonical JSON (a node event's in its wrapper),
        stage ``fold``."""
        reason = exc.reason if isinstance(exc, ParseError) else "internal-error"
        logger.error("event %s of %s %s failed, to %s: %s", ev.event_id,
                     "job" if isinstance(ev, JobEvent) else "node",
                     key.decode(errors="replace"), self.topic, exc,
                     exc_info=None if isinstance(exc, ParseError) else exc)
        self.outputs.send(self.topic, key, encode_item(ev), dlq_headers(
            message, Rejected(reason, f"{type(exc).__name__}: {exc}"), stage="fold"))
        DLQ_RECORDS.labels("fold", reason).inc()

    def job(self, key: bytes, message: Any, fold: JobFold | None, exc: Exception) -> None:
        """A job whose state cannot be written (over its budget even with one event of
        each kind, a bug, or the worker died writing it: ``fold`` None): its latest
        document to the DLQ, stage ``state``."""
        def latest() -> dict[str, Any] | None:
            docs = fold.documents() if fold is not None else []
            return docs[-1] if docs else None

        self._unwritten("job", key, message, latest, exc)

    def node(self, key: bytes, message: Any, fold: NodeFold | None, exc: Exception) -> None:
        """A node whose state cannot be written (over its budget, a bug, or the worker
        died writing it: ``fold`` None): its document to the DLQ, stage ``state``."""
        self._unwritten("node", key, message,
                        lambda: fold.document() if fold is not None else None, exc)

    def _unwritten(self, what: str, key: bytes, message: Any,
                   latest: Callable[[], dict[str, Any] | None], exc: Exception) -> None:
        if isinstance(exc, Rejected):
            rejected = exc
            logger.error("%s state of %s: %s; to %s", what, key.decode(errors="replace"),
                         exc.error, self.topic)
        elif isinstance(exc, StateTooLarge):
            rejected = Rejected("state-too-large", str(exc))
            logger.warning("%s state of %s cannot be kept, to %s: %s", what,
                           key.decode(errors="replace"), self.topic, exc)
        else:
            rejected = Rejected("internal-error", f"{type(exc).__name__}: {exc}")
            logger.error("%s state of %s failed, to %s", what, key.decode(errors="replace"),
                         self.topic, exc_info=exc)
        value = None
        try:
            doc = latest()
            value = dumps(doc) if doc is not None else None
        except Exception:  # noqa: BLE001 - the record says why; the fold may be what fails
            logger.debug("no document of %s for its DLQ record", key, exc_info=True)
        self.outputs.send(self.topic, key, value, dlq_headers(message, rejected,
                                                              stage="state"))
        DLQ_RECORDS.labels("state", rejected.reason).inc()

    def state(self, key: bytes, message: Any, doc: dict[str, Any], exc: ParseError,
              what: str = "job") -> None:
        """A job (or node) state its topic's schema cannot hold (a value beyond its types,
        from events admitted before the check that refuses them): to the DLQ as JSON; the
        later states are judged again."""
        logger.warning("%s state of %s cannot be written, to %s: %s", what,
                       key.decode(errors="replace"), self.topic, exc.message)
        self.outputs.send(self.topic, key, dumps(doc),
                          dlq_headers(message, Rejected(exc.reason, exc.message), stage="state"))
        DLQ_RECORDS.labels("state", exc.reason).inc()
