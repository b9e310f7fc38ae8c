"""The node events through the sink (issue 36): what ``hpc.nodes.events`` becomes in
``hpc-node-events-<gen>-YYYY.MM`` (monthly by the event's time, id ``event_id``, created
once), the family's names and template, and what the converter refuses."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from datafiles import REPO
from sink_fakes import Stack

from pipeline.fold.nodes import event_document
from pipeline.parsers import parse_record
from pipeline.sink.converter import Converter, DocumentError, Op
from pipeline.sink.names import CURRENT, Family, alias_name, index_name, index_pattern
from pipeline.sink.stats import SinkStats
from pipeline.sink.templates import family_body, index_template

NOV_2026_S = 1_794_000_000  # 2026-11-06T21:20:00Z


def node_events() -> list[dict[str, Any]]:
    """The event documents of a recorded ``scontrol show nodes --json`` (Slurm 24.05)."""
    payload = (REPO / "tests/data/slurm/nodes_v0.0.41_24.05.json").read_bytes()
    return [event_document(ev) for ev in parse_record("slurm-nodes", payload, cluster="c")]


def test_the_family_is_monthly_behind_its_alias() -> None:
    assert index_name("p-", Family.NODE_EVENTS, "v1", "2026.11") == (
        "p-hpc-node-events-v1-2026.11")
    assert alias_name("p-", Family.NODE_EVENTS) == "p-hpc-node-events"
    assert index_pattern("p-", Family.NODE_EVENTS, "v2") == "p-hpc-node-events-v2-*"
    with pytest.raises(ValueError, match="YYYY.MM"):
        index_name("", Family.NODE_EVENTS, "v1", CURRENT)
    template = index_template("p-", Family.NODE_EVENTS, "v1", live=True)
    assert template["index_patterns"] == ["p-hpc-node-events-v1-*"]
    assert template["template"]["aliases"] == {"p-hpc-node-events": {}}
    mappings = family_body(Family.NODE_EVENTS)["mappings"]
    assert mappings["dynamic"] == "strict"
    assert mappings["properties"]["timestamp"] == {"type": "date", "format": "epoch_millis"}
    assert mappings["properties"]["context"]["type"] == "flattened"


def test_a_node_event_is_created_once_by_its_id_in_the_month_of_its_time() -> None:
    conv = Converter("p-", "v1")
    doc = {"cluster": "c", "scheduler": "flux", "node": "n1", "event": "drain",
           "timestamp": NOV_2026_S * 1000, "source": "flux-resource-journal",
           "event_id": "e1", "reason": "bad fan", "reason_by": None, "state": None,
           "episode": "e1", "context": '{"rank":3}'}
    action = conv.convert(Family.NODE_EVENTS, doc)
    assert (action.family, action.op, action.index, action.doc_id, action.version) == (
        Family.NODE_EVENTS, Op.CREATE, "p-hpc-node-events-v1-2026.11", "e1", None)
    # nulls left out, the context an object for its flattened field
    assert action.source == {**{k: v for k, v in doc.items() if v is not None},
                             "context": {"rank": 3}}
    assert action.header() == {"create": {"_index": "p-hpc-node-events-v1-2026.11",
                                          "_id": "e1"}}


@pytest.mark.parametrize(("change", "reason"), [
    ({"timestamp": NOV_2026_S * 1000.0}, "bad_time"),  # seconds as a double: not ours
    ({"timestamp": -1}, "bad_time"),
    ({"event_id": ""}, "missing_field"),
    ({"node": None}, "missing_field"),
    ({"context": "[1]"}, "bad_json"),
    ({"context": "{"}, "bad_json"),
])
def test_a_node_event_that_cannot_be_a_document_is_refused_with_a_reason(
        change: dict[str, Any], reason: str) -> None:
    doc = {"cluster": "c", "scheduler": "slurm", "node": "n1", "event": "state",
           "timestamp": NOV_2026_S * 1000, "source": "slurm-nodes", "event_id": "e1",
           "context": "{}", **change}
    with pytest.raises(DocumentError) as err:
        Converter().node_event(doc)
    assert err.value.reason == reason


def test_node_events_are_indexed_through_the_sinks_loop_and_copies_are_one(
        tmp_path: Path) -> None:
    stack = Stack(tmp_path)
    codec = stack.codecs["node_events"]
    docs = node_events()
    topic = stack.cfg.topics.node_events
    for doc in [*docs, docs[0]]:  # a copy, as the worker writes after a crash
        context = json.dumps(doc["context"], separators=(",", ":"))
        stack.log.append(topic, f"c:{doc['node']}".encode(),
                         codec.encode({**doc, "context": context}))
    stats = stack.run()
    assert isinstance(stats, SinkStats)
    assert {meta["_id"]: (op, meta["_index"]) for op, meta in stack.es.ops} == {
        d["event_id"]: ("create", "hpc-node-events-v1-2026.11") for d in docs}
    assert stack.es.docs == {d["event_id"]: {k: v for k, v in d.items() if v is not None}
                             for d in docs}
    assert stack.log.committed == {(topic, 0): len(docs) + 1}
