"""The fold's date_range fields must be values Elasticsearch accepts: never an empty range."""

from __future__ import annotations

import json

from pipeline.fold import fold
from pipeline.parsers import parse_record

T = 1_795_000_000


def _jobcomp(start: int, end: int) -> bytes:
    return json.dumps({
        "jobid": 7, "username": "alice", "user_id": 1001, "groupname": "alice",
        "group_id": 1001, "@submit": _iso(T), "@eligible": _iso(T), "@start": _iso(start),
        "@end": _iso(end), "elapsed": end - start, "partition": "short", "nodes": "c001",
        "total_cpus": 4, "total_nodes": 1, "derived_ec": "0:0", "exit_code": "0:0",
        "state": "COMPLETED", "cluster": "c", "account": "phys", "time_limit": 60,
        "job_name": "sim", "@queue_wait": start - T}).encode()


def _iso(t: int) -> str:
    from datetime import UTC, datetime

    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%dT%H:%M:%S")


def test_a_job_started_in_its_submit_second_has_no_pending_interval() -> None:
    (doc,) = fold(parse_record("slurm-jobcomp", _jobcomp(T, T + 30), cluster="c"))
    assert doc["t_start"] == doc["t_submit"]
    assert doc["pending_interval"] is None
    assert doc["run_interval"] == {"gte": doc["t_start"], "lt": doc["t_end"]}


def test_a_job_that_ran_for_no_time_has_no_run_interval() -> None:
    (doc,) = fold(parse_record("slurm-jobcomp", _jobcomp(T + 5, T + 5), cluster="c"))
    assert doc["run_interval"] is None
    assert doc["pending_interval"] == {"gte": doc["t_submit"], "lt": doc["t_start"]}
