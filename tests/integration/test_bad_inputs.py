"""The bad-input corpus (tests/data/bad) through a real worker on the broker.

Every case is published to the raw topic, followed by a good record with the same key (same
partition, after it). Once the worker committed everything: each ``dlq`` case has exactly
one DLQ record (its raw-topic value untouched, ``reason``/``stage``/``error`` headers) and
made no event and no state; each ``accepted`` case made its events and its job's state and
no DLQ record; every good record was processed (the stream went on); nothing else came out.
"""

from __future__ import annotations

import gzip
import importlib.util
import json
import re
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, Message, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from pipeline.codecs.codec import AvroCodec, codecs_from_config, raw_to_avro
from pipeline.core.model import RawRecord
from pipeline.kafka.positions import Positions, group_lag
from pipeline.kafka.topics import canonical_topic, ensure_topics
from pipeline.parsers import FORMATS
from pipeline.parsers.normalize import normalize
from pipeline.runtime.children import Child, free_port, log_tail
from pipeline.runtime.config import Config

CORPUS = Path(__file__).parents[1] / "data" / "bad"
RECEIVED = 1_780_000_000.0
GUARD_S = 300.0
_ROW = re.compile(r"^\| (\S+) \| (\S+) \| (dlq: [a-z0-9-]+|accepted) \| .+ \|$")


@dataclass(frozen=True)
class Case:
    file: str
    fmt: str
    #: the DLQ reason, or None when the case is valid data
    reason: str | None
    value: bytes

    def raw(self) -> RawRecord | None:
        """The record offline, as the worker decodes it (None for raw-value cases)."""
        if self.fmt == "raw-value":
            return None
        return record(self.fmt, _payload(self.file))


def _payload(name: str) -> bytes:
    data = (CORPUS / name).read_bytes()
    return gzip.decompress(data) if name.endswith(".gz") else data


def record(fmt: str, payload: bytes, cluster: str = "bad") -> RawRecord:
    # a format of either scheduler (node-usage): its payload's, else slurm's
    scheduler = FORMATS[fmt][0]
    if scheduler is None:
        try:
            scheduler = json.loads(payload).get("scheduler")
        except (ValueError, AttributeError):
            scheduler = None
        scheduler = scheduler if scheduler in ("flux", "slurm") else "slurm"
    return RawRecord(cluster=cluster, scheduler=scheduler,  # type: ignore[arg-type]
                     format=fmt, received_at=RECEIVED, payload=payload)


def readme_rows() -> list[tuple[str, str, str]]:
    rows = []
    for line in (CORPUS / "README.md").read_text().splitlines():
        m = _ROW.match(line)
        if m:
            rows.append((m[1], m[2], m[3]))
    return rows


def cases() -> list[Case]:
    codec = AvroCodec("RawRecord")
    out = []
    for name, fmt, outcome in readme_rows():
        if fmt == "raw-value":
            value = _payload(name)
        else:
            value = codec.encode(raw_to_avro(record(fmt, _payload(name))))
        reason = outcome.removeprefix("dlq: ") if outcome != "accepted" else None
        out.append(Case(name, fmt, reason, value))
    return out


def good(n: int) -> RawRecord:
    """A valid Flux submit of job ``n`` on cluster ``good``."""
    return record("flux-journal", json.dumps({"id": n, "events": [{
        "timestamp": RECEIVED - 10, "name": "submit",
        "context": {"userid": 1001, "urgency": 16, "flags": 0, "version": 1}}]}).encode(),
        cluster="good")


# -- the corpus itself -----------------------------------------------------------------


def test_every_file_has_a_row_and_every_row_a_file() -> None:
    files = {p.name for p in CORPUS.iterdir()} - {"README.md", "make_corpus.py"}
    rows = [name for name, _, _ in readme_rows()]
    assert len(rows) == len(set(rows))
    assert set(rows) == files


def test_the_files_are_what_make_corpus_writes() -> None:
    spec = importlib.util.spec_from_file_location("make_corpus", CORPUS / "make_corpus.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert module.RECEIVED == RECEIVED
    made = module.corpus()
    assert {name: _payload(name) for name in made} == made


@pytest.mark.parametrize("case", cases(), ids=lambda c: c.file)
def test_each_case_offline(case: Case) -> None:
    """What the worker does, without the worker: the reason (or the events) of each case."""
    from pipeline.codecs.wire import Wire
    from pipeline.runtime.errors import ParseError

    wire = Wire(Config())
    try:
        events = normalize(wire.decode_raw(case.value))
    except ParseError as exc:
        assert exc.reason == case.reason, exc
        return
    assert case.reason is None, f"admitted {[e.event for e in events]}"
    assert events


# -- through the worker ----------------------------------------------------------------


def read_all(cfg: Config, topic: str) -> list[Message]:
    """Every message of ``topic`` up to its current end."""
    positions = Positions(AdminClient(cfg.librdkafka()))
    ends = {p: end for (_, p), end in positions.ends([topic]).items() if end > 0}
    out: list[Message] = []
    if not ends:
        return out
    consumer = Consumer(cfg.librdkafka(**{"group.id": f"read-{time.time_ns()}",
                                          "enable.auto.commit": False,
                                          "fetch.message.max.bytes": 32 * 1024 * 1024}))
    try:
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in ends])
        deadline = time.monotonic() + GUARD_S
        while ends:
            assert time.monotonic() < deadline, f"hang guard: reading {topic}"
            for msg in consumer.consume(500, 0.5):
                if msg.error():
                    continue
                out.append(msg)
                if msg.offset() + 1 >= ends.get(msg.partition(), 0):
                    ends.pop(msg.partition(), None)
    finally:
        consumer.close()
    return out


def caught_up(cfg: Config, positions: Positions, published: int) -> bool:
    app = cfg.worker.app_id
    topics = [cfg.topics.raw, canonical_topic(app)]
    tps = positions.partitions(topics)
    ends = positions.ends(topics)
    raw_end = sum(v for (t, _), v in ends.items() if t == cfg.topics.raw)
    return (raw_end >= published and len({t for t, _ in tps}) == 2
            and group_lag(ends, positions.committed(app, tps)) == 0)


def test_the_corpus_through_the_worker(stack_cfg: Config, tmp_path: Path) -> None:
    cfg = stack_cfg.replace(worker={"web_port": free_port()})
    ensure_topics(cfg)
    corpus = cases()
    producer = Producer(cfg.librdkafka(**{"message.max.bytes": 17 * 1024 * 1024,
                                          "linger.ms": 5}))
    codec = AvroCodec("RawRecord")
    goods = {n: good(700_000 + n) for n in range(len(corpus))}
    for n, case in enumerate(corpus):
        key = f"corpus:{n}".encode()
        producer.produce(cfg.topics.raw, key=key, value=case.value)
        producer.produce(cfg.topics.raw, key=key, value=codec.encode(raw_to_avro(goods[n])))
    assert producer.flush(60) == 0
    published = 2 * len(corpus)

    worker = Child("worker", cfg, ["worker", "--name", "corpus", "--loglevel", "info"],
                   tmp_path / "worker.log").start()
    positions = Positions(AdminClient(cfg.librdkafka()))
    try:
        deadline = time.monotonic() + GUARD_S
        while not caught_up(cfg, positions, published):
            worker.check()
            assert time.monotonic() < deadline, f"hang guard:\n{log_tail(worker.log, 40)}"
            time.sleep(0.5)
    finally:
        worker.stop()
    assert "Traceback" not in worker.log.read_text(errors="replace"), log_tail(worker.log, 60)

    # the DLQ: exactly the bad cases, each once, as published, with its reason
    dlq = read_all(cfg, cfg.topics.dlq)
    got = sorted((m.value() or b"", dict(m.headers() or [])["reason"].decode()) for m in dlq)
    want = sorted((c.value, c.reason) for c in corpus if c.reason is not None)
    assert [r for _, r in got] == [r for _, r in want]
    assert got == want
    for m in dlq:
        headers = dict(m.headers() or [])
        assert headers["stage"] == b"normalize" and headers["error"]
        assert m.key() is not None and m.key().startswith(b"corpus:")

    # events and states: the good records and the accepted cases, nothing else
    expected_events: set[str] = set()
    expected_jobs: set[bytes] = set()
    for rec in [*goods.values(), *(c.raw() for c in corpus if c.reason is None)]:
        assert rec is not None
        for ev in normalize(rec):
            expected_events.add(ev.event_id)
            expected_jobs.add(ev.key.encode())
    events_codec = codecs_from_config(cfg)["events"]
    events = [events_codec.decode(m.value()) for m in read_all(cfg, cfg.topics.events)]
    assert {e["event_id"] for e in events} == expected_events
    states = read_all(cfg, cfg.topics.state)
    assert {m.key() for m in states} == expected_jobs
    # the 10 MB user attribute: the event kept, its jobspec dropped and marked
    [big] = [e for e in events if e["cluster"] == "bad" and e["job_id"] == "4119"]
    assert json.loads(big["context"]).get("jobspec_truncated") is True
