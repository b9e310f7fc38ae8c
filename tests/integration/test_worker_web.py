"""The worker's web endpoint on the real broker: what it serves, to whom, and when.

1. two workers sharing a bearer token: a request without it (or with another) is refused
   401 by either, with it either answers every job, half of them through the other worker
   (which refuses requests without the token: so the routed ones carried it); Faust's
   pages that show topology, tables or sensors are gone; the token never reaches a log;
   a refused source is logged once, not once per request;
2. a worker just started answers 503 with a reason until it can tell who owns a job,
   never 500 (Faust's aiokafka traceback before).
"""

from __future__ import annotations

import json
import re
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from topic_reads import read_topic
from workers import (
    Raw,
    WorkerProcess,
    grep_log,
    offline,
    publish,
    wait_caught_up,
    wait_for,
)

from pipeline.core.model import RawRecord
from pipeline.runtime.config import Config
from pipeline.tooling.workload import Workload, WorkloadSpec

TOKEN = "jobstream-test-token-0123456789abcdef"


@pytest.fixture
def token_file(tmp_path: Path) -> Path:
    path = tmp_path / "web.token"
    path.write_text(TOKEN + "\n")
    path.chmod(0o600)
    return path


def get(port: int, path: str, token: str | None = None) -> tuple[int, Any]:
    request = urllib.request.Request(f"http://127.0.0.1:{port}{path}")
    if token is not None:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=30) as resp:  # noqa: S310 - our worker
            status, body = resp.status, resp.read()
    except urllib.error.HTTPError as exc:
        status, body = exc.code, exc.read()
    try:
        return status, json.loads(body)
    except ValueError:
        return status, body.decode(errors="replace")


def pending_jobs(jobs: int) -> list[Raw]:
    """The first record of every job of a generated workload: jobs that wait."""
    seen: set[str] = set()
    out = []
    for r in Workload(WorkloadSpec(seed=43, jobs=jobs, start=1_790_000_000.0,
                                       usage_interval_s=None)).records():
        if r.key not in seen:
            seen.add(r.key)
            out.append(Raw(r.key, RawRecord(r.cluster, r.scheduler, r.format, r.time,
                                            r.payload, r.key)))
    return out


def snapshot_partitions(worker: WorkerProcess) -> set[int] | None:
    lines = grep_log(worker, r"queue snapshots: partitions=")
    found = re.search(r"partitions=(\[[\d, ]*\])", lines[-1]) if lines else None
    return set(json.loads(found[1])) if found else None


def test_two_workers_with_a_token(stack_cfg: Config, spawn: Callable[..., WorkerProcess],
                                  token_file: Path) -> None:
    cfg = stack_cfg.replace(worker={"snapshot_interval_s": 1.0,
                                    "web_token_file": str(token_file)})
    messages = pending_jobs(60)
    expected = offline(cfg, messages)
    workers = [spawn(cfg, name=f"w{i}").start() for i in (1, 2)]

    def split() -> bool:
        parts = [snapshot_partitions(w) for w in workers]
        return all(parts) and parts[0] | parts[1] == {0, 1, 2, 3} \
            and not parts[0] & parts[1]  # type: ignore[operator]

    wait_for("the partitions shared by two workers", split, workers)
    owned = [snapshot_partitions(w) or set() for w in workers]
    publish(cfg, messages)
    wait_caught_up(cfg, workers)

    for w in workers:
        for path in ("/jobs/flux-a/1", "/", "/router/", "/table/jobs/"):
            for token in (None, "not-the-token-at-all-0123456789"):
                status, body = get(w.web_port, path, token)
                assert status == 401, (w.name, path, status, body)
                assert TOKEN not in json.dumps(body)
        # Faust's pages of topology, tables and sensors are not served at all
        for path in ("/router/", "/router/jobs/", "/table/", "/table/jobs/", "/stats/",
                     "/assignment/", "/graph/", "/performance/"):
            status, _ = get(w.web_port, path, TOKEN)
            assert status == 404, (w.name, path, status)
        assert get(w.web_port, "/", TOKEN) == (200, {"status": "OK"})

    for key, doc in sorted(expected.docs.items()):
        cluster, job_id = key.split(":")
        for w in workers:
            status, body = get(w.web_port, f"/jobs/{cluster}/{job_id}", TOKEN)
            assert status == 200, (w.name, key, body)
            assert body == json.loads(json.dumps(doc)), (w.name, key)
    # the state topic has the table's partitions (same count and partitioner): each worker
    # owns some of the jobs, so each answered for some of the other's, through it
    partition = {m.key.decode(): m.partition for m in read_topic(cfg, cfg.topics.state)
                 if m.key is not None}
    for mine in owned:
        assert 0 < sum(partition[k] in mine for k in expected.docs) < len(expected.docs)
    for w in workers:
        assert get(w.web_port, "/jobs/flux-a/12345", TOKEN)[0] == 404

    for w in workers:
        log = w.output()
        assert TOKEN not in log, w.name
        refusals = grep_log(w, r"worker web endpoint: refused a request from 127\.0\.0\.1")
        assert len(refusals) == 1, (w.name, refusals)  # 8 refused requests, one line


def test_a_worker_just_started_answers_503_with_a_reason(
        stack_cfg: Config, spawn: Callable[..., WorkerProcess]) -> None:
    w = spawn(stack_cfg).start()
    answers: list[tuple[int, Any]] = []

    def known() -> bool:
        try:
            answers.append(get(w.web_port, "/jobs/flux-a/1"))
        except OSError:
            return False  # not listening yet
        return answers[-1][0] == 404

    wait_for("the worker to answer 404 for an unknown job", known, [w], poll_s=0.02)
    statuses = {status for status, _ in answers}
    assert statuses <= {503, 404}, answers
    assert 503 in statuses, answers
    for status, body in answers:
        if status == 503:
            assert body["error"] == "not ready" and body["reason"], body
    time.sleep(0.5)
    assert not grep_log(w, r"Traceback|Error handling request"), w.output()[-3000:]
