"""Index templates, index creation and alias moves on the real Elasticsearch."""

from __future__ import annotations

import pytest
from elasticsearch import Elasticsearch

from pipeline.runtime.config import Config
from pipeline.runtime.errors import SinkError
from pipeline.sink.names import Family, alias_name, index_name
from pipeline.sink.templates import ensure_indices, live_generation, swap_aliases

NOV_2026 = 1_794_000_000_000


def aliases_of(es: Elasticsearch, prefix: str) -> dict[str, set[str]]:
    got = es.indices.get_alias(index=f"{prefix}*")
    return {name: set(body["aliases"]) for name, body in got.items()}


def test_ensure_is_idempotent_and_makes_the_aliases(stack_cfg: Config,
                                                   es: Elasticsearch) -> None:
    p = stack_cfg.elasticsearch.index_prefix
    assert ensure_indices(es, p, "v1", now_ms=NOV_2026) is True
    assert ensure_indices(es, p, "v1", now_ms=NOV_2026) is True
    assert live_generation(es, p) == "v1"
    assert aliases_of(es, p) == {
        f"{p}hpc-jobs-v1-2026.11": {f"{p}hpc-jobs"},
        f"{p}hpc-jobs-v1-undated": {f"{p}hpc-jobs"},
        f"{p}hpc-job-events-v1-2026.11": {f"{p}hpc-job-events"},
        f"{p}hpc-queue-snapshots-v1-2026.11": {f"{p}hpc-queue-snapshots"},
        f"{p}hpc-nodes-v1-current": {f"{p}hpc-nodes"},
        f"{p}hpc-node-events-v1-2026.11": {f"{p}hpc-node-events"},
    }
    # the aliases exist before any document: Grafana can point at them at once
    assert es.count(index=alias_name(p, Family.JOBS))["count"] == 0
    assert es.count(index=alias_name(p, Family.NODES))["count"] == 0


def test_next_months_index_joins_the_alias_of_the_live_generation_only(
        stack_cfg: Config, es: Elasticsearch) -> None:
    p = stack_cfg.elasticsearch.index_prefix
    ensure_indices(es, p, "v1", now_ms=NOV_2026)
    ensure_indices(es, p, "v2", now_ms=NOV_2026)  # a replay: not live
    for gen in ("v1", "v2"):
        # a bulk write creates next month's index from the template
        es.index(index=index_name(p, Family.JOBS, gen, "2026.12"), id="c:1",
                 document={"cluster": "c", "job_id": "1", "revision": 1})
    got = aliases_of(es, p)
    assert got[f"{p}hpc-jobs-v1-2026.12"] == {f"{p}hpc-jobs"}
    assert got[f"{p}hpc-jobs-v2-2026.12"] == set()


def test_strict_mapping_refuses_unknown_fields(stack_cfg: Config, es: Elasticsearch) -> None:
    p = stack_cfg.elasticsearch.index_prefix
    ensure_indices(es, p, "v1", now_ms=NOV_2026)
    with pytest.raises(Exception, match="strict_dynamic_mapping_exception"):
        es.index(index=index_name(p, Family.JOBS, "v1", "2026.11"), id="x",
                 document={"cluster": "c", "script": "rm -rf /"})


def test_new_fields_reach_existing_indices(stack_cfg: Config, es: Elasticsearch) -> None:
    p = stack_cfg.elasticsearch.index_prefix
    old = index_name(p, Family.JOBS, "v1", "2026.10")
    # an index made by an older jobstream whose mapping lacked most fields
    es.indices.create(index=old, mappings={"dynamic": "strict",
                                           "properties": {"cluster": {"type": "keyword"}}})
    ensure_indices(es, p, "v1", now_ms=NOV_2026)
    props = es.indices.get_mapping(index=old)[old]["mappings"]["properties"]
    assert props["t_submit"]["type"] == "date" and props["revision"]["type"] == "long"
    # and its refresh interval (job documents searchable sooner)
    got = es.indices.get_settings(index=old, name="index.refresh_interval")
    assert got[old]["settings"]["index"]["refresh_interval"] == "500ms"


def test_a_changed_field_type_asks_for_a_new_generation(stack_cfg: Config,
                                                        es: Elasticsearch) -> None:
    p = stack_cfg.elasticsearch.index_prefix
    es.indices.create(index=index_name(p, Family.JOBS, "v1", "2026.10"),
                      mappings={"properties": {"revision": {"type": "keyword"}}})
    with pytest.raises(SinkError, match="new generation"):
        ensure_indices(es, p, "v1", now_ms=NOV_2026)


def test_swap_moves_all_the_aliases_and_back(stack_cfg: Config, es: Elasticsearch) -> None:
    p = stack_cfg.elasticsearch.index_prefix
    ensure_indices(es, p, "v1", now_ms=NOV_2026)
    ensure_indices(es, p, "v2", now_ms=NOV_2026)
    swap_aliases(es, p, "v1", "v2")
    got = aliases_of(es, p)
    for family in Family:
        alias = alias_name(p, family)
        holders = {name for name, aliases in got.items() if alias in aliases}
        assert holders
        assert all(name.startswith(f"{p}{family.value}-v2-") for name in holders), holders
    assert live_generation(es, p) == "v2"
    # next month of v2 joins, next month of v1 does not
    es.index(index=index_name(p, Family.SNAPSHOTS, "v1", "2026.12"), id="a", document={})
    es.index(index=index_name(p, Family.SNAPSHOTS, "v2", "2026.12"), id="a", document={})
    got = aliases_of(es, p)
    assert got[f"{p}hpc-queue-snapshots-v1-2026.12"] == set()
    assert got[f"{p}hpc-queue-snapshots-v2-2026.12"] == {f"{p}hpc-queue-snapshots"}
    swap_aliases(es, p, "v2", "v1")
    assert live_generation(es, p) == "v1"


def test_an_index_made_before_a_field_lost_its_index_keeps_it_and_the_sink_starts(
        stack_cfg: Config, es: Elasticsearch) -> None:
    """Elasticsearch cannot take a field's index or doc values away in place: the events
    index of this month, made with facts and event_id indexed, keeps them (and gets the new
    fields), and next month's index has the mapping of now, behind the same alias."""
    p = stack_cfg.elasticsearch.index_prefix
    old = index_name(p, Family.EVENTS, "v1", "2026.11")
    es.indices.create(index=old, mappings={"dynamic": "strict", "properties": {
        "@timestamp": {"type": "date", "format": "epoch_millis"},
        "event": {"type": "keyword", "ignore_above": 256},
        "event_id": {"type": "keyword", "ignore_above": 8191},
        "facts": {"type": "flattened", "ignore_above": 1024}}})
    ensure_indices(es, p, "v1", now_ms=NOV_2026)
    props = es.indices.get_mapping(index=old)[old]["mappings"]["properties"]
    assert props["facts"] == {"type": "flattened", "ignore_above": 1024}
    assert props["event_id"] == {"type": "keyword", "ignore_above": 8191}
    assert props["event"]["ignore_above"] == 8191  # changed in place
    assert props["usage"]["properties"]["mem_mb"] == {"type": "double", "index": False}
    new = index_name(p, Family.EVENTS, "v1", "2026.12")
    doc = {"@timestamp": 1_796_000_000_000, "event": "submit", "event_id": "e1",
           "facts": {"user": "alice"}}
    es.index(index=old, id="e1", document=doc, refresh=True)
    es.index(index=new, id="e1", document=doc, refresh=True)
    props = es.indices.get_mapping(index=new)[new]["mappings"]["properties"]
    assert props["facts"]["index"] is False and props["event_id"]["doc_values"] is False
    # the old index still answers a search on facts, the new one keeps them in _source only
    alias = alias_name(p, Family.EVENTS)
    hits = es.search(index=alias, query={"term": {"facts.user": "alice"}})["hits"]["hits"]
    assert [h["_index"] for h in hits] == [old]
    both = es.search(index=alias, query={"ids": {"values": ["e1"]}})["hits"]["hits"]
    assert sorted(h["_index"] for h in both) == [old, new]
    assert all(h["_source"]["facts"] == {"user": "alice"} for h in both)
    ensure_indices(es, p, "v1", now_ms=NOV_2026)  # and again: idempotent over both
