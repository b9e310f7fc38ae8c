"""One bad job of a multi-job record dead-letters that job, not its neighbours (issue 31,
class 7): the parsers, the normalize stage, the worker's jobs stage, ``jobstream parse`` and
the edges' keys.

The 22.05 squeue vector lists three jobs (1 running, 2 failed, 3 pending); each test makes
one of them bad in a way the parser or the admission refuses.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from agents_factory import Message, RecordedOutputs, jobs_stage
from click.testing import CliRunner
from datafiles import vector

from pipeline.codecs.codec import AvroCodec, raw_to_avro
from pipeline.core.model import RawRecord
from pipeline.parsers.normalize import normalize
from pipeline.runtime.config import Config
from pipeline.runtime.errors import ParseError

SQUEUE = json.loads(vector("slurm", "squeue_running_22.05.json").read_text())
SACCT = json.loads(vector("slurm", "sacct_25.11.json").read_text())
T = 1795312702.0
RECEIVED = 1.9e9  # after every job of both vectors


def doc_with(doc: dict[str, Any], index: int, **changes: Any) -> dict[str, Any]:
    jobs = [dict(j) for j in doc["jobs"]]
    jobs[index].update(changes)
    return {**doc, "jobs": jobs}


def raw(doc: dict[str, Any], fmt: str = "slurm-squeue") -> RawRecord:
    return RawRecord(cluster="c", scheduler="slurm", format=fmt, received_at=RECEIVED,
                     payload=json.dumps(doc).encode(), key=None)


def job_ids(events: Any) -> set[str]:
    return {ev.job_id for ev in events}


BAD_NODES = doc_with(SQUEUE, 1, nodes="n[")  # job 2


# --------------------------------------------------------------------------- parsers

def test_parse_parts_gives_each_job_its_events_or_its_error() -> None:
    from pipeline.parsers import parse_parts

    parts = parse_parts("slurm-squeue", json.dumps(BAD_NODES).encode(), cluster="c")
    assert [p.index for p in parts] == [0, 1, 2]
    assert parts[1].error is not None and parts[1].error.reason == "bad-hostlist"
    assert parts[1].source == BAD_NODES["jobs"][1] and not parts[1].events
    assert job_ids(parts[0].events) == {"1"} and job_ids(parts[2].events) == {"3"}


def test_a_parser_bug_in_one_job_is_that_jobs_internal_error(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from pipeline.parsers import parse_parts, slurm_json

    real = slurm_json.squeue_job

    def buggy(job: Any, w: str) -> Any:
        if job["job_id"] == 3:
            raise KeyError("a bug")
        return real(job, w)

    monkeypatch.setattr(slurm_json, "squeue_job", buggy)
    parts = parse_parts("slurm-squeue", json.dumps(SQUEUE).encode(), cluster="c")
    error = parts[2].error
    assert error is not None and error.reason == "internal-error" and "KeyError" in error.message
    assert isinstance(error.__cause__, KeyError)
    assert job_ids(parts[0].events) == {"1"}


def test_a_bad_document_is_still_refused_whole() -> None:
    from pipeline.parsers import parse_parts

    for payload in (b"{", b'{"jobs": 3}', b"{}"):
        with pytest.raises(ParseError):
            parse_parts("slurm-squeue", payload, cluster="c")


# --------------------------------------------------------------------------- normalize

@pytest.mark.parametrize(("doc", "fmt", "victim", "reason"), [
    (BAD_NODES, "slurm-squeue", 1, "bad-hostlist"),
    (doc_with(SQUEUE, 0, job_state="NOT_A_STATE"), "slurm-squeue", 0, "bad-state"),
    (doc_with(SQUEUE, 2, job_id=2**64), "slurm-squeue", 2, "bad-value"),
    (doc_with(SQUEUE, 1, user_id="alice"), "slurm-squeue", 1, "bad-type"),
    # the admission refuses one job: its submit time a year after the record was received
    (doc_with(SQUEUE, 0, submit_time=RECEIVED + 365 * 86400), "slurm-squeue", 0,
     "future-timestamp"),
    (doc_with(SACCT, 0, nodes="n[0-999][0-999][0-999]"), "slurm-sacct", 0, "bad-hostlist"),
])
def test_normalize_parts_takes_the_good_jobs_and_sets_the_bad_one_aside(
        doc: dict[str, Any], fmt: str, victim: int, reason: str) -> None:
    from pipeline.parsers.normalize import normalize_parts

    good = [j for i, j in enumerate(doc["jobs"]) if i != victim]
    events, rejected = normalize_parts(raw(doc, fmt))
    [part] = rejected
    assert (part.index, part.reason) == (victim, reason)
    assert part.payload == json.dumps(doc["jobs"][victim], separators=(",", ":"),
                                      ensure_ascii=False).encode()  # compact
    expected = job_ids(normalize(raw({**doc, "jobs": good}, fmt)))
    assert job_ids(events) == expected and expected


def test_normalize_stays_all_or_nothing() -> None:
    with pytest.raises(ParseError) as err:
        normalize(raw(BAD_NODES))
    assert err.value.reason == "bad-hostlist" and "jobs[1]" in err.value.message


def test_a_record_none_of_whose_jobs_is_good_is_refused_whole() -> None:
    from pipeline.parsers.normalize import normalize_parts

    doc = {**SQUEUE, "jobs": [{**j, "nodes": "n["} for j in SQUEUE["jobs"][:2]]}
    with pytest.raises(ParseError) as err:
        normalize_parts(raw(doc))
    assert err.value.reason == "bad-hostlist" and "1 more" in err.value.message


def test_the_workers_canonical_events_carry_the_rejected_parts() -> None:
    from agents.canonical import canonical_events
    from pipeline.codecs.wire import Wire

    value = AvroCodec("RawRecord").encode(raw_to_avro(raw(BAD_NODES)))
    events, rejected = canonical_events(Wire(Config()), value, 100_000)
    assert job_ids(ev for ev, _ in events) == {"1", "3"}
    assert [(p.index, p.reason) for p in rejected] == [(1, "bad-hostlist")]


# --------------------------------------------------------------------------- the worker

def test_the_jobs_stage_dead_letters_the_bad_job_and_folds_its_neighbours() -> None:
    from pipeline.runtime.metrics import DLQ_RECORDS

    cfg = Config()
    outputs = RecordedOutputs()
    stage = jobs_stage(cfg, outputs=outputs)
    value = AvroCodec("RawRecord").encode(raw_to_avro(raw(BAD_NODES)))
    message = Message(topic=cfg.topics.raw, partition=0, offset=7, key=None, value=value)
    counted = DLQ_RECORDS.labels("normalize", "bad-hostlist")._value.get()
    wait = stage.take(message)
    if wait is not None:
        asyncio.run(wait)
    [(_, _, payload, sent_headers)] = outputs.to(cfg.topics.dlq)
    headers = dict(sent_headers or ())
    assert json.loads(payload or b"") == BAD_NODES["jobs"][1]
    assert headers["reason"] == b"bad-hostlist" and headers["part"] == b"1"
    assert headers["stage"] == b"normalize" and b"jobs[1]" in headers["error"]
    assert headers["origin"] == f"{cfg.topics.raw}[0]@7".encode()
    assert DLQ_RECORDS.labels("normalize", "bad-hostlist")._value.get() == counted + 1
    # the neighbours' events go on (re-keyed through the canonical topic: no raw key)
    keyed = {s[1] for s in outputs.sent if s[0] != cfg.topics.dlq}
    assert {b"testcluster:1", b"testcluster:3"} <= keyed


# --------------------------------------------------------------------------- the CLI, edges

def test_jobstream_parse_prints_the_good_jobs_and_the_bad_job_as_an_error(
        tmp_path: Path) -> None:
    from pipeline.tooling.fold_cli import parse

    path = tmp_path / "squeue.json"
    path.write_text(json.dumps(BAD_NODES))
    result = CliRunner().invoke(parse, ["--format", "slurm-squeue", "--cluster", "c",
                                        str(path)])
    assert result.exit_code == 1
    assert {json.loads(line)["job_id"] for line in result.stdout.splitlines()} == {"1", "3"}
    assert f"{path}:1 jobs[1]: bad-hostlist:" in result.stderr


def test_an_edge_keys_a_document_by_its_first_good_job() -> None:
    from pipeline.edges.base import record_key

    doc = doc_with(SQUEUE, 0, nodes="n[")
    assert record_key("slurm-squeue", json.dumps(doc).encode(), "c", RECEIVED) == "testcluster:2"
