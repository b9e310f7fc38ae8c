"""``jobstream edge flux``: the Flux job-manager journal to ``hpc.jobs.raw``.

The journal (``job-manager.events-journal``, docs/flux.md, "The journal") streams, per connection, a
backlog (one response per job with its whole eventlog, jobspec and R; with ``full`` the
inactive jobs too, in hash order), the sentinel ``{"id": -1, "events": []}``, then one
response per live event. Each response is published as one RawRecord (format
``flux-journal``, payload = the response bytes exactly as received), keyed
``<cluster>:<decimal job id>``. The sentinel is logged, not published.

The journal has no server-side cursor: a reconnect replays the backlog. The edge keeps a
watermark ``since`` (the newest event timestamp such that every response up to it was
confirmed by Kafka, persisted in the spool's ``meta`` only after delivery) and skips the
responses whose events are all at or before it; a response with any newer event is
published whole, so a reconnect yields duplicates, never gaps.

Sources are pluggable (:class:`JournalSource`): :class:`FluxJournalSource` talks to a live
instance through the ``flux`` bindings (imported only there: flux-python needs a local
flux-core), :class:`RecordedJournalSource` plays recorded ``flux-journal`` JSON lines.

The same process follows the resource journal too (:mod:`pipeline.edges.flux_resource`),
through the same runtime and spool: :meth:`FluxEdge.run` runs each further
:class:`Follower` it was given in a thread of its own beside the job journal's loop
(:func:`follow`, the reconnect loop both share).

Why the raw streaming RPC and not ``flux.job.JournalConsumer``: the consumer hands out
parsed per-event objects (the exact response bytes are gone) and buffers the whole backlog
in memory to sort it before the first event, which breaks the edge's 50 MB bound on an
instance that retains many inactive jobs. The watermark rule below gives the same resume
guarantee without sorting: backlog responses only move the watermark once the sentinel
has passed and all of them are confirmed.
"""

from __future__ import annotations

import errno
import json
import logging
import os
import threading
import time
from collections import deque
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, Protocol

from pipeline.core.admission import MAX_EPOCH_S
from pipeline.core.model import RawRecord, job_key
from pipeline.edges.base import EdgeRuntime
from pipeline.runtime.backoff import Backoff
from pipeline.runtime.config import Config
from pipeline.runtime.errors import ServiceError

__all__ = [
    "FluxEdge",
    "FluxJournalSource",
    "Follower",
    "JournalDisconnected",
    "JournalSource",
    "RecordedJournalSource",
    "Watermark",
    "follow",
    "spooled_watermark",
]

logger = logging.getLogger(__name__)

JOURNAL_TOPIC = "job-manager.events-journal"
SINCE_META = "flux.since"


class JournalDisconnected(Exception):
    """The connection to the journal broke; the edge reconnects with backoff."""


class JournalSource(Protocol):
    """A journal connection factory: each ``stream()`` call is one connection."""

    #: True when the source ends by itself (a recording): the edge stops after it.
    finite: bool

    def stream(self, stop: threading.Event) -> Iterator[bytes]:
        """Yield the responses of one connection as bytes; return at end of stream;
        raise :class:`JournalDisconnected` when the connection breaks."""
        ...


class FluxJournalSource:
    """The live journal through the ``flux`` Python bindings (instance owner only).

    Subclasses follow another journal RPC of the same kind by changing the class
    attributes and :meth:`_request` (:class:`pipeline.edges.flux_resource.FluxResourceSource`).
    """

    finite = False
    #: the streaming RPC's topic, and what the messages call it
    topic = JOURNAL_TOPIC
    journal = "job-manager journal"
    #: the edge's option that replays a recording of it instead
    recorded_option = "--recorded"

    def __init__(self, uri: str = "", *, poll_s: float = 1.0) -> None:
        self.uri = uri
        self.poll_s = poll_s

    def _import(self) -> Any:
        try:
            import flux  # type: ignore[import-not-found]
            import flux.constants  # type: ignore[import-not-found]  # noqa: F401
        except ImportError as exc:
            raise ServiceError(
                "the Flux Python bindings are not importable "
                f"({exc}); install flux-python matching the local flux-core (and run on a "
                f"host with flux-core installed), or replay a recording with "
                f"{self.recorded_option}") from exc
        return flux

    def _request(self, flux: Any) -> tuple[dict[str, Any], int]:
        """The request payload and the node it goes to."""
        return {"full": True}, flux.constants.FLUX_NODEID_ANY

    def stream(self, stop: threading.Event) -> Iterator[bytes]:
        flux = self._import()
        try:
            handle = flux.Flux(self.uri) if self.uri else flux.Flux()
        except OSError as exc:
            raise JournalDisconnected(
                f"cannot connect to Flux at {self.uri or os.environ.get('FLUX_URI', 'default')}: "
                f"{exc.strerror or exc}") from exc
        self._check_owner(handle)
        payload, nodeid = self._request(flux)
        rpc = handle.rpc(self.topic, payload, nodeid, flux.constants.FLUX_RPC_STREAMING)
        while not stop.is_set():
            try:
                rpc.wait_for(self.poll_s)
                payload = rpc.get_str()
            except OSError as exc:
                if exc.errno == errno.ETIMEDOUT:
                    continue
                if exc.errno == errno.ENODATA:
                    return
                if exc.errno == errno.EPERM:
                    raise ServiceError(self._owner_message()) from exc
                raise JournalDisconnected(f"{self.journal} RPC failed: "
                                          f"{exc.strerror or exc}") from exc
            rpc.reset()
            yield payload.encode() if isinstance(payload, str) else bytes(payload)

    def _check_owner(self, handle: Any) -> None:
        try:
            owner = int(handle.attr_get("security.owner"))
        except (OSError, ValueError, AttributeError):
            return  # the RPC's EPERM will tell
        if owner != os.getuid():
            raise ServiceError(self._owner_message(owner))

    def _owner_message(self, owner: int | None = None) -> str:
        who = f"uid {owner}" if owner is not None else "the instance owner"
        return (f"the Flux {self.journal} answers only the instance owner ({who}); this "
                f"process runs as uid {os.getuid()}. Run `jobstream edge flux` as that user "
                "(the 'flux' user on a system instance, or root with "
                "[access] allow-root-owner = true)")


class RecordedJournalSource:
    """Recorded ``flux-journal`` JSON lines, played as a journal connection.

    Every connection replays the recording from the start, as the real journal replays its
    backlog. ``pace`` plays at that many times the recorded speed (gaps capped at 1 s),
    ``interval`` waits a fixed time between responses; ``disconnect_after[k]`` breaks
    connection ``k`` after that many responses (for tests of the reconnect path).
    """

    finite = True

    def __init__(self, paths: Sequence[str | Path], *, pace: float | None = None,
                 interval: float | None = None, disconnect_after: Sequence[int] = ()) -> None:
        self.paths = [Path(p) for p in paths]
        self.pace = pace
        self.interval = interval
        self.disconnect_after = list(disconnect_after)
        self.connections = 0

    def _lines(self) -> Iterator[bytes]:
        for path in self.paths:
            with path.open("rb") as fh:
                for line in fh:
                    line = line.rstrip(b"\r\n")
                    if line.strip():
                        yield line

    def stream(self, stop: threading.Event) -> Iterator[bytes]:
        conn = self.connections
        self.connections += 1
        limit = self.disconnect_after[conn] if conn < len(self.disconnect_after) else None
        last_ts: float | None = None
        for n, line in enumerate(self._lines()):
            if stop.is_set():
                return
            if limit is not None and n >= limit:
                raise JournalDisconnected(f"recorded connection {conn} broken after {n} "
                                          "responses")
            if self.interval:
                stop.wait(self.interval)
            elif self.pace:
                ts = _max_timestamp(_loads(line))
                if ts is not None and last_ts is not None and ts > last_ts:
                    stop.wait(min(1.0, (ts - last_ts) / self.pace))
                last_ts = ts if ts is not None else last_ts
            yield line


def _loads(payload: bytes) -> dict[str, Any] | None:
    """The response as an object, or None when it cannot be read: nesting past Python's
    recursion limit (a job's owner chooses a memo's value, and Flux takes 2,048 levels)
    raises RecursionError, not ValueError. The record still goes out, unkeyed; the worker
    gives it its DLQ reason."""
    try:
        obj = json.loads(payload)
    except (ValueError, RecursionError):
        return None
    return obj if isinstance(obj, dict) else None


def _max_timestamp(resp: dict[str, Any] | None) -> float | None:
    """The newest event time of a response. Only times count: one past the year 5138 (or
    NaN) would move the watermark past every later response, and the edge would skip them
    all, after restarts too."""
    if not resp or not isinstance(resp.get("events"), list):
        return None
    stamps = [float(e["timestamp"]) for e in resp["events"]
              if isinstance(e, dict) and isinstance(e.get("timestamp"), int | float)
              and not isinstance(e["timestamp"], bool) and 0 <= e["timestamp"] <= MAX_EPOCH_S]
    return max(stamps) if stamps else None


class Watermark:
    """The newest event timestamp up to which every published response is in Kafka.

    Responses are registered in publish order; Kafka confirms them in any order (several
    partitions). The watermark moves over the longest confirmed prefix. Backlog responses
    come in hash order, not time order, so they only move it once the sentinel that closes
    their backlog is passed: until then a later-acked job may hide an earlier, unsent one.
    """

    def __init__(self, since: float = 0.0) -> None:
        self.since = since
        self._pending: deque[tuple[int | None, float | None, bool]] = deque()
        self._acked: set[int] = set()
        #: the sequence numbers of the pending responses: a runtime shared by several
        #: journals confirms the others' records too, which are not ours to keep
        self._mine: set[int] = set()
        self._candidate = since
        self._lock = threading.Lock()

    def add(self, seq: int, ts: float | None, *, backlog: bool) -> None:
        with self._lock:
            self._pending.append((seq, ts, backlog))
            self._mine.add(seq)

    def sentinel(self) -> None:
        """The backlog of the current connection is complete."""
        with self._lock:
            self._pending.append((None, None, False))

    def acked(self, seqs: Sequence[int]) -> float | None:
        """Mark confirmed records; the new watermark if it moved, else None."""
        with self._lock:
            self._acked.update(seq for seq in seqs if seq in self._mine)
            moved = False
            while self._pending:
                seq, ts, backlog = self._pending[0]
                if seq is not None:
                    if seq not in self._acked:
                        break
                    self._acked.discard(seq)
                    self._mine.discard(seq)
                self._pending.popleft()
                if ts is not None and ts > self._candidate:
                    self._candidate = ts
                if not backlog and self._candidate > self.since:
                    self.since = self._candidate
                    moved = True
            return self.since if moved else None


def spooled_watermark(runtime: EdgeRuntime, meta: str) -> Watermark:
    """A journal's watermark, read from the spool's meta ``meta`` (0 before the first) and
    written back there whenever Kafka's confirmations move it: where a restart resumes."""
    watermark = Watermark(float(runtime.spool.get_meta(meta, "0") or 0))

    def acked(seqs: list[int]) -> None:
        since = watermark.acked(seqs)
        if since is not None:
            runtime.spool.set_meta(meta, repr(since))

    runtime.on_acked(acked)
    return watermark


class Follower(Protocol):
    """One journal of the edge: its source, and what it does with each response."""

    source: JournalSource
    #: names the journal in the logs
    what: str
    published: int
    skipped: int

    def connected(self) -> None:
        """A new connection begins: its backlog comes first."""
        ...

    def handle(self, payload: bytes) -> None:
        """Publish one response (or note the sentinel)."""
        ...


def follow(follower: Follower, stop: threading.Event, reconnect_max_s: float) -> None:
    """Follow one journal until ``stop`` is set (or, for a finite source, to its end),
    reconnecting with backoff when the connection ends or breaks."""
    backoff = Backoff(1.0, reconnect_max_s)
    what = follower.what
    while not stop.is_set():
        follower.connected()
        try:
            for payload in follower.source.stream(stop):
                follower.handle(payload)
                backoff.reset()
            if follower.source.finite:
                logger.info("%s recording finished: %d published, %d skipped", what,
                            follower.published, follower.skipped)
                return
            logger.warning("%s stream ended (its module unloaded or Flux restarting); "
                           "reconnecting", what)
        except JournalDisconnected as exc:
            logger.warning("%s disconnected: %s; reconnecting", what, exc)
        stop.wait(backoff.next())


class FluxEdge:
    """Journal -> spool -> Kafka, with reconnects and the persisted watermark.

    :param also: further journals of the same instance (the resource journal), on the
        same ``runtime``, each followed in a thread of its own while :meth:`run` runs.
    """

    what = "journal"

    def __init__(self, cfg: Config, source: JournalSource, *,
                 runtime: EdgeRuntime | None = None, also: Sequence[Follower] = ()) -> None:
        self.cfg = cfg
        self.source = source
        self.runtime = runtime or EdgeRuntime(cfg, "flux")
        self.also = list(also)
        self.watermark = spooled_watermark(self.runtime, SINCE_META)
        self.published = 0
        self.skipped = 0
        self.sentinels = 0
        self._in_backlog = True

    def connected(self) -> None:
        self._in_backlog = True

    def handle(self, payload: bytes) -> None:
        """Publish one journal response (or note the sentinel)."""
        resp = _loads(payload)
        job_id = resp.get("id") if resp else None
        if job_id == -1:
            self.sentinels += 1
            self._in_backlog = False
            self.watermark.sentinel()
            logger.info("journal: backlog complete (sentinel); live events from here")
            return
        ts = _max_timestamp(resp)
        if ts is not None and ts <= self.watermark.since:
            self.skipped += 1
            return
        key = None
        if isinstance(job_id, int) and not isinstance(job_id, bool) and job_id >= 0:
            key = job_key(self.cfg.cluster, str(job_id))
        else:
            logger.warning("journal: response without a job id published unkeyed: %.200r",
                           payload)
        seq = self.runtime.publish(RawRecord(
            cluster=self.cfg.cluster, scheduler="flux", format="flux-journal",
            received_at=time.time(), payload=payload, key=key))
        self.watermark.add(seq, ts, backlog=self._in_backlog)
        self.published += 1

    def run(self, stop: threading.Event | None = None, *, stop_timeout: float = 10.0) -> None:
        """Run until ``stop`` is set (or, for finite sources, until all is delivered);
        then give records in flight ``stop_timeout`` seconds to be confirmed. A journal
        that fails (a :class:`ServiceError`: not the owner, no bindings) sets ``stop``,
        so that the others end too, and its error is raised here."""
        stop = stop or self.runtime.stopping
        reconnect_max_s = self.cfg.edge.flux.reconnect_max_s
        failed: list[BaseException] = []

        def follow_also(follower: Follower) -> None:
            try:
                follow(follower, stop, reconnect_max_s)
            except BaseException as exc:  # noqa: BLE001 - raised again by run()
                failed.append(exc)
                stop.set()

        threads = [threading.Thread(target=follow_also, args=(f,), daemon=True,
                                    name=f"flux-{f.what.replace(' ', '-')}")
                   for f in self.also]
        self.runtime.start()
        try:
            for thread in threads:
                thread.start()
            try:
                follow(self, stop, reconnect_max_s)
            except BaseException:
                stop.set()
                raise
            finally:
                for thread in threads:
                    thread.join()
            if failed:
                raise failed[0]
            while not stop.is_set() and self.runtime.spool.depth() > 0:
                stop.wait(0.1)
        finally:
            self.runtime.stop(stop_timeout)
