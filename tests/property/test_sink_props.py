"""Properties of the sink's pure parts: coalescing and offset tracking."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from pipeline.sink.converter import Converter, coalesce
from pipeline.sink.offsets import OffsetTracker

conv = Converter()

#: (job number, revision) pairs: duplicates and any order
updates = st.lists(st.tuples(st.integers(0, 5), st.integers(0, 20)), max_size=60)


def state(job: int, revision: int) -> dict[str, object]:
    return {"cluster": "c", "scheduler": "flux", "job_id": str(job), "revision": revision,
            "t_submit": 1_794_000_000_000, "updated_at": 1}


@given(updates)
def test_coalesce_keeps_each_jobs_highest_revision(pairs: list[tuple[int, int]]) -> None:
    actions = [conv.job(state(j, r), origin=i) for i, (j, r) in enumerate(pairs)]
    kept, superseded = coalesce(actions)
    assert {a.doc_id: a.version for a in kept} == {
        f"c:{j}": max(r for jj, r in pairs if jj == j) for j, _ in pairs}
    # nothing lost, nothing invented: every input is kept or superseded, once
    assert sorted(a.origin for a in kept + superseded) == list(range(len(pairs)))


@given(updates, st.randoms(use_true_random=False))
def test_coalescing_any_permutation_gives_the_same_writes(pairs: list[tuple[int, int]],
                                                          rnd: object) -> None:
    shuffled = list(pairs)
    rnd.shuffle(shuffled)  # type: ignore[attr-defined]
    a = {x.doc_id: x.version for x in coalesce([conv.job(state(*p)) for p in pairs])[0]}
    b = {x.doc_id: x.version for x in coalesce([conv.job(state(*p)) for p in shuffled])[0]}
    assert a == b


@given(st.lists(st.integers(1, 5), min_size=1, max_size=40), st.data())
def test_commit_is_the_acknowledged_prefix(gaps: list[int], data: st.DataObject) -> None:
    offsets = []
    o = -1
    for g in gaps:
        o += g
        offsets.append(o)
    tr = OffsetTracker()
    for off in offsets:
        tr.track("t", 0, off)
    acked = data.draw(st.permutations(offsets).flatmap(
        lambda p: st.integers(0, len(p)).map(lambda n: p[:n])))
    for off in acked:
        tr.ack("t", 0, off)
    done = set(acked)
    prefix = 0
    while prefix < len(offsets) and offsets[prefix] in done:
        prefix += 1
    expected = {("t", 0): offsets[prefix - 1] + 1} if prefix else {}
    assert tr.committable() == expected


@given(st.integers(0, 253_402_300_799_999))
def test_month_of_agrees_with_datetime(epoch_ms: int) -> None:
    from datetime import UTC, datetime

    from pipeline.sink.names import month_of

    assert month_of(epoch_ms) == datetime.fromtimestamp(epoch_ms / 1000, tz=UTC).strftime("%Y.%m")


@given(st.one_of(st.integers(max_value=-1), st.integers(min_value=253_402_300_800_000),
                 st.floats().filter(lambda x: not 0 <= x <= 253_402_300_799_999)))
def test_month_of_refuses_every_time_outside_1970_to_9999(epoch_ms: float) -> None:
    import pytest

    from pipeline.sink.names import TimeRangeError, month_of

    with pytest.raises(TimeRangeError):
        month_of(epoch_ms)


@given(st.floats(allow_nan=True, allow_infinity=True) | st.integers())
def test_an_events_time_gives_a_valid_index_or_bad_time(ts: float) -> None:
    import re

    from pipeline.sink.converter import DocumentError

    ev = {"cluster": "c", "job_id": "1", "event_id": "e", "timestamp": ts}
    try:
        action = conv.event(ev)
    except DocumentError as exc:
        assert exc.reason == "bad_time"
        return
    assert re.fullmatch(r"hpc-job-events-v1-[0-9]{4}\.(0[1-9]|1[0-2])", action.index)
    assert 0 <= action.source["@timestamp"] <= 253_402_300_799_999  # type: ignore[index]


# -- ids within Elasticsearch's 512-byte limit ------------------------------------------

#: any text, long names and characters of every UTF-8 width (no lone surrogates: no
#: request body can hold one)
names = st.text(st.characters(exclude_categories=("Cs",)), max_size=700)


def _nbytes(text: str) -> int:
    return len(text.encode("utf-8"))


@given(names, names, st.booleans())
def test_job_ids_fit_and_stay_as_before_when_they_did(cluster: str, job_id: str,
                                                      later: bool) -> None:
    from pipeline.fold import doc_id
    from pipeline.sink.converter import MAX_ID_BYTES, job_doc_id

    doc = {"cluster": cluster, "job_id": job_id, "incarnation": 1 if later else None,
           "t_submit": 1_794_000_000_000}
    before = doc_id(doc)
    got = job_doc_id(doc)
    assert _nbytes(got) <= MAX_ID_BYTES
    if _nbytes(before) <= MAX_ID_BYTES:
        assert got == before


@given(names, names, names, st.one_of(st.none(), names))
def test_snapshot_ids_fit_and_stay_as_before_when_they_did(cluster: str, queue: str,
                                                           worker: str,
                                                           reason: str | None) -> None:
    from pipeline.sink.converter import MAX_ID_BYTES

    snap = {"cluster": cluster or "c", "queue": queue, "worker": worker or "w",
            "timestamp": 1_794_000_000_000, "reason": reason}
    before = f"{snap['cluster']}:{queue}:{snap['worker']}:1794000000000"
    if reason is not None:
        before += f":{reason}"
    got = conv.snapshot(snap).doc_id
    assert _nbytes(got) <= MAX_ID_BYTES
    if _nbytes(before) <= MAX_ID_BYTES:
        assert got == before


@given(st.lists(names, min_size=2, max_size=30, unique=True))
def test_bounded_ids_of_distinct_texts_are_distinct(texts: list[str]) -> None:
    from pipeline.sink.converter import bounded_id

    # the same long prefix for all: only the hash tells them apart
    long = ["p" * 600 + t for t in texts]
    assert len({bounded_id(t) for t in texts + long}) == 2 * len(texts)
