"""The Flux resource journal (``resource.journal``, RFC 44 events) to ``hpc.jobs.raw``.

``jobstream edge flux`` follows it beside the job-manager journal, in the same process and
through the same :class:`~pipeline.edges.base.EdgeRuntime` and spool
(:class:`pipeline.edges.flux.FluxEdge` runs it in a thread of its own,
``[edge.flux] resource_journal``). The RPC is sent as flux-core's
``flux.resource.ResourceJournalConsumer`` sends it: an empty payload ``{}`` to rank 0,
streaming. The resource module answers, per connection, its in-memory eventlog since it
was loaded (the backlog, in time order, starting with the ``restart`` it posted), then the
sentinel ``{"events": []}``, then one response per event as it is committed; each response
is ``{"events": [<RFC 18 entry>...]}``, with the instance's ``R`` beside a
``resource-define``. It is owner-only like the job journal, and ends (ENODATA) when the
module unloads.

Each response but the sentinel is one RawRecord of format ``flux-resource-journal``, with
the connection's rank map put in front by :class:`~pipeline.parsers.flux_resource.RankMaps`
(the latest ``restart``'s ``ranks`` and ``nodelist``), the response's own bytes following
as Flux sent them: a live ``online``, ``offline``, ``torpid`` or ``lively`` names ranks
only, and without the map the worker could not name its nodes. The map is read off every
response of a connection, those skipped as already delivered too, since the ``restart``
that names the ranks is in the backlog.

The key is ``cluster:node`` of the record's first node event (what the parser says,
:func:`~pipeline.edges.base.record_key`), as a multi-job Slurm document is keyed by its
first job. A live response concerns one event and mostly one node (a drain, an undrain,
one rank going offline), and the worker folds a record's events of its own key in the
partition it reads them in, re-keying the others through its canonical topic
(``agents/routing.py``): so the common case is folded where it lands, and a response
naming many nodes (``restart``, ``online`` of a whole idset, ``resource-define``) is
still folded whole, its other nodes' events re-keyed. Keying by the cluster alone would
put every node of a cluster in one partition; keying unkeyed would re-key every event. A
record the parser refuses goes out unkeyed; the worker gives it its DLQ reason.

The resource journal has no server-side cursor either: a reconnect (or a restart of the
edge) replays the backlog. The journal's own :class:`~pipeline.edges.flux.Watermark`
(persisted as ``flux.resource.since`` in the spool's meta, moved only after Kafka
confirmed) skips the responses whose events are all at or before it, as the job
journal's does.

Sources: :class:`FluxResourceSource` (the live RPC, through the ``flux`` bindings imported
only there) or :class:`~pipeline.edges.flux.RecordedJournalSource` over recorded
``resource.journal`` JSON lines (``jobstream edge flux --recorded-resources FILE``).
"""

from __future__ import annotations

import logging
import time
from typing import Any

from pipeline.core.model import RawRecord
from pipeline.edges.base import EdgeRuntime, record_key
from pipeline.edges.flux import (
    FluxJournalSource,
    JournalSource,
    _loads,
    _max_timestamp,
    spooled_watermark,
)
from pipeline.parsers.flux_resource import SOURCE, RankMaps
from pipeline.runtime.config import Config

__all__ = ["RESOURCE_JOURNAL_TOPIC", "RESOURCE_SINCE_META", "FluxResourceEdge",
           "FluxResourceSource"]

logger = logging.getLogger(__name__)

RESOURCE_JOURNAL_TOPIC = "resource.journal"
RESOURCE_SINCE_META = "flux.resource.since"


class FluxResourceSource(FluxJournalSource):
    """The live resource journal through the ``flux`` Python bindings (instance owner)."""

    topic = RESOURCE_JOURNAL_TOPIC
    journal = "resource journal"
    recorded_option = "--recorded-resources"

    def _request(self, flux: Any) -> tuple[dict[str, Any], int]:
        # the resource module's journal is served by rank 0's module only
        return {}, 0


def _is_sentinel(resp: dict[str, Any] | None) -> bool:
    return resp is not None and resp.get("events") == [] and set(resp) == {"events"}


class FluxResourceEdge:
    """Resource journal -> spool -> Kafka, on the job journal's runtime (a
    :class:`~pipeline.edges.flux.Follower` of :class:`~pipeline.edges.flux.FluxEdge`)."""

    what = "resource journal"

    def __init__(self, cfg: Config, source: JournalSource, *, runtime: EdgeRuntime) -> None:
        self.cfg = cfg
        self.source = source
        self.runtime = runtime
        self.watermark = spooled_watermark(runtime, RESOURCE_SINCE_META)
        self.published = 0
        self.skipped = 0
        self.sentinels = 0
        self._maps = RankMaps()
        self._in_backlog = True

    def connected(self) -> None:
        # a new connection's backlog starts with a restart again: a map of its own
        self._maps = RankMaps()
        self._in_backlog = True

    def handle(self, payload: bytes) -> None:
        """Publish one resource journal response (or note the sentinel)."""
        resp = _loads(payload)
        if _is_sentinel(resp):
            self.sentinels += 1
            self._in_backlog = False
            self.watermark.sentinel()
            logger.info("resource journal: backlog complete (sentinel); live events from "
                        "here")
            return
        record = self._maps.record(payload)  # skipped or not: it may hold the restart
        ts = _max_timestamp(resp)
        if ts is not None and ts <= self.watermark.since:
            self.skipped += 1
            return
        key = record_key(SOURCE, record, self.cfg.cluster)
        if key is None:
            logger.warning("resource journal: a response naming no node, or one the parser "
                           "refuses, published unkeyed (the worker says which)")
        seq = self.runtime.publish(RawRecord(
            cluster=self.cfg.cluster, scheduler="flux", format=SOURCE,
            received_at=time.time(), payload=record, key=key))
        self.watermark.add(seq, ts, backlog=self._in_backlog)
        self.published += 1
