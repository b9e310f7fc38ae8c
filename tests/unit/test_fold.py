"""The fold: hand-built events for every rule, then the real vectors of ../shared/vectors."""

from __future__ import annotations

import gc
import json
import weakref
from pathlib import Path
from typing import Any

import pytest
from datafiles import vector

from pipeline.codecs.schemas import load_schema
from pipeline.core.hostlist import expand_hostlist
from pipeline.core.model import JobEvent, make_event_id
from pipeline.fold import DOC_FIELDS, JobFold, doc_id, fold
from pipeline.parsers import parse_record, split_records

T0 = 1_795_000_000.0


def ev(name: str, t: float, *, job: str = "100", sched: str = "flux", source: str | None = None,
       seq: int | None = None, ctx: dict[str, Any] | None = None,
       facts: dict[str, Any] | None = None, cluster: str = "c", eid: str | None = None,
       f58: str | None = None) -> JobEvent:
    source = source or ("flux-journal" if sched == "flux" else "slurm-jobcomp")
    return JobEvent(cluster=cluster, scheduler=sched, job_id=job, event=name,  # type: ignore[arg-type]
                    timestamp=t, source=source,
                    event_id=eid or make_event_id(cluster, sched, job, name, t, source),
                    seq=seq, context=ctx or {}, facts=facts or {}, job_id_f58=f58)


def flux_life(*, finish: int | None = 0, extra: list[JobEvent] | None = None,
              until: str = "clean") -> list[JobEvent]:
    """A Flux job: submit at T0, eligible at +2, alloc +10, start +11, finish +71, clean +75."""
    steps = [
        ev("submit", T0, seq=0, ctx={"userid": 1000, "urgency": 16},
           facts={"uid": 1000, "job_name": "sim", "queue": "batch", "bank": "phys",
                  "timelimit_s": 3600.0, "cores_req": 8, "nodes_req": 2}, f58="ƒ2L7qeDM"),
        ev("validate", T0 + 1, seq=1),
        ev("depend", T0 + 1.5, seq=2),
        ev("priority", T0 + 2, seq=3, ctx={"priority": 16}),
        ev("alloc", T0 + 10, seq=4, facts={"nnodes": 2, "ncores": 8, "ngpus": 2,
                                           "nodelist": ["n1", "n2"]}),
        ev("prolog-start", T0 + 10.2, seq=5, ctx={"description": "p"}),
        ev("prolog-finish", T0 + 10.7, seq=6, ctx={"description": "p", "status": 0}),
        ev("start", T0 + 11, seq=7),
    ]
    if finish is not None:
        code = {"exit_code": finish >> 8} if not finish & 0x7F else {
            "exit_code": 128 + (finish & 0x7F), "signal": finish & 0x7F}
        steps.append(ev("finish", T0 + 71, seq=8, ctx={"status": finish}, facts=code))
    steps += [ev("epilog-start", T0 + 72, seq=9), ev("epilog-finish", T0 + 74, seq=10),
              ev("clean", T0 + 75, seq=11)]
    events = [e for e in steps if e.event != "clean" or until == "clean"]
    return sorted(events + (extra or []), key=lambda e: e.timestamp)


def one(events: list[JobEvent]) -> dict[str, Any]:
    docs = fold(events)
    assert len(docs) == 1, docs
    return docs[0]


# --------------------------------------------------------------------------- document shape


def test_document_has_every_field_of_the_job_state_schema() -> None:
    schema = {f["name"] for f in load_schema("JobState").current["fields"]}
    doc = one(flux_life())
    assert list(doc) == list(DOC_FIELDS)
    assert set(DOC_FIELDS) == schema


def test_document_is_json_and_times_are_epoch_milliseconds() -> None:
    doc = one(flux_life())
    assert json.loads(json.dumps(doc)) == doc
    assert doc["t_submit"] == 1_795_000_000_000
    assert doc["t_eligible"] == 1_795_000_002_000
    assert doc["t_alloc"] == 1_795_000_010_000
    assert doc["t_start"] == 1_795_000_011_000
    assert doc["t_end"] == 1_795_000_071_000
    assert doc["t_clean"] == 1_795_000_075_000
    assert doc["updated_at"] == 1_795_000_075_000
    for name in ("t_submit", "t_alloc", "t_end", "updated_at"):
        assert isinstance(doc[name], int)


def test_flux_completed_job() -> None:
    doc = one(flux_life())
    assert doc["cluster"] == "c" and doc["scheduler"] == "flux" and doc["job_id"] == "100"
    assert doc["job_id_f58"] == "ƒ2L7qeDM"
    assert (doc["uid"], doc["job_name"], doc["queue"], doc["bank"]) == (1000, "sim", "batch",
                                                                         "phys")
    assert (doc["state"], doc["result"], doc["exit_code"], doc["signal"]) == (
        "done", "completed", 0, None)
    assert doc["cancelled_before_start"] is False
    assert (doc["nnodes"], doc["ncores"], doc["ngpus"]) == (2, 8, 2)
    assert doc["nodelist"] == ["n1", "n2"] and doc["first_node"] == "n1"
    assert (doc["nodes_req"], doc["cores_req"], doc["timelimit_s"]) == (2, 8, 3600.0)
    assert doc["wait_s"] == 11.0  # start - submit
    assert doc["eligible_wait_s"] == 9.0  # start - priority
    assert doc["run_s"] == 61.0  # end - alloc
    assert doc["prolog_s"] == 0.5 and doc["epilog_s"] == 2.0
    assert doc["node_hours"] == pytest.approx(2 * 61 / 3600)
    assert doc["core_hours"] == pytest.approx(8 * 61 / 3600)
    assert doc["gpu_hours"] == pytest.approx(2 * 61 / 3600)
    assert doc["timelimit_used_pct"] == pytest.approx(61 / 3600 * 100)
    assert doc["expansion_factor"] == pytest.approx((11 + 61) / 61)
    assert doc["ef_x_nh"] == pytest.approx((11 + 61) / 61 * 2 * 61 / 3600)
    assert (doc["size_bucket"], doc["gpu_bucket"], doc["wait_bucket"],
            doc["runtime_bucket"]) == ("5 - 8", "2", "1 - 30s", "30s - 30min")
    assert doc["run_interval"] == {"gte": doc["t_alloc"], "lt": doc["t_end"]}
    assert doc["pending_interval"] == {"gte": doc["t_submit"], "lt": doc["t_start"]}
    assert doc["exceptions"] == [] and doc["requeue_count"] == 0
    assert doc["revision"] == 12 and doc["incarnation"] == 0


# --------------------------------------------------------------------------- Flux states


@pytest.mark.parametrize(("upto", "state"), [
    ("priority", "pending"), ("alloc", "running"), ("start", "running"),
    ("finish", "completing"), ("epilog-finish", "completing"), ("clean", "done"),
])
def test_flux_state_follows_the_eventlog(upto: str, state: str) -> None:
    events = flux_life()
    cut = next(i for i, e in enumerate(events) if e.event == upto)
    doc = one(events[:cut + 1])
    assert doc["state"] == state
    if state != "done":
        assert doc["result"] is None and doc["cancelled_before_start"] is None


def test_running_job_usage_runs_to_the_newest_event_not_the_clock() -> None:
    events = [e for e in flux_life() if e.timestamp <= T0 + 11]
    doc = one(events)
    assert doc["state"] == "running"
    assert doc["t_end"] is None and doc["run_s"] == 1.0  # newest event (start) - alloc
    assert doc["node_hours"] == pytest.approx(2 / 3600)
    assert doc["run_interval"] == {"gte": doc["t_alloc"], "lt": None}
    assert doc["updated_at"] == 1_795_000_011_000
    assert one(events) == doc  # reproducible


def memo(t: float, **values: Any) -> JobEvent:
    return ev("memo", t, ctx=values)


def test_memos_set_the_user_annotations_the_last_value_of_each_key_null_removing_it() -> None:
    running = [e for e in flux_life() if e.timestamp <= T0 + 11]
    memos = [memo(T0 + 12, progress=10, stage="mesh"), memo(T0 + 13, progress=50),
             memo(T0 + 14, note="hello", mesh={"cells": 10, "dims": [2, 3]}),
             memo(T0 + 15, note=None, mesh={"cells": None, "ok": True})]
    doc = one(running + memos)
    assert doc["user_annotations"] == {"progress": "50", "stage": "mesh",
                                       "mesh.dims": "[2,3]", "mesh.ok": "true"}
    assert doc["user_annotations_dropped"] is None
    # memos are folded events: they count in revision and move updated_at (and run_s)
    assert doc["revision"] == len(running) + len(memos)
    assert doc["updated_at"] == round((T0 + 15) * 1000) and doc["run_s"] == 5.0
    # a removal wins over the older value however they arrive, copies change nothing
    assert one(running + memos[::-1] + memos[1:]) == doc
    assert one(running)["user_annotations"] is None
    jf = JobFold()
    for e in running + memos:
        jf.add(e)
    assert not jf.add(memos[0]) and jf.documents() == [doc]
    # a memo stating a fact is folded like any event
    assert jf.add(ev("memo", T0 + 16, facts={"queue": "debug"}))
    assert jf.documents()[0]["queue"] == "debug"


def test_a_memo_value_replaces_an_object_and_an_object_a_value_as_in_flux() -> None:
    running = [e for e in flux_life() if e.timestamp <= T0 + 11]

    def notes(*memos: JobEvent) -> dict[str, str] | None:
        return one(running + list(memos))["user_annotations"]

    assert notes(memo(T0 + 12, a={"b": 1}), memo(T0 + 13, a={"c": 2})) == {"a.b": "1",
                                                                           "a.c": "2"}
    assert notes(memo(T0 + 12, a={"b": 1}), memo(T0 + 13, a=5)) == {"a": "5"}
    assert notes(memo(T0 + 12, a=5), memo(T0 + 13, a={"c": 2})) == {"a.c": "2"}
    # a value removed what was under it, so an object written later starts afresh
    assert notes(memo(T0 + 12, a={"b": 1}), memo(T0 + 13, a=5), memo(T0 + 14, a={})) is None
    assert notes(memo(T0 + 12, a={"b": 1}), memo(T0 + 13, a=None),
                 memo(T0 + 14, a={"c": 2})) == {"a.c": "2"}


def test_a_dotted_key_and_a_nested_path_of_one_memo_show_the_same_after_a_restart() -> None:
    # both name the field a.b at one position: the choice may depend neither on the order
    # of the memo's keys nor on the order a state read back makes its entries in
    running = [e for e in flux_life() if e.timestamp <= T0 + 11]
    shown = set()
    for ctx in ({"a.b": 1, "a": {"b": 2}}, {"a": {"b": 2}, "a.b": 1}):
        jf = JobFold()
        for e in [*running, ev("memo", T0 + 12, ctx=ctx)]:
            jf.add(e)
        again = JobFold.from_dict(json.loads(json.dumps(jf.to_dict())))
        live, restored = (f.documents()[0]["user_annotations"] for f in (jf, again))
        assert live == restored
        shown.add(live["a.b"])
    assert len(shown) == 1


def test_documents_kept_up_event_by_event_equal_the_whole_fold() -> None:
    """Events that sort after the last one continue the folded incarnation; a run ended
    by a requeue is closed, so an event after it starts the fold again (hypothesis found
    an eligible time that stuck to the closed run's successor)."""
    for events in (flux_life(),
                   [ev("alloc", T0, sched="slurm"), ev("requeue", T0, sched="slurm"),
                    ev("eligible", T0 + 1, sched="slurm")]):
        jf = JobFold()
        for n, e in enumerate(events, 1):
            jf.add(e)
            assert jf.documents() == fold(events[:n]), events[n - 1].event


def test_a_fold_let_go_is_freed_by_reference_counting() -> None:
    """The worker's cache lets folds go; its collector thresholds make full collections
    rare (agents/cli.py), so a fold in a reference cycle would stay in memory."""
    gc.disable()
    try:
        for events in (flux_life(until="start"), flux_life()):
            jf = JobFold()
            for e in events:
                jf.add(e)
                jf.documents()
            jf.to_json()
            gone = weakref.ref(jf)
            del jf
            assert gone() is None
    finally:
        gc.enable()


def test_pending_job_has_no_run_fields() -> None:
    doc = one([e for e in flux_life() if e.timestamp <= T0 + 2])
    assert doc["state"] == "pending"
    assert doc["t_start"] is None and doc["wait_s"] is None and doc["run_s"] is None
    assert doc["node_hours"] is None and doc["runtime_bucket"] is None
    assert doc["size_bucket"] == "5 - 8"  # from cores asked for
    assert doc["pending_interval"] == {"gte": doc["t_submit"], "lt": None}


# --------------------------------------------------------------------------- Flux results


def exc(t: float, typ: str, severity: int = 0, note: str = "", seq: int | None = None
        ) -> JobEvent:
    return ev("exception", t, seq=seq, ctx={"type": typ, "severity": severity, "note": note,
                                            "userid": 0})


def test_cancelled_while_pending_is_cancelled_before_start() -> None:
    events = [e for e in flux_life() if e.timestamp <= T0 + 2]
    events += [exc(T0 + 5, "cancel"), ev("clean", T0 + 5.1)]
    doc = one(events)
    assert (doc["state"], doc["result"], doc["cancelled_before_start"]) == (
        "done", "cancelled", True)
    assert doc["t_end"] == 1_795_000_005_000 and doc["t_start"] is None
    assert doc["run_s"] is None and doc["exit_code"] is None
    assert doc["exceptions"] == [{"type": "cancel", "severity": 0, "note": None,
                                  "timestamp": 1_795_000_005_000}]


def test_cancelled_while_running_ends_at_the_exception() -> None:
    doc = one(flux_life(finish=0x8F00, extra=[exc(T0 + 30, "cancel")]))
    assert doc["result"] == "cancelled" and doc["cancelled_before_start"] is False
    assert doc["t_end"] == 1_795_000_030_000  # first fatal exception, not finish
    assert doc["run_s"] == 20.0
    assert (doc["exit_code"], doc["signal"]) == (143, None)


def test_timeout() -> None:
    doc = one(flux_life(finish=36352, extra=[exc(T0 + 60, "timeout", note="expired")]))
    assert doc["result"] == "timeout"
    assert doc["exceptions"][0]["note"] == "expired"


@pytest.mark.parametrize(("typ", "result"), [
    ("oom", "oom"), ("node-failure", "node_fail"), ("exec", "failed"),
    ("dependency", "exception"), ("test", "exception"), ("mf_priority", "exception"),
])
def test_fatal_exception_types_refine_flux_failed(typ: str, result: str) -> None:
    doc = one(flux_life(finish=256, extra=[exc(T0 + 30, typ)]))
    assert doc["result"] == result


def test_nonzero_finish_is_failed_and_zero_is_completed() -> None:
    assert one(flux_life(finish=768))["result"] == "failed"
    assert one(flux_life(finish=768))["exit_code"] == 3
    assert one(flux_life(finish=9))["signal"] == 9


def test_non_fatal_exception_keeps_a_successful_job_completed() -> None:
    doc = one(flux_life(extra=[exc(T0 + 20, "node-failure", severity=2, note="lost n2")]))
    assert doc["result"] == "completed"
    assert doc["exceptions"][0]["severity"] == 2
    assert doc["t_end"] == 1_795_000_071_000


def test_fatal_exception_after_finish_does_not_undo_success() -> None:
    # flux-core decides success when the finish event is processed
    doc = one(flux_life(extra=[exc(T0 + 73, "epilog")]))
    assert doc["result"] == "completed"
    assert doc["t_end"] == 1_795_000_071_000


def test_most_severe_exception_is_tracked_first_at_equal_severity() -> None:
    events = flux_life(finish=None, extra=[exc(T0 + 20, "mine", severity=1),
                                           exc(T0 + 21, "cancel"), exc(T0 + 22, "timeout")])
    doc = one(events)
    assert doc["result"] == "cancelled"
    assert [e["type"] for e in doc["exceptions"]] == ["mine", "cancel", "timeout"]


def test_flux_eligible_is_the_priority_that_made_the_job_schedulable() -> None:
    events = [
        ev("submit", T0, facts={"uid": 1}), ev("validate", T0 + 1), ev("depend", T0 + 2),
        ev("priority", T0 + 3, ctx={"priority": 0}),  # held (urgency 0)
        ev("urgency", T0 + 50, ctx={"urgency": 16}),
        ev("priority", T0 + 51, ctx={"priority": 16}),
        ev("priority", T0 + 60, ctx={"priority": 20}),  # reprioritized: still eligible
        ev("alloc", T0 + 70), ev("start", T0 + 71),
    ]
    doc = one(events)
    assert doc["t_eligible"] == 1_795_000_051_000
    assert doc["eligible_wait_s"] == 20.0 and doc["wait_s"] == 71.0


def test_held_job_never_becomes_eligible() -> None:
    events = [ev("submit", T0), ev("priority", T0 + 3, ctx={"priority": 0}),
              exc(T0 + 9, "cancel"), ev("clean", T0 + 10)]
    doc = one(events)
    assert doc["t_eligible"] is None and doc["cancelled_before_start"] is True


def test_jobspec_update_wins_and_absence_never_overwrites() -> None:
    events = flux_life(extra=[ev("jobspec-update", T0 + 0.5, facts={"timelimit_s": 600.0,
                                                                     "bank": "chem"})])
    doc = one(events)
    assert doc["timelimit_s"] == 600.0 and doc["bank"] == "chem"
    assert doc["job_name"] == "sim"  # the update did not say, the submit did


# --------------------------------------------------------------------------- dedupe, ids


def test_duplicates_change_nothing() -> None:
    events = flux_life()
    assert fold(events + events[::-1] + events[:3]) == fold(events)


def test_copies_of_one_event_merge_their_facts() -> None:
    base = flux_life()
    submit = base[0]
    bare = ev("submit", T0, seq=None, eid=submit.event_id, facts={"uid": 1000},
              source="flux-eventlog")
    jf_a, jf_b = JobFold(), JobFold()
    for e in [bare, *base]:
        jf_a.add(e)
    for e in [*base, bare]:
        jf_b.add(e)
    assert jf_a.documents() == jf_b.documents()
    assert jf_a.documents()[0]["job_name"] == "sim"
    assert jf_a.documents()[0]["revision"] == len(base) + 1


def test_doc_id() -> None:
    assert doc_id({"cluster": "c", "job_id": "7", "incarnation": 0, "t_submit": 5}) == "c:7"
    assert doc_id({"cluster": "c", "job_id": "7", "incarnation": 2, "t_submit": 5}) == "c:7@5"
    assert doc_id({"cluster": "c", "job_id": "7"}) == "c:7"


def test_fold_sorts_documents_by_doc_id() -> None:
    events = [ev("submit", T0, job=j) for j in ("30", "4", "100")]
    assert [d["job_id"] for d in fold(events)] == ["100", "30", "4"]


# --------------------------------------------------------------------------- JobFold


def test_jobfold_add_reports_duplicates_and_revision_grows() -> None:
    jf = JobFold()
    revisions = []
    for e in flux_life():
        assert jf.add(e) is True
        assert jf.add(e) is False
        revisions.append(jf.documents()[0]["revision"])
    assert revisions == sorted(revisions) and len(set(revisions)) == len(revisions)


def test_jobfold_keeps_no_payloads_and_round_trips_through_json() -> None:
    big = ev("submit", T0, facts={"uid": 1})
    big = JobEvent(**{**{f: getattr(big, f) for f in big.__dataclass_fields__},
                      "jobspec": {"tasks": [1]}, "R": {"execution": {}},
                      "record": {"script": "#!/bin/sh echo s3cr3t"}})
    jf = JobFold()
    jf.add(big)
    for e in flux_life()[1:]:
        jf.add(e)
    state = json.loads(json.dumps(jf.to_dict()))
    text = json.dumps(state)
    assert "s3cr3t" not in text and "tasks" not in text and "execution" not in text
    again = JobFold.from_dict(state)
    assert again.documents() == jf.documents()
    assert again.revision == jf.revision
    assert again.add(flux_life()[3]) is False
    assert again.done and not JobFold.from_dict(
        JobFold().to_dict() | {"cluster": "c", "scheduler": "flux", "job_id": "1"}).done


def test_jobfold_refuses_another_job() -> None:
    jf = JobFold()
    jf.add(ev("submit", T0, job="1"))
    with pytest.raises(ValueError, match="c:2"):
        jf.add(ev("submit", T0, job="2"))


# --------------------------------------------------------------------------- Slurm


def sev(name: str, t: float, facts: dict[str, Any] | None = None, *, source: str = "jobcomp",
        job: str = "5", ctx: dict[str, Any] | None = None, extra: tuple[Any, ...] = ()
        ) -> JobEvent:
    src = f"slurm-{source}"
    return ev(name, t, job=job, sched="slurm", source=src, facts=facts, ctx=ctx,
              eid=make_event_id("c", "slurm", job, name, t, source, *extra))


IDENT = {"user": "alice", "uid": 1001, "bank": "physics", "qos": "high", "job_name": "j"}


def test_slurm_sources_merge_into_one_document_the_end_record_winning() -> None:
    events = [
        sev("alloc", T0 + 9.5, {**IDENT, "queue": "short", "nodelist": ["vm1"], "nnodes": 1,
                                "ncores": 4, "restart_count": 0}, source="hook"),
        sev("submit", T0, {**IDENT, "queue": "short", "t_submit": T0}, source="squeue"),
        sev("start", T0 + 10, {**IDENT, "t_start": T0 + 10, "nodelist": ["vm1"],
                               "nnodes": 1, "ncores": 4}, source="squeue"),
        sev("end", T0 + 70, {**IDENT, "t_submit": T0, "t_start": T0 + 10, "t_end": T0 + 70,
                             "result": "failed", "exit_code": 3, "nodelist": ["vm1"],
                             "nnodes": 1, "ncores": 4, "timelimit_s": 600}),
        # a late poll or epilog hook that disagrees must not win over the final record
        sev("start", T0 + 80, {"t_start": T0 + 11, "ncores": 99}, source="squeue"),
        sev("end", T0 + 75, {"exit_code": 1, "nodelist": ["vm9"], "t_end": T0 + 75},
            source="hook"),
    ]
    doc = one(events)
    assert (doc["state"], doc["result"], doc["exit_code"]) == ("done", "failed", 3)
    assert (doc["user"], doc["bank"], doc["queue"], doc["qos"]) == (
        "alice", "physics", "short", "high")
    assert doc["t_start"] == 1_795_000_010_000 and doc["ncores"] == 4
    assert doc["nodelist"] == ["vm1"] and doc["t_end"] == 1_795_000_070_000
    assert doc["t_alloc"] == doc["t_start"]  # Slurm's start is the allocation
    assert doc["run_s"] == 60.0 and doc["wait_s"] == 10.0 and doc["timelimit_s"] == 600
    assert doc["restart_count"] == 0 and doc["requeue_count"] == 0


def test_slurm_hook_epilog_without_result_is_completing_until_a_record_says() -> None:
    alloc = sev("alloc", T0 + 10, {**IDENT, "nodelist": ["vm"], "nnodes": 1}, source="hook")
    epilog = sev("end", T0 + 40, {**IDENT, "exit_code": 0, "nodelist": ["vm"]}, source="hook")
    doc = one([alloc, epilog])
    assert (doc["state"], doc["result"], doc["exit_code"]) == ("completing", None, 0)
    assert doc["t_alloc"] == 1_795_000_010_000 and doc["t_end"] == 1_795_000_040_000
    final = sev("end", T0 + 39, {"t_start": T0 + 10, "t_end": T0 + 39, "result": "timeout",
                                 "exit_code": 0})
    doc = one([alloc, epilog, final])
    assert (doc["state"], doc["result"]) == ("done", "timeout")
    assert doc["t_end"] == 1_795_000_039_000


def test_slurm_eligible_wait() -> None:
    doc = one([sev("submit", T0, {"t_submit": T0}),
               sev("eligible", T0 + 100, {"t_eligible": T0 + 100}),
               sev("start", T0 + 130, {"t_start": T0 + 130})])
    assert doc["eligible_wait_s"] == 30.0 and doc["wait_s"] == 130.0
    assert doc["state"] == "running"


def test_slurm_cancelled_while_pending() -> None:
    doc = one([sev("submit", T0, {**IDENT, "t_submit": T0}),
               sev("end", T0 + 30, {**IDENT, "t_submit": T0, "t_end": T0 + 30,
                                    "result": "cancelled", "exit_code": 0})])
    assert (doc["result"], doc["cancelled_before_start"]) == ("cancelled", True)
    assert doc["t_start"] is None and doc["run_s"] is None and doc["wait_s"] is None
    assert doc["pending_interval"] == {"gte": doc["t_submit"], "lt": doc["t_end"]}


def _requeued_job() -> list[JobEvent]:
    """Run 1 submitted at T0, started at +10, requeued at +100 (node failure); Slurm gives
    the job a new submit time at +105; run 2 starts at +200 and completes at +260."""
    s1 = T0 + 105
    return [
        sev("submit", T0, {**IDENT, "t_submit": T0}),
        sev("start", T0 + 10, {**IDENT, "t_start": T0 + 10, "nodelist": ["a1", "a2"],
                               "nnodes": 2, "ncores": 8}),
        sev("requeue", T0 + 100, {**IDENT, "t_submit": T0, "t_start": T0 + 10,
                                  "t_end": T0 + 100}),
        sev("alloc", T0 + 10, {"nodelist": ["a1", "a2"], "restart_count": 0}, source="hook"),
        sev("end", T0 + 101, {"exit_code": 1, "restart_count": 0}, source="hook"),
        sev("submit", s1, {**IDENT, "t_submit": s1}),
        sev("start", T0 + 200, {**IDENT, "t_start": T0 + 200, "nodelist": ["b1"],
                                "nnodes": 1, "ncores": 4}),
        sev("end", T0 + 260, {**IDENT, "t_submit": s1, "t_start": T0 + 200,
                              "t_end": T0 + 260, "result": "completed", "exit_code": 0,
                              "nodelist": ["b1"], "nnodes": 1, "ncores": 4}),
        sev("alloc", T0 + 200, {"nodelist": ["b1"], "restart_count": 1}, source="hook"),
    ]


def test_requeued_job_stays_one_document_describing_its_last_run() -> None:
    doc = one(_requeued_job())
    assert doc_id(doc) == "c:5"
    assert doc["requeue_count"] == 1 and doc["restart_count"] == 1
    assert (doc["state"], doc["result"]) == ("done", "completed")
    assert doc["t_submit"] == 1_795_000_000_000  # the job's first submit
    assert doc["t_start"] == 1_795_000_200_000 and doc["t_end"] == 1_795_000_260_000
    assert doc["nodelist"] == ["b1"] and doc["nnodes"] == 1
    assert doc["run_s"] == 60.0 and doc["wait_s"] == 200.0
    # usage of both runs: 90 s on 2 nodes, then 60 s on 1
    assert doc["node_hours"] == pytest.approx((90 * 2 + 60 * 1) / 3600)
    assert doc["core_hours"] == pytest.approx((90 * 8 + 60 * 4) / 3600)
    assert doc["cancelled_before_start"] is False


def test_requeued_job_waiting_for_its_next_run_is_pending() -> None:
    events = [e for e in _requeued_job() if e.timestamp <= T0 + 101]
    doc = one(events)
    assert doc["state"] == "pending" and doc["requeue_count"] == 1
    assert doc["t_start"] is None and doc["result"] is None and doc["nodelist"] is None
    assert doc["node_hours"] == pytest.approx(90 * 2 / 3600)
    with_submit = one([*events, _requeued_job()[5]])
    assert with_submit["state"] == "pending" and with_submit["requeue_count"] == 1


def test_requeues_reported_by_several_sources_are_counted_once() -> None:
    events = _requeued_job()
    s1 = T0 + 105
    # sacct says restart_cnt 1: one requeue event per restart index, at the new submit
    sacct = [sev("submit", s1, {**IDENT, "t_submit": s1, "restart_count": 1}, source="sacct"),
             sev("requeue", s1, {**IDENT, "restart_count": 1}, source="sacct", extra=(1,))]
    doc = one(events + sacct)
    assert doc["requeue_count"] == 1
    assert doc["result"] == "completed"


def test_restart_count_alone_counts_requeues() -> None:
    doc = one([sev("alloc", T0, {"restart_count": 3, "nodelist": ["x"]}, source="hook")])
    assert doc["requeue_count"] == 3


def test_reused_slurm_job_id_is_a_new_job() -> None:
    later = T0 + 86400 * 90
    old = [sev("submit", T0, {**IDENT, "t_submit": T0}),
           sev("end", T0 + 50, {**IDENT, "t_submit": T0, "t_start": T0 + 5, "t_end": T0 + 50,
                                "result": "completed", "exit_code": 0, "nnodes": 1})]
    new = [sev("submit", later, {"user": "bob", "t_submit": later}),
           sev("alloc", later + 7, {"nodelist": ["z"], "nnodes": 1}, source="hook")]
    docs = fold(old + new)
    assert [doc_id(d) for d in docs] == ["c:5", f"c:5@{round(later * 1000)}"]
    first, second = docs
    assert (first["incarnation"], second["incarnation"]) == (0, 1)
    assert first["user"] == "alice" and first["state"] == "done"
    assert second["user"] == "bob" and second["state"] == "running"
    assert second["nodelist"] == ["z"]  # the hook event has no submit time: latest before it
    assert second["requeue_count"] == 0 and first["requeue_count"] == 0
    assert first["revision"] == second["revision"] == 4


def test_hook_event_before_any_later_submit_stays_with_the_first_job() -> None:
    later = T0 + 86400 * 90
    docs = fold([sev("submit", T0, {"t_submit": T0}),
                 sev("alloc", T0 + 3, {"nodelist": ["a"]}, source="hook"),
                 sev("submit", later, {"t_submit": later})])
    assert docs[0]["nodelist"] == ["a"] and docs[1]["nodelist"] is None


@pytest.mark.parametrize("evidence", ["node_fail", "preempted", "restart_count"])
def test_new_submit_after_a_requeue_like_end_continues_the_job(evidence: str) -> None:
    s1 = T0 + 300
    first_end = "node_fail" if evidence == "restart_count" else evidence
    events = [sev("submit", T0, {"t_submit": T0, "restart_count": 0}),
              sev("start", T0 + 1, {"t_start": T0 + 1, "nnodes": 1}),
              sev("end", T0 + 60, {"t_submit": T0, "t_start": T0 + 1, "t_end": T0 + 60,
                                   "result": first_end})]
    second = {"t_submit": s1}
    if evidence == "restart_count":
        events[2] = sev("end", T0 + 60, {"t_end": T0 + 60, "exit_code": 1}, source="hook")
        second["restart_count"] = 1
    events += [sev("submit", s1, second), sev("start", s1 + 5, {"t_start": s1 + 5})]
    doc = one(events)
    assert doc["requeue_count"] == 1 and doc["state"] == "running"
    assert doc["t_submit"] == 1_795_000_000_000


def test_negative_spans_from_clock_skew_are_left_out() -> None:
    doc = one([sev("submit", T0, {"t_submit": T0}), sev("start", T0 - 5, {"t_start": T0 - 5}),
               sev("end", T0 + 10, {"t_start": T0 - 5, "t_end": T0 + 10,
                                    "result": "completed"})])
    assert doc["wait_s"] is None and doc["run_s"] == 15.0
    assert doc["pending_interval"] == {"gte": doc["t_submit"], "lt": None}


# --------------------------------------------------------------------------- real vectors

FLUX_RESULTS = {"completed": "COMPLETED", "failed": "FAILED", "oom": "FAILED",
                "node_fail": "FAILED", "exception": "FAILED", "cancelled": "CANCELED",
                "timeout": "TIMEOUT"}


def _events(fmt: str, *paths: Path, cluster: str = "vec", **kw: Any) -> list[JobEvent]:
    out: list[JobEvent] = []
    for path in paths:
        for _, payload in split_records(fmt, path.read_bytes()):
            out += parse_record(fmt, payload, cluster=cluster, **kw)
    return out


@pytest.fixture(scope="module")
def flux_truth() -> dict[str, dict[str, Any]]:
    jobs = json.loads(vector("flux", "real-0.88-flux-jobs.json").read_text())["jobs"]
    return {str(j["id"]): j for j in jobs}


def _ms(t: float | None) -> int | None:
    return None if t is None else round(t * 1000)


@pytest.mark.parametrize("recording", ["backlog", "live"])
def test_flux_088_recording_folds_as_flux_jobs_reports(recording: str,
                                                        flux_truth: dict[str, Any]) -> None:
    path = vector("flux", f"real-0.88-journal-{recording}.jsonl")
    docs = fold(_events("flux-journal", path))
    assert {d["job_id"] for d in docs} == set(flux_truth)
    for doc in docs:
        truth = flux_truth[doc["job_id"]]
        where = truth["name"]
        assert doc["state"] == "done", where
        assert FLUX_RESULTS[doc["result"]] == truth["result"], where
        if truth.get("waitstatus") is not None:
            assert doc["exit_code"] == truth["returncode"], where
        else:
            assert doc["exit_code"] is None, where
        assert doc["job_id_f58"] == truth["jobid"], where
        assert doc["job_name"] == truth["name"], where
        assert doc["uid"] == truth["userid"], where
        assert doc["t_submit"] == _ms(truth["t_submit"]), where
        assert doc["t_alloc"] == _ms(truth.get("t_run")), where
        assert doc["t_end"] == _ms(truth["t_cleanup"]), where
        assert doc["t_clean"] == _ms(truth["t_inactive"]), where
        assert doc["queue"] == truth["queue"] and doc["bank"] == truth.get("bank"), where
        assert doc["nnodes"] == truth.get("nnodes"), where
        expected_nodes = expand_hostlist(truth["nodelist"]) if truth.get("nodelist") else None
        assert doc["nodelist"] == expected_nodes, where
        assert doc["timelimit_s"] == truth["duration"], where
        if truth.get("runtime") is not None:
            assert doc["run_s"] == pytest.approx(truth["runtime"], abs=0.002), where
        else:
            assert doc["run_s"] is None, where
        assert doc["cancelled_before_start"] is (truth["returncode"] == -128), where


def test_flux_088_refined_results(flux_truth: dict[str, Any]) -> None:
    docs = {flux_truth[d["job_id"]]["name"]: d for d in fold(_events(
        "flux-journal", vector("flux", "real-0.88-journal-backlog.jsonl")))}
    assert docs["raised"]["result"] == "exception"  # operator-raised fatal exception
    assert docs["dep-never"]["result"] == "exception"  # dependency can never be met
    assert docs["nocmd"]["result"] == "failed"  # exec: the job's own command failed
    assert docs["held"]["t_eligible"] is None and docs["held"]["cancelled_before_start"]
    assert docs["gpu-train"]["ngpus"] == 2 and docs["gpu-train"]["gpu_bucket"] == "2"
    assert docs["mpi"]["nodelist"] == ["node2", "node3"]
    assert docs["updated"]["timelimit_s"] == 1200.0  # jobspec-update while held
    assert docs["signal"]["signal"] == 9


def test_flux_088_backlog_and_live_fold_to_the_same_documents() -> None:
    backlog = _events("flux-journal", vector("flux", "real-0.88-journal-backlog.jsonl"))
    live = _events("flux-journal", vector("flux", "real-0.88-journal-live.jsonl"))

    def strip(docs: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return [{k: v for k, v in d.items() if k != "revision"} for d in docs]

    assert strip(fold(backlog)) == strip(fold(live)) == strip(fold(live + backlog))


def _as_text(user: dict[str, Any], above: str = "") -> dict[str, str]:
    """Flux's ``annotations.user`` as the document shows it: flat, each value as text."""
    out: dict[str, str] = {}
    for key, value in user.items():
        name = f"{above}.{key}" if above else key
        if isinstance(value, dict):
            out.update(_as_text(value, name))
        else:
            out[name] = value if isinstance(value, str) else json.dumps(value)
    return out


def test_flux_088_memos_fold_to_the_user_annotations_flux_jobs_shows() -> None:
    """Four memos on one running job, the last removing a key: the document has what
    ``flux jobs`` shows afterwards, in its JSON and as it prints ``{user.*}``."""
    [doc] = fold(_events("flux-journal", vector("flux", "real-0.88-memo-journal.jsonl")))
    [truth] = json.loads(vector("flux", "real-0.88-memo-flux-jobs.json").read_text())["jobs"]
    assert doc["job_id_f58"] == truth["jobid"] and doc["result"] == "cancelled"
    assert doc["user_annotations"] == _as_text(truth["annotations"]["user"]) == {
        "progress": "50", "stage": "mesh"}
    assert doc["user_annotations_dropped"] is None
    header, row = vector("flux", "real-0.88-memo-flux-jobs.txt").read_text().splitlines()
    printed = dict(zip(header.split(), row.split(" "), strict=True))
    assert printed["JOBID"] == doc["job_id_f58"]
    for column in ("USER.PROGRESS", "USER.STAGE", "USER.NOTE"):  # Flux prints "" for none
        key = column.removeprefix("USER.").lower()
        assert (doc["user_annotations"].get(key) or "") == printed[column], column


def test_flux_088_recording_s_memos_are_its_jobs_user_annotations(
        flux_truth: dict[str, Any]) -> None:
    for recording in ("backlog", "live"):
        docs = fold(_events("flux-journal", vector("flux", f"real-0.88-journal-{recording}.jsonl")))
        for doc in docs:
            truth = flux_truth[doc["job_id"]]
            user = dict(truth.get("annotations", {}).get("user", {}))
            if "uri" in truth:  # flux jobs --json shows a subinstance's user.uri as uri
                user["uri"] = truth["uri"]
            assert doc["user_annotations"] == (_as_text(user) or None), truth["name"]


def test_flux_dump_eventlog_and_derived_journal_agree() -> None:
    from pipeline.parsers.flux import build_eventlog_record

    record = build_eventlog_record(vector("flux", "eventlog-v1_dump-0.46.0.jsonl").read_bytes(),
                                   vector("flux", "jobspec_dump-0.46.0.json").read_bytes(),
                                   vector("flux", "R_dump-0.46.0.json").read_bytes(), "ƒ7vo8MjM")
    from_eventlog = one(parse_record("flux-eventlog", record, cluster="vec"))
    from_journal = one(_events("flux-journal", vector("flux", "journal-backlog_DERIVED.jsonl")))
    from_live = one(_events("flux-journal", vector("flux", "journal-live_DERIVED.jsonl")))
    for doc in (from_journal, from_live):
        assert {k: v for k, v in doc.items() if k != "revision"} == {
            k: v for k, v in from_eventlog.items() if k != "revision"}
    doc = from_eventlog
    assert (doc["job_id"], doc["job_id_f58"], doc["uid"]) == ("263721058304", "ƒ7vo8MjM", 8556)
    assert (doc["result"], doc["exit_code"], doc["nodelist"]) == ("completed", 0, ["catalyst160"])


def test_flux_rfc20_example_gpus() -> None:
    from pipeline.parsers.flux import build_eventlog_record

    eventlog = vector("flux", "eventlog-v1_dump-0.46.0.jsonl").read_bytes()
    record = build_eventlog_record(eventlog, None,
                                   vector("flux", "R_rfc20-example1.json").read_bytes(),
                                   263721058304)
    doc = one(parse_record("flux-eventlog", record, cluster="vec"))
    assert (doc["nnodes"], doc["ncores"], doc["ngpus"]) == (4, 192, 32)
    assert doc["nodelist"] == ["node186", "node187", "node188", "node189"]
    assert doc["gpu_bucket"] == "17 - 32" and doc["size_bucket"] == "129 - 256"


def _slurm_vector_events() -> dict[str, list[JobEvent]]:
    jobcomp = _events("slurm-jobcomp", vector("slurm", "jobcomp_22.05_sample.jsonl"))
    squeue = _events("slurm-squeue", vector("slurm", "squeue_running_22.05.json"))
    hooks = _events("slurm-hook", *sorted(vector("slurm", "hooks").glob("*.env")),
                    received_at=T0)
    return {"jobcomp": jobcomp, "squeue": squeue, "hooks": hooks,
            "all": jobcomp + squeue + hooks}


@pytest.fixture(scope="module")
def slurm_docs() -> dict[str, dict[str, dict[str, Any]]]:
    return {name: {d["job_id"]: d for d in fold(evs)}
            for name, evs in _slurm_vector_events().items()}


def test_slurm_jobcomp_vector(slurm_docs: dict[str, Any]) -> None:
    docs = slurm_docs["jobcomp"]
    fail = docs["2"]
    assert (fail["job_name"], fail["user"], fail["uid"], fail["bank"], fail["queue"],
            fail["qos"]) == ("fail-job", "alice", 1001, "physics", "short", "high")
    assert (fail["state"], fail["result"], fail["exit_code"]) == ("done", "failed", 3)
    assert fail["timelimit_s"] == 600 and fail["run_s"] == 2.0
    assert fail["nodelist"] == ["vm"] and (fail["nnodes"], fail["ncores"]) == (1, 1)
    task = docs["10"]
    assert (task["array_id"], task["array_task"], task["result"]) == ("3", 1, "completed")
    assert task["wait_s"] == 8.0 and task["timelimit_s"] is None
    ok = docs["1"]
    assert (ok["user"], ok["bank"], ok["result"], ok["run_s"]) == ("root", "root",
                                                                   "completed", 20.0)


def test_slurm_squeue_vector(slurm_docs: dict[str, Any]) -> None:
    docs = slurm_docs["squeue"]
    assert docs["1"]["state"] == "running" and docs["1"]["result"] is None
    assert (docs["2"]["state"], docs["2"]["result"], docs["2"]["exit_code"]) == (
        "done", "failed", 3)
    pending = docs["3"]
    assert (pending["state"], pending["array_id"], pending["t_start"]) == ("pending", "3",
                                                                           None)


def test_slurm_hooks_alone_do_not_guess_a_result(slurm_docs: dict[str, Any]) -> None:
    for doc in slurm_docs["hooks"].values():
        assert doc["state"] == "completing" and doc["result"] is None
    assert slurm_docs["hooks"]["2"]["exit_code"] == 3


def test_slurm_sources_together(slurm_docs: dict[str, Any]) -> None:
    docs = slurm_docs["all"]
    assert set(docs) == {"1", "2", "3", "10"}
    job1 = docs["1"]
    assert (job1["state"], job1["result"], job1["exit_code"]) == ("done", "completed", 0)
    assert job1["run_s"] == 20.0 and job1["nodelist"] == ["vm"]
    all_events = _slurm_vector_events()["all"]
    assert job1["revision"] == len({e.event_id for e in all_events if e.job_id == "1"})
    job2 = docs["2"]
    assert (job2["result"], job2["exit_code"], job2["qos"]) == ("failed", 3, "high")
    assert job2["requeue_count"] == 0


def test_slurm_job_seen_only_by_its_prolog_hook_has_started() -> None:
    """PrologSlurmctld runs at the allocation, which is Slurm's start: a running job known
    only from the hook must show a start time and its allocated cores."""
    path = vector("slurm", "hooks", "prolog_ctld_1.env")
    events = parse_record("slurm-hook", path.read_bytes(), cluster="c", received_at=1000.0)
    doc = one(events)
    assert doc["state"] == "running"
    assert doc["t_start"] == doc["t_alloc"] == 1_000_000
    assert doc["ncores"] == 1


def test_a_folds_kept_json_costs_about_its_length() -> None:
    """The entries ``to_json`` keeps are texts of their own size, not encoder buffers
    (orjson's bytes keep 4 KiB each, whatever their length)."""
    import tracemalloc

    jf = JobFold()
    for e in flux_life():
        jf.add(e)
    tracemalloc.start()
    try:
        jf._json.clear()  # noqa: SLF001 -- encoded again below, traced
        before = tracemalloc.get_traced_memory()[0]
        text = jf.to_json()
        kept = tracemalloc.get_traced_memory()[0] - before - len(text)
    finally:
        tracemalloc.stop()
    assert kept < 3 * len(text)
