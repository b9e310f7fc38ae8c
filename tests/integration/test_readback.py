"""Polls of an index the sink has just created, on the real Elasticsearch.

Between an index's creation and the start of its primary shard, Elasticsearch answers
searches 503 (``search_phase_execution_exception``: all shards failed). A poll waiting for
documents must read that as "nothing yet", as it reads a missing index, and a scan broken
off half-way must still fail. The shard is held unassigned here by an allocation filter
naming no node, then released. (A refresh waits for the shard instead: it is no poll.)
"""

from __future__ import annotations

import pytest
from elasticsearch import ApiError, Elasticsearch

from pipeline.replay.readback import NOT_YET, job_counts, job_documents, not_yet, refresh
from pipeline.runtime.config import Config

UNASSIGNED = {"index.routing.allocation.require._name": "no-such-node",
              "index.number_of_replicas": 0}


@pytest.fixture
def starting_index(stack_cfg: Config, es: Elasticsearch) -> str:
    index = f"{stack_cfg.elasticsearch.index_prefix}hpc-jobs-starting"
    es.indices.create(index=index, settings=UNASSIGNED, wait_for_active_shards="0",
                      mappings={"dynamic_templates": [{"keywords": {
                          "match_mapping_type": "string", "mapping": {"type": "keyword"}}}]})
    return index


def test_a_starting_index_answers_503(es: Elasticsearch, starting_index: str) -> None:
    with pytest.raises(ApiError) as raised:
        es.search(index=starting_index, size=0)
    assert raised.value.meta.status == 503 and not_yet(raised.value)


def test_polls_read_a_starting_index_as_empty_then_its_documents(
        es: Elasticsearch, starting_index: str) -> None:
    assert job_counts(es, starting_index).total == 0
    assert list(job_documents(es, starting_index)) == []
    assert es.options(ignore_status=NOT_YET).count(index=starting_index).get("count", 0) == 0

    es.indices.put_settings(index=starting_index,
                            settings={"index.routing.allocation.require._name": None})
    es.cluster.health(index=starting_index, wait_for_status="green", timeout="60s")
    es.index(index=starting_index, id="c:1", document={"state": "done", "cluster": "c"})
    refresh(es, starting_index)
    counts = job_counts(es, starting_index)
    assert (counts.total, counts.of("cluster", "c")) == (1, 1)
    assert list(job_documents(es, starting_index)) == [{"state": "done", "cluster": "c"}]


def test_other_errors_are_not_read_as_empty(es: Elasticsearch, stack_cfg: Config) -> None:
    with pytest.raises(ApiError) as raised:  # 400: a query Elasticsearch cannot parse
        job_counts(es, f"{stack_cfg.elasticsearch.index_prefix}*", ids=[{"bad": 1}])  # type: ignore[list-item]
    assert raised.value.meta.status == 400
