"""Record real Elasticsearch ``_bulk`` item answers for the sink's classification tests.

Run against the local stack (``jobstream stack up``)::

    .venv/bin/python tests/data/sink/record_bulk_responses.py [http://127.0.0.1:9200]

It creates indices under the prefix ``rec-`` from the sink's own templates, sends one bulk
request per case (the case's set-up requests first), writes every case's request line(s),
the item answer and the Elasticsearch version to ``bulk_responses.json`` beside this
file, and deletes what it created. The cases cover each outcome of
``pipeline.sink.client.classify``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from elasticsearch import Elasticsearch

from pipeline.sink.templates import ensure_indices

PREFIX = "rec-"
JOBS = f"{PREFIX}hpc-jobs-v1-2026.11"
EVENTS = f"{PREFIX}hpc-job-events-v1-2026.11"
OUT = Path(__file__).with_name("bulk_responses.json")

JOB = {"cluster": "c1", "scheduler": "slurm", "job_id": "1", "state": "done",
       "t_submit": 1_794_000_000_000, "revision": 5, "updated_at": 1_794_000_100_000}


def versioned(op: str, index: str, doc_id: str, version: int) -> dict[str, Any]:
    return {op: {"_index": index, "_id": doc_id, "version": version,
                 "version_type": "external"}}


#: name -> (set-up bulk lines, the recorded bulk lines (one action), expected outcome)
CASES: dict[str, tuple[list[Any], list[Any], str]] = {
    "index_external_new": (
        [], [versioned("index", JOBS, "c1:1", 5), JOB], "ok"),
    "index_external_higher": (
        [versioned("index", JOBS, "c1:2", 5), JOB],
        [versioned("index", JOBS, "c1:2", 6), {**JOB, "revision": 6}], "ok"),
    "index_external_lower": (
        [versioned("index", JOBS, "c1:3", 5), JOB],
        [versioned("index", JOBS, "c1:3", 4), {**JOB, "revision": 4}], "duplicate"),
    "index_external_equal": (
        [versioned("index", JOBS, "c1:4", 5), JOB],
        [versioned("index", JOBS, "c1:4", 5), JOB], "duplicate"),
    "create_new": (
        [], [{"create": {"_index": EVENTS, "_id": "e1"}},
             {"cluster": "c1", "job_id": "1", "event_id": "e1", "event": "submit",
              "timestamp": 1_794_000_000.5, "@timestamp": 1_794_000_000_500}], "ok"),
    "create_existing": (
        [{"create": {"_index": EVENTS, "_id": "e2"}}, {"event_id": "e2"}],
        [{"create": {"_index": EVENTS, "_id": "e2"}}, {"event_id": "e2"}], "duplicate"),
    "strict_unknown_field": (
        [], [versioned("index", JOBS, "c1:5", 1), {**JOB, "no_such_field": 1}], "reject"),
    "wrong_type": (
        [], [versioned("index", JOBS, "c1:6", 1), {**JOB, "uid": "not-a-number"}], "reject"),
    "bad_date": (
        [], [versioned("index", JOBS, "c1:7", 1), {**JOB, "t_start": "yesterday"}], "reject"),
    "object_for_keyword": (
        [], [versioned("index", JOBS, "c1:8", 1), {**JOB, "user": {"name": "x"}}], "reject"),
    "delete_missing": (
        [], [versioned("delete", JOBS, "c1:9", 3)], "duplicate"),
    "delete_older": (
        [versioned("index", JOBS, "c1:10", 2), JOB],
        [versioned("delete", JOBS, "c1:10", 3)], "ok"),
    "delete_newer": (
        [versioned("index", JOBS, "c1:11", 5), JOB],
        [versioned("delete", JOBS, "c1:11", 3)], "duplicate"),
    "read_only_allow_delete_block": (
        [], [versioned("index", f"{PREFIX}flood", "c1:12", 1), {"x": 1}], "retry"),
    "write_block": (
        [], [versioned("index", f"{PREFIX}blocked", "c1:13", 1), {"x": 1}], "fail"),
    "closed_index": (
        [], [versioned("index", f"{PREFIX}closed", "c1:14", 1), {"x": 1}], "fail"),
    "unassigned_shard": (
        [], [versioned("index", f"{PREFIX}unassigned", "c1:15", 1), {"x": 1}], "retry"),
}


def prepare(es: Elasticsearch) -> None:
    ensure_indices(es, PREFIX, "v1", live=True, now_ms=1_794_000_000_000)
    es.indices.create(index=f"{PREFIX}flood",
                      settings={"index.blocks.read_only_allow_delete": True})
    es.indices.create(index=f"{PREFIX}blocked", settings={"index.blocks.write": True})
    es.indices.create(index=f"{PREFIX}closed")
    es.indices.close(index=f"{PREFIX}closed")
    es.indices.create(index=f"{PREFIX}unassigned", wait_for_active_shards="0", settings={
        "index.routing.allocation.require._name": "no-such-node",
        "index.number_of_replicas": 0})


def clean(es: Elasticsearch) -> None:
    for name in ("flood", "blocked"):
        es.options(ignore_status=404).indices.put_settings(
            index=f"{PREFIX}{name}", settings={"index.blocks.read_only_allow_delete": None,
                                               "index.blocks.write": None})
    es.options(ignore_status=404).indices.delete(index=f"{PREFIX}*", expand_wildcards="all")
    es.options(ignore_status=404).indices.delete_index_template(name=f"{PREFIX}*")


def main(url: str) -> None:
    es = Elasticsearch(url, request_timeout=60)
    clean(es)
    prepare(es)
    try:
        version = es.cluster.stats(filter_path="nodes.versions")["nodes"]["versions"][0]
        recorded: dict[str, Any] = {"elasticsearch": version, "cases": {}}
        for name, (setup, lines, expected) in CASES.items():
            if setup:
                es.bulk(operations=setup, refresh=False)
            # the short timeout makes the unassigned shard answer 503 within a second
            resp = es.bulk(operations=lines, timeout="1s")
            (item,) = resp["items"]
            recorded["cases"][name] = {"request": lines, "item": item, "expected": expected}
        OUT.write_text(json.dumps(recorded, indent=1, sort_keys=True) + "\n")
        print(f"wrote {OUT} ({len(CASES)} cases, Elasticsearch {version})")
    finally:
        clean(es)


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "http://127.0.0.1:9200")
