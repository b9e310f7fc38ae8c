"""``pending_reason``: why a job waits (issue 13), from Flux RFC 21 events and Slurm's
``state_reason``; kept after a run that ended without starting, None once a run started."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from datafiles import vector

from pipeline.core.model import JobEvent, make_event_id
from pipeline.fold import fold
from pipeline.parsers import parse_record, split_records
from pipeline.parsers.slurm_json import parse_squeue

T0 = 1_795_000_000.0


def ev(name: str, t: float, ctx: dict[str, Any] | None = None, *, seq: int | None = None,
       sched: str = "flux", source: str = "flux-journal",
       facts: dict[str, Any] | None = None) -> JobEvent:
    return JobEvent(cluster="c", scheduler=sched, job_id="1", event=name,  # type: ignore[arg-type]
                    timestamp=t, source=source,
                    event_id=make_event_id("c", sched, "1", name, t, source, json.dumps(ctx)),
                    seq=seq, context=ctx or {}, facts=facts or {})


def reason(events: list[JobEvent]) -> str | None:
    (doc,) = fold(events)
    return doc["pending_reason"]


def flux(*names: str | tuple[str, dict[str, Any]], urgency: int = 16) -> list[JobEvent]:
    """A Flux job submitted at T0 with ``urgency``, then ``names`` one a second, in order."""
    events = [ev("submit", T0, {"urgency": urgency, "userid": 1}, seq=0)]
    for i, item in enumerate(names, 1):
        name, ctx = item if isinstance(item, tuple) else (item, None)
        events.append(ev(name, T0 + i, ctx, seq=i))
    return events


# --------------------------------------------------------------------------- Flux


@pytest.mark.parametrize(("events", "expected"), [
    (flux(), None),  # NEW: not validated yet, no reason
    (flux("validate"), "dependency"),  # DEPEND
    (flux("validate", "depend"), "priority"),  # PRIORITY: not prioritized yet
    (flux("validate", "depend", ("priority", {"priority": 16})), "resources"),
    (flux("validate", "depend", ("priority", {"priority": 0})), "priority"),
    (flux("validate", "depend", ("priority", {"priority": 0}), urgency=0), "held"),
    (flux("validate", urgency=0), "held"),  # held wins over everything
    (flux(("dependency-add", {"description": "after:7"}), "validate"), "dependency"),
    # urgency raised: back to PRIORITY until the next priority event
    (flux("validate", "depend", ("priority", {"priority": 0}),
          ("urgency", {"urgency": 16, "userid": 1}), urgency=0), "priority"),
    (flux("validate", "depend", ("priority", {"priority": 0}),
          ("urgency", {"urgency": 16, "userid": 1}), ("priority", {"priority": 16}),
          urgency=0), "resources"),
    # a hold after the job was schedulable
    (flux("validate", "depend", ("priority", {"priority": 16}),
          ("urgency", {"urgency": 0, "userid": 1}), ("priority", {"priority": 0})), "held"),
    (flux("validate", "depend", ("priority", {"priority": 16}), "jobspec-update"), "priority"),
    (flux("validate", "depend", ("priority", {"priority": 16}), "flux-restart"), "priority"),
])
def test_flux_reason_follows_rfc21_pending_states(events: list[JobEvent],
                                                  expected: str | None) -> None:
    assert reason(events) == expected


def test_flux_dependency_until_every_added_one_is_removed() -> None:
    add = [("dependency-add", {"description": "after:7"}),
           ("dependency-add", {"description": "begin-time=5"})]
    assert reason(flux(*add, "validate")) == "dependency"
    one_left = flux(*add, ("dependency-remove", {"description": "after:7"}), "validate")
    assert reason(one_left) == "dependency"
    none_left = flux(*add, ("dependency-remove", {"description": "after:7"}),
                     ("dependency-remove", {"description": "begin-time=5"}), "validate",
                     "depend")
    assert reason(none_left) == "priority"


def test_flux_reason_is_none_once_running_and_after_a_run() -> None:
    life = ["validate", "depend", ("priority", {"priority": 16}), "alloc"]
    assert reason(flux(*life)) is None
    (doc,) = fold(flux(*life, "start", ("finish", {"status": 0}), "free", "clean"))
    assert doc["state"] == "done" and doc["pending_reason"] is None


def test_flux_job_cancelled_while_pending_keeps_its_reason() -> None:
    cancel = ("exception", {"type": "cancel", "severity": 0, "note": "", "userid": 1})
    (doc,) = fold(flux("validate", "depend", ("priority", {"priority": 0}), cancel, "clean",
                       urgency=0))
    assert (doc["state"], doc["result"], doc["pending_reason"]) == ("done", "cancelled", "held")
    (doc,) = fold(flux("validate", "depend", ("priority", {"priority": 9}), cancel))
    assert (doc["state"], doc["pending_reason"]) == ("completing", "resources")


def _flux_journal_docs() -> dict[str, dict[str, Any]]:
    path = vector("flux", "real-0.88-journal-live.jsonl")
    events = [e for _, payload in split_records("flux-journal", path.read_bytes())
              for e in parse_record("flux-journal", payload, cluster="fluxtest")]
    return {d["job_name"]: d for d in fold(events)}


def test_flux_real_journal_held_urgent_and_dependency_jobs() -> None:
    docs = _flux_journal_docs()
    assert docs["held"]["result"] == "cancelled" and docs["held"]["pending_reason"] == "held"
    assert docs["dep-never"]["pending_reason"] == "dependency"  # exception while in DEPEND
    for name in ("urgent", "updated", "dep-parent", "ok"):  # held or not, they ran
        assert docs[name]["pending_reason"] is None, name


def test_flux_real_journal_prefix_shows_the_reason_while_pending() -> None:
    """The live journal cut before the held job's cancel: it waits, held; ``urgent`` waits
    held until its urgency is raised, then for resources until its alloc."""
    path = vector("flux", "real-0.88-journal-live.jsonl")
    events = [e for _, payload in split_records("flux-journal", path.read_bytes())
              for e in parse_record("flux-journal", payload, cluster="fluxtest")]
    names = {e.job_id: e.facts["job_name"] for e in events if e.facts.get("job_name")}
    urgent = [e for e in events if names.get(e.job_id) == "urgent"]
    raised = next(e.timestamp for e in urgent if e.event == "urgency")
    alloc = next(e.timestamp for e in urgent if e.event == "alloc")

    def at(t: float, job: str) -> str | None:
        (doc,) = [d for d in fold(e for e in events if e.timestamp < t)
                  if d["job_name"] == job]
        assert doc["state"] == "pending"
        return doc["pending_reason"]

    cancelled = next(e.timestamp for e in events
                     if names.get(e.job_id) == "held" and e.event == "exception")
    assert at(raised, "urgent") == "held"
    assert at(cancelled, "held") == "held"
    prioritized = next(e.timestamp for e in urgent
                       if e.event == "priority" and e.context.get("priority"))
    assert at(alloc, "urgent") == "resources" and prioritized < alloc


# --------------------------------------------------------------------------- Slurm


def _slurm(*files: tuple[str, str]) -> dict[str, dict[str, Any]]:
    events: list[JobEvent] = []
    for fmt, name in files:
        path: Path = vector("slurm", name)
        for _, payload in split_records(fmt, path.read_bytes()):
            events += parse_record(fmt, payload, cluster="kafkatest")
    return {d["job_id"]: d for d in fold(events)}


def test_slurm_real_squeue_pending_jobs_have_their_state_reason() -> None:
    docs = _slurm(("slurm-squeue", "squeue_25.11.json"))
    got = {j: (d["state"], d["pending_reason"]) for j, d in docs.items()}
    assert got == {
        "1": ("running", None),
        "3": ("pending", "Resources"), "5": ("pending", "Resources"),
        "6": ("pending", "Priority"), "7": ("pending", "Priority"),
        "8": ("pending", "Priority"),
        "4": ("pending", "JobHeldUser"),
    }


def test_slurm_reason_gone_once_run_kept_when_cancelled_while_held() -> None:
    docs = _slurm(("slurm-squeue", "squeue_25.11.json"),
                  ("slurm-squeue", "squeue_25.11_phase2.json"),
                  ("slurm-sacct", "sacct_25.11.json"),
                  ("slurm-jobcomp", "jobcomp_kafka_25.11.jsonl"))
    assert docs["4"]["state"] == "done" and docs["4"]["result"] == "cancelled"
    assert docs["4"]["pending_reason"] == "JobHeldUser"
    for job in ("3", "5", "6", "7", "8", "13"):  # seen pending, then they ran
        assert docs[job]["t_start"] is not None, job
        assert docs[job]["pending_reason"] is None, job


def _squeue_job(reason: str | None, state: str = "PENDING") -> dict[str, Any]:
    job: dict[str, Any] = {"job_id": 9, "job_state": [state], "partition": "debug",
                           "submit_time": int(T0), "user_name": "u", "account": "a"}
    if reason is not None:
        job["state_reason"] = reason
    return job


def _polls(*jobs: dict[str, Any]) -> list[JobEvent]:
    return [e for job in jobs for e in parse_squeue(json.dumps({"jobs": [job]}).encode(),
                                                    cluster="c")]


def test_slurm_reason_events_one_per_reason_never_none_never_when_not_pending() -> None:
    same = _polls(_squeue_job("Priority"), {**_squeue_job("Priority"),
                                             "last_sched_evaluation": int(T0) + 60})
    reasons = [e for e in same if e.event == "reason"]
    # polls of one reason give one event: a long wait does not grow the job's state
    assert len({(e.event_id, e.timestamp) for e in reasons}) == 1
    assert not [e for e in _polls(_squeue_job("None"), _squeue_job(None))
                if e.event == "reason"]
    running = {**_squeue_job("None", "RUNNING"), "start_time": int(T0) + 5, "nodes": "vm"}
    assert not [e for e in _polls(running) if e.event == "reason"]


@pytest.mark.parametrize(("seen", "expected"), [
    (["Priority", "Resources"], "Resources"),
    (["Dependency", "Priority"], "Priority"),
    (["JobHeldUser", "Priority"], "Priority"),
    (["JobHeldUser", "Dependency"], "Dependency"),
    (["Dependency", "QOSMaxJobsPerUserLimit"], "QOSMaxJobsPerUserLimit"),
    (["QOSMaxJobsPerUserLimit", "Priority"], "Priority"),
    (["JobArrayTaskLimit"], "JobArrayTaskLimit"),
])
def test_slurm_run_seen_with_several_reasons_shows_the_furthest_along(
        seen: list[str], expected: str) -> None:
    for order in (seen, seen[::-1]):
        events = _polls(*(_squeue_job(r) for r in order))
        assert reason(events) == expected


def test_slurm_requeued_job_waits_for_the_reason_of_its_new_run() -> None:
    first = _squeue_job("Resources")
    ran = {**_squeue_job("None", "RUNNING"), "start_time": int(T0) + 5, "nodes": "vm"}
    requeued = {**_squeue_job("Priority"), "submit_time": int(T0) + 100, "restart_cnt": 1}
    (doc,) = fold(_polls(first, ran, requeued))
    assert (doc["state"], doc["requeue_count"], doc["pending_reason"]) == (
        "pending", 1, "Priority")
