"""The Flux resource journal (RFC 44) -> node events -> node documents.

The recorded journal of a real Flux 0.88 instance (``tests/data/vectors/flux``, README) must
fold to what Flux itself showed at the end of the recording: ``flux resource status`` and
``flux resource drain``, whose files are parsed here. Flux prints R's host names (``vm``)
where the events name the brokers' (node0-3): the test maps Flux's ranks through the
journal's own ``restart``, as the parser keys nodes.
"""

from __future__ import annotations

import json
import math
from collections import Counter
from dataclasses import replace
from typing import Any

import pytest
from datafiles import vector
from flux_views import recording_allocations, resource_drains, resource_status

from pipeline.core.model import RawRecord
from pipeline.core.nodes import NodeEvent
from pipeline.fold.nodes import fold_nodes
from pipeline.parsers import FORMATS, NODE_FORMATS, parse_record, split_records
from pipeline.parsers.flux_resource import (
    RankMaps,
    parse_resource_journal,
)
from pipeline.parsers.normalize import normalize
from pipeline.runtime.errors import ParseError

CLUSTER = "fluxtest"


def _lines(name: str) -> list[bytes]:
    return [line for line in vector("flux", name).read_bytes().split(b"\n") if line.strip()]


def _journal() -> tuple[list[NodeEvent], RankMaps]:
    maps = RankMaps()
    events: list[NodeEvent] = []
    for line in _lines("real-0.88-resource-journal.jsonl"):
        events += parse_resource_journal(maps.record(line), cluster=CLUSTER)
    return events, maps


@pytest.fixture(scope="module")
def end_of_recording() -> dict[str, dict[str, Any]]:
    """The node documents at the end of the recording: the resource journal, and the job's
    allocation of its node up to then. Flux's view at the end shows node0 ``draining``,
    so it was taken while the job still ran: before its ``free`` (1796149904.03), which
    came after the resource journal's last event."""
    events, maps = _journal()
    jobs = recording_allocations(CLUSTER, maps.hosts, max(ev.timestamp for ev in events))
    assert [(ev.node, ev.event) for ev in jobs] == [("node0", "alloc")]
    return {doc["node"]: doc for doc in fold_nodes(events + jobs)}


def test_the_recorded_journal_folds_to_what_flux_resource_status_showed(
        end_of_recording: dict[str, dict[str, Any]]) -> None:
    shown = resource_status(vector("flux", "real-0.88-resource-status-end.txt"))
    folded = Counter((doc["scheduler_state"], doc["responding"])
                     for doc in end_of_recording.values())
    assert folded == shown
    assert {n: d["state"] for n, d in end_of_recording.items()} == {
        "node0": "draining", "node1": "up", "node2": "drained", "node3": "down"}


def test_the_recorded_journal_folds_to_the_drains_flux_resource_drain_showed(
        end_of_recording: dict[str, dict[str, Any]]) -> None:
    _, maps = _journal()
    rows = resource_drains(vector("flux", "real-0.88-resource-drain-end.txt"))
    drained = {n: d for n, d in end_of_recording.items() if d["drained"]}
    assert len(rows) == len(drained) == 2
    for row in rows:
        node = maps.hosts[int(row["ranks"])]
        doc = drained.pop(node)
        assert doc["state"] == doc["scheduler_state"] == row["state"]
        assert doc["reason"] == row["reason"]
        # Flux keeps a drain's time in whole seconds; the document has the event's
        assert math.floor(doc["reason_at"] / 1000) == row["time"]
        assert doc["since"] == doc["reason_at"]
        assert doc["reason_by"] is None  # RFC 44's drain names no user
        # Flux prints R's name of the rank; the document is keyed by the events' name
        assert row["nodelist"] == "vm" != node
    assert drained == {}
    node1 = end_of_recording["node1"]  # drained ("bad DIMM on slot 3"), then undrained
    assert (node1["state"], node1["reason"], node1["reason_at"]) == ("up", None, None)
    assert node1["since"] == round(1796149896.2841277 * 1000)


def test_time_in_each_state_adds_up_from_the_first_event_to_the_newest(
        end_of_recording: dict[str, dict[str, Any]]) -> None:
    node1 = end_of_recording["node1"]
    spent = {k: v for k, v in node1["state_s"].items() if v}
    assert spent == pytest.approx({"down": 1796149891.6105394 - 1796149890.9233384,
                                   "up": 1796149895.1186283 - 1796149891.6105394,
                                   "drained": 1796149896.2841277 - 1796149895.1186283})
    for doc in end_of_recording.values():
        total = sum(doc["state_s"].values())
        assert total == pytest.approx((doc["updated_at"] - round(1796149890.9233384 * 1000))
                                      / 1000, abs=1e-3)


def test_without_the_jobs_a_drained_node_with_a_job_is_drained() -> None:
    """The resource events do not say whether a node runs a job: Flux's ``draining`` is
    drained and allocated, which only the jobs' events tell."""
    events, _ = _journal()
    docs = {d["node"]: d for d in fold_nodes(events)}
    assert (docs["node0"]["state"], docs["node0"]["allocated"]) == ("drained", None)


def test_the_job_s_free_makes_its_drained_node_drained() -> None:
    events, maps = _journal()
    docs = {d["node"]: d for d in fold_nodes(events + recording_allocations(CLUSTER,
                                                                            maps.hosts))}
    node0 = docs["node0"]
    assert (node0["state"], node0["allocated"]) == ("drained", False)
    assert node0["since"] == round(1796149904.034176 * 1000)
    assert node0["state_s"]["draining"] == pytest.approx(1796149904.034176 - 1796149897.3614776)


def test_events_are_keyed_by_the_events_names_and_r_s_names_kept_beside() -> None:
    events, maps = _journal()
    assert maps.hosts == {0: "node0", 1: "node1", 2: "node2", 3: "node3"}
    assert {ev.node for ev in events} == {"node0", "node1", "node2", "node3"}
    defines = [ev for ev in events if ev.event == "resource-define"]
    assert [(ev.node, ev.context["r_host"]) for ev in defines] == [
        (f"node{i}", "vm") for i in range(4)]
    assert all(ev.key == f"{CLUSTER}:{ev.node}" and ev.scheduler == "flux" for ev in events)


def test_the_eventlog_flux_printed_holds_the_journal_s_events() -> None:
    """``flux resource eventlog`` at the end: the same events (the recording is whole)."""
    printed = [(round(float(line.split()[0]), 3), line.split()[1])
               for line in vector("flux", "real-0.88-resource-eventlog.txt").read_text()
               .splitlines()]
    journal = []
    for line in _lines("real-0.88-resource-journal.jsonl"):
        journal += [(round(e["timestamp"], 3), e["name"]) for e in json.loads(line)["events"]]
    assert printed == journal


def test_a_backlog_and_a_live_copy_of_one_event_are_one_event() -> None:
    events, _ = _journal()
    again, _ = _journal()
    assert fold_nodes(events + again) == fold_nodes(events)
    assert len({ev.event_id for ev in events}) == len(events)


def test_rank_maps_keep_the_response_bytes_after_the_map() -> None:
    lines = _lines("real-0.88-resource-journal.jsonl")
    maps = RankMaps()
    records = list(maps.records(lines))
    assert records[0] == lines[0]  # holds its own restart
    assert records[3] == lines[3] == b'{"events":[]}'  # the sentinel
    prefix = b'{"ranks":"0-3","nodelist":"node[0-3]",'
    for line, record in zip(lines[1:], records[1:], strict=True):
        if record != line:
            assert record == prefix + line[1:]


def test_a_live_record_without_a_rank_map_is_refused() -> None:
    line = _lines("real-0.88-resource-journal.jsonl")[-1]  # offline idset 3
    with pytest.raises(ParseError) as err:
        parse_resource_journal(line, cluster=CLUSTER)
    assert err.value.reason == "unknown-ranks"
    assert "offline" in err.value.message


def _rec(events: list[dict[str, Any]], **top: Any) -> bytes:
    return json.dumps({"ranks": "0-1", "nodelist": "n[0-1]", **top, "events": events}).encode()


def _fold(*records: bytes) -> dict[str, dict[str, Any]]:
    events = [ev for rec in records for ev in parse_resource_journal(rec, cluster="c")]
    return {d["node"]: d for d in fold_nodes(events)}


def _ev(name: str, ts: float, **context: Any) -> dict[str, Any]:
    return {"timestamp": ts, "name": name, "context": context}


def test_torpid_and_lively() -> None:
    docs = _fold(_rec([_ev("online", 10, idset="0-1")]), _rec([_ev("torpid", 20, idset="1")]),
                 _rec([_ev("lively", 25, idset="1")]), _rec([_ev("torpid", 30, idset="0")]))
    assert (docs["n0"]["state"], docs["n0"]["scheduler_state"]) == ("unresponsive", "torpid")
    assert docs["n0"]["responding"] is False
    assert (docs["n1"]["state"], docs["n1"]["since"]) == ("up", 25_000)
    assert docs["n1"]["state_s"]["unresponsive"] == 5.0


@pytest.mark.parametrize(("overwrite", "reason", "at"), [
    (0, "first", 20_000), (1, "second", 20_000), (2, "second", 30_000)])
def test_a_drain_of_a_drained_node_follows_overwrite(overwrite: int, reason: str,
                                                     at: int) -> None:
    docs = _fold(_rec([_ev("online", 10, idset="0-1")]),
                 _rec([_ev("drain", 20, idset="0", nodelist="n0", reason="first",
                           overwrite=0)]),
                 _rec([_ev("drain", 30, idset="0", nodelist="n0", reason="second",
                           overwrite=overwrite)]))
    assert (docs["n0"]["state"], docs["n0"]["reason"], docs["n0"]["reason_at"]) == (
        "drained", reason, at)
    assert docs["n0"]["since"] == 20_000


def test_truncate_states_every_rank() -> None:
    """RFC 44 ``truncate``: a truncated eventlog's first event, the state it summarizes."""
    rec = json.dumps({"events": [_ev("truncate", 50, online="0", torpid="", ranks="0-2",
                                     nodelist="t[0-2]",
                                     drain={"2": {"timestamp": 40.0, "reason": "fan"}})]})
    docs = _fold(rec.encode())
    assert {n: (d["state"], d["reason"]) for n, d in docs.items()} == {
        "t0": ("up", None), "t1": ("down", None), "t2": ("drained", "fan")}
    assert docs["t2"]["reason_at"] == 40_000


def test_instance_events_and_unknown_events() -> None:
    events = parse_resource_journal(_rec([
        _ev("resource-update", 5, expiration=99), _ev("future-event", 6, idset="1", x=1),
        _ev("no-idset-event", 7)]), cluster="c")
    assert [(ev.node, ev.event, dict(ev.context)) for ev in events] == [
        ("n1", "future-event", {"x": 1, "rank": 1})]


def test_a_drain_names_its_own_hosts() -> None:
    """drain/undrain carry their nodelist: its names win over the map's."""
    events = parse_resource_journal(_rec([_ev("drain", 5, idset="1", nodelist="other1",
                                              reason="r", overwrite=0)]), cluster="c")
    assert [(ev.node, ev.reason, ev.by) for ev in events] == [("other1", "r", None)]


@pytest.mark.parametrize(("payload", "reason"), [
    (b"\xff", "invalid-utf8"),
    (b'{"events": [', "invalid-json"),
    (b"[]", "not-an-object"),
    (b'{"R": {}}', "missing-field"),
    (b'{"events": {}}', "bad-type"),
    (b'{"events": [], "events": []}', "duplicate-key"),
    (b'{"events": [{"timestamp": 1}]}', "missing-field"),
    (b'{"events": [{"name": "", "timestamp": 1}]}', "bad-type"),
    (b'{"events": [{"name": "online", "timestamp": "1"}]}', "bad-timestamp"),
    (b'{"events": [{"name": "online", "timestamp": -1}]}', "bad-timestamp"),
    (b'{"events": [{"name": "online", "timestamp": 1e400}]}', "bad-timestamp"),
    (b'{"events": [{"name": "online", "timestamp": 1, "context": []}]}', "bad-type"),
    (b'{"events": [{"name": "online", "timestamp": 1, "context": {"idset": "0"}}]}',
     "unknown-ranks"),
    (_rec([_ev("online", 1, idset="5")]), "unknown-ranks"),
    (_rec([_ev("online", 1, idset="0-")]), "bad-idset"),
    (_rec([_ev("online", 1)]), "missing-field"),
    (_rec([_ev("drain", 1, idset="0-1", nodelist="n0", overwrite=0)]), "bad-hostlist"),
    (_rec([_ev("drain", 1, idset="0", nodelist="n[0", overwrite=0)]), "bad-hostlist"),
    (_rec([_ev("drain", 1, idset="0", nodelist="n0", overwrite=7)]), "bad-value"),
    (_rec([_ev("drain", 1, idset="0", nodelist="n0", reason=3)]), "bad-type"),
    (_rec([_ev("restart", 1, ranks="0-1", online="")]), "missing-field"),
    (_rec([_ev("resource-define", 1, method="kvs")], R=[]), "bad-R"),
    (_rec([_ev("resource-define", 1)], R={"execution": {"R_lite": [{"rank": "0-1"}],
                                                       "nodelist": ["a"]}}), "bad-R"),
    (_rec([_ev("online", 1, idset="0", x=1e400)]), "invalid-json"),
    # R's names never key a node: without the events' map, its ranks are unknown
    (json.dumps({"events": [_ev("resource-define", 1, method="kvs")], "R": {
        "version": 1, "execution": {"R_lite": [{"rank": "0"}], "nodelist": ["vm"]}}}).encode(),
     "unknown-ranks"),
    (b'{"ranks": "0-1", "events": [{"name": "online", "timestamp": 1}]}', "missing-field"),
])
def test_bad_records_are_refused_with_their_reason(payload: bytes, reason: str) -> None:
    with pytest.raises(ParseError) as err:
        parse_resource_journal(payload, cluster="c")
    assert err.value.reason == reason, err.value


def test_the_format_is_registered_for_flux_one_record_a_line() -> None:
    assert FORMATS["flux-resource-journal"][0] == "flux"
    assert "flux-resource-journal" in NODE_FORMATS
    assert parse_record("flux-resource-journal", b'{"events":[]}', cluster="c") == []


def test_a_recorded_file_is_cut_into_records_with_their_maps() -> None:
    """``jobstream parse`` / ``publish`` of a recording: a file is one connection's
    responses, so each record gets the map of the restart before it."""
    data = vector("flux", "real-0.88-resource-journal.jsonl").read_bytes()
    records = list(split_records("flux-resource-journal", data))
    assert [n for n, _ in records] == list(range(1, 9))
    events = [ev for _, rec in records
              for ev in parse_record("flux-resource-journal", rec, cluster=CLUSTER)]
    assert events == _journal()[0]


def test_the_stream_normalizes_node_records_into_node_events_it_admits() -> None:
    """The worker's normalize stage takes a node format's records: their events are node
    events (folded into node documents, never into a job's state), admitted by the same
    rules as a job's, so a broken clock is refused with its reason."""
    line = vector("flux", "real-0.88-resource-journal.jsonl").read_bytes().splitlines()[0]
    raw = RawRecord(cluster=CLUSTER, scheduler="flux", format="flux-resource-journal",
                    received_at=0.0, payload=line)
    events = normalize(raw)
    assert events and all(isinstance(ev, NodeEvent) for ev in events)
    assert events == parse_record("flux-resource-journal", line, cluster=CLUSTER)
    early = replace(raw, received_at=events[0].timestamp - 2 * 86400)
    with pytest.raises(ParseError) as err:
        normalize(early)
    assert err.value.reason == "future-timestamp"
    assert f"of node {CLUSTER}:" in err.value.message
