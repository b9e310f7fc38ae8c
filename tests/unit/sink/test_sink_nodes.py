"""The node states through the sink's real loop (Kafka and Elasticsearch faked): what
``hpc.nodes.state`` becomes in ``hpc-nodes-<gen>-current``, a node's tombstone a delete."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from datafiles import REPO
from sink_fakes import Stack, job_doc

from pipeline.fold.nodes import fold_nodes
from pipeline.parsers import parse_record
from pipeline.sink.stats import SinkStats


def nodes() -> list[dict[str, Any]]:
    """The node documents of a recorded ``scontrol show nodes --json`` (Slurm 24.05)."""
    payload = (REPO / "tests/data/slurm/nodes_v0.0.41_24.05.json").read_bytes()
    return fold_nodes(parse_record("slurm-nodes", payload, cluster="c"))


def test_node_states_are_indexed_into_the_current_index_by_revision(tmp_path: Path) -> None:
    stack = Stack(tmp_path)
    docs = nodes()
    for doc in docs:
        stack.node(doc)
    stats = stack.run()
    assert isinstance(stats, SinkStats) and stats.written == len(docs)
    codec = stack.codecs["nodes"]
    assert stack.es.docs == {
        f"{d['cluster']}:{d['node']}": {k: v for k, v in codec.decode(codec.encode(d)).items()
                                        if v is not None}
        for d in docs}
    assert {(op, meta["_index"], meta["version"], meta["version_type"])
            for op, meta in stack.es.ops} == {
        ("index", "hpc-nodes-v1-current", 1, "external")}
    assert stack.log.committed == {(stack.cfg.topics.nodes, 0): len(docs)}


def test_a_node_tombstone_deletes_its_document_and_a_jobs_writes_nothing(
        tmp_path: Path) -> None:
    stack = Stack(tmp_path)
    gpu01, gpu02 = (d for d in nodes() if d["node"] in ("gpu01", "gpu02"))
    stack.node(gpu01)
    stack.node(gpu02)
    stack.state(job_doc(1))
    assert isinstance(stack.run(), SinkStats)
    stack.log.append(stack.cfg.topics.nodes, b"testcluster:gpu01", None)
    stack.log.append(stack.cfg.topics.state, b"c1:1", None)
    stats = stack.run()
    assert isinstance(stats, SinkStats) and stats.tombstones == 2
    assert set(stack.es.docs) == {"testcluster:gpu02", "c1:1"}
    assert stack.es.ops[-1] == ("delete", {"_index": "hpc-nodes-v1-current",
                                           "_id": "testcluster:gpu01"})
    assert stack.log.committed == {(stack.cfg.topics.nodes, 0): 3,
                                   (stack.cfg.topics.state, 0): 2}


def test_a_node_state_that_cannot_be_a_document_goes_to_the_dlq(tmp_path: Path) -> None:
    stack = Stack(tmp_path)
    good, bad = nodes()[:2]
    stack.node(good)
    stack.node({**bad, "revision": -1})
    stack.log.append(stack.cfg.topics.nodes, b"\xff", None)  # a tombstone of no node
    stats = stack.run()
    assert isinstance(stats, SinkStats) and stats.dead_lettered == 2
    assert [d["headers"]["reason"] for d in stack.dlq()] == ["bad_revision", "bad_key"]
    assert set(stack.es.docs) == {f"{good['cluster']}:{good['node']}"}
    assert stack.log.committed == {(stack.cfg.topics.nodes, 0): 3}
