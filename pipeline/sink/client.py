"""Bulk writes to Elasticsearch: retries, and the fate of every item.

:func:`classify` is the one place that decides what a bulk item's answer means:

* ``ok`` -- written;
* ``duplicate`` -- a version conflict on an externally versioned write or on a ``create``:
  the same or newer data is already there, which is success (at-least-once delivery
  makes duplicates normal); a ``delete`` that finds nothing is the same;
* ``retry`` -- 429 or 5xx: Elasticsearch is overloaded or a shard is not ready;
* ``reject`` -- Elasticsearch refuses the document for its content (mapping or parse
  errors): retrying cannot help, the record goes to the DLQ with the error type as reason;
* ``fail`` -- anything else (closed index, authorization, unknown): a sticky error; the
  runner commits nothing past it.

A request Elasticsearch refuses *as a whole* for what it holds (400 with a content error
such as ``action_request_validation_exception``; 413, over ``http.max_content_length``) is
split in halves, and the halves again, until the offending items are alone: each is then
rejected with the request's error type as its reason, and everything else is written.
That costs about two requests per offending item and level of halving (log2 of the
request's items), and nothing at all while no request is refused. A whole-request
refusal that is not about the content (401/403 credentials, 404, a closed index) is the
same for every half, so it is not split: it stays the sticky failure it was; so is a
content error that every item of the request gets alone as well (more than one item, none
accepted): that is the request's fault, and dead-lettering all would empty the stream
into the DLQ.

Two things are rejected before anything is sent, as no request can carry them: an action
that cannot be encoded as JSON (``unencodable``: a lone surrogate, say) and one whose
encoded size is over ``http.max_content_length`` (``content_too_long``).

:class:`BulkClient` retries whole requests that fail (connection refused, timeout, 429,
5xx) and the items that ask for it, with exponential backoff and full jitter, at most
:data:`RETRY_MAX_S` per wait but never giving up: while Elasticsearch is down the sink
blocks and says so once per wait. The wait goes through an injected ``sleep`` so the
runner can keep its Kafka consumer alive (and stop) meanwhile.
"""

from __future__ import annotations

import logging
import time
from collections import Counter, deque
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, TypeVar

from elasticsearch import ApiError, Elasticsearch, NotFoundError, TransportError

from pipeline.core.jsontext import dumps
from pipeline.runtime.backoff import Backoff
from pipeline.runtime.config import ElasticsearchConfig
from pipeline.runtime.errors import SinkError
from pipeline.runtime.metrics import SINK_BULK_ITEMS, SINK_BULK_SECONDS, SINK_RETRIES
from pipeline.sink.converter import Action, Op

__all__ = [
    "MALFORMED_ERRORS",
    "MAX_CONTENT_LENGTH",
    "RETRY_MAX_S",
    "BulkClient",
    "ItemResult",
    "Outcome",
    "classify",
    "make_client",
]

logger = logging.getLogger(__name__)

T = TypeVar("T")

#: Item error types that mean "this document's content is wrong" (Kafka Connect's
#: malformed-document list, plus the document_parsing_exception of Elasticsearch >= 8.8).
MALFORMED_ERRORS: frozenset[str] = frozenset({
    "mapper_parsing_exception",
    "document_parsing_exception",
    "strict_dynamic_mapping_exception",
    "illegal_argument_exception",
    "action_request_validation_exception",
})

_CONFLICT = "version_conflict_engine_exception"

#: Whole-request error types (status 400) that mean "something in this request is wrong",
#: so that a part of it may be right: the request is split to find what.
_REQUEST_CONTENT_ERRORS: frozenset[str] = MALFORMED_ERRORS | {
    "parse_exception",
    "x_content_parse_exception",
    "json_parse_exception",
    "json_e_o_f_exception",
    "not_x_content_exception",
}

#: Elasticsearch's default ``http.max_content_length`` (100mb): no request may be longer,
#: so a single action that is refuses itself.
MAX_CONTENT_LENGTH = 100 * 1024 * 1024

#: the longest wait between two attempts, so also how long the sink may take to write
#: again once Elasticsearch is back; one bulk request every few seconds is no load for a
#: cluster that is recovering
RETRY_MAX_S = 5.0


class Outcome(StrEnum):
    OK = "ok"
    DUPLICATE = "duplicate"
    RETRY = "retry"
    REJECT = "reject"
    FAIL = "fail"

    @property
    def done(self) -> bool:
        """The write needs nothing more (the record may be acknowledged)."""
        return self in (Outcome.OK, Outcome.DUPLICATE)


@dataclass(frozen=True, slots=True)
class ItemResult:
    action: Action
    outcome: Outcome
    status: int
    #: Elasticsearch error type ("" when none): the DLQ reason of a rejected item
    error_type: str = ""
    #: Elasticsearch's explanation, caused_by included
    error: str = ""


def classify(op: str, item: Mapping[str, Any]) -> tuple[Outcome, str, str]:
    """The fate of one bulk item: ``(outcome, error type, error text)``.

    ``op`` is the item's operation (``index``, ``create``, ``delete``); ``item`` the body
    under it in the bulk response (``status``, ``error``).
    """
    status = int(item.get("status", 0))
    error = item.get("error")
    etype, text = _describe(error)
    if 200 <= status < 300:
        return Outcome.OK, "", ""
    if status == 409 and etype == _CONFLICT:
        return Outcome.DUPLICATE, etype, text
    if status == 404 and op == Op.DELETE.value and etype in ("", "index_not_found_exception"):
        return Outcome.DUPLICATE, etype or "not_found", text
    if status == 429 or status >= 500:
        return Outcome.RETRY, etype, text
    if etype in MALFORMED_ERRORS:
        return Outcome.REJECT, etype, text
    return Outcome.FAIL, etype or f"http_{status}", text


def make_client(cfg: ElasticsearchConfig, *, request_timeout: float = 60.0) -> Elasticsearch:
    """An Elasticsearch client for the sink: no transport-level retries (the sink retries,
    with backoff and logs), one timeout for every request."""
    kwargs: dict[str, Any] = {
        "request_timeout": request_timeout,
        "max_retries": 0,
        "retry_on_timeout": False,
    }
    if cfg.username:
        kwargs["basic_auth"] = (cfg.username, cfg.password.reveal())
    if cfg.ca_certs:
        kwargs["ca_certs"] = cfg.ca_certs
    return Elasticsearch(cfg.url, **kwargs)


class BulkClient:
    """Writes actions with ``_bulk`` and returns every item's :class:`ItemResult`.

    :param es: the Elasticsearch client
    :param backoff: waits between retries (full jitter)
    :param max_bytes: upper bound of one request body (more actions -> several requests)
    :param max_content_length: the cluster's ``http.max_content_length``: one action longer
        than this is rejected without being sent
    :param sleep: how to wait (the runner's keeps the consumer alive; may raise to stop)
    """

    def __init__(self, es: Elasticsearch, *, backoff: Backoff | None = None,
                 max_bytes: int = 8 * 1024 * 1024,
                 max_content_length: int = MAX_CONTENT_LENGTH,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        self._es = es
        self._backoff = backoff or Backoff(0.5, RETRY_MAX_S, jitter=True)
        self._max_bytes = max_bytes
        self._max_content_length = max_content_length
        self._sleep = sleep
        #: retries made so far (whole requests and items), for the runner's summary
        self.retries = 0
        #: (index family, outcome) -> its counter, looked up once (a bulk has thousands)
        self._items: dict[tuple[str, Outcome], Any] = {}

    def write(self, actions: Sequence[Action]) -> list[ItemResult]:
        """Write ``actions``; returns when every item is done, rejected or failed."""
        results: dict[int, ItemResult] = {}
        # counted once per request: a Prometheus counter's inc() takes a lock
        outcomes: Counter[tuple[str, Outcome]] = Counter()
        lines = self._encode_all(actions, results, outcomes)
        todo = [i for i in range(len(actions)) if i not in results]
        #: items refused alone when their request was refused as a whole
        refused: dict[int, _Refused] = {}
        answered = False
        self._backoff.reset()
        while todo:
            again: list[int] = []
            cause = ""
            pending = deque(self._chunks(todo, lines))
            while pending:
                chunk = pending.popleft()
                try:
                    items = self._send([lines[i] for i in chunk])
                except _Retryable as exc:
                    again.extend(chunk)
                    cause = str(exc)
                    continue
                except _Refused as exc:
                    if len(chunk) == 1:
                        refused[chunk[0]] = exc
                    else:
                        logger.warning("bulk of %d item(s) refused as a whole (%s); splitting "
                                       "it to find the offending item(s)", len(chunk), exc)
                        half = len(chunk) // 2
                        pending.appendleft(chunk[half:])
                        pending.appendleft(chunk[:half])
                    continue
                answered = True
                if len(items) != len(chunk):
                    raise SinkError(f"bulk answered {len(items)} items for {len(chunk)}")
                for i, item in zip(chunk, items, strict=True):
                    op, body = next(iter(item.items()))
                    outcome, etype, text = classify(op, body)
                    outcomes[actions[i].family.value, outcome] += 1
                    if outcome is Outcome.RETRY:
                        again.append(i)
                        cause = f"{body.get('status')} {etype}"
                    else:
                        results[i] = ItemResult(actions[i], outcome, int(body.get("status", 0)),
                                                etype, text)
                self._count(outcomes)
            todo = again
            if todo:
                self._wait(f"bulk of {len(todo)} item(s)", cause)
        if len(refused) > 1 and not answered:
            # Every item refused alike, alone as together: the request's fault, not theirs
            # (a parameter this Elasticsearch does not take, say). Dead-lettering them
            # all would empty the stream into the DLQ: a sticky failure instead.
            first = next(iter(refused.values()))
            raise SinkError(f"elasticsearch refused each of {len(refused)} bulk items alone "
                            f"as it refused them together: {first}")
        for i, exc in refused.items():
            logger.warning("bulk item refused alone id=%s: %s", actions[i].doc_id, exc)
            results[i] = ItemResult(actions[i], Outcome.REJECT, exc.status, exc.reason, exc.text)
            outcomes[actions[i].family.value, Outcome.REJECT] += 1
        self._count(outcomes)
        return [results[i] for i in range(len(actions))]

    def _encode_all(self, actions: Sequence[Action], results: dict[int, ItemResult],
                    outcomes: Counter[tuple[str, Outcome]]) -> list[bytes]:
        """Each action's NDJSON lines; one that no request can carry is rejected now."""
        lines: list[bytes] = []
        for i, action in enumerate(actions):
            try:
                line = _encode(action)
            except Exception as exc:  # the item's own content: no JSON text holds it
                line = b""
                results[i] = ItemResult(action, Outcome.REJECT, 0, "unencodable",
                                        f"the document cannot be written as JSON: "
                                        f"{type(exc).__name__}: {exc}")
            else:
                if len(line) > self._max_content_length:
                    results[i] = ItemResult(
                        action, Outcome.REJECT, 413, "content_too_long",
                        f"the document is {len(line)} bytes of JSON; Elasticsearch takes "
                        f"requests of at most {self._max_content_length} bytes "
                        "(http.max_content_length)")
                    line = b""
            if i in results:
                outcomes[action.family.value, Outcome.REJECT] += 1
            lines.append(line)
        return lines

    def existing_ids(self, index: str, ids: Iterable[str]) -> set[str]:
        """Which of ``ids`` exist in ``index`` (real time: a write not yet refreshed
        counts). A missing index holds none."""
        wanted = list(dict.fromkeys(ids))
        if not wanted:
            return set()

        def mget() -> set[str]:
            try:
                resp = self._es.mget(index=index, ids=wanted, source=False,
                                     filter_path=["docs._id", "docs.found"])
            except NotFoundError:
                return set()
            return {d["_id"] for d in resp.get("docs", []) if d.get("found")}

        return self.call(mget, f"mget of {len(wanted)} id(s) in {index}")

    def call(self, fn: Callable[[], T], what: str) -> T:
        """Run one request, retrying while Elasticsearch is unreachable or overloaded."""
        self._backoff.reset()
        while True:
            try:
                return _retryable(fn)
            except _Retryable as exc:
                self._wait(what, str(exc))

    def _count(self, outcomes: Counter[tuple[str, Outcome]]) -> None:
        for key, n in outcomes.items():
            counter = self._items.get(key)
            if counter is None:
                counter = self._items[key] = SINK_BULK_ITEMS.labels(*key)
            counter.inc(n)
        outcomes.clear()

    def _send(self, body: list[bytes]) -> list[Mapping[str, Any]]:
        def bulk() -> Any:
            try:
                return self._es.bulk(
                    operations=body,  # type: ignore[arg-type]  # NDJSON lines, passed through
                    filter_path=["items.*.status", "items.*.error"])
            except ApiError as exc:
                refused = _Refused.of(exc)
                if refused is not None:
                    raise refused from exc
                raise

        with SINK_BULK_SECONDS.time():
            resp = _retryable(bulk)
        return list(resp.get("items", []))

    def _wait(self, what: str, cause: str) -> None:
        delay = self._backoff.next()
        self.retries += 1
        SINK_RETRIES.inc()
        logger.warning("elasticsearch retry=%d wait=%.2fs what=%r cause=%r",
                       self._backoff.failures, delay, what, cause[:300])
        self._sleep(delay)

    def _chunks(self, todo: list[int], lines: list[bytes]) -> Iterator[list[int]]:
        chunk: list[int] = []
        size = 0
        for i in todo:
            n = len(lines[i])
            if chunk and size + n > self._max_bytes:
                yield chunk
                chunk, size = [], 0
            chunk.append(i)
            size += n
        if chunk:
            yield chunk


class _Retryable(Exception):
    """A whole request failed in a way that retrying may fix."""


class _Refused(Exception):
    """A whole bulk request refused for what it holds: a part of it may be fine."""

    def __init__(self, status: int, reason: str, text: str) -> None:
        super().__init__(f"{status} {reason}: {text}")
        self.status = status
        self.reason = reason
        self.text = text

    @classmethod
    def of(cls, exc: ApiError) -> _Refused | None:
        """The refusal ``exc`` is, if it is about the request's content."""
        status = exc.meta.status
        body = exc.body if isinstance(exc.body, Mapping) else {}
        etype, text = _describe(body.get("error"))
        if status == 413 or (status == 400 and etype in _REQUEST_CONTENT_ERRORS):
            return cls(status, etype or f"http_{status}", text or str(exc.message))
        return None


def _retryable(fn: Callable[[], T]) -> T:
    try:
        return fn()
    except ApiError as exc:
        if exc.meta.status == 429 or exc.meta.status >= 500:
            raise _Retryable(f"{exc.meta.status} {exc.message}") from exc
        raise SinkError(f"elasticsearch refused a request: {exc.meta.status} {exc}") from exc
    except TransportError as exc:  # connection refused, reset, timeout
        raise _Retryable(f"{type(exc).__name__}: {exc.message}") from exc


def _encode(action: Action) -> bytes:
    return b"".join(dumps(line) + b"\n" for line in action.operations())


def _describe(error: Any) -> tuple[str, str]:
    if not isinstance(error, Mapping):
        return "", "" if error is None else str(error)
    etype = str(error.get("type", ""))
    text = str(error.get("reason", ""))
    cause = error.get("caused_by")
    if isinstance(cause, Mapping) and cause.get("reason"):
        text = f"{text}; caused by {cause.get('type', '')}: {cause['reason']}"
    return etype, text
