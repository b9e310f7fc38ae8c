"""The fold does not depend on the order or duplication of its events (docs/design.md, section 5).

Generated job event sets are deliberately messy: equal timestamps, events with and without
``seq``, several sources, copies of one ``event_id`` with different content, Slurm submit
times that split incarnations and runs, requeues, final and non-final ends, memos that set,
replace and remove user annotations.
"""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import pytest
from hypothesis import find, given, settings
from hypothesis import strategies as st

from pipeline.core.jsontext import canonical
from pipeline.core.model import RESULTS, JobEvent, make_event_id
from pipeline.fold import JobFold, doc_id, fold

T0 = 1_700_000_000.0
LATER = T0 + 10**6  # far enough for a reused Slurm job id

FACT_POOL: dict[str, list[Any]] = {
    "job_name": ["a", "b"], "user": ["u1", "u2"], "uid": [0, 1001], "queue": ["q1", "q2"],
    "bank": ["b1", "b2"], "timelimit_s": [60, 3600.0], "cores_req": [1, 8],
    "nnodes": [1, 2], "ncores": [1, 4], "ngpus": [0, 2], "nodelist": [["n1"], ["n1", "n2"]],
    "exit_code": [0, 1, 143], "signal": [9, 15], "result": sorted(RESULTS),
    "t_submit": [T0, T0 + 3, LATER], "t_eligible": [T0 + 1, T0 + 4],
    "t_start": [T0 + 2, T0 + 8, LATER + 2], "t_end": [T0 + 10, T0 + 12, LATER + 9],
    "restart_count": [0, 1, 2], "expiration": [T0 + 100],
    # usage, stated by final records of a run (sacct), by some copies of one id and not others
    "cpu_time_s": [0.5, 12.0], "cpu_eff_pct": [4.0, 99.5], "mem_max_mb": [2.5, 300.0],
    "mem_max_pct": [0.5, 75.0], "gpu_util_pct": [10.0, 90.0], "mem_alloc_mb": [400, 8000],
    "mem_req_mb": [400, 8000],
}
NAMES = {
    "flux": ["submit", "validate", "depend", "priority", "urgency", "jobspec-update", "alloc",
             "prolog-start", "prolog-finish", "start", "exception", "finish", "release",
             "epilog-start", "epilog-finish", "free", "clean", "memo", "invalidate",
             "dependency-add", "dependency-remove", "flux-restart"],
    "slurm": ["submit", "eligible", "alloc", "start", "end", "requeue", "preempt", "reason"],
}
SOURCES = {"flux": ["flux-journal", "flux-eventlog"],
           "slurm": ["slurm-jobcomp", "slurm-sacct", "slurm-squeue", "slurm-hook"]}


#: A memo's context: keys set, replaced, removed (null), objects merged into (flux job memo).
memo_keys = st.sampled_from(["a", "b", "c"])
memo_leaves = st.none() | st.integers(0, 3) | st.sampled_from(["x", "y"]) | st.just([1, None])
memo_contexts = st.dictionaries(memo_keys, st.recursive(
    memo_leaves, lambda inner: st.dictionaries(memo_keys, inner, max_size=3), max_leaves=6),
    max_size=3)


def _context(name: str) -> st.SearchStrategy[dict[str, Any]]:
    if name == "memo":
        return memo_contexts
    if name == "exception":
        return st.fixed_dictionaries({
            "type": st.sampled_from(["cancel", "timeout", "oom", "exec", "test"]),
            "severity": st.integers(0, 2), "note": st.sampled_from(["", "n"])})
    if name == "priority":
        return st.fixed_dictionaries({"priority": st.sampled_from([0, 16])})
    if name == "finish":
        return st.fixed_dictionaries({"status": st.sampled_from([0, 256, 9, 36608])})
    if name in ("submit", "urgency"):  # urgency 0 holds a Flux job (pending_reason)
        return st.fixed_dictionaries({"urgency": st.sampled_from([0, 16])})
    if name in ("dependency-add", "dependency-remove"):
        return st.fixed_dictionaries({"description": st.sampled_from(["after:1", "after:2"])})
    if name == "reason":
        return st.fixed_dictionaries({"state_reason": st.sampled_from(
            ["Priority", "Resources", "JobHeldUser", "Dependency", "QOSMaxJobsPerUserLimit"])})
    return st.just({})


facts_strategy = st.lists(st.sampled_from(sorted(FACT_POOL)), unique=True, max_size=5).flatmap(
    lambda keys: st.fixed_dictionaries({k: st.sampled_from(FACT_POOL[k]) for k in keys}))


@st.composite
def job_events(draw: st.DrawFn) -> list[JobEvent]:
    sched = draw(st.sampled_from(["flux", "slurm"]))
    jobs = draw(st.lists(st.sampled_from(["1", "2"]), min_size=1, max_size=2, unique=True))
    events = []
    for _ in range(draw(st.integers(1, 14))):
        job = draw(st.sampled_from(jobs))
        name = draw(st.sampled_from(NAMES[sched]))
        base = draw(st.sampled_from([T0, LATER])) if sched == "slurm" else T0
        t = base + draw(st.integers(0, 6)) / draw(st.sampled_from([1, 2]))
        source = draw(st.sampled_from(SOURCES[sched]))
        seq = draw(st.none() | st.integers(0, 5)) if sched == "flux" else None
        # a small pool of shared ids: copies of one event with different content
        eid = draw(st.sampled_from(["", "x0", "x1"]))
        events.append(JobEvent(
            cluster="c", scheduler=sched, job_id=job, event=name,  # type: ignore[arg-type]
            timestamp=t, source=source,
            event_id=eid or make_event_id("c", sched, job, name, t, source), seq=seq,
            context=draw(_context(name)), facts=draw(facts_strategy),
            job_id_f58=f"f{job}" if sched == "flux" else None,
            jobspec={"attributes": {}} if draw(st.booleans()) else None,
        ))
    return events


@st.composite
def tied_events(draw: st.DrawFn) -> list[JobEvent]:
    """Many sources stating conflicting facts about one job at a few instants: only the
    tie-breaks of the total order decide between them."""
    sched = draw(st.sampled_from(["flux", "slurm"]))
    events = []
    for _ in range(draw(st.integers(2, 8))):
        name = draw(st.sampled_from(["submit", "start", "end", "alloc"]))
        t = T0 + draw(st.integers(0, 1))
        source = draw(st.sampled_from(SOURCES[sched]))
        facts = draw(st.fixed_dictionaries({}, optional={
            "queue": st.sampled_from(["q1", "q2"]), "exit_code": st.sampled_from([0, 1]),
            "result": st.sampled_from(["completed", "failed"]),
            "t_submit": st.sampled_from([T0, T0 + 1])}))
        events.append(JobEvent(
            cluster="c", scheduler=sched, job_id="1", event=name,  # type: ignore[arg-type]
            timestamp=t, source=source, seq=None, facts=facts,
            event_id=make_event_id("c", sched, "1", name, t, source)))
    return events


any_events = st.one_of(job_events(), tied_events())


def _canon(docs: list[dict[str, Any]]) -> str:
    return json.dumps(docs, sort_keys=True)


@settings(max_examples=300, deadline=None)
@given(any_events, st.data())
def test_any_permutation_and_duplication_gives_the_same_documents(
        events: list[JobEvent], data: st.DataObject) -> None:
    expected = _canon(fold(events))
    shuffled = data.draw(st.permutations(events))
    extra = data.draw(st.lists(st.sampled_from(events), max_size=10))
    mixed = data.draw(st.permutations([*shuffled, *extra]))
    assert _canon(fold(mixed)) == expected


@settings(max_examples=300, deadline=None)
@given(any_events, st.data())
def test_incremental_fold_equals_fold_in_any_insertion_order(
        events: list[JobEvent], data: st.DataObject) -> None:
    order = data.draw(st.permutations(events + events[:2]))
    cut = data.draw(st.integers(0, len(order)))
    folds: dict[str, JobFold] = {}
    for i, ev in enumerate(order):
        if i == cut:  # a worker restart: the state goes through its table value
            folds = {k: JobFold.from_dict(json.loads(jf.to_json())) for k, jf in folds.items()}
        folds.setdefault(ev.key, JobFold()).add(ev)
        if data.draw(st.booleans()):  # a batch ends: the documents so far
            folds[ev.key].documents()
    incremental = sorted((d for jf in folds.values() for d in jf.documents()),
                         key=lambda d: (d["cluster"], d["job_id"], d["incarnation"]))
    expected = sorted(fold(events), key=lambda d: (d["cluster"], d["job_id"], d["incarnation"]))
    assert _canon(incremental) == _canon(expected)


@settings(max_examples=300, deadline=None)
@given(any_events, st.data())
def test_the_table_value_is_the_json_of_the_state_after_every_event(
        events: list[JobEvent], data: st.DataObject) -> None:
    """``to_json`` keeps each event's encoding until the event changes: a copy of an id
    with other content (merged), a duplicate, a state read back must all show."""
    variants = [replace(ev, facts={**ev.facts, "extra": i}, seq=i)
                for i, ev in enumerate(data.draw(st.lists(st.sampled_from(events), max_size=4)))]
    order = data.draw(st.permutations(events + events[:2] + variants))
    folds: dict[str, JobFold] = {}
    for ev in order:
        jf = folds.setdefault(ev.key, JobFold())
        jf.add(ev)
        value = jf.to_json()
        assert value == json.dumps(jf.to_dict(), separators=(",", ":"),
                                   ensure_ascii=False).encode()
        if data.draw(st.booleans()):  # read back from the table
            folds[ev.key] = JobFold.from_dict(json.loads(value))
            assert folds[ev.key].to_json() == value


@settings(max_examples=300, deadline=None)
@given(any_events, st.data())
def test_revision_never_decreases_as_events_arrive(events: list[JobEvent],
                                                   data: st.DataObject) -> None:
    order = data.draw(st.permutations(events + events[:3]))
    folds: dict[str, JobFold] = {}
    last: dict[str, int] = {}
    arrived: dict[str, list[JobEvent]] = {}
    for ev in order:
        jf = folds.setdefault(ev.key, JobFold())
        added = jf.add(ev)
        docs = jf.documents()
        # the documents kept up as events arrive equal a fold of all of them at once
        arrived.setdefault(ev.key, []).append(ev)
        assert _canon(sorted(docs, key=doc_id)) == _canon(fold(arrived[ev.key]))
        revisions = {d["revision"] for d in docs}
        assert revisions == ({jf.revision} if len(jf) else set())
        before = last.get(ev.key, 0)
        assert jf.revision > before if added else jf.revision == before
        last[ev.key] = jf.revision


def _flux_merge(user: dict[str, Any], memo: dict[str, Any]) -> None:
    """What flux-core does with a memo (job-list's memo_update): an object merged key by
    key into the object at its key (made one if it is not), any other value set; then
    nulls removed, and objects left empty."""
    for key, value in memo.items():
        if isinstance(value, dict):
            if not isinstance(user.get(key), dict):
                user[key] = {}
            _flux_merge(user[key], value)
        else:
            user[key] = value


def _clear_null(obj: dict[str, Any]) -> None:
    for key, value in list(obj.items()):
        if isinstance(value, dict):
            _clear_null(value)
        if value is None or value == {}:
            del obj[key]


def _shown(user: dict[str, Any], above: str = "") -> dict[str, str]:
    out: dict[str, str] = {}
    for key, value in user.items():
        name = f"{above}.{key}" if above else key
        if isinstance(value, dict):
            out.update(_shown(value, name))
        else:
            out[name] = value if isinstance(value, str) else canonical(value)
    return out


@st.composite
def memo_jobs(draw: st.DrawFn) -> list[JobEvent]:
    """A running Flux job and memos, some at one instant (one id: copies merged), with and
    without seq (a memo seen live and in a backlog)."""
    events = [JobEvent(cluster="c", scheduler="flux", job_id="1", event=name,
                       timestamp=T0 + i, source="flux-journal", seq=i, job_id_f58="f1",
                       event_id=make_event_id("c", "flux", "1", name, T0 + i, "flux-journal"),
                       context={"urgency": 16} if name == "submit" else {})
              for i, name in enumerate(["submit", "validate", "depend", "alloc", "start"])]
    for _ in range(draw(st.integers(1, 12))):
        t = T0 + 5 + draw(st.integers(0, 8)) / 4
        events.append(JobEvent(
            cluster="c", scheduler="flux", job_id="1", event="memo", timestamp=t,
            source=draw(st.sampled_from(SOURCES["flux"])), seq=draw(st.none() | st.integers(5, 9)),
            event_id=make_event_id("c", "flux", "1", "memo", t, "flux-journal"),
            context=draw(memo_contexts), job_id_f58="f1"))
    return events


@settings(max_examples=500, deadline=None)
@given(memo_jobs(), st.data())
def test_memos_in_any_order_and_copies_give_the_same_document(events: list[JobEvent],
                                                               data: st.DataObject) -> None:
    """A removal wins over an older value however they arrive; copies change nothing."""
    expected = _canon(fold(events))
    extra = data.draw(st.lists(st.sampled_from(events), max_size=10))
    mixed = data.draw(st.permutations([*events, *extra]))
    assert _canon(fold(mixed)) == expected


@settings(max_examples=500, deadline=None)
@given(memo_jobs())
def test_memos_set_the_annotations_flux_would_applying_them_in_fold_order(
        events: list[JobEvent]) -> None:
    memos = sorted((e for e in events if e.event == "memo"), key=lambda e: (
        e.timestamp, e.seq is None, e.seq or 0))
    if len({e.timestamp for e in memos}) < len(memos):
        # memos of one instant are copies of one event id to the fold, merged key by key
        memos = [e for e in memos if sum(o.timestamp == e.timestamp for o in memos) == 1]
        events = [e for e in events if e.event != "memo" or e in memos]
    user: dict[str, Any] = {}
    for e in memos:
        _flux_merge(user, json.loads(json.dumps(e.context)))
        _clear_null(user)
    [doc] = fold(events)
    assert doc["user_annotations"] == (_shown(user) or None)
    assert doc["user_annotations_dropped"] is None


@pytest.mark.parametrize("reason", ["held", "dependency", "priority", "resources", "Priority",
                                    "Resources", "JobHeldUser", "QOSMaxJobsPerUserLimit"])
def test_generated_events_reach_every_pending_reason(reason: str) -> None:
    """The invariance tests above see every pending reason rule at work, not only None."""
    find(job_events(), lambda evs: any(d["pending_reason"] == reason for d in fold(evs)),
         settings=settings(max_examples=5000, database=None))
