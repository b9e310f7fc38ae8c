"""Helpers of the agents' integration tests: ``jobstream worker`` subprocesses configured
through ``JOBSTREAM_*`` variables, raw records onto the broker, topics read to their end,
and "the worker has caught up" judged from its consumer group's committed offsets.

Caught up means: every partition of the raw topic and of the worker's internal canonical
topic is committed up to its end. Faust flushes its producer before it commits, so by
then every output of every input is on the broker, and reading the output topics up to
their current ends gives all of them: no idle timeouts, no sleeps.
"""

from __future__ import annotations

import functools
import os
import random
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil
from confluent_kafka import (
    Producer,
)
from topic_reads import Msg, committed, end_offsets

from pipeline.codecs.codec import AvroCodec, raw_to_avro
from pipeline.codecs.wire import Wire, fit_event
from pipeline.core.anonymize import Anonymizer
from pipeline.core.enrich import Enricher
from pipeline.core.model import JobEvent, RawRecord
from pipeline.fold import doc_id, fold
from pipeline.kafka.topics import canonical_topic, ensure_topics
from pipeline.parsers.normalize import normalize
from pipeline.runtime.children import config_env
from pipeline.runtime.config import Config
from pipeline.runtime.errors import ParseError

#: Guard against a hang only: every wait normally ends on its condition long before.
GUARD_S = 240.0


# -- configuration --------------------------------------------------------------------


# -- worker processes -----------------------------------------------------------------


class WorkerProcess:
    """One ``jobstream worker`` subprocess; its output goes to ``log``."""

    def __init__(self, cfg: Config, workdir: Path, *, name: str = "w1",
                 web_port: int | None = None, store_dir: Path | None = None,
                 **worker: Any) -> None:
        self.web_port = web_port or free_port()
        store = store_dir or workdir / f"store-{name}"
        self.cfg = cfg.replace(worker={"web_port": self.web_port, "store_dir": str(store),
                                       **worker})
        self.name = name
        self.workdir = workdir
        self.log = workdir / f"worker-{name}.log"
        self.proc: subprocess.Popen[bytes] | None = None
        self.starts = 0

    def start(self) -> WorkerProcess:
        env = {k: v for k, v in os.environ.items() if not k.startswith("JOBSTREAM_")}
        env.update(config_env(self.cfg))
        self.starts += 1
        with open(self.log, "ab") as log:
            log.write(f"\n==== start {self.starts} ====\n".encode())
            log.flush()
            self.proc = subprocess.Popen(
                [sys.executable, "-c", "from pipeline.cli import main; main()",
                 "worker", "--name", self.name, "--loglevel", "info"],
                cwd=self.workdir, env=env, stdout=log, stderr=subprocess.STDOUT)
        return self

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def kill(self) -> None:
        """SIGKILL: no clean-up, no last commit, no flush."""
        if self.alive():
            assert self.proc is not None
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(30)

    def stop(self, timeout: float = 60.0) -> None:
        """SIGTERM, then SIGKILL if it has not stopped in ``timeout``."""
        if not self.alive():
            return
        assert self.proc is not None
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()

    def rss(self) -> int:
        """Resident memory in bytes."""
        return int(psutil.Process(self.pid).memory_info().rss)

    def cpu_s(self) -> float:
        """CPU seconds used so far (user + system)."""
        times = psutil.Process(self.pid).cpu_times()
        return float(times.user + times.system)

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def check_alive(self) -> None:
        if not self.alive():
            raise AssertionError(f"worker {self.name} exited; its log:\n{self.output()[-6000:]}")


@functools.cache
def codec_of(schema: str) -> AvroCodec:
    """One codec per schema for the whole session: building one compiles its reader and
    writer (~40 ms), which ``as_state`` paid once per job compared (minutes per test)."""
    return AvroCodec(schema)


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_for(what: str, condition: Callable[[], bool], workers: Iterable[WorkerProcess] = (),
             guard_s: float = GUARD_S, poll_s: float = 0.2) -> None:
    """Wait until ``condition()``; fail if a worker dies or the hang guard expires."""
    workers = list(workers)
    deadline = time.monotonic() + guard_s
    while not condition():
        for w in workers:
            w.check_alive()
        if time.monotonic() > deadline:
            logs = "\n".join(w.output()[-3000:] for w in workers)
            raise AssertionError(f"hang guard: still waiting for {what}\n{logs}")
        time.sleep(poll_s)


# -- topics (read with tests/topic_reads.py) ------------------------------------------


def lag(cfg: Config) -> dict[str, dict[int, tuple[int, int]]]:
    """topic -> partition -> (committed, end) of the worker group's input topics, where
    the group has not committed everything yet (empty when caught up)."""
    group = cfg.worker.app_id
    out: dict[str, dict[int, tuple[int, int]]] = {}
    for topic in (cfg.topics.raw, canonical_topic(cfg.worker.app_id)):
        ends = end_offsets(cfg, topic)  # Positions asks again while a partition has no leader
        if not ends:
            out[topic] = {}
            continue
        done = committed(cfg, group, topic, ends)
        behind = {p: (done.get(p, -1), end) for p, end in ends.items()
                  if end > 0 and done.get(p, -1) < end}
        if behind:
            out[topic] = behind
    return out


def wait_caught_up(cfg: Config, workers: Iterable[WorkerProcess],
                   guard_s: float = GUARD_S) -> None:
    last: list[Any] = []

    def done() -> bool:
        last[:] = [lag(cfg)]
        return not last[0]

    try:
        wait_for("the worker to commit every input", done, workers, guard_s, poll_s=0.5)
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n(committed, end) behind: {last}") from None


# -- raw records ----------------------------------------------------------------------


@dataclass(frozen=True)
class Raw:
    """A raw-topic message to publish: the record, or (for bad input) bare bytes."""

    key: str | None
    record: RawRecord | None = None
    value: bytes | None = None

    def encode(self, codec: AvroCodec) -> bytes:
        if self.value is not None:
            return self.value
        assert self.record is not None
        return codec.encode(raw_to_avro(self.record))


def raw_producer(cfg: Config) -> Producer:
    return Producer(cfg.librdkafka(**{
        "enable.idempotence": True, "acks": "all", "linger.ms": 20,
        "compression.type": "lz4", "message.max.bytes": 16 * 1024 * 1024,
        "queue.buffering.max.kbytes": 512 * 1024}))


def publish(cfg: Config, messages: Iterable[Raw]) -> int:
    """Publish to ``cfg.topics.raw`` (creating the topics first), in order; the count."""
    ensure_topics(cfg)
    codec = codec_of("RawRecord")
    producer = raw_producer(cfg)
    errors: list[str] = []

    def delivered(err: Any, msg: Any) -> None:
        if err is not None:
            errors.append(f"{err.name()}: {err.str()}")

    n = 0
    for m in messages:
        value = m.encode(codec)
        while True:
            try:
                producer.produce(cfg.topics.raw, value=value,
                                 key=m.key.encode() if m.key else None,
                                 on_delivery=delivered)
                break
            except BufferError:
                producer.poll(0.1)
        producer.poll(0)
        n += 1
    left = producer.flush(120)
    assert left == 0 and not errors, f"raw records not delivered: {left} left, {errors[:3]}"
    return n


def shuffled_within_jobs(messages: list[Raw], rng: random.Random, share: float) -> list[Raw]:
    """``messages`` with the records of a ``share`` of the jobs in a random order (each
    job's records keep the positions the job had; other jobs are untouched)."""
    positions: dict[str | None, list[int]] = {}
    for i, m in enumerate(messages):
        positions.setdefault(m.key, []).append(i)
    out = list(messages)
    for key, idx in positions.items():
        if key is None or len(idx) < 2 or rng.random() >= share:
            continue
        items = [messages[i] for i in idx]
        rng.shuffle(items)
        for i, m in zip(idx, items, strict=True):
            out[i] = m
    return out


def grep_log(worker: WorkerProcess, pattern: str) -> list[str]:
    return [ln for ln in worker.output().splitlines() if re.search(pattern, ln)]


def iter_chunks(items: list[Any], n: int) -> Iterator[list[Any]]:
    for i in range(0, len(items), n):
        yield items[i:i + n]


# -- what the worker must produce -----------------------------------------------------


@dataclass
class Expected:
    """The offline result of a list of raw messages, by the same pure functions."""

    #: doc_id -> job document (enriched, anonymized)
    docs: dict[str, dict[str, Any]]
    #: every distinct event id
    event_ids: set[str]
    #: encoded raw value -> the reason it must be in the DLQ with
    bad: dict[bytes, str]
    events: list[JobEvent]


def stages(cfg: Config) -> tuple[Enricher, Anonymizer]:
    """The enrichment and anonymization stages of ``cfg``, as the worker builds them."""
    return (Enricher.from_config(cfg.enrich.passwd_file, cfg.enrich.users_file,
                                 cfg.enrich.topology_file),
            Anonymizer.from_config(cfg.anonymize.fields, cfg.anonymize.key_file))


def offline(cfg: Config, messages: Iterable[Raw]) -> Expected:
    """What ``messages`` must turn into: normalize, fit, fold, enrich, anonymize."""
    codec = codec_of("RawRecord")
    wire = Wire(cfg, {"raw": codec})
    enricher, anonymizer = stages(cfg)
    events: list[JobEvent] = []
    bad: dict[bytes, str] = {}
    for m in messages:
        value = m.encode(codec)
        try:
            evs = [fit_event(ev, cfg.worker.max_event_bytes)[0]
                   for ev in normalize(wire.decode_raw(value))]
        except ParseError as exc:
            bad[value] = exc.reason
            continue
        events += evs
    docs = {doc_id(d): anonymizer.document(enricher.facts(d)) for d in fold(events)}
    return Expected(docs, {ev.event_id for ev in events}, bad, events)


def latest_states(messages: Iterable[Msg]) -> dict[str, dict[str, Any]]:
    """doc_id -> the last state document of it on the state topic (tombstones drop a key)."""
    codec = codec_of("JobState")
    out: dict[str, dict[str, Any]] = {}
    for m in messages:
        if m.value is None:
            assert m.key is not None
            key = m.key.decode()
            out = {k: v for k, v in out.items() if f"{v['cluster']}:{v['job_id']}" != key}
            continue
        doc = codec.decode(m.value)
        out[doc_id(doc)] = doc
    return out


def as_state(doc: Mapping[str, Any]) -> dict[str, Any]:
    """A job document as the state topic gives it back (through the JobState schema)."""
    codec = codec_of("JobState")
    return codec.decode(codec.encode(doc))


def diff_states(got: Mapping[str, Mapping[str, Any]], expected: Mapping[str, Mapping[str, Any]],
                limit: int = 5) -> list[str]:
    """Human-readable differences, at most ``limit`` of them (empty when equal)."""
    out = []
    for k in sorted(set(got) | set(expected)):
        if k not in got:
            out.append(f"{k}: missing on the state topic")
        elif k not in expected:
            out.append(f"{k}: unexpected on the state topic")
        else:
            want = as_state(expected[k])
            fields = {f: (got[k].get(f), want.get(f)) for f in set(got[k]) | set(want)
                      if got[k].get(f) != want.get(f)}
            if fields:
                out.append(f"{k}: got/expected {fields}")
        if len(out) >= limit:
            break
    return out


def event_ids(messages: Iterable[Msg]) -> list[str]:
    codec = codec_of("JobEvent")
    return [codec.decode(m.value)["event_id"] for m in messages if m.value is not None]
