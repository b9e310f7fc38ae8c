"""``slurm-nodes``: Slurm node documents -> node events -> node documents.

No real node document was recorded (``tests/data/vectors/slurm`` has none): the documents
of ``tests/data/slurm/nodes_*.json`` are built to Slurm's own node schema (its README says
from which source), one per shape: 22.05's ``sinfo --json`` (openapi v0.0.38) and 24.05's
``scontrol show nodes --json`` (data_parser v0.0.41).
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
from datafiles import REPO

from pipeline.fold.nodes import fold_nodes, slurm_state
from pipeline.parsers import FORMATS, NODE_FORMATS, parse_parts, parse_record, split_records
from pipeline.runtime.errors import ParseError

DATA = REPO / "tests" / "data" / "slurm"
T = 1795312702  # the documents' time
RECEIVED = T + 8.0


def _doc(name: str) -> dict[str, Any]:
    return json.loads((DATA / name).read_text())


def _events(doc: dict[str, Any] | bytes, received_at: float | None = RECEIVED) -> list[Any]:
    payload = doc if isinstance(doc, bytes) else json.dumps(doc).encode()
    return parse_record("slurm-nodes", payload, cluster="fallback", received_at=received_at)


def _docs(events: list[Any]) -> dict[str, dict[str, Any]]:
    return {d["node"]: d for d in fold_nodes(events)}


def test_22_05_sinfo_nodes() -> None:
    docs = _docs(_events(_doc("nodes_v0.0.38_22.05.json")))
    got = {n: (d["state"], d["scheduler_state"], d["reason"], d["reason_by"])
           for n, d in docs.items()}
    assert got == {
        "n01": ("up", "IDLE", None, None),
        "n02": ("drained", "IDLE+DRAIN", "bad DIMM", "root"),
        "n03": ("draining", "MIXED+DRAIN", "kernel update", "alice"),
        "n04": ("down", "DOWN+NOT_RESPONDING", "Not responding", "slurm"),
        "n05": ("up", "ALLOCATED", None, None),
        "n06": ("unresponsive", "IDLE+NOT_RESPONDING", None, None),
    }
    # no last_update in 22.05: the poll is dated by the record's receive time, a state with
    # a reason from the time Slurm set it
    assert docs["n01"]["since"] == docs["n01"]["updated_at"] == RECEIVED * 1000
    assert docs["n02"]["since"] == docs["n02"]["reason_at"] == (T - 102) * 1000
    assert docs["n02"]["state_s"]["drained"] == RECEIVED - (T - 102)
    assert docs["n05"]["partitions"] == ["short"]
    assert (docs["n03"]["allocated"], docs["n03"]["responding"]) == (True, True)
    assert (docs["n04"]["allocated"], docs["n04"]["responding"]) == (False, False)
    assert all(d["cluster"] == "fallback" and d["scheduler"] == "slurm" for d in docs.values())


def test_24_05_scontrol_nodes() -> None:
    events = _events(_doc("nodes_v0.0.41_24.05.json"), received_at=None)
    assert {ev.context["observed"] for ev in events} == {"last_update"}
    docs = _docs(events)
    got = {n: (d["state"], d["reason"], d["reason_by"], d["since"]) for n, d in docs.items()}
    assert got == {
        "gpu01": ("draining", "GPU ECC errors", "root", (T - 300) * 1000),
        "gpu02": ("up", None, None, T * 1000),
        "cpu01": ("down", "Not responding", "slurm", (T - 600) * 1000),
        "cpu02": ("drained", "maintenance", "bob", (T - 120) * 1000),
        "cpu03": ("off", None, None, T * 1000),
        "cpu04": ("up", None, None, T * 1000),
    }
    assert all(d["cluster"] == "testcluster" for d in docs.values())  # meta.slurm.cluster
    assert docs["cpu04"]["partitions"] == ["batch", "debug"]
    cpu02 = next(ev for ev in events if ev.node == "cpu02")
    assert cpu02.context["hostname"] == "cpu02-ib"  # keyed by NodeName, the host beside it


def test_an_unchanged_poll_repeats_its_events() -> None:
    """Idempotence: another poll that sees no change (same last_update) gives the same ids,
    so the documents and their revisions do not move."""
    doc = _doc("nodes_v0.0.41_24.05.json")
    first = _events(doc, received_at=T + 5)
    second = _events(doc, received_at=T + 65)
    assert [ev.event_id for ev in first] == [ev.event_id for ev in second]
    assert fold_nodes(first + second) == fold_nodes(first)


def _poll(doc: dict[str, Any], at: float, node: str, **fields: Any) -> dict[str, Any]:
    doc = copy.deepcopy(doc)
    doc["last_update"] = {"set": True, "infinite": False, "number": at}
    for n in doc["nodes"]:
        if n["name"] == node:
            n.update(fields)
    return doc


def test_drain_resume_and_down_over_polls() -> None:
    """A node drained, resumed (slurmctld clears the reason and its time), then downed:
    each change is a new event, each state begins when Slurm says or the poll first saw it."""
    base = _doc("nodes_v0.0.41_24.05.json")
    unset = {"set": True, "infinite": False, "number": 0}
    polls = [
        _poll(base, T, "gpu02"),
        _poll(base, T + 100, "gpu02", state=["IDLE", "DRAIN"], reason="fan failure",
              reason_changed_at={"set": True, "infinite": False, "number": T + 90},
              reason_set_by_user="root"),
        _poll(base, T + 200, "gpu02", state=["IDLE"], reason="", reason_changed_at=unset,
              reason_set_by_user=""),
        _poll(base, T + 300, "gpu02", state=["DOWN"], reason="Kill task failed",
              reason_changed_at={"set": True, "infinite": False, "number": T + 280},
              reason_set_by_user="slurm"),
        _poll(base, T + 400, "gpu02", state=["DOWN"], reason="Kill task failed",
              reason_changed_at={"set": True, "infinite": False, "number": T + 280},
              reason_set_by_user="slurm"),
    ]
    events = [ev for poll in polls for ev in _events(poll) if ev.node == "gpu02"]
    idle = [ev.event_id for ev in events if ev.context["state"] == ["IDLE"]]
    assert len(set(idle)) == 2  # idle after the resume is not a copy of idle before
    for order in (events, events[::-1]):
        doc = _docs(list(order))["gpu02"]
        assert (doc["state"], doc["reason"], doc["reason_by"]) == (
            "down", "Kill task failed", "slurm")
        assert doc["since"] == (T + 280) * 1000
        assert doc["updated_at"] == (T + 400) * 1000
        assert doc["revision"] == 5
        assert {k: v for k, v in doc["state_s"].items() if v} == {
            "up": 90 + 80, "drained": 110, "down": 120}


def test_a_bad_node_costs_only_itself() -> None:
    doc = _doc("nodes_v0.0.41_24.05.json")
    doc["nodes"][1]["state"] = 7
    del doc["nodes"][3]["name"]
    parts = parse_parts("slurm-nodes", json.dumps(doc).encode(), cluster="c")
    assert [p.error.reason if p.error else None for p in parts] == [
        None, "bad-type", None, "missing-field", None, None]
    assert parts[1].source == doc["nodes"][1]
    assert [ev.node for p in parts for ev in p.events] == ["gpu01", "cpu01", "cpu03", "cpu04"]
    with pytest.raises(ParseError) as err:  # all or nothing
        parse_record("slurm-nodes", json.dumps(doc).encode(), cluster="c")
    assert err.value.reason == "bad-type"


@pytest.mark.parametrize(("change", "reason"), [
    ({"state": []}, "bad-type"),
    ({"state": ["  "]}, "bad-value"),
    ({"state": None}, "missing-field"),
    ({"state": "idle", "state_flags": "DRAIN"}, "bad-type"),
    ({"name": ""}, "bad-type"),
    ({"reason": 5}, "bad-type"),
    ({"reason": "x", "reason_changed_at": "soon"}, "bad-time"),
    ({"partitions": [1]}, "bad-type"),
])
def test_bad_nodes_are_refused_with_their_reason(change: dict[str, Any], reason: str) -> None:
    doc = _doc("nodes_v0.0.41_24.05.json")
    doc["nodes"][0].update(change)
    parts = parse_parts("slurm-nodes", json.dumps(doc).encode(), cluster="c")
    assert parts[0].error is not None and parts[0].error.reason == reason, parts[0].error
    assert all(p.error is None for p in parts[1:])


@pytest.mark.parametrize(("payload", "reason"), [
    (b"not json", "invalid-json"),
    (b"[]", "not-an-object"),
    (b'{"meta": {}}', "missing-field"),
    (b'{"nodes": {}}', "bad-type"),
    (b'{"errors": [{"error": "Unable to contact slurm controller"}]}', "source-error"),
    (b'{"sinfo": [{"nodes": {"nodes": ["n1"]}}]}', "unsupported-shape"),
    (b'{"nodes": [], "last_update": "yesterday"}', "bad-time"),
])
def test_bad_documents_are_refused_whole(payload: bytes, reason: str) -> None:
    with pytest.raises(ParseError) as err:
        parse_parts("slurm-nodes", payload, cluster="c", received_at=RECEIVED)
    assert err.value.reason == reason, err.value


def test_a_document_with_no_time_is_refused() -> None:
    """22.05 states no last_update; without the record's receive time the poll's time is
    not known (0 means not known, as a RawRecord says)."""
    payload = (DATA / "nodes_v0.0.38_22.05.json").read_bytes()
    for received_at in (None, 0.0):
        with pytest.raises(ParseError) as err:
            parse_parts("slurm-nodes", payload, cluster="c", received_at=received_at)
        assert err.value.reason == "missing-field"


@pytest.mark.parametrize(("states", "state"), [
    (["IDLE"], "up"), (["MIXED"], "up"), (["ALLOCATED", "COMPLETING"], "up"),
    (["IDLE", "DRAIN"], "drained"), (["DOWN", "DRAIN"], "drained"),
    (["MIXED", "DRAIN"], "draining"), (["IDLE", "COMPLETING", "DRAIN"], "draining"),
    (["ALLOCATED", "FAIL"], "draining"), (["IDLE", "FAIL"], "drained"),
    (["DOWN"], "down"), (["ERROR"], "down"), (["DOWN", "NOT_RESPONDING"], "down"),
    (["IDLE", "NOT_RESPONDING"], "unresponsive"), (["FUTURE"], "off"),
    (["IDLE", "POWERED_DOWN"], "off"), (["IDLE", "POWERING_UP"], "off"),
    (["IDLE", "MAINTENANCE", "RESERVED"], "up"), (["UNKNOWN"], "unknown"),
    (["WHATEVER"], "unknown"),
])
def test_slurm_states_map_onto_the_node_vocabulary(states: list[str], state: str) -> None:
    assert slurm_state(states) == state


def test_the_format_is_registered_for_slurm_one_document_a_record() -> None:
    assert FORMATS["slurm-nodes"][0] == "slurm" and "slurm-nodes" in NODE_FORMATS
    data = Path(DATA / "nodes_v0.0.38_22.05.json").read_bytes()
    assert list(split_records("slurm-nodes", data)) == [(1, data)]


def test_documents_are_what_the_node_state_schema_writes() -> None:
    """Every field of the NodeState schema, no other, and the codec writes and reads them."""
    from pipeline.codecs.codec import AvroCodec
    from pipeline.codecs.schemas import load_schema
    from pipeline.fold.nodes import DOC_FIELDS

    fields = [f["name"] for f in load_schema("NodeState").current["fields"]]
    assert list(DOC_FIELDS) == fields
    codec = AvroCodec("NodeState")
    events = _events(_doc("nodes_v0.0.38_22.05.json")) + _events(
        _doc("nodes_v0.0.41_24.05.json"))
    for doc in fold_nodes(events):
        assert list(doc) == fields
        assert codec.decode(codec.encode(doc)) == doc
