"""Reconciliation poller: ``squeue --json`` and ``sacct --json`` every ``poll_interval_s``.

Hooks miss jobs that never start and jobcomp misses jobs that have not ended; the poller
sees both (docs/slurm.md, "The poller"; after cc-slurm-adapter). Each poll publishes one
record per job:
the command's JSON document with ``jobs`` cut down to that one job (``meta`` and the other
top-level keys kept), so every record has a job key and stays far below Kafka's message
size even on a large cluster. A job whose JSON object did not change since the previous
poll is not published again; the top-level keys do not count, since Slurm 23.02 prints
``last_backfill`` and ``last_update``, which change at every poll. The digests of the last
poll's jobs are kept in a file beside the spool, not in memory
(:class:`~pipeline.edges.slurm.changes.DigestSet`).

The output is never held in memory (50,000 queued jobs are ~28 MiB of JSON): each command
writes to an unlinked temporary file beside the spool, read in two streaming passes
(:mod:`.documents`), and the jobs are spooled :data:`CHUNK` records at a time.

``sacct`` asks for the window from the high-water mark (minus 1 s) to now, at most
``catchup_max_s`` back; the mark moves to the poll's start time only after every record of
the poll is durably spooled, so a crash re-asks the same window (duplicates, no gap). While
Slurm is unreachable (command missing, failing, timing out, printing no JSON) the poller
backs off exponentially up to ``poll_backoff_max_s`` (:class:`.polling.PollLoop`).
"""

from __future__ import annotations

import logging
import shlex
import tempfile
import time
from collections.abc import Callable
from typing import IO, Any

from pipeline.core.model import RawRecord
from pipeline.edges.base import EdgeRuntime, record_key
from pipeline.edges.slurm.changes import DigestSet, DigestWriter, digest, dumps
from pipeline.edges.slurm.documents import iter_items, top_level
from pipeline.edges.slurm.polling import Poller, Runner, run_command

__all__ = ["CHUNK", "HWM_META", "SlurmPoller"]

logger = logging.getLogger(__name__)

HWM_META = "slurm.sacct.hwm"
#: records per publish_many (one spool transaction): bounds the memory of a poll (a
#: squeue job is 0.5-5 KB, held as its payload and again Avro-encoded while spooled)
CHUNK = 250


class SlurmPoller(Poller):
    """Runs the polls in a thread; ``poll_once`` is the unit of work (tests call it)."""

    def __init__(self, runtime: EdgeRuntime, *, runner: Runner = run_command,
                 clock: Callable[[], float] = time.time,
                 sleep: Callable[[float], bool] | None = None) -> None:
        super().__init__(runtime, what="slurm poll",
                         interval_s=runtime.cfg.edge.slurm.poll_interval_s, runner=runner,
                         clock=clock, sleep=sleep)
        #: the digests of the last poll's jobs, by format (the job id is in the job)
        self._seen: dict[str, DigestSet] = {"slurm-squeue": DigestSet(),
                                            "slurm-sacct": DigestSet()}

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

    def _publish(self, fmt: str, f: IO[bytes], rest: dict[str, Any]) -> int:
        cluster = self.runtime.cfg.cluster
        now = time.time()
        seen = self._seen[fmt]
        fresh = DigestWriter(self.runtime.spool.path.parent)
        try:
            records: list[RawRecord] = []
            n = 0
            for job in iter_items(f, "jobs"):
                # the job alone: the top-level keys (last_update, ...) change at every poll
                value = digest(job)
                if value in seen:  # unchanged, and keyed when it was published
                    fresh.append(value)
                    continue
                # the record as before the streaming parse: the parsers downstream are
                # unchanged
                payload = dumps({**rest, "jobs": [job]})
                key = record_key(fmt, payload, cluster, now)
                if key is not None:  # an unkeyed record goes out again at every poll
                    fresh.append(value)
                records.append(RawRecord(cluster=cluster, scheduler="slurm", format=fmt,
                                         received_at=now, payload=payload, key=key))
                if len(records) >= CHUNK:
                    self.runtime.publish_many(records)
                    n += len(records)
                    records = []
            if records:
                self.runtime.publish_many(records)
                n += len(records)
        except BaseException:
            fresh.close()
            raise
        self._seen[fmt] = fresh.finish()
        seen.close()
        return n

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
        # on disk beside the spool, not in /tmp (often tmpfs, i.e. memory); unlinked at once
        spool_dir = self.runtime.spool.path.parent
        with tempfile.TemporaryFile(dir=spool_dir) as squeue_out, \
                tempfile.TemporaryFile(dir=spool_dir) as sacct_out:
            self.runner(squeue, timeout, squeue_out)
            self.runner(sacct, timeout, sacct_out)
            # both documents are checked before anything is published
            squeue_rest, sacct_rest = (top_level(squeue_out, "jobs"),
                                      top_level(sacct_out, "jobs"))
            n = (self._publish("slurm-squeue", squeue_out, squeue_rest)
                 + self._publish("slurm-sacct", sacct_out, sacct_rest))
        # everything of this window is on disk: the next poll may start from here
        self.runtime.spool.set_meta(HWM_META, repr(now))
        self.polls += 1
        self.published += n
        return n

    def stop(self) -> None:
        if self._loop.stop():  # else still in a poll, which uses the digests
            self.close()

    def close(self) -> None:
        """Close the digests' files (a poll after this republishes every job)."""
        for digests in self._seen.values():
            digests.close()

    def describe(self) -> dict[str, Any]:
        return {"polls": self.polls, "published": self.published, "failures": self.failures,
                "high_water_mark": self.high_water_mark}
