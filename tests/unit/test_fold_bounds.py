"""A job's state is bounded whatever its owner posts: windows of kept events, the dropped
ones counted, a byte budget (pipeline.fold, "Bounds")."""

from __future__ import annotations

import json
import random
import time
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_fold import T0, ev, exc, flux_life, one

from pipeline.core.model import JobEvent
from pipeline.fold import (
    FOLD_CONTEXT,
    KEEP_PER_WINDOW,
    STATE_FACT_CHARS,
    STATE_TEXT_CHARS,
    USER_ANNOTATION_BYTES,
    USER_ANNOTATION_KEY_BYTES,
    USER_ANNOTATION_KEYS,
    USER_ANNOTATION_VALUE_BYTES,
    JobFold,
    StateTooLarge,
    fold,
)

#: a job state's budget in the worker (worker.max_state_bytes' default)
BUDGET = 512 * 1024
#: fields that count events, which the bounds make order-dependent (module docstring)
COUNTS = ("revision", "events_dropped", "exceptions_dropped", "user_annotations_dropped")


def urgency(i: int, *, base: float = T0 + 3) -> JobEvent:
    return ev("urgency", base + i * 1e-3, ctx={"userid": 1000, "urgency": i % 31 + 1})


def raise_(i: int, severity: int = 1) -> JobEvent:
    return exc(T0 + 3 + i * 1e-3, f"user{i % 7}", severity=severity, note=f"raise {i}")


def folded(events: list[JobEvent]) -> JobFold:
    jf = JobFold()
    for e in events:
        jf.add(e)
    return jf


def without_counts(doc: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in doc.items() if k not in COUNTS}


def test_a_job_given_urgencies_and_exceptions_without_end_stays_one_bounded_record() -> None:
    """100,000 urgency changes and 50,000 exceptions on one's own pending job: the state
    stays well under a Kafka record, the document counts what it dropped, the fold's
    time per event stays flat."""
    life = flux_life()
    extra = [urgency(i) for i in range(100_000)] + [raise_(i) for i in range(50_000)]
    events = sorted(life + extra, key=lambda e: e.timestamp)
    started = time.process_time()
    jf = folded(events[:15_000])
    jf.documents()
    first = time.process_time() - started
    for e in events[15_000:]:
        jf.add(e)
    doc = jf.documents()[0]
    total = time.process_time() - started
    state = jf.to_json()
    assert len(state) < BUDGET / 4
    assert len(jf) <= len(life) + 2 * KEEP_PER_WINDOW
    assert doc["exceptions_dropped"] == 50_000 - KEEP_PER_WINDOW
    assert doc["events_dropped"] == 150_000 - 2 * KEEP_PER_WINDOW
    assert len(doc["exceptions"]) == KEEP_PER_WINDOW
    # the first of the window and the latest are kept
    notes = [e["note"] for e in doc["exceptions"]]
    assert notes[0] == "raise 0" and notes[-1] == "raise 49999"
    assert doc["state"] == "done" and doc["result"] == "completed"
    assert doc["revision"] == len(life) + 150_000
    # linear: ten times the events cost at most ~10x (generous for a shared machine)
    assert total < max(first, 0.05) * (len(events) / 15_000) * 3
    # and the state reads back to the same documents
    assert JobFold.from_dict(json.loads(state)).documents() == [doc]


def test_below_the_bounds_nothing_changes() -> None:
    extra = [urgency(i) for i in range(KEEP_PER_WINDOW)] + [
        raise_(i) for i in range(KEEP_PER_WINDOW)]
    doc = one(flux_life(extra=extra))
    assert doc["events_dropped"] is None and doc["exceptions_dropped"] is None
    assert len(doc["exceptions"]) == KEEP_PER_WINDOW
    assert doc["revision"] == len(flux_life()) + 2 * KEEP_PER_WINDOW


def test_the_first_fatal_exception_decides_the_result_whatever_follows() -> None:
    """A job cancelled, then flooded with fatal exceptions of another type: the tracked
    exception is the first of the most severe, which the window keeps."""
    extra = [exc(T0 + 20, "cancel", severity=0)] + [
        exc(T0 + 21 + i * 1e-3, "flood", severity=0) for i in range(3 * KEEP_PER_WINDOW)]
    doc = one(flux_life(finish=None, extra=extra))
    assert doc["result"] == "cancelled" and doc["t_end"] == round((T0 + 20) * 1000)
    assert doc["exceptions_dropped"] == 2 * KEEP_PER_WINDOW + 1


def test_the_latest_urgency_decides_a_pending_job_s_reason() -> None:
    life = [e for e in flux_life(finish=None) if e.event in ("submit", "validate", "depend",
                                                              "priority")]
    held = [urgency(i) for i in range(5 * KEEP_PER_WINDOW)] + [
        ev("urgency", T0 + 100, ctx={"urgency": 0})]
    assert one(life + held)["pending_reason"] == "held"
    unheld = held + [ev("urgency", T0 + 101, ctx={"urgency": 16})]
    assert one(life + unheld)["pending_reason"] == "priority"


@settings(max_examples=30, deadline=None)
@given(st.randoms(use_true_random=False), st.integers(KEEP_PER_WINDOW + 1, 3 * KEEP_PER_WINDOW),
       st.integers(0, 50))
def test_beyond_the_bounds_any_order_and_copies_keep_the_same_events(
        rnd: random.Random, n: int, copies: int) -> None:
    """The kept events, and so every field but the counts, are the same for any order and
    any duplication; in fold order the counts are exact."""
    events = flux_life(extra=[urgency(i) for i in range(n)] + [raise_(i) for i in range(n)])
    in_order = folded(events)
    shuffled = events + [rnd.choice(events) for _ in range(copies)]
    rnd.shuffle(shuffled)
    other = folded(shuffled)
    assert {e.event_id for e in other.events()} == {e.event_id for e in in_order.events()}
    assert [without_counts(d) for d in other.documents()] == [
        without_counts(d) for d in in_order.documents()]
    doc = in_order.documents()[0]
    assert doc["events_dropped"] == 2 * (n - KEEP_PER_WINDOW)
    assert doc["revision"] == len(events)
    assert other.documents()[0]["revision"] <= doc["revision"]


def test_revision_grows_with_every_event_that_enters_a_full_window() -> None:
    jf = folded(flux_life(extra=[urgency(i) for i in range(KEEP_PER_WINDOW)]))
    revisions = [jf.documents()[0]["revision"]]
    for i in range(KEEP_PER_WINDOW, KEEP_PER_WINDOW + 20):
        assert jf.add(urgency(i))
        revisions.append(jf.documents()[0]["revision"])
    assert revisions == sorted(set(revisions))
    # an event older than the window's latest (a copy of a dropped one, or a late one)
    assert not jf.add(urgency(5)) and jf.documents()[0]["revision"] == revisions[-1]


def test_the_state_keeps_only_the_context_the_fold_reads_and_bounded_text() -> None:
    huge = "x" * (40 * 1024)
    jf = folded(flux_life(extra=[
        exc(T0 + 20, huge, severity=0, note=huge),
        ev("dependency-add", T0 + 0.5, ctx={"description": huge + "a", "blob": huge}),
        ev("dependency-add", T0 + 0.6, ctx={"description": huge + "b"}),
        ev("dependency-remove", T0 + 0.7, ctx={"description": huge + "a"}),
    ]))
    state = json.loads(jf.to_json())
    for entry in state["events"]:
        assert set(entry["context"]) <= FOLD_CONTEXT
        for value in entry["context"].values():
            assert not isinstance(value, str) or len(value) <= STATE_TEXT_CHARS + 40
    assert len(jf.to_json()) < 16 * 1024
    doc = jf.documents()[0]
    assert doc["exceptions"][0]["type"] == huge[:STATE_TEXT_CHARS]
    # two long descriptions stay two: one added and not removed still holds the job
    pending = folded([e for e in flux_life(finish=None, extra=[
        ev("dependency-add", T0 + 0.5, ctx={"description": huge + "a"}),
        ev("dependency-add", T0 + 0.6, ctx={"description": huge + "b"}),
        ev("dependency-remove", T0 + 0.7, ctx={"description": huge + "a"}),
    ]) if e.event in ("submit", "validate", "dependency-add", "dependency-remove")])
    assert pending.documents()[0]["pending_reason"] == "dependency"


def test_fit_shrinks_the_windows_of_a_state_over_its_budget_then_refuses() -> None:
    fat = {"job_name": "j" * 2000}
    jf = folded(flux_life(extra=[
        ev("urgency", T0 + 3 + i * 1e-3, ctx={"urgency": 1}, facts=fat) for i in range(90)]))
    before = jf.documents()[0]
    assert len(jf.to_json()) > 64 * 1024
    data = jf.fit(64 * 1024)
    assert len(data) <= 64 * 1024 and jf.keep < KEEP_PER_WINDOW
    after = jf.documents()[0]
    assert after["events_dropped"] == 90 - jf.keep
    assert after["revision"] == before["revision"]
    assert JobFold.from_dict(json.loads(data)).documents() == [after]
    huge = folded([ev("submit", T0, facts={"job_name": "j" * 100_000})])
    assert huge.documents()[0]["job_name"] == "j" * STATE_FACT_CHARS
    with pytest.raises(StateTooLarge):
        huge.fit(STATE_FACT_CHARS)


def test_a_state_written_before_the_bounds_reads_bounded() -> None:
    events = flux_life(extra=[urgency(i) for i in range(3 * KEEP_PER_WINDOW)])
    unbounded = {"cluster": "c", "scheduler": "flux", "job_id": "100", "job_id_f58": "ƒ2L7qeDM",
                 "events": [{"event_id": e.event_id, "event": e.event,
                             "timestamp": e.timestamp, "source": e.source, "seq": e.seq,
                             "context": dict(e.context), "facts": dict(e.facts)}
                            for e in events]}
    jf = JobFold.from_dict(unbounded)
    assert len(jf) == len(flux_life()) + KEEP_PER_WINDOW
    assert jf.documents()[0]["events_dropped"] == 2 * KEEP_PER_WINDOW
    assert without_counts(jf.documents()[0]) == without_counts(fold(events)[0])


def test_a_big_node_list_is_kept_as_runs_and_reads_back_exactly() -> None:
    names = ([f"frontier{i:05d}" for i in range(1, 9409)] + ["login1", "n[x]", "a099", "a100",
             "gpu-7-b", "gpu-8-b", "x" + "9" * 30, "node0", "node00"])
    life = flux_life()
    alloc = next(e for e in life if e.event == "alloc")
    big = [e if e is not alloc else ev("alloc", alloc.timestamp, seq=alloc.seq,
                                       facts={**alloc.facts, "nodelist": names}) for e in life]
    jf = folded(big)
    data = jf.to_json()
    assert len(data) < 8 * 1024
    again = JobFold.from_dict(json.loads(data))
    assert again.documents() == jf.documents()
    assert again.documents()[0]["nodelist"] == names


def memo(i: int, **values: Any) -> JobEvent:
    return ev("memo", T0 + 12 + i * 1e-3, ctx=values)


def running_life() -> list[JobEvent]:
    return [e for e in flux_life() if e.timestamp <= T0 + 11]


def test_ten_thousand_memos_of_one_job_keep_its_state_one_bounded_record() -> None:
    """A workflow tool posting 10,000 memos, each with a key of its own and a long value:
    the state keeps a window of memos and the annotations' bounds, whatever the count,
    and the document counts what it did not keep."""
    life = running_life()
    memos = [memo(i, progress=i, **{f"step{i:05d}": "x" * 600}) for i in range(10_000)]
    jf = folded(life + memos)
    doc = jf.documents()[0]
    state = jf.to_json()
    # a kept memo is ~170 bytes of state, an annotation its path, value and ~80 of position
    bound = (len(folded(life).to_json()) + KEEP_PER_WINDOW * 256
             + USER_ANNOTATION_KEYS * (USER_ANNOTATION_KEY_BYTES + USER_ANNOTATION_VALUE_BYTES
                                       + 128))
    assert len(state) < bound < BUDGET / 4
    assert len(jf) == len(life) + KEEP_PER_WINDOW
    notes = doc["user_annotations"]
    # the smallest paths: progress, then the first steps, each cut to the value's bytes
    assert list(notes) == ["progress", *(f"step{i:05d}" for i in range(USER_ANNOTATION_KEYS - 1))]
    assert notes["progress"] == "9999" and notes["step00000"] == "x" * USER_ANNOTATION_VALUE_BYTES
    assert sum(len(k) + len(v.encode()) for k, v in notes.items()) <= USER_ANNOTATION_BYTES
    # every step value is not kept whole: cut (the kept ones) or without room (the rest)
    assert doc["user_annotations_dropped"] == 10_000
    assert doc["events_dropped"] == 10_000 - KEEP_PER_WINDOW
    assert doc["revision"] == len(life) + 10_000
    assert JobFold.from_dict(json.loads(state)).documents() == [doc]
    # the same memo again, posted a thousand times: one key, the state no larger
    same = folded(life + [memo(i, progress=i) for i in range(10_000)])
    assert same.documents()[0]["user_annotations"] == {"progress": "9999"}
    assert len(same.to_json()) < len(folded(life).to_json()) + KEEP_PER_WINDOW * 256 + 256


def test_a_late_memo_its_full_window_does_not_keep_still_sets_its_annotation() -> None:
    """The memo window keeps the first and the latest memos; one arriving late, between
    them, is folded into the annotations all the same, and counted (revision, dropped):
    the document changed, so its revision must grow. A copy of it changes nothing."""
    jf = folded(running_life() + [memo(i, progress=i) for i in range(2 * KEEP_PER_WINDOW)])
    before = jf.documents()[0]
    late = memo(KEEP_PER_WINDOW // 2, late="yes")
    assert jf.add(late)
    doc = jf.documents()[0]
    assert doc["user_annotations"] == {"late": "yes", "progress": str(2 * KEEP_PER_WINDOW - 1)}
    assert doc["revision"] == before["revision"] + 1
    assert doc["events_dropped"] == before["events_dropped"] + 1
    assert not jf.add(late) and jf.documents() == [doc]
    assert JobFold.from_dict(json.loads(jf.to_json())).documents() == [doc]


def test_annotation_keys_no_index_can_hold_are_dropped_and_counted() -> None:
    long_key = "k" * (USER_ANNOTATION_KEY_BYTES + 1)
    doc = one(running_life() + [memo(0, ok=1, **{long_key: 1, "a\x00b": 2}),
                                memo(1, deep={"k" * (USER_ANNOTATION_KEY_BYTES - 4): 3})])
    assert doc["user_annotations"] == {"ok": "1"}
    assert doc["user_annotations_dropped"] == 3


path_keys = st.sampled_from([f"k{i}" for i in range(12)] + [
    "k\x00", "k" * (USER_ANNOTATION_KEY_BYTES - 2), "é" * (USER_ANNOTATION_KEY_BYTES // 2)])
memo_values = st.none() | st.integers(-2, 2) | st.text(max_size=4) | st.sampled_from(
    ["v" * (USER_ANNOTATION_VALUE_BYTES + 1), "é" * USER_ANNOTATION_VALUE_BYTES])
memo_contexts = st.dictionaries(path_keys, memo_values | st.dictionaries(
    path_keys, memo_values, max_size=4), max_size=6) | st.dictionaries(  # wide: past the bound
    path_keys, st.dictionaries(path_keys, memo_values, min_size=8), min_size=6)


def _writes(contexts: list[dict[str, Any]]) -> list[tuple[tuple[str, ...], Any]]:
    """Every (path, value) the memos write, objects included."""
    out: list[tuple[tuple[str, ...], Any]] = []
    todo = [((), ctx) for ctx in contexts]
    while todo:
        above, obj = todo.pop()
        for key, value in obj.items():
            out.append(((*above, key), value))
            if isinstance(value, dict):
                todo.append(((*above, key), value))
    return out


def _not_kept_whole(contexts: list[dict[str, Any]]) -> int:
    """The writes a fold in order drops: at a path outside the smallest keyable ones, or
    of a value longer than its bytes (pipeline.fold.annotations, "Bounds")."""
    writes = _writes(contexts)

    def keyable(path: tuple[str, ...]) -> bool:
        return (all("\x00" not in k for k in path)
                and len(".".join(path).encode()) <= USER_ANNOTATION_KEY_BYTES)

    kept = sorted({path for path, _ in writes if keyable(path)})[:USER_ANNOTATION_KEYS]
    return sum(1 for path, value in writes if path not in kept or (
        isinstance(value, str) and len(value.encode()) > USER_ANNOTATION_VALUE_BYTES))


@settings(max_examples=100, deadline=None)
@given(st.lists(memo_contexts, min_size=1, max_size=40), st.randoms(use_true_random=False),
       st.integers(0, 20))
def test_beyond_the_bounds_the_annotations_are_the_same_in_any_order_and_counted(
        contexts: list[dict[str, Any]], rnd: random.Random, copies: int) -> None:
    """Many keys, long keys and values: at most USER_ANNOTATION_KEYS paths kept, each
    within its bytes; the same annotations for any order and copies of the memos; what
    was not kept counted, exactly in fold order, at most that otherwise."""
    life = running_life()
    memos = [memo(i, **ctx) for i, ctx in enumerate(contexts)]
    in_order = folded(life + memos)
    doc = in_order.documents()[0]
    shuffled = life + memos + [rnd.choice(memos) for _ in range(copies)]
    rnd.shuffle(shuffled)
    other = folded(shuffled)
    assert without_counts(other.documents()[0]) == without_counts(doc)
    notes = doc["user_annotations"] or {}
    assert len(in_order.annotations) <= USER_ANNOTATION_KEYS
    assert len(other.annotations) <= USER_ANNOTATION_KEYS
    for key, value in notes.items():
        assert len(key.encode()) <= USER_ANNOTATION_KEY_BYTES
        assert len(value.encode()) <= USER_ANNOTATION_VALUE_BYTES
    assert sum(len(k.encode()) + len(v.encode()) for k, v in notes.items()) <= (
        USER_ANNOTATION_BYTES)
    dropped = _not_kept_whole(contexts)
    assert (doc["user_annotations_dropped"] or 0) == dropped
    assert (other.documents()[0]["user_annotations_dropped"] or 0) <= dropped
