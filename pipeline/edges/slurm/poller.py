"""Reconciliation poller: ``squeue --json`` and ``sacct --json`` every ``poll_interval_s``.

Hooks miss jobs that never start and jobcomp misses jobs that have not ended; the poller
sees both (slurm.md 6.3, after cc-slurm-adapter). Each poll publishes one record per job:
the command's JSON document with ``jobs`` cut down to that one job (``meta`` and the other
top-level keys kept), so every record has a job key and stays far below Kafka's message
size even on a large cluster. A job whose JSON did not change since the previous poll is
not published again.

``sacct`` asks for the window from the high-water mark (minus 1 s) to now, at most
``catchup_max_s`` back; the mark moves to the poll's start time only after every record of
the poll is durably spooled, so a crash re-asks the same window (duplicates, no gap). While
Slurm is unreachable (command missing, failing, timing out, printing no JSON) the poller
backs off exponentially up to ``poll_backoff_max_s``.
"""

from __future__ import annotations

import hashlib
import json
import logging
import shlex
import subprocess
import threading
import time
from collections.abc import Callable
from typing import Any

from pipeline.edges.base import Backoff, EdgeRuntime, record_key
from pipeline.errors import JobstreamError
from pipeline.model import RawRecord

__all__ = ["PollError", "SlurmPoller", "split_jobs"]

logger = logging.getLogger(__name__)

HWM_META = "slurm.sacct.hwm"

Runner = Callable[[list[str], float], str]


class PollError(Exception):
    """A Slurm command failed; the poller backs off."""


def run_command(argv: list[str], timeout: float) -> str:
    try:
        proc = subprocess.run(argv, capture_output=True, timeout=timeout, check=False)
    except FileNotFoundError as exc:
        raise PollError(f"{argv[0]} not found") from exc
    except subprocess.TimeoutExpired as exc:
        raise PollError(f"{argv[0]} timed out after {timeout:.0f} s") from exc
    if proc.returncode != 0:
        err = proc.stderr.decode(errors="replace").strip().splitlines()
        raise PollError(f"{argv[0]} exited {proc.returncode}: {err[-1] if err else ''}")
    return proc.stdout.decode(errors="replace")


def split_jobs(text: str) -> list[bytes]:
    """One ``--json`` document -> one document per job (compact JSON bytes)."""
    try:
        doc = json.loads(text)
    except ValueError as exc:
        raise PollError(f"output is not JSON: {exc}") from exc
    if not isinstance(doc, dict) or not isinstance(doc.get("jobs"), list):
        raise PollError("output has no jobs list")
    rest = {k: v for k, v in doc.items() if k != "jobs"}
    return [json.dumps({**rest, "jobs": [job]}, separators=(",", ":")).encode()
            for job in doc["jobs"]]


def _digest(payload: bytes) -> bytes:
    return hashlib.blake2b(payload, digest_size=12).digest()


class SlurmPoller:
    """Runs the polls in a thread; ``poll_once`` is the unit of work (tests call it)."""

    def __init__(self, runtime: EdgeRuntime, *, runner: Runner = run_command,
                 clock: Callable[[], float] = time.time,
                 sleep: Callable[[float], bool] | None = None) -> None:
        self.runtime = runtime
        self.cfg = runtime.cfg.edge.slurm
        self.runner = runner
        self.clock = clock
        self.published = 0
        self.polls = 0
        self.failures = 0
        self._seen: dict[str, dict[str, bytes]] = {"slurm-squeue": {}, "slurm-sacct": {}}
        self._stop = threading.Event()
        #: waits between polls; returns True when the poller should stop
        self._sleep = sleep or self._stop.wait
        self._thread: threading.Thread | None = None

    @property
    def high_water_mark(self) -> float | None:
        value = self.runtime.spool.get_meta(HWM_META)
        return float(value) if value else None

    def _window_start(self, now: float) -> float:
        hwm = self.high_water_mark
        start = now - self.cfg.catchup_max_s
        if hwm is not None:
            start = max(start, hwm - 1.0)
        return start

    def _publish(self, fmt: str, docs: list[bytes]) -> int:
        cluster = self.runtime.cfg.cluster
        now = time.time()
        seen = self._seen[fmt]
        fresh: dict[str, bytes] = {}
        records = []
        for payload in docs:
            key = record_key(fmt, payload, cluster, now)
            digest = _digest(payload)
            if key is not None:
                fresh[key] = digest
                if seen.get(key) == digest:
                    continue
            records.append(RawRecord(cluster=cluster, scheduler="slurm", format=fmt,
                                     received_at=now, payload=payload, key=key))
        if records:
            self.runtime.publish_many(records)
        self._seen[fmt] = fresh
        return len(records)

    def poll_once(self) -> int:
        """One squeue + sacct round; the number of records published. Raises PollError."""
        now = self.clock()
        squeue = shlex.split(self.cfg.squeue_command)
        sacct = shlex.split(self.cfg.sacct_command) + [
            "--starttime", time.strftime("%Y-%m-%dT%H:%M:%S",
                                         time.localtime(self._window_start(now))),
            "--endtime", time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(now + 1)),
        ]
        timeout = self.cfg.command_timeout_s
        squeue_docs = split_jobs(self.runner(squeue, timeout))
        sacct_docs = split_jobs(self.runner(sacct, timeout))
        n = self._publish("slurm-squeue", squeue_docs) + self._publish("slurm-sacct", sacct_docs)
        # everything of this window is on disk: the next poll may start from here
        self.runtime.spool.set_meta(HWM_META, repr(now))
        self.polls += 1
        self.published += n
        return n

    def start(self) -> None:
        self._thread = threading.Thread(target=self.run, name="slurm-poller", daemon=True)
        self._thread.start()

    def run(self) -> None:
        """Poll until stopped: every ``poll_interval_s``, backing off while Slurm fails."""
        backoff = Backoff(min(5.0, self.cfg.poll_interval_s), self.cfg.poll_backoff_max_s)
        while not self._stop.is_set():
            try:
                n = self.poll_once()
                backoff.reset()
                delay = self.cfg.poll_interval_s
                logger.info("slurm poll: %d records", n)
            except (PollError, JobstreamError) as exc:
                self.failures += 1
                delay = backoff.next()
                logger.warning("slurm poll failed (%s); next attempt in %.0f s", exc, delay)
            if self._sleep(delay):
                return

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(self.cfg.command_timeout_s + 5.0)

    def describe(self) -> dict[str, Any]:
        return {"polls": self.polls, "published": self.published, "failures": self.failures,
                "high_water_mark": self.high_water_mark}
