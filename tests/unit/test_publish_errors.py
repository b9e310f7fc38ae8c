"""``jobstream publish`` takes whatever a parser raises as a DLQ-bound record, never a
traceback, and publishes a multi-job document whose jobs are not all bad (issue 31,
classes 4 and 7). Kafka is replaced by a list: what would be produced, to which topic."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from datafiles import vector

from pipeline.codecs.codec import AvroCodec, raw_from_avro
from pipeline.core.model import JobEvent
from pipeline.edges import publish
from pipeline.edges.publish import SourceRecord, publish_records
from pipeline.runtime.config import Config

CFG = Config().replace(cluster="c")
JOBCOMP = vector("slurm", "jobcomp_22.05_sample.jsonl").read_text().splitlines()
SQUEUE = json.loads(vector("slurm", "squeue_running_22.05.json").read_text())


class FakeSender:
    sent: list[tuple[str, bytes, str | None, dict[str, bytes]]]

    def __init__(self, cfg: Config) -> None:
        self.sent = []
        self.failed = 0
        self.last_error = ""
        FakeSender.last = self

    def send(self, topic: str, value: bytes, key: str | None,
             headers: list[tuple[str, bytes]] | None = None) -> None:
        self.sent.append((topic, value, key, dict(headers or ())))

    def flush(self, timeout: float) -> int:
        return 0


@pytest.fixture
def sent(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setattr(publish, "_Sender", FakeSender)
    yield


def run(fmt: str, *payloads: bytes) -> tuple[publish.PublishResult, list[Any]]:
    records = [SourceRecord(f"in:{i}", p) for i, p in enumerate(payloads, 1)]
    result = publish_records(CFG, fmt, iter(records))
    return result, FakeSender.last.sent


def raw_keys(sent: None) -> list[str | None]:
    return [key for topic, _, key, _ in sent if topic == CFG.topics.raw]


def dead(sent: None) -> list[dict[str, bytes]]:
    return [headers for topic, _, _, headers in sent if topic == CFG.topics.dlq]


def test_a_parser_bug_is_a_dlq_record_and_the_run_goes_on(
        sent: None, monkeypatch: pytest.MonkeyPatch) -> None:
    from pipeline import parsers

    def broken(payload: bytes, *, cluster: str,
               received_at: float | None = None) -> list[JobEvent]:
        if payload.startswith(b'{"jobid":2,'):
            raise KeyError("a parser bug")
        return parsers.FORMATS["slurm-jobcomp"][1]()(payload, cluster=cluster,
                                                     received_at=received_at)

    monkeypatch.setitem(parsers._PARSERS, "slurm-jobcomp", broken)
    result, out = run("slurm-jobcomp", JOBCOMP[0].encode(), JOBCOMP[1].encode())
    [headers] = dead(out)
    assert headers["reason"] == b"internal-error" and b"KeyError" in headers["error"]
    assert headers["stage"] == b"publish" and headers["origin"] == b"in:1"
    assert (result.bad, result.published) == (1, 1)
    assert result.errors == ["in:1: internal-error: KeyError: 'a parser bug'"]


def test_numbers_past_what_int_reads_are_a_reason_not_a_traceback(sent: None) -> None:
    alloc = {"name": "alloc", "timestamp": 1_780_000_000.0, "context": {}}
    R = {"version": 1, "execution": {"R_lite": [{"rank": "1" * 5000,
                                                 "children": {"core": "0"}}]}}
    journal = json.dumps({"id": 5, "events": [alloc], "R": R}).encode()
    jobcomp = JOBCOMP[0].replace('"jobid":2', '"jobid":' + "9" * 5000).encode()
    result, out = run("flux-journal", journal)
    assert [h["reason"] for h in dead(out)] == [b"bad-R"]
    result, out = run("slurm-jobcomp", jobcomp)
    [headers] = dead(out)
    assert headers["reason"] == b"invalid-json" and b"4300 digits" in headers["error"]


def test_a_document_with_one_bad_job_is_published_keyed_by_a_good_one(
        sent: None) -> None:
    jobs = [dict(j) for j in SQUEUE["jobs"]]
    jobs[0]["nodes"] = "n["
    result, out = run("slurm-squeue", json.dumps({**SQUEUE, "jobs": jobs}).encode())
    assert raw_keys(out) == ["testcluster:2"] and not dead(out)
    [(_, value, _, _)] = out
    assert json.loads(raw_from_avro(AvroCodec("RawRecord").decode(value)).payload) == {
        **SQUEUE, "jobs": jobs}  # the record's bytes, untouched
    assert (result.published, result.bad, result.bad_parts) == (1, 0, 1)
    [line] = result.errors
    assert line.startswith("in:1 jobs[0]: bad-hostlist: ")


def test_a_document_of_bad_jobs_only_goes_to_the_dlq_whole(sent: None) -> None:
    jobs = [{**j, "nodes": "n["} for j in SQUEUE["jobs"][:2]]
    result, out = run("slurm-squeue", json.dumps({**SQUEUE, "jobs": jobs}).encode())
    [headers] = dead(out)
    assert headers["reason"] == b"bad-hostlist" and not raw_keys(out)
    assert (result.published, result.bad) == (0, 1)


def test_a_record_over_kafka_s_size_is_refused_as_too_large_not_a_traceback() -> None:
    """librdkafka refuses a record over ``message.max.bytes`` as it is produced (no broker
    involved): publish reports it as a bad record, and the DLQ record goes without it."""
    from pipeline.runtime.errors import ParseError

    sender = publish._Sender(CFG.replace(kafka={"bootstrap": "127.0.0.1:9"}))
    with pytest.raises(ParseError) as too_large:
        sender.send(CFG.topics.raw, b"x" * (17 << 20), "c:1")
    assert too_large.value.reason == "too-large"
    sender.send(CFG.topics.dlq, None, None, [("reason", b"too-large")])  # this one goes
    sender.producer.purge()
    sender.producer.flush(0)


def test_publish_dead_letters_a_record_too_large_for_kafka(sent: None,
                                                           monkeypatch: pytest.MonkeyPatch
                                                           ) -> None:
    from pipeline.runtime.errors import ParseError

    def refuse(self: FakeSender, topic: str, value: bytes | None, key: str | None,
               headers: list[tuple[str, bytes]] | None = None) -> None:
        if value is not None and len(value) > 4000:
            raise ParseError("too-large", "more than Kafka takes")
        self.sent.append((topic, value, key, dict(headers or ())))

    monkeypatch.setattr(FakeSender, "send", refuse)
    big = json.dumps({**json.loads(JOBCOMP[0]), "job_name": "n" * 5000}).encode()
    result, out = run("slurm-jobcomp", big, JOBCOMP[1].encode())
    assert result.published == 1 and result.bad == 1
    [headers] = dead(out)
    assert headers["reason"] == b"too-large" and len(headers["value_sha256"]) == 64
