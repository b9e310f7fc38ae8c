"""Helpers of the end-to-end Slurm test: the real Slurm edge as a process, the test cluster
pointed at it, job documents watched in Elasticsearch as they become searchable, the raw
topic read back, and the edge's cost per record.

The edge runs through its lean entry point, ``python -m pipeline.edges slurm``, configured
entirely by ``JOBSTREAM_*`` variables, so what is measured is what a site runs.
"""

from __future__ import annotations

import http.client
import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import psutil
from slurm_cluster import SlurmCluster
from slurm_daemons import log_tail
from stack_names import isolated
from topic_reads import end_offsets, read_topic
from waiting import wait_until

from pipeline.codecs.codec import AvroCodec, raw_from_avro
from pipeline.core.model import RawRecord
from pipeline.replay.readback import client
from pipeline.runtime.children import config_env, free_port
from pipeline.runtime.config import Config

__all__ = ["DocWatcher", "EdgeProcess", "Usage", "end_offsets", "lua_plugins", "percentile",
           "read_dlq", "read_raw", "routed", "send_hook", "set_conf_keys"]

#: Guard against a hang only: every wait normally ends on its condition long before.
GUARD_S = 120.0


# -- the edge process -------------------------------------------------------------------


@dataclass(frozen=True)
class Usage:
    """What a process has used so far: CPU seconds (own, not its children's), resident
    memory now and at its peak (``VmHWM``), in bytes."""

    cpu_s: float
    rss: int
    peak_rss: int


class EdgeProcess:
    """``python -m pipeline.edges slurm`` with ``cfg`` as its whole configuration.

    :param env: more environment (``SLURM_CONF`` and ``PATH`` for the poller's commands)
    """

    def __init__(self, cfg: Config, log: Path, env: Mapping[str, str] | None = None) -> None:
        self.cfg = cfg
        self.log = log
        self.extra_env = dict(env or {})
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> EdgeProcess:
        """Start it and wait until it says it listens."""
        env = {k: v for k, v in os.environ.items() if not k.startswith("JOBSTREAM_")}
        env.update(config_env(self.cfg))
        env.update(self.extra_env)
        env["PYTHONUNBUFFERED"] = "1"
        if env.get("PYTHONPATH"):
            # it runs in the log's directory: a relative entry (PYTHONPATH=. in a
            # worktree) would fall through to the installed tree, another checkout's code
            env["PYTHONPATH"] = absolute_path_list(env["PYTHONPATH"])
        self.log.parent.mkdir(parents=True, exist_ok=True)
        with self.log.open("ab") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "pipeline.edges", "-v", "slurm"], env=env,
                cwd=self.log.parent, stdin=subprocess.DEVNULL, stdout=out,
                stderr=subprocess.STDOUT, start_new_session=True)

        def ready() -> bool:
            self.check()
            return "jobstream edge slurm: ready" in self.output()

        wait_until(ready, timeout=GUARD_S, what=f"the edge to listen (log {self.log})",
                   interval=0.1)
        return self

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def output(self) -> str:
        try:
            return self.log.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def check(self) -> None:
        """Fail with its log if it has exited."""
        if self.proc is not None and self.proc.poll() is not None:
            raise AssertionError(f"the Slurm edge exited with {self.proc.returncode}:\n"
                                 f"{log_tail(self.log)}")

    def usage(self) -> Usage:
        proc = psutil.Process(self.pid)
        cpu = proc.cpu_times()
        return Usage(cpu_s=cpu.user + cpu.system, rss=int(proc.memory_info().rss),
                     peak_rss=_peak_rss(self.pid))

    def stop(self, timeout: float = 30.0) -> int | None:
        """SIGTERM (it stops its sources, then its drainer), SIGKILL after ``timeout``."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode


def absolute_path_list(value: str) -> str:
    """``value``, a ``PYTHONPATH``, with each entry made absolute against the current
    directory (empty entries, which mean it, too)."""
    return os.pathsep.join(os.path.abspath(p or os.curdir) for p in value.split(os.pathsep))


def _peak_rss(pid: int) -> int:
    status = Path(f"/proc/{pid}/status").read_text()
    match = re.search(r"^VmHWM:\s+(\d+) kB", status, re.MULTILINE)
    return int(match.group(1)) * 1024 if match else 0


# -- the cluster pointed at the edge ------------------------------------------------------


def set_conf_keys(text: str, values: Mapping[str, str]) -> str:
    """slurm.conf ``text`` with the one line of each key in ``values`` replaced."""
    out = text
    for key, value in values.items():
        pattern = re.compile(rf"^{re.escape(key)}=.*$", re.MULTILINE)
        if len(pattern.findall(out)) != 1:
            raise ValueError(f"slurm.conf must have exactly one {key}= line")
        out = pattern.sub(f"{key}={value}", out)
    return out


@contextmanager
def routed(cluster: SlurmCluster, jobcomp_url: str, hook: Path) -> Iterator[None]:
    """The running cluster's jobcomp records and slurmctld hooks sent to ``jobcomp_url``
    and ``hook`` while the block runs, then back to where they went before.

    ``scontrol reconfigure`` re-reads slurm.conf in place on 22.05: PrologSlurmctld and
    EpilogSlurmctld are read per job, and the jobcomp plugin is given the new location
    (``jobcomp_g_init`` -> ``set_location``), so the cluster keeps running and its other
    users (the records test with its stand-ins) find it as they left it.
    """
    original = cluster.conf.read_text()
    cluster.conf.write_text(set_conf_keys(original, {
        "JobCompLoc": jobcomp_url, "PrologSlurmctld": str(hook),
        "EpilogSlurmctld": str(hook)}))
    try:
        cluster.run(["scontrol", "reconfigure"])
        shown = cluster.run(["scontrol", "show", "config"]).stdout
        if not re.search(rf"^JobCompLoc\s*=\s*{re.escape(jobcomp_url)}\s*$", shown,
                         re.MULTILINE):
            raise AssertionError(f"slurmctld did not take JobCompLoc={jobcomp_url}")
        yield
    finally:
        cluster.conf.write_text(original)
        cluster.run(["scontrol", "reconfigure"], check=False)


# -- job documents becoming searchable ----------------------------------------------------


class DocWatcher:
    """Searches the job alias every ``interval`` seconds in a thread of its own and notes,
    per job id, the wall-clock time its document was first found ``done``.

    Search, not get: a document counts once a search finds it, which is when a dashboard
    can show it.
    """

    def __init__(self, cfg: Config, alias: str, interval: float = 0.2) -> None:
        self.cfg = cfg
        self.alias = alias
        self.interval = interval
        self.first_done: dict[str, float] = {}
        self.errors = 0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="doc-watcher", daemon=True)

    def start(self) -> DocWatcher:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)

    def done(self) -> dict[str, float]:
        with self._lock:
            return dict(self.first_done)

    def _run(self) -> None:
        with client(self.cfg) as es:
            while not self._stop.wait(self.interval):
                try:
                    resp = es.search(index=self.alias, size=10_000, source=["job_id"],
                                     query={"term": {"state": "done"}},
                                     ignore_unavailable=True, allow_no_indices=True)
                except Exception:  # noqa: BLE001 -- the index may not exist yet
                    self.errors += 1
                    continue
                now = time.time()
                with self._lock:
                    for hit in resp["hits"]["hits"]:
                        self.first_done.setdefault(hit["_source"]["job_id"], now)


# -- the raw topic ------------------------------------------------------------------------


def read_raw(cfg: Config, topic: str) -> list[RawRecord]:
    """Every raw record of ``topic`` up to its current end."""
    codec = AvroCodec("RawRecord")
    return [raw_from_avro(codec.decode(m.value)) for m in read_topic(cfg, topic)]


def read_dlq(cfg: Config, topic: str) -> list[tuple[dict[str, str], bytes]]:
    """Every record of the DLQ ``topic`` up to its current end: (headers, value)."""
    return [({k: v.decode("utf-8", "replace") for k, v in m.headers.items()}, m.value)
            for m in read_topic(cfg, topic)]


@contextmanager
def lua_plugins(cluster: SlurmCluster, cfg: Config, site_policy: Path) -> Iterator[None]:
    """jobstream's job_submit.lua and cli_filter.lua, written by ``install-lua`` with
    ``cfg``'s submit spool and ``site_policy`` as the site's own job_submit policy, in the
    cluster's slurm.conf directory while the block runs; the pass-through scripts after.
    A second's pause first: job_submit/lua reloads a script whose mtime (whole seconds)
    passed its last load."""
    time.sleep(1.1)
    env = {"PATH": "/usr/bin:/bin", **config_env(cfg)}
    done = subprocess.run([sys.executable, "-m", "pipeline.edges", "install-lua",
                           str(cluster.etc), "--site-policy", str(site_policy)],
                          env=env, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    try:
        yield
    finally:
        time.sleep(1.1)
        cluster.write_pass_through_lua()


# -- driving an edge by hand (its cost per record) ----------------------------------------


def send_hook(path: Path, env: Mapping[str, str], timeout: float = 10.0) -> None:
    """What the shipped hook does over the socket: one JSON object, then wait for "ok"."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(timeout)
        sock.connect(str(path))
        sock.sendall(json.dumps(dict(env), separators=(",", ":")).encode())
        sock.shutdown(socket.SHUT_WR)
        reply = sock.recv(16)
    if not reply.startswith(b"ok"):
        raise AssertionError(f"the edge did not confirm a hook record: {reply!r}")


def post_jobcomp(conn: http.client.HTTPConnection, body: bytes) -> None:
    """One jobcomp/elasticsearch POST on a kept-alive connection; must be answered 201."""
    conn.request("POST", "/slurm/_doc", body=body,
                 headers={"Content-Type": "application/json"})
    resp = conn.getresponse()
    resp.read()
    if resp.status != 201:
        raise AssertionError(f"the edge answered a jobcomp POST with {resp.status}")


def feed(port: int, hook_socket: Path, jobcomp: Iterable[bytes],
         hooks: Iterable[Mapping[str, str]]) -> int:
    """POST every jobcomp body and send every hook environment; how many records."""
    n = 0
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        for body in jobcomp:
            post_jobcomp(conn, body)
            n += 1
    finally:
        conn.close()
    for env in hooks:
        send_hook(hook_socket, env)
        n += 1
    return n


# -- figures ------------------------------------------------------------------------------


def percentile(values: Sequence[float], q: float) -> float:
    """The ``q`` quantile (0..1) by nearest rank; values must not be empty."""
    ordered = sorted(values)
    rank = max(1, min(len(ordered), round(q * len(ordered) + 0.5)))
    return ordered[rank - 1]


def wait_for(what: str, condition: Callable[[], bool], checks: Iterable[Callable[[], None]],
             guard_s: float = GUARD_S, interval: float = 0.25,
             detail: Callable[[], str] | None = None) -> None:
    """Until ``condition()``; every round runs ``checks`` (they raise when a process died),
    and the hang guard fails the wait after ``guard_s`` with ``detail()`` in its message."""
    checks = list(checks)
    deadline = time.monotonic() + guard_s
    while not condition():
        for check in checks:
            check()
        if time.monotonic() > deadline:
            raise AssertionError(f"hang guard: still waiting for {what} after {guard_s:.0f} s"
                                 + (f": {detail()}" if detail else ""))
        time.sleep(interval)


@contextmanager
def module_config(base: Config, cluster: str, state: Path) -> Iterator[Config]:
    """A config of a test module's own on the running stack (:func:`stack_names.isolated`)
    for ``cluster``, with a worker web port of its own."""
    with isolated(base.replace(cluster=cluster), state) as cfg:
        yield cfg.replace(worker={"web_port": free_port()})
