"""Records -> bulk actions, and coalescing within a flush."""

from __future__ import annotations

import json
from typing import Any

import pytest
from datafiles import REPO

from pipeline.fold.nodes import fold_nodes
from pipeline.parsers import parse_record
from pipeline.sink.converter import Action, Converter, DocumentError, Op, coalesce
from pipeline.sink.names import Family

NOV_2026 = 1_794_000_000_000  # 2026-11-06T21:20:00Z, epoch ms
DEC_2026 = 1_796_342_400_000  # 2026-12-04T00:00:00Z


def job(revision: int = 3, **extra: Any) -> dict[str, Any]:
    doc: dict[str, Any] = {"cluster": "c1", "scheduler": "slurm", "job_id": "42",
                           "state": "running", "t_submit": NOV_2026, "user": None,
                           "revision": revision, "updated_at": NOV_2026 + 5}
    doc.update(extra)
    return doc


def event(event_id: str = "e1", **extra: Any) -> dict[str, Any]:
    ev: dict[str, Any] = {"cluster": "c1", "scheduler": "flux", "job_id": "99",
                          "event": "submit", "timestamp": NOV_2026 / 1000 + 0.25,
                          "source": "flux-journal", "event_id": event_id, "seq": 0,
                          "context": '{"urgency":16}', "facts": "{}", "jobspec": None,
                          "R": None, "record": None, "job_id_f58": None}
    ev.update(extra)
    return ev


def snapshot(**extra: Any) -> dict[str, Any]:
    snap: dict[str, Any] = {"cluster": "c1", "queue": "batch", "worker": "w1",
                            "partitions": [0, 1], "timestamp": DEC_2026, "pending_jobs": 3,
                            "oldest_pending_age_s": None}
    snap.update(extra)
    return snap


def node(revision: int = 2, **extra: Any) -> dict[str, Any]:
    doc: dict[str, Any] = {"cluster": "c1", "scheduler": "slurm", "node": "n01",
                           "state": "drained", "scheduler_state": "IDLE+DRAIN",
                           "drained": True, "responding": True, "allocated": False,
                           "reason": "bad DIMM", "reason_by": "root", "reason_at": NOV_2026,
                           "since": NOV_2026, "state_s": {"drained": 60.0},
                           "partitions": [], "revision": revision,
                           "updated_at": NOV_2026 + 60_000}
    doc.update(extra)
    return doc


conv = Converter(prefix="t-", generation="v2")


class TestJobs:
    def test_index_with_external_version_into_submit_month(self) -> None:
        a = conv.job(job(revision=7))
        assert a.op is Op.INDEX
        assert a.index == "t-hpc-jobs-v2-2026.11"
        assert a.doc_id == "c1:42"
        assert a.header() == {"index": {"_index": "t-hpc-jobs-v2-2026.11", "_id": "c1:42",
                                        "version": 7, "version_type": "external"}}

    def test_month_follows_t_submit_not_updates(self) -> None:
        assert conv.job(job(updated_at=DEC_2026)).index.endswith("-2026.11")

    def test_nulls_left_out_of_source(self) -> None:
        source = conv.job(job()).source
        assert source is not None and "user" not in source and source["state"] == "running"

    def test_without_submit_time_goes_to_undated(self) -> None:
        a = conv.job(job(t_submit=None))
        assert a.index == "t-hpc-jobs-v2-undated" == conv.undated_index()

    def test_later_incarnation_id_has_submit_time(self) -> None:
        assert conv.job(job(incarnation=1)).doc_id == f"c1:42@{NOV_2026}"

    @pytest.mark.parametrize("revision", [None, -1, "3", 2.5, True])
    def test_bad_revision(self, revision: Any) -> None:
        with pytest.raises(DocumentError) as info:
            conv.job(job(revision=revision))
        assert info.value.reason == "bad_revision"

    def test_bad_submit_time(self) -> None:
        with pytest.raises(DocumentError, match="t_submit") as info:
            conv.job(job(t_submit="yesterday"))
        assert info.value.reason == "bad_time"

    @pytest.mark.parametrize("name", ["cluster", "job_id"])
    def test_missing_identity(self, name: str) -> None:
        with pytest.raises(DocumentError) as info:
            conv.job(job(**{name: ""}))
        assert info.value.reason == "missing_field"


class TestEvents:
    def test_create_with_event_id_and_millisecond_timestamp(self) -> None:
        a = conv.event(event())
        assert a.op is Op.CREATE and a.version is None
        assert a.header() == {"create": {"_index": "t-hpc-job-events-v2-2026.11", "_id": "e1"}}
        assert a.source is not None
        assert a.source["@timestamp"] == NOV_2026 + 250
        assert a.source["timestamp"] == NOV_2026 / 1000 + 0.25

    def test_json_text_fields_become_objects(self) -> None:
        a = conv.event(event(record=json.dumps({"JobId": 1}), facts='{"queue":"q"}'))
        assert a.source is not None
        assert a.source["context"] == {"urgency": 16}
        assert a.source["facts"] == {"queue": "q"}
        assert a.source["record"] == {"JobId": 1}
        assert "jobspec" not in a.source

    def test_a_lone_surrogate_is_bad_json(self) -> None:
        # json reads "\ud800" as a str no UTF-8 request body can hold: the bulk request
        # would fail, not the one event
        with pytest.raises(DocumentError) as info:
            conv.event(event(facts='{"s":"\\ud800"}'))
        assert info.value.reason == "bad_json" and "surrogate" in info.value.message
        assert conv.event(event(facts='{"s":"\\ud83d\\ude00"}')).source["facts"] == {
            "s": "\U0001f600"}

    @pytest.mark.parametrize("context", ["{nope", "[1, 2]", "3"])
    def test_context_must_be_a_json_object(self, context: str) -> None:
        with pytest.raises(DocumentError) as info:
            conv.event(event(context=context))
        assert info.value.reason == "bad_json"

    @pytest.mark.parametrize("ts", [None, float("nan"), "now"])
    def test_bad_timestamp(self, ts: Any) -> None:
        with pytest.raises(DocumentError) as info:
            conv.event(event(timestamp=ts))
        assert info.value.reason == "bad_time"


class TestSnapshots:
    def test_id_is_cluster_queue_worker_time(self) -> None:
        a = conv.snapshot(snapshot())
        assert a.op is Op.INDEX and a.version is None
        assert a.doc_id == f"c1:batch:w1:{DEC_2026}"
        assert a.index == "t-hpc-queue-snapshots-v2-2026.12"
        assert a.source is not None and "oldest_pending_age_s" not in a.source

    def test_empty_queue_name_is_a_queue(self) -> None:
        assert conv.snapshot(snapshot(queue="")).doc_id == f"c1::w1:{DEC_2026}"

    def test_reason_snapshot_has_its_own_id_beside_the_queues(self) -> None:
        queue = conv.snapshot(snapshot(reason=None))
        by_reason = conv.snapshot(snapshot(reason="Priority", reason_jobs=2))
        assert queue.doc_id == f"c1:batch:w1:{DEC_2026}"
        assert by_reason.doc_id == f"c1:batch:w1:{DEC_2026}:Priority"
        assert queue.source is not None and "reason" not in queue.source

    def test_node_rows_have_an_id_per_state_and_reason(self) -> None:
        def row(state: str, reason: str | None) -> str:
            return conv.snapshot(snapshot(queue="", pending_jobs=0, node_state=state,
                                          node_reason=reason, node_count=2,
                                          node_s=60.0)).doc_id

        base = f"c1::w1:{DEC_2026}"
        assert row("drained", "fans") == f"{base}:drained:fans"
        assert row("drained", None) == f"{base}:drained"
        assert len({row("drained", None), row("drained", "fans"), row("down", "fans"),
                    row("up", None), conv.snapshot(snapshot(queue="")).doc_id}) == 5

    def test_bad_timestamp(self) -> None:
        with pytest.raises(DocumentError):
            conv.snapshot(snapshot(timestamp=1.5))


class TestNodes:
    def test_index_with_external_version_into_the_current_index(self) -> None:
        a = conv.node(node(revision=7))
        assert a.op is Op.INDEX and a.family is Family.NODES
        assert a.index == "t-hpc-nodes-v2-current" == conv.nodes_index()
        assert a.header() == {"index": {"_index": "t-hpc-nodes-v2-current", "_id": "c1:n01",
                                        "version": 7, "version_type": "external"}}

    def test_the_index_is_the_same_whatever_the_times(self) -> None:
        # a node's versions are checked in one index: no time may move its document
        later = conv.node(node(since=DEC_2026, updated_at=DEC_2026, reason_at=None))
        assert later.index == conv.node(node()).index

    def test_nulls_left_out_of_source(self) -> None:
        source = conv.node(node(reason=None, reason_by=None, allocated=None)).source
        assert source is not None
        assert not {"reason", "reason_by", "allocated"} & set(source)
        assert source["state_s"] == {"drained": 60.0} and source["partitions"] == []

    def test_a_folded_node_document_converts_with_the_folds_id(self) -> None:
        payload = (REPO / "tests/data/slurm/nodes_v0.0.41_24.05.json").read_bytes()
        docs = fold_nodes(parse_record("slurm-nodes", payload, cluster="c"))
        actions = [conv.node(d) for d in docs]
        assert {a.doc_id for a in actions} == {f"testcluster:{d['node']}" for d in docs}
        assert all(a.version == d["revision"] == 1 for a, d in zip(actions, docs, strict=True))

    @pytest.mark.parametrize("revision", [None, -1, "3", 2.5, True])
    def test_bad_revision(self, revision: Any) -> None:
        with pytest.raises(DocumentError, match="node document revision") as info:
            conv.node(node(revision=revision))
        assert info.value.reason == "bad_revision"

    @pytest.mark.parametrize("name", ["cluster", "node"])
    def test_missing_identity(self, name: str) -> None:
        with pytest.raises(DocumentError) as info:
            conv.node(node(**{name: ""}))
        assert info.value.reason == "missing_field"

    def test_a_tombstone_deletes_by_its_key_without_a_version(self) -> None:
        d = conv.node_gone(b"c1:n01", origin="o")
        assert (d.op, d.family, d.index, d.doc_id, d.version, d.origin) == (
            Op.DELETE, Family.NODES, "t-hpc-nodes-v2-current", "c1:n01", None, "o")
        assert d.operations() == [{"delete": {"_index": "t-hpc-nodes-v2-current",
                                              "_id": "c1:n01"}}]
        assert d.doc_id == conv.node(node()).doc_id

    @pytest.mark.parametrize(("key", "reason"), [(None, "missing_field"), (b"", "missing_field"),
                                                 (b"\xff:n01", "bad_key")])
    def test_a_tombstone_without_a_usable_key(self, key: bytes | None, reason: str) -> None:
        with pytest.raises(DocumentError) as info:
            conv.node_gone(key)
        assert info.value.reason == reason


def test_convert_dispatches_by_family() -> None:
    assert conv.convert(Family.JOBS, job(), origin="o").origin == "o"
    assert conv.convert(Family.EVENTS, event()).family is Family.EVENTS
    assert conv.convert(Family.SNAPSHOTS, snapshot()).family is Family.SNAPSHOTS
    assert conv.convert(Family.NODES, node()).family is Family.NODES


def test_operations_are_header_and_source_lines() -> None:
    a = conv.job(job())
    assert a.operations() == [a.header(), a.source]
    d = Action(Family.JOBS, Op.DELETE, "i", "x", version=3)
    assert d.operations() == [{"delete": {"_index": "i", "_id": "x", "version": 3,
                                          "version_type": "external"}}]


class TestCoalesce:
    def test_highest_revision_per_job_whatever_the_order(self) -> None:
        revs = [conv.job(job(revision=r), origin=r) for r in (2, 5, 3, 1)]
        kept, superseded = coalesce(revs)
        assert [a.version for a in kept] == [5]
        assert sorted(a.origin for a in superseded) == [1, 2, 3]

    def test_equal_revision_keeps_the_first(self) -> None:
        kept, superseded = coalesce([conv.job(job(), origin="a"), conv.job(job(), origin="b")])
        assert [a.origin for a in kept] == ["a"] and [a.origin for a in superseded] == ["b"]

    def test_jobs_kept_apart_by_id_in_first_seen_order(self) -> None:
        actions = [conv.job(job(job_id="2")), conv.job(job(job_id="1")),
                   conv.job(job(job_id="2", revision=9))]
        kept, _ = coalesce(actions)
        assert [(a.doc_id, a.version) for a in kept] == [("c1:2", 9), ("c1:1", 3)]

    def test_a_job_moving_out_of_undated_keeps_the_dated_revision(self) -> None:
        kept, _ = coalesce([conv.job(job(revision=1, t_submit=None)), conv.job(job(revision=2))])
        assert [(a.index, a.version) for a in kept] == [("t-hpc-jobs-v2-2026.11", 2)]

    def test_duplicate_events_keep_the_first(self) -> None:
        kept, superseded = coalesce([conv.event(event(), origin=1),
                                     conv.event(event(), origin=2),
                                     conv.event(event("e2"), origin=3)])
        assert [a.origin for a in kept] == [1, 3] and [a.origin for a in superseded] == [2]

    def test_snapshots_keep_the_last(self) -> None:
        kept, _ = coalesce([conv.snapshot(snapshot(pending_jobs=1), origin=1),
                            conv.snapshot(snapshot(pending_jobs=2), origin=2)])
        assert [a.origin for a in kept] == [2]

    def test_highest_node_revision_whatever_the_order(self) -> None:
        for order in ((2, 5, 3, 1), (5, 1), (1, 5)):
            kept, superseded = coalesce([conv.node(node(revision=r), origin=r) for r in order])
            assert [a.version for a in kept] == [5]
            assert sorted(a.origin for a in superseded) == sorted(set(order) - {5})

    def test_a_node_tombstone_replaces_what_came_before_and_yields_to_what_follows(
            self) -> None:
        gone = conv.node_gone(b"c1:n01", origin="gone")
        kept, superseded = coalesce([conv.node(node(revision=4), origin=4), gone])
        assert kept == [gone] and [a.origin for a in superseded] == [4]
        back = conv.node(node(revision=1), origin="back")
        kept, superseded = coalesce([gone, back])
        assert [a.origin for a in kept] == ["back"] and superseded == [gone]

    def test_families_never_coalesce_with_each_other(self) -> None:
        a = Action(Family.JOBS, Op.INDEX, "i", "x", {}, 1)
        b = Action(Family.EVENTS, Op.CREATE, "j", "x", {})
        assert coalesce([a, b])[0] == [a, b]


class TestRelocations:
    def test_delete_undated_copy_with_the_new_revision(self) -> None:
        dated = conv.job(job(revision=4), origin="m")
        other = conv.job(job(job_id="7"))
        (d,) = conv.relocations([dated, other], undated={"c1:42"})
        assert d.op is Op.DELETE and d.index == conv.undated_index()
        assert (d.doc_id, d.version, d.origin) == ("c1:42", 4, "m")

    def test_undated_writes_need_no_relocation(self) -> None:
        assert conv.relocations([conv.job(job(t_submit=None))], undated={"c1:42"}) == []


def test_generation_is_checked() -> None:
    with pytest.raises(ValueError, match="generation"):
        Converter(generation="2")


class TestTimesOutsideTheRange:
    """A time no index can be named after is the record's fault: a DocumentError
    (``bad_time``, the DLQ) instead of an exception that stops the sink, or an index of
    an invented month."""

    @pytest.mark.parametrize("t_submit", [-1, 253_402_300_800_000, 2**62, -(2**62)])
    def test_job(self, t_submit: int) -> None:
        with pytest.raises(DocumentError) as info:
            conv.job(job(t_submit=t_submit))
        assert info.value.reason == "bad_time"

    @pytest.mark.parametrize("ts", [1e300, -1e300, 1.7e308, -0.001, 253_402_300_800.0,
                                    float("inf")])
    def test_event(self, ts: float) -> None:
        with pytest.raises(DocumentError) as info:
            conv.event(event(timestamp=ts))
        assert info.value.reason == "bad_time"

    @pytest.mark.parametrize("ts", [-5, 2**63 - 1, 253_402_300_800_000])
    def test_snapshot(self, ts: int) -> None:
        with pytest.raises(DocumentError) as info:
            conv.snapshot(snapshot(timestamp=ts))
        assert info.value.reason == "bad_time"

    def test_year_2100_is_a_month_like_any_other(self) -> None:
        assert conv.job(job(t_submit=4_102_444_800_000)).index == "t-hpc-jobs-v2-2100.01"


def test_an_invalid_prefix_is_refused_at_construction() -> None:
    with pytest.raises(ValueError, match="index_prefix"):
        Converter(prefix="Site-")


class TestFlattenedLimits:
    """What Elasticsearch's ``flattened`` fields (context, facts) would refuse, refused
    here with a reason that names it: the event goes to the DLQ, before the bulk."""

    @pytest.mark.parametrize("context", [
        {"\x00": 1}, {"a": {"b\x00c": 1}}, {"a": [{"\x00": 1}]},
        {"k" * 28_700: 1}, {"k" * 20_000: {"j" * 9_000: 1}},
        json.loads("{" + '"a":{' * 20 + '"b":1' + "}" * 21),
    ])
    def test_refused(self, context: dict[str, Any]) -> None:
        with pytest.raises(DocumentError) as info:
            conv.event(event(context=json.dumps(context)))
        assert info.value.reason == "bad_json"

    @pytest.mark.parametrize("context", [
        {"a": "v" * 100_000},  # a long value: ignore_above's business
        {"k" * 1000: 1}, {"é" * 5000: 1},
        json.loads("{" + '"a":{' * 19 + '"b":1' + "}" * 20),
    ])
    def test_kept(self, context: dict[str, Any]) -> None:
        assert conv.event(event(context=json.dumps(context))).source["context"] == context  # type: ignore[index]

    def test_only_the_flattened_fields(self) -> None:
        # jobspec, R and record are kept in _source only: nothing to refuse there
        a = conv.event(event(record=json.dumps({"\x00": {"k" * 30_000: 1}})))
        assert a.source is not None and "\x00" in a.source["record"]

    def test_json_nested_beyond_the_recursion_limit_is_bad_json(self) -> None:
        with pytest.raises(DocumentError) as info:
            conv.event(event(facts="[" * 100_000 + "]" * 100_000))
        assert info.value.reason == "bad_json"
