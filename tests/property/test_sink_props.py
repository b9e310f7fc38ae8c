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


@given(st.integers(-(10**12), 10**13))
def test_month_of_agrees_with_datetime(epoch_ms: int) -> None:
    from datetime import UTC, datetime

    from pipeline.sink.names import month_of

    assert month_of(epoch_ms) == datetime.fromtimestamp(epoch_ms / 1000, tz=UTC).strftime("%Y.%m")
