"""Elasticsearch's limits, met by the sink against the real Elasticsearch (issue 31).

* a 1,000-character cluster and queue name (ids over 512 bytes before: Elasticsearch
  refused the whole bulk request and the sink exited on every start) and a 40 KB
  exception type (over the keyword term limit before: the document was refused) end as
  indexed documents, and the ordinary job after them too;
* a bulk request refused as a whole (an ``_id`` over 512 bytes, sent past the converter)
  is split until the offending item is alone: it is rejected, the rest written;
* the mappings' new ``ignore_above`` reach indices made with the mapping of before
  (``_update_existing``'s put_mapping), as Elasticsearch allows for keywords.
"""

from __future__ import annotations

from typing import Any

import pytest
from elasticsearch import Elasticsearch
from sink_feed import NOV_2026, Feed, all_docs, create_topics, job_doc, run_sink, uncommitted

from pipeline.runtime.config import Config
from pipeline.sink.client import BulkClient, Outcome
from pipeline.sink.converter import MAX_ID_BYTES, Action, Converter
from pipeline.sink.names import CURRENT, SINGLE_INDEX, Family, alias_name, index_name
from pipeline.sink.runner import SinkRunner
from pipeline.sink.templates import ensure_indices, family_body

LONG_CLUSTER = "c" * 1000
LONG_QUEUE = "q" * 1000
EXCEPTION_TYPE = "x" * 40_000


@pytest.fixture
def cfg(stack_cfg: Config) -> Config:
    create_topics(stack_cfg)
    return stack_cfg.replace(sink={"flush_interval_s": 0.2, "max_batch": 200})


def drain(cfg: Config) -> SinkRunner:
    n = uncommitted(cfg)
    runner = SinkRunner(cfg)
    run_sink(runner, lambda s: s.records >= n and uncommitted(cfg) == 0)
    return runner


def test_long_names_and_a_40kb_exception_type_end_as_indexed_documents(
        cfg: Config, es: Elasticsearch) -> None:
    feed = Feed(cfg)
    long_job = job_doc(1, 3, cluster=LONG_CLUSTER, queue=LONG_QUEUE, exceptions=[
        {"type": EXCEPTION_TYPE, "severity": 0, "note": "owner's choice",
         "timestamp": NOV_2026}])
    feed.state(long_job)
    feed.snapshot({"cluster": LONG_CLUSTER, "queue": LONG_QUEUE, "worker": "w1",
                   "partitions": [0], "timestamp": NOV_2026, "pending_jobs": 1})
    feed.snapshot({"cluster": "c1", "queue": "é" * 1000, "worker": "w1",  # 2,000 bytes
                   "partitions": [0], "timestamp": NOV_2026, "pending_jobs": 2})
    feed.state(job_doc(2, 3))  # an ordinary job after them
    feed.flush()
    runner = drain(cfg)
    assert runner.stats.dead_lettered == 0

    prefix = cfg.elasticsearch.index_prefix
    jobs = all_docs(es, alias_name(prefix, Family.JOBS))
    assert len(jobs) == 2
    (long_id,) = [i for i, d in jobs.items() if d["cluster"] == LONG_CLUSTER]
    assert len(long_id.encode()) <= MAX_ID_BYTES
    assert jobs[long_id] == feed.indexed(long_job)  # all of it in _source
    assert "c1:2" in jobs
    # the 1,000-character names are indexed (under ignore_above), the 40 KB type is not
    hits = es.search(index=alias_name(prefix, Family.JOBS), query={"bool": {"filter": [
        {"term": {"queue": LONG_QUEUE}}, {"term": {"cluster": LONG_CLUSTER}}]}})
    assert [h["_id"] for h in hits["hits"]["hits"]] == [long_id]
    ignored = es.search(index=alias_name(prefix, Family.JOBS),
                        query={"term": {"_ignored": "exceptions.type"}})["hits"]["hits"]
    assert [h["_id"] for h in ignored] == [long_id]  # kept in _source, left out of the index
    snaps = all_docs(es, alias_name(prefix, Family.SNAPSHOTS))
    assert len(snaps) == 2 and all(len(i.encode()) <= MAX_ID_BYTES for i in snaps)


def test_a_bulk_request_refused_as_a_whole_is_split_to_the_offending_item(
        stack_cfg: Config, es: Elasticsearch) -> None:
    prefix = stack_cfg.elasticsearch.index_prefix
    ensure_indices(es, prefix, "v1", live=True)
    conv = Converter(prefix, "v1")
    actions = [conv.job(job_doc(n, 1), origin=n) for n in range(40)]
    bad = actions[17]
    # an id the converter can no longer make: sent anyway, it makes Elasticsearch refuse
    # the whole request (action_request_validation_exception)
    actions[17] = Action(bad.family, bad.op, bad.index, "i" * 600, bad.source, bad.version,
                         origin=17)
    results = BulkClient(es, sleep=lambda _: None).write(actions)
    outcomes: dict[Any, Outcome] = {r.action.origin: r.outcome for r in results}
    assert outcomes.pop(17) is Outcome.REJECT
    assert results[17].error_type == "action_request_validation_exception"
    assert set(outcomes.values()) == {Outcome.OK}
    docs = all_docs(es, alias_name(prefix, Family.JOBS))
    assert set(docs) == {f"c1:{n}" for n in range(40) if n != 17}


def test_ignore_above_reaches_indices_made_with_the_mapping_of_before(
        stack_cfg: Config, es: Elasticsearch) -> None:
    prefix = stack_cfg.elasticsearch.index_prefix
    for family in Family:
        body = family_body(family)
        old = _without_ignore_above(body["mappings"])
        last = CURRENT if family in SINGLE_INDEX else "2026.10"
        es.indices.create(index=index_name(prefix, family, "v1", last),
                          settings=body["settings"], mappings=old)
    ensure_indices(es, prefix, "v1", live=True)  # put_mapping on the existing indices
    got = es.indices.get_mapping(index=index_name(prefix, Family.JOBS, "v1", "2026.10"))
    props = next(iter(got.body.values()))["mappings"]["properties"]
    assert props["queue"]["ignore_above"] == 8191
    assert props["exceptions"]["properties"]["type"]["ignore_above"] == 8191


def _without_ignore_above(mapping: Any) -> Any:
    """The mapping as it was before keywords had ignore_above (the bounds that were there
    already stay)."""
    if isinstance(mapping, dict):
        if mapping.get("type") == "keyword" and mapping.get("ignore_above") == 8191:
            return {k: v for k, v in mapping.items() if k != "ignore_above"}
        return {k: _without_ignore_above(v) for k, v in mapping.items()}
    return mapping
