"""Reading job (and node) documents back from Elasticsearch (the demo's summary, replay
checks).

Everything reads through the ``hpc-jobs`` alias (or a generation's own index pattern),
optionally restricted to a set of document ids: the jobs of one demo run in an index that
also holds earlier ones.
"""

from __future__ import annotations

from collections.abc import Collection, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from elasticsearch import ApiError, Elasticsearch, helpers

from pipeline.runtime.config import Config
from pipeline.sink.client import make_client
from pipeline.sink.names import Family, alias_name, index_pattern

__all__ = ["NOT_YET", "JobCounts", "client", "job_counts", "job_documents", "jobs_alias",
           "jobs_pattern", "node_count", "nodes_alias", "not_yet", "refresh"]

#: the statuses with which a read of an index a poll is waiting for means "nothing there
#: yet": the index does not exist (404), or it was just created and its primary shards are
#: still starting (503, ``search_phase_execution_exception``: all shards failed)
NOT_YET: tuple[int, ...] = (404, 503)

#: terms aggregations of :func:`job_counts`
COUNT_FIELDS: tuple[str, ...] = ("state", "result", "cluster")


def client(cfg: Config, timeout: float = 30.0) -> Elasticsearch:
    return make_client(cfg.elasticsearch, request_timeout=timeout)


def jobs_alias(cfg: Config) -> str:
    return alias_name(cfg.elasticsearch.index_prefix, Family.JOBS)


def nodes_alias(cfg: Config) -> str:
    return alias_name(cfg.elasticsearch.index_prefix, Family.NODES)


def jobs_pattern(cfg: Config, generation: str) -> str:
    return index_pattern(cfg.elasticsearch.index_prefix, Family.JOBS, generation)


@dataclass
class JobCounts:
    """Documents in total and per value of each of :data:`COUNT_FIELDS`."""

    total: int = 0
    by: dict[str, dict[str, int]] = field(default_factory=dict)

    def of(self, name: str, value: str) -> int:
        return self.by.get(name, {}).get(value, 0)


def not_yet(exc: ApiError) -> bool:
    """Whether ``exc`` answers a read of an index that is missing or still starting."""
    return exc.meta.status in NOT_YET


def _query(ids: Collection[str] | None) -> dict[str, Any]:
    return {"ids": {"values": list(ids)}} if ids is not None else {"match_all": {}}


def job_counts(es: Elasticsearch, index: str, ids: Collection[str] | None = None
               ) -> JobCounts:
    """Counts of job documents by state, result and cluster (one search)."""
    try:
        resp = es.search(index=index, size=0, query=_query(ids), track_total_hits=True,
                         aggs={name: {"terms": {"field": name, "size": 100}}
                               for name in COUNT_FIELDS})
    except ApiError as exc:
        if not not_yet(exc):
            raise
        return JobCounts()
    aggs = resp.get("aggregations", {})
    return JobCounts(
        total=int(resp["hits"]["total"]["value"]),
        by={name: {b["key"]: int(b["doc_count"]) for b in aggs.get(name, {}).get("buckets", [])}
            for name in COUNT_FIELDS})


def node_count(es: Elasticsearch, index: str, clusters: Collection[str]) -> int:
    """How many node documents of ``clusters`` ``index`` holds (0 before it exists)."""
    try:
        return int(es.count(index=index, query={"terms": {"cluster": list(clusters)}})["count"])
    except ApiError as exc:
        if not not_yet(exc):
            raise
        return 0


def job_documents(es: Elasticsearch, index: str, ids: Collection[str] | None = None
                  ) -> Iterator[Mapping[str, Any]]:
    """Every job document's ``_source`` (scrolling: any number of documents)."""
    read = 0
    try:
        for hit in helpers.scan(es, index=index, query={"query": _query(ids)}, size=1000):
            read += 1
            yield hit["_source"]
    except ApiError as exc:
        if read or not not_yet(exc):  # a scan broken off half-way is no empty index
            raise


def refresh(es: Elasticsearch, index: str) -> None:
    """Make every acknowledged write searchable now."""
    es.options(ignore_status=NOT_YET).indices.refresh(index=index, allow_no_indices=True,
                                                      ignore_unavailable=True)
