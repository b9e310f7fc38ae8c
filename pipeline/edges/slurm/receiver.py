"""An Elasticsearch look-alike for Slurm's jobcomp/elasticsearch plugin.

Point ``JobCompLoc=http://<edge>:<port>/<index>/_doc`` at it (Slurm before 20.11 appends
``/slurm/jobcomp`` itself: accepted too). The plugin probes the location with a HEAD
request when it loads, then POSTs one JSON document per finished job and counts 200/201 as
indexed; anything else is retried every 30 s from its memory (docs/slurm.md,
"jobcomp/elasticsearch transport"). So the
receiver answers 201 only after the record is in the spool, and 503 when the spool cannot
take it: Slurm keeps the record and tries again.

A body that is not JSON is spooled all the same (the agents route it to the DLQ with the
reason); refusing it would only make Slurm retry it forever.

Who may post (:class:`ReceiverGuard`): it listens on loopback by default; beyond it, it
needs an allow-list of source networks (``edge.slurm.receiver_allow``: the slurmctld
hosts) and/or HTTP basic credentials (``receiver_user`` / ``receiver_password``). The
plugin has no credential setting of its own (no JobCompUser/JobCompPass): it hands
``JobCompLoc`` to libcurl untouched, and libcurl sends the ``user:password@`` of that URL
as basic authentication. A refused request is answered 403 (source not allowed) or 401
(credentials), before its body is read, and never reaches the spool; each refused source
is logged once.

Standard library only (``ThreadingHTTPServer``: a thread per request), which keeps the edge
small; it speaks HTTP/1.1 and answers curl's ``Expect: 100-continue``.
"""

from __future__ import annotations

import json
import logging
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit

from pipeline.core.model import RawRecord
from pipeline.edges.base import EdgeRuntime, record_key
from pipeline.runtime.config import SlurmEdgeConfig
from pipeline.runtime.errors import ConfigError, JobstreamError
from pipeline.runtime.netguard import AllowList, BasicAuth, RefusalLog, is_loopback
from pipeline.runtime.servers import ServerThread

__all__ = ["JobcompReceiver", "ReceiverGuard"]

logger = logging.getLogger(__name__)

FORMAT = "slurm-jobcomp"
#: larger bodies are refused (a jobcomp record with a batch script is a few KB)
MAX_BODY = 16 << 20
_DOC_ENDPOINTS = frozenset({"_doc", "_create", "jobcomp"})


class ReceiverGuard:
    """Who may talk to the receiver: sources in ``allow`` (every source when empty) and,
    with ``basic`` set, only with its credentials."""

    def __init__(self, allow: AllowList, basic: BasicAuth | None) -> None:
        self.allow = allow
        self.basic = basic
        self.refusals = RefusalLog(logger, "jobcomp receiver")

    @classmethod
    def from_config(cls, s: SlurmEdgeConfig) -> ReceiverGuard:
        allow = AllowList(s.receiver_allow.split(","), "edge.slurm.receiver_allow")
        if bool(s.receiver_user) != bool(s.receiver_password):
            raise ConfigError("edge.slurm.receiver_user and edge.slurm.receiver_password "
                              "go together (basic authentication needs both)")
        basic = BasicAuth(s.receiver_user, s.receiver_password) if s.receiver_user else None
        if not allow and basic is None and not is_loopback(s.receiver_host):
            raise ConfigError(
                f"edge.slurm.receiver_host = {s.receiver_host!r} is not loopback: set "
                "edge.slurm.receiver_allow (the slurmctld hosts' addresses) and/or "
                "edge.slurm.receiver_user and receiver_password (sent by Slurm from "
                "JobCompLoc=http://user:password@host:port/slurm/_doc)")
        return cls(allow, basic)

    def refusal(self, source: str, authorization: str | None) -> int | None:
        """The status a request from ``source`` is refused with (None: accepted)."""
        if not self.allow.allows(source):
            self.refusals.refused_from(source, "source not in edge.slurm.receiver_allow")
            return 403
        if self.basic is not None and not self.basic.check(authorization):
            self.refusals.refused_from(source, "no valid basic credentials")
            return 401
        return None


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "jobstream-edge"
    # headers and body go out in two writes: with Nagle on, the client's delayed ACK
    # adds 40 ms to every request
    disable_nagle_algorithm = True
    server: _Server

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002
        logger.debug("%s " + format, self.address_string(), *args)

    def _reply(self, status: int, body: dict[str, object] | None = None,
               headers: dict[str, str] | None = None) -> None:
        data = json.dumps(body).encode() if body is not None else b""
        self.send_response(status)
        self.send_header("Content-Type", "application/json; charset=UTF-8")
        self.send_header("Content-Length", str(len(data)))
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)

    def _error(self, status: int, kind: str, reason: str,
               headers: dict[str, str] | None = None) -> None:
        self._reply(status, {"error": {"type": kind, "reason": reason}, "status": status},
                    headers)

    def _refused(self) -> bool:
        """Answer a request the guard refuses (before its body is read: the connection is
        closed instead) and say so."""
        status = self.server.guard.refusal(self.client_address[0],
                                           self.headers.get("Authorization"))
        if status is None:
            return False
        self.close_connection = True
        if status == 401:
            self._error(401, "security_exception", "authentication required",
                        {"WWW-Authenticate": 'Basic realm="jobstream", charset="UTF-8"'})
        else:
            self._error(403, "security_exception", "source address not allowed")
        return True

    def handle_expect_100(self) -> bool:
        # curl waits for "100 Continue" before a large body: refuse before it is sent
        return not self._refused() and super().handle_expect_100()

    def do_HEAD(self) -> None:  # noqa: N802 - the plugin's location probe
        if not self._refused():
            self._reply(200)

    def do_GET(self) -> None:  # noqa: N802
        if self._refused():
            return
        self._reply(200, {"name": "jobstream-edge", "cluster_name": self.server.cluster,
                          "tagline": "jobcomp receiver of the jobstream Slurm edge",
                          "version": {"number": "8.19.0"}})

    def do_PUT(self) -> None:  # noqa: N802 - index creation by hand or by tools
        if self._refused():
            return
        self._drain_body()
        self._reply(200, {"acknowledged": True})

    def do_POST(self) -> None:  # noqa: N802
        if self._refused():
            return
        parts = [p for p in urlsplit(self.path).path.split("/") if p]
        if len(parts) < 2 or parts[1] not in _DOC_ENDPOINTS:
            self._drain_body()
            self._error(404, "no_handler_found_exception",
                        f"no handler for POST {self.path}; post to /<index>/_doc")
            return
        body = self._read_body()
        if body is None:
            return
        index = parts[0]
        try:
            seq = self.server.accept(body)
        except JobstreamError as exc:
            logger.error("jobcomp record refused, Slurm will retry: %s", exc)
            self._error(503, "spool_unavailable", str(exc))
            return
        self._reply(201, {"_index": index, "_id": f"{self.server.cluster}-{seq}",
                          "_version": 1, "result": "created", "_seq_no": seq,
                          "_primary_term": 1,
                          "_shards": {"total": 1, "successful": 1, "failed": 0}})

    def _read_body(self) -> bytes | None:
        length = self.headers.get("Content-Length")
        if length is None:
            self._error(411, "illegal_argument_exception", "Content-Length required")
            self.close_connection = True
            return None
        try:
            n = int(length)
        except ValueError:
            n = -1
        if n < 0 or n > MAX_BODY:
            self._error(413, "content_too_long_exception", f"body of {length} bytes refused")
            self.close_connection = True
            return None
        return self.rfile.read(n)

    def _drain_body(self) -> None:
        try:
            n = int(self.headers.get("Content-Length") or 0)
        except ValueError:
            n = 0
        if 0 < n <= MAX_BODY:
            self.rfile.read(n)
        else:
            self.close_connection = True


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, address: tuple[str, int], runtime: EdgeRuntime,
                 guard: ReceiverGuard) -> None:
        self.runtime = runtime
        self.guard = guard
        self.cluster = runtime.cfg.cluster
        self.received = 0
        super().__init__(address, _Handler)

    def accept(self, body: bytes) -> int:
        now = time.time()
        try:
            json.loads(body)
        except (ValueError, RecursionError):  # nested past the recursion limit: not ValueError
            logger.warning("jobcomp POST body is not JSON; spooled for the DLQ: %.200r", body)
        rec = RawRecord(cluster=self.cluster, scheduler="slurm", format=FORMAT,
                        received_at=now, payload=body,
                        key=record_key(FORMAT, body, self.cluster, now))
        seq = self.runtime.publish(rec)
        self.received += 1
        return seq


class JobcompReceiver:
    """The HTTP receiver as an edge component: ``start()`` listens, ``stop()`` closes.

    ``port`` 0 picks a free port (see :attr:`port` after ``start``); ``guard`` defaults to
    the one ``runtime``'s configuration asks for.
    """

    def __init__(self, runtime: EdgeRuntime, host: str, port: int,
                 guard: ReceiverGuard | None = None) -> None:
        self.runtime = runtime
        self.host = host
        self._port = port
        self.guard = guard or ReceiverGuard.from_config(runtime.cfg.edge.slurm)
        self._server: _Server | None = None
        self._served: ServerThread | None = None

    @property
    def port(self) -> int:
        return self._server.server_address[1] if self._server else self._port

    @property
    def url(self) -> str:
        """What to put in ``JobCompLoc`` (index ``slurm``)."""
        return f"http://{self.host}:{self.port}/slurm/_doc"

    @property
    def received(self) -> int:
        return self._server.received if self._server else 0

    def start(self) -> None:
        try:
            self._server = _Server((self.host, self._port), self.runtime, self.guard)
        except OSError as exc:
            from pipeline.runtime.errors import ServiceError
            raise ServiceError(f"jobcomp receiver cannot listen on {self.host}:{self._port}: "
                               f"{exc.strerror}; set edge.slurm.receiver_port") from exc
        self._served = ServerThread(self._server, "jobcomp-receiver").start()
        logger.info("jobcomp receiver on %s", self.url)

    def stop(self) -> None:
        if self._served is not None:
            self._served.stop()
