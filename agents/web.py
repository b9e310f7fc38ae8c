"""The worker's web endpoint: who may ask, and what it answers.

``GET /jobs/<cluster>/<job_id>`` answers a job's current document from whichever worker
owns the job's partition: a worker that does not own it asks the owner (Faust's router
finds it by the ``canonical_url`` every worker advertises to the group) and passes the
answer on. The endpoint binds ``worker.web_bind`` (loopback by default); beyond loopback
it needs ``worker.web_token_file``, a bearer token every request must carry, the routed
ones included (:class:`WebAccess`), and TLS (``worker.web_tls_cert`` / ``web_tls_key``,
which Faust's aiohttp site serves with) so that the token does not cross the network in
clear text, unless ``worker.web_tls_terminated_by_proxy`` says a proxy in front
terminates it. With TLS the workers advertise https and check each other's certificate
(``worker.web_tls_ca``). Faust's own pages that show the configuration, the
topology or table contents (``/router``, ``/table``, ``/stats``, ``/assignment``,
``/graph``, ``/performance``) are switched off: nothing here needs them; ``/`` answers
``{"status": "OK"}``, behind the token like everything else.

A query that comes before the worker can tell who owns the job (not in the group yet,
rebalancing, recovering its table, or Kafka's metadata of the table's topic still
unknown) is answered 503 with the reason, not with Faust's traceback.
"""

from __future__ import annotations

import logging
import socket
import ssl
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

import aiohttp
from aiohttp import web as aioweb
from yarl import URL

from agents.faust_patches import kafka_producer
from pipeline.fold import JobFold
from pipeline.runtime.config import Config, Secret
from pipeline.runtime.errors import ConfigError
from pipeline.runtime.netguard import (
    RefusalLog,
    bearer_ok,
    is_loopback,
    read_secret_file,
    require_tls,
    server_tls,
)

if TYPE_CHECKING:
    from agents.context import WorkerContext

__all__ = ["ROUTED_HEADER", "JobQuery", "WebAccess", "faust_web_settings"]

logger = logging.getLogger(__name__)

#: marks a request one worker passes to the owner of a job: the owner answers it itself
#: (503 when it no longer owns the job), so a request never travels in circles while
#: ownership moves
ROUTED_HEADER = "X-Jobstream-Routed"
#: how long a worker waits for the owner of a job to answer
ROUTE_TIMEOUT_S = 10.0

Handler = Callable[[aioweb.Request], Awaitable[aioweb.StreamResponse]]


class WebAccess:
    """Who may use the worker's web endpoint: with a token configured, every request on
    every path must carry it as ``Authorization: Bearer <token>`` (401 otherwise, logged
    once per source address). ``tls`` is what the endpoint serves with (None: plain HTTP),
    ``peer_ssl`` what a routed request checks the owner's certificate with (aiohttp's
    ``ssl``: True is the system's CAs)."""

    def __init__(self, token: Secret | None, tls: ssl.SSLContext | None = None,
                 peer_ssl: ssl.SSLContext | bool = True) -> None:
        self.token = token
        self.tls = tls
        self.peer_ssl = peer_ssl
        self.refusals = RefusalLog(logger, "worker web endpoint")

    @classmethod
    def from_config(cls, cfg: Config) -> WebAccess:
        w = cfg.worker
        token = read_secret_file(w.web_token_file, "worker.web_token_file") \
            if w.web_token_file else None
        if token is None and not is_loopback(w.web_bind):
            raise ConfigError(
                f"worker.web_bind = {w.web_bind!r} is not loopback: set "
                "worker.web_token_file (a bearer token every request must carry), or keep "
                "the web endpoint on loopback")
        tls = server_tls(w.web_tls_cert, w.web_tls_key, "worker.web_tls")
        require_tls(w.web_bind, tls, terminated_by_proxy=w.web_tls_terminated_by_proxy,
                    bind_key="worker.web_bind", prefix="worker.web_tls")
        peer_ssl: ssl.SSLContext | bool = True
        if w.web_tls_ca:
            try:
                peer_ssl = ssl.create_default_context(cafile=w.web_tls_ca)
            except (OSError, ssl.SSLError) as exc:
                raise ConfigError(f"worker.web_tls_ca: cannot load {w.web_tls_ca}: "
                                  f"{exc}") from exc
        return cls(token, tls, peer_ssl)

    def headers(self) -> dict[str, str]:
        """What a request to another worker carries."""
        return {"Authorization": f"Bearer {self.token.reveal()}"} if self.token else {}

    def middleware(self) -> Callable[[aioweb.Request, Handler], Awaitable[Any]]:
        @aioweb.middleware
        async def require_token(request: aioweb.Request, handler: Handler) -> Any:
            if self.token is not None and not bearer_ok(
                    request.headers.get("Authorization"), self.token):
                self.refusals.refused_from(request.remote or "?", "no valid bearer token")
                return aioweb.json_response(
                    {"error": "a bearer token is required (Authorization: Bearer <token>)"},
                    status=401, headers={"WWW-Authenticate": 'Bearer realm="jobstream"'})
            return await handler(request)

        return require_token


def advertised_host(cfg: Config) -> str:
    """The host name other workers reach this one by (Faust's ``web_host``)."""
    w = cfg.worker
    if w.web_host:
        return w.web_host
    if w.web_bind in ("", "0.0.0.0", "::"):  # noqa: S104 - a wildcard: any of our names
        return socket.gethostname()
    return w.web_bind


def faust_web_settings(cfg: Config, access: WebAccess) -> dict[str, Any]:
    """The Faust app's web settings: where it listens, what it advertises, what it
    serves."""
    host = advertised_host(cfg)
    url_host = f"[{host}]" if ":" in host else host
    return {
        "web_enabled": True,
        "web_port": cfg.worker.web_port,
        "web_bind": cfg.worker.web_bind,
        "web_host": host,
        "canonical_url": f"{'https' if access.tls else 'http'}://{url_host}:"
                         f"{cfg.worker.web_port}",
        "web_ssl_context": access.tls,
        "web_application_options": {"middlewares": [access.middleware()]},
        # Faust's pages: the routing table (topology), tables' contents, sensors,
        # assignment, service graph and metrics. Routing between workers goes through
        # app.router and the assignor, not through these pages.
        "web_router_enabled": False,
        "web_tables_enabled": False,
        "web_stats_enabled": False,
        "web_graph_enabled": False,
        "web_metrics_enabled": False,
        "debug": False,
    }


class JobQuery:
    """``GET /jobs/<cluster>/<job_id>``: the job's current document (as indexed: enriched
    and anonymized), from this worker's table or from the owner's."""

    def __init__(self, worker: WorkerContext, access: WebAccess) -> None:
        self.worker = worker
        self.access = access
        self.app = worker.app
        self.table = worker.jobs
        self.topic = self.table.changelog_topic.get_topic_name()
        self.joined = False

    def register(self) -> None:
        @self.app.on_partitions_assigned.connect
        async def joined(app: Any, assigned: Any, **kwargs: Any) -> None:
            self.joined = True

        @self.app.page("/jobs/{cluster}/{job_id}")
        async def job_view(web: Any, request: Any, cluster: str, job_id: str) -> Any:
            return await self.answer(web, request, cluster, job_id)

    def not_ready(self) -> str | None:
        """Why the owner of a job cannot be told yet (None: it can)."""
        if not self.joined:
            return "the worker has not joined its group yet"
        if self.app.rebalancing:
            return "the worker group is rebalancing"
        if self.app.tables.recovery.in_recovery:
            return "the worker is recovering its job table"
        # Faust hashes the key with its producer's metadata, which knows a topic only once
        # it asked for it: before, aiokafka fails on a None partition list
        producer = kafka_producer(self.app.producer)
        if producer is None or producer.client.cluster.partitions_for_topic(self.topic) is None:
            if producer is not None:
                producer.client.add_topic(self.topic)  # ask for it now, not at the next refresh
            return f"the partitions of {self.topic} are not known yet"
        return None

    async def answer(self, web: Any, request: Any, cluster: str, job_id: str) -> Any:
        reason = self.not_ready()
        if reason is not None:
            return self._unavailable(web, reason)
        key = f"{cluster}:{job_id}".encode()
        try:
            owner: URL = self.app.router.key_store(self.table.name, key)
        except KeyError:  # a partition no member of the group holds yet
            return self._unavailable(web, "the job's partition is not assigned yet")
        if self._is_me(owner):
            return self._local(web, key, cluster, job_id)
        if request.headers.get(ROUTED_HEADER):
            return self._unavailable(web, "the job's partition is moving between workers")
        return await self._routed(web, request, owner)

    def _is_me(self, owner: URL) -> bool:
        me = URL(str(self.app.conf.canonical_url))
        return (owner.host, owner.port) == (me.host, me.port)

    def _local(self, web: Any, key: bytes, cluster: str, job_id: str) -> Any:
        from agents.states import decode_state

        state = decode_state(self.table.get(key))
        if state is None:
            return web.json({"error": f"unknown job {cluster}:{job_id}"}, status=404)
        docs = [self.worker.anonymizer.document(self.worker.enricher.facts(d))
                for d in JobFold.from_dict(state).documents()]
        return web.json(docs[-1] if len(docs) == 1 else {"incarnations": docs})

    async def _routed(self, web: Any, request: Any, owner: URL) -> Any:
        url = owner.with_path(request.path).with_query(request.query)
        headers = {**self.access.headers(), ROUTED_HEADER: "1"}
        try:
            async with self.app.http_client.get(
                    url, headers=headers, ssl=self.access.peer_ssl,
                    timeout=aiohttp.ClientTimeout(total=ROUTE_TIMEOUT_S)) as response:
                return web.text(await response.text(), content_type=response.content_type,
                                status=response.status)
        except (TimeoutError, aiohttp.ClientError) as exc:
            logger.warning("job query: the owner %s did not answer: %s", owner, exc)
            return self._unavailable(web, "the worker owning the job did not answer")

    @staticmethod
    def _unavailable(web: Any, reason: str) -> Any:
        return web.json({"error": "not ready", "reason": reason}, status=503,
                        headers={"Retry-After": "1"})
