"""Prometheus metrics of jobstream's long-running processes: every definition, and the server.

Each process (``jobstream worker``, ``sink``, ``edge flux``, ``edge slurm``, ``edge node``)
counts into the same process-wide registry (prometheus_client's default one, which adds the
``process_*`` metrics: an edge's resident memory has a target) and calls :func:`start`
once, which serves it on the process's port from ``[metrics]`` (the node edge's, one per
compute node, from ``edge.node.metrics_port``, on loopback only). The counting code
imports the metric it needs from here and keeps the labelled child (``.labels(...)``) when
it counts in a loop: a label lookup hashes the label values under a lock, an ``inc`` on a
child is one lock.

Nothing listens beyond loopback without credentials (design, section 5): a bind that is
not loopback needs ``metrics.token_file``, whose token Prometheus sends as a bearer token,
and TLS (``metrics.tls_cert`` / ``tls_key``) so that the token does not cross the network
in clear text, unless ``metrics.tls_terminated_by_proxy`` says a proxy in front terminates
it (the same guards as the worker's web endpoint: :mod:`pipeline.runtime.netguard`).
"""

from __future__ import annotations

import logging
import socket
import ssl
import threading
import weakref
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any, Protocol
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from prometheus_client import REGISTRY, Counter, Gauge, Histogram, Info, make_wsgi_app
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.exposition import ThreadingWSGIServer
from prometheus_client.registry import Collector

from pipeline.runtime.config import Config, Secret
from pipeline.runtime.errors import ConfigError
from pipeline.runtime.netguard import (
    bearer_ok,
    is_loopback,
    read_secret_file,
    require_tls,
    server_tls,
)
from pipeline.runtime.servers import ServerThread

__all__ = [
    "CONSUMER_LAG",
    "DLQ_RECORDS",
    "EDGE_RECORDS_PUBLISHED",
    "EDGE_RECORDS_RECEIVED",
    "LAST_EVENT_TIME",
    "NODE_INTERVAL_CPU",
    "NODE_JOBS",
    "NODE_READ_ERRORS",
    "NODE_SAMPLES_PUBLISHED",
    "PROCESS_INFO",
    "PROCESSES",
    "SINK_BULK_ITEMS",
    "SINK_BULK_SECONDS",
    "SINK_RECORDS_READ",
    "SINK_RETRIES",
    "WATCHDOG_STALLS",
    "WORKER_ALLOCATIONS_UNTRACKED",
    "WORKER_DUPLICATES_DROPPED",
    "WORKER_EVENTS_FOLDED",
    "WORKER_RECORDS_PUBLISHED",
    "WORKER_RECORDS_READ",
    "LagReporter",
    "LastEventTime",
    "serve",
    "start",
    "track_spool",
]

logger = logging.getLogger(__name__)

# -- producer edges -------------------------------------------------------------------

EDGE_RECORDS_RECEIVED = Counter(
    "jobstream_edge_records_received",
    "Records an edge took from its source and stored in its spool (acknowledged to the source)",
    ["edge", "cluster"])
EDGE_RECORDS_PUBLISHED = Counter(
    "jobstream_edge_records_published",
    "Spooled records Kafka confirmed (and the spool forgot)", ["edge", "cluster", "topic"])

# -- the node edge (one per compute node) ----------------------------------------------

NODE_SAMPLES_PUBLISHED = Counter(
    "jobstream_node_samples_published",
    "node-usage records the node edge spooled, one per job per interval and one final",
    ["cluster"])
NODE_JOBS = Gauge(
    "jobstream_node_jobs", "Jobs the node edge sampled in its last interval, by reader",
    ["reader"])
NODE_READ_ERRORS = Counter(
    "jobstream_node_read_errors",
    "Jobs (or whole readers) the node edge could not read in an interval; the log says "
    "why, once per job and reason")
NODE_INTERVAL_CPU = Histogram(
    "jobstream_node_interval_cpu_seconds",
    "CPU seconds the node edge spent on one interval (reading, encoding, spooling)",
    buckets=(0.001, 0.0025, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5))

# -- the worker -----------------------------------------------------------------------

WORKER_RECORDS_READ = Counter(
    "jobstream_worker_records_read", "Raw records the worker read", ["topic"])
WORKER_DUPLICATES_DROPPED = Counter(
    "jobstream_worker_duplicates_dropped",
    "Canonical events dropped as exact copies of a recent one before the fold")
WORKER_EVENTS_FOLDED = Counter(
    "jobstream_worker_events_folded", "Canonical events folded into job states", ["cluster"])
WORKER_RECORDS_PUBLISHED = Counter(
    "jobstream_worker_records_published",
    "Records the worker sent to an output topic (events, job states, snapshots) or re-keyed "
    "to its canonical topic", ["topic"])
WORKER_ALLOCATIONS_UNTRACKED = Counter(
    "jobstream_worker_allocations_untracked",
    "Flux jobs allocated more hosts than the worker derives node events for "
    "(pipeline.parsers.flux_resource.MAX_ALLOCATION_HOSTS)", ["cluster"])
LAST_EVENT_TIME = Gauge(
    "jobstream_last_event_timestamp_seconds",
    "Newest timestamp of a folded event per cluster (Unix time): a cluster that went quiet",
    ["cluster"])
WATCHDOG_STALLS = Counter(
    "jobstream_watchdog_stalls",
    "Input partitions the worker's watchdog found stuck and read again",
    ["topic", "partition", "kind"])

# -- the sink -------------------------------------------------------------------------

SINK_RECORDS_READ = Counter(
    "jobstream_sink_records_read", "Records the sink consumed", ["topic"])
SINK_BULK_ITEMS = Counter(
    "jobstream_sink_bulk_items",
    "Bulk items by Elasticsearch's answer: ok, duplicate (already applied), retry (429/5xx), "
    "reject (the document's content: to the DLQ), fail", ["index", "outcome"])
SINK_BULK_SECONDS = Histogram(
    "jobstream_sink_bulk_seconds", "Duration of one _bulk request",
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0))
SINK_RETRIES = Counter(
    "jobstream_sink_retries",
    "Waits before retrying Elasticsearch (unreachable, overloaded, or items asking for it)")

# -- shared ---------------------------------------------------------------------------

DLQ_RECORDS = Counter(
    "jobstream_dlq_records", "Records sent to the dead-letter topic", ["stage", "reason"])
#: which jobstream process a scrape target is (``jobstream_process_info{process="worker"}``):
#: alert rules join on it, whatever the scrape job is called
PROCESS_INFO = Info("jobstream_process", "The jobstream process serving these metrics")
CONSUMER_LAG = Gauge(
    "jobstream_consumer_lag",
    "Records on a partition past its group's committed offset (sink: past what Elasticsearch "
    "acknowledged)", ["group", "topic", "partition"])


class LastEventTime:
    """``jobstream_last_event_timestamp_seconds``, only ever moved forward: events of
    different jobs arrive out of time order, and the newest is what says a cluster lives."""

    def __init__(self) -> None:
        self._newest: dict[str, tuple[float, Any]] = {}

    def saw(self, cluster: str, timestamp: float) -> None:
        known = self._newest.get(cluster)
        if known is None:
            known = (float("-inf"), LAST_EVENT_TIME.labels(cluster=cluster))
        if timestamp > known[0]:
            known[1].set(timestamp)
            self._newest[cluster] = (timestamp, known[1])


class LagReporter:
    """``jobstream_consumer_lag`` of one consumer group: each report replaces the previous
    one, so a partition this process no longer holds leaves the metric (its new owner
    reports it)."""

    def __init__(self, group: str) -> None:
        self.group = group
        self._reported: set[tuple[str, int]] = set()

    def report(self, lags: Mapping[tuple[str, int], int]) -> None:
        for (topic, partition), lag in lags.items():
            CONSUMER_LAG.labels(self.group, topic, str(partition)).set(max(0, lag))
        for topic, partition in self._reported - set(lags):
            try:
                CONSUMER_LAG.remove(self.group, topic, str(partition))
            except KeyError:
                pass
        self._reported = set(lags)


# -- spools ---------------------------------------------------------------------------


class SpoolFigures(Protocol):
    """What the spool metrics read of a spool's stats (``pipeline.edges.spool.SpoolStats``;
    a protocol, so that the runtime imports nothing of the edges above it)."""

    @property
    def name(self) -> str: ...
    @property
    def depth(self) -> int: ...
    @property
    def oldest_age_s(self) -> float | None: ...
    @property
    def bytes(self) -> int: ...
    @property
    def quarantined(self) -> int: ...


class Spool(Protocol):
    """A spool as the metrics see it (``pipeline.edges.spool.Spool``)."""

    name: str

    def stats(self) -> SpoolFigures: ...


class _SpoolCollector(Collector):
    """Depth, oldest record age, size and quarantine of the spools this process runs,
    read from each spool's file at scrape time (one query per spool, off the edge's
    threads)."""

    def __init__(self) -> None:
        self._spools: weakref.WeakSet[Spool] = weakref.WeakSet()
        self._lock = threading.Lock()

    def track(self, spool: Spool) -> None:
        with self._lock:
            self._spools.add(spool)

    def untrack(self, spool: Spool) -> None:
        with self._lock:
            self._spools.discard(spool)

    def describe(self) -> Iterable[GaugeMetricFamily]:
        return self._families()

    def collect(self) -> Iterable[GaugeMetricFamily]:
        depth, age, size, quarantined = self._families()
        with self._lock:
            spools = list(self._spools)
        for spool in spools:
            try:
                stats = spool.stats()
            except Exception as exc:  # noqa: BLE001 - closed under us, or the disk: skip it
                logger.debug("spool %s: no stats for the metrics: %s", spool.name, exc)
                continue
            depth.add_metric([stats.name], stats.depth)
            age.add_metric([stats.name], stats.oldest_age_s or 0.0)
            size.add_metric([stats.name], stats.bytes)
            quarantined.add_metric([stats.name], stats.quarantined)
        return [depth, age, size, quarantined]

    @staticmethod
    def _families() -> list[GaugeMetricFamily]:
        return [
            GaugeMetricFamily("jobstream_spool_depth", "Records waiting in the spool for Kafka",
                              labels=["spool"]),
            GaugeMetricFamily("jobstream_spool_oldest_age_seconds",
                              "Age of the oldest record waiting in the spool (0 when empty)",
                              labels=["spool"]),
            GaugeMetricFamily("jobstream_spool_bytes", "Bytes of the records waiting",
                              labels=["spool"]),
            GaugeMetricFamily("jobstream_spool_quarantined",
                              "Records Kafka refused for good, kept aside in the spool file",
                              labels=["spool"]),
        ]


_SPOOLS = _SpoolCollector()
REGISTRY.register(_SPOOLS)


def track_spool(spool: Spool) -> Callable[[], None]:
    """Report ``spool`` in the spool metrics; returns the function that stops it."""
    _SPOOLS.track(spool)
    return lambda: _SPOOLS.untrack(spool)


# -- the server -----------------------------------------------------------------------

#: the processes that serve metrics, each with its port key in ``[metrics]``
PROCESSES = {"worker": "worker_port", "sink": "sink_port", "edge flux": "edge_flux_port",
             "edge slurm": "edge_slurm_port"}


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
        """Prometheus scrapes every few seconds: a line per scrape is noise."""


def _with_token(app: Callable[..., Any], token: Secret) -> Callable[..., Any]:
    def guarded(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterator[bytes]:
        if not bearer_ok(environ.get("HTTP_AUTHORIZATION"), token):
            start_response("401 Unauthorized", [("WWW-Authenticate", 'Bearer realm="metrics"'),
                                                ("Content-Type", "text/plain")])
            return iter([b"a bearer token is required\n"])
        return app(environ, start_response)

    return guarded


#: Longest wait for a metrics client's TLS handshake, and then for each of its reads.
HANDSHAKE_TIMEOUT_S = 10.0


def serve(bind: str, port: int, *, token: Secret | None = None,
          tls: ssl.SSLContext | None = None,
          tls_terminated_by_proxy: bool = False) -> WSGIServer:
    """Serve the registry on ``bind:port`` (any path, as prometheus_client does) from a
    daemon thread, over TLS with ``tls``. Raises :class:`ConfigError` when the port cannot
    be had, or when ``bind`` is not loopback and there is no token, or no TLS and no
    proxy that terminates it."""
    if not is_loopback(bind) and not token:
        raise ConfigError(f"metrics.bind = {bind!r} is not loopback: set "
                          "metrics.token_file (a bearer token Prometheus sends), or keep the "
                          "port on loopback behind a proxy of your own")
    require_tls(bind, tls, terminated_by_proxy=tls_terminated_by_proxy,
                bind_key="metrics.bind", prefix="metrics.tls")
    app = make_wsgi_app(REGISTRY)
    if token:
        app = _with_token(app, token)
    try:
        family = socket.getaddrinfo(bind, port, type=socket.SOCK_STREAM,
                                    flags=socket.AI_PASSIVE)[0][0]
    except OSError as exc:
        raise ConfigError(f"metrics.bind = {bind!r}: {exc}") from exc

    class Server(ThreadingWSGIServer):
        address_family = family

        def finish_request(self, request: Any, client_address: Any) -> None:
            if tls is None:
                super().finish_request(request, client_address)
                return
            # the handshake in the request's own thread: one in the accepting thread (as
            # prometheus_client's start_http_server has it) lets one silent client stop
            # every scrape
            # a client that connects and says nothing must not hold its thread for ever
            request.settimeout(HANDSHAKE_TIMEOUT_S)
            try:
                conn = tls.wrap_socket(request, server_side=True)
            except (ssl.SSLError, OSError) as exc:  # plain HTTP, a port scanner, a bad CA
                logger.debug("metrics: no TLS handshake with %s: %s", client_address[0], exc)
                return
            with conn:
                super().finish_request(conn, client_address)

    try:
        httpd = make_server(bind, port, app, Server, handler_class=_QuietHandler)
    except OSError as exc:
        raise ConfigError(f"metrics: cannot listen on {bind}:{port}: {exc.strerror}") from exc
    ServerThread(httpd, "metrics").start()
    return httpd


def start(cfg: Config, process: str, *, port: int | None = None,
          bind: str | None = None) -> WSGIServer | None:
    """Serve the metrics of ``process`` (a key of :data:`PROCESSES`) on its configured
    port; None when that port is 0 (off). A process whose port is configured elsewhere
    (the node edge's) passes ``port``, and ``bind`` to listen elsewhere than
    ``metrics.bind``; the token and TLS of ``[metrics]`` apply all the same."""
    m = cfg.metrics
    PROCESS_INFO.info({"process": process})
    port = getattr(m, PROCESSES[process]) if port is None else port
    if not port:
        return None
    bind = m.bind if bind is None else bind
    token = read_secret_file(m.token_file, "metrics.token_file") if m.token_file else None
    tls = server_tls(m.tls_cert, m.tls_key, "metrics.tls")
    server = serve(bind, port, token=token, tls=tls,
                   tls_terminated_by_proxy=m.tls_terminated_by_proxy)
    logger.info("%s: metrics on %s://%s:%d/metrics", process, "https" if tls else "http",
                bind, server.server_port)
    return server
