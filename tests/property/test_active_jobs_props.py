"""The worker's views kept in flat records (:mod:`agents.digests`) give what the dicts they
replaced gave: :class:`agents.active_jobs.ActiveJobs` the same summaries, in the same
order, so the same snapshots and the same expiry, as a dict of summaries by key per
partition (the design before 2026-12-04); :class:`agents.digests.DigestIndex` the same
answers as a dict of digest -> record number; :class:`agents.canonical.RecentIds` (a ring)
what its docstring says."""

from __future__ import annotations

import hashlib
import math

from hypothesis import given, settings
from hypothesis import strategies as st

from agents.active_jobs import ActiveJobs
from agents.canonical import RecentIds
from agents.digests import DigestIndex
from pipeline.core.snapshots import JobSummary, build_snapshots


class DictJobs:
    """The view as a dict of summaries by key per partition: what the packed forms must
    give back (the packing keeps a time limit as a float, and a negative submit time, or
    a NaN limit, as none)."""

    def __init__(self) -> None:
        self.by_partition: dict[int, dict[bytes, JobSummary]] = {}
        self.done: dict[bytes, tuple[int, float]] = {}

    def update(self, key: bytes, partition: int, s: JobSummary, now: float) -> None:
        limit = s.timelimit_s
        self.by_partition.setdefault(partition, {})[key] = s._replace(
            t_submit_ms=None if s.t_submit_ms is None or s.t_submit_ms < 0 else s.t_submit_ms,
            timelimit_s=None if limit is None or math.isnan(limit) else float(limit))
        if s.state == "done":
            self.done.setdefault(key, (partition, now))
        else:
            self.done.pop(key, None)

    def forget(self, key: bytes) -> None:
        self.done.pop(key, None)
        for jobs in self.by_partition.values():
            jobs.pop(key, None)

    def keep(self, partitions: set[int]) -> None:
        self.by_partition = {p: j for p, j in self.by_partition.items() if p in partitions}
        self.done = {k: v for k, v in self.done.items() if v[0] in partitions}

    def summaries(self, partitions: set[int]) -> list[JobSummary]:
        return [s for p in partitions for s in self.by_partition.get(p, {}).values()]


COUNTS = st.one_of(st.integers(0, 64), st.integers(-2**63, 2**63 - 1))
SUMMARIES = st.builds(
    JobSummary,
    cluster=st.sampled_from(["c", "d"]), queue=st.sampled_from(["batch", "debug"]),
    state=st.sampled_from(["pending", "running", "done"]),
    nodes=COUNTS, cores=COUNTS, gpus=COUNTS,
    t_submit_ms=st.one_of(st.none(), st.integers(-2**63, 2**63 - 1)),
    timelimit_s=st.one_of(st.none(), st.integers(0, 10**6), st.floats(allow_nan=True)),
    reason=st.one_of(st.none(), st.sampled_from(["Priority", "Resources"])))
KEYS = st.integers(0, 40).map(lambda n: f"c:{n}".encode())
OPS = st.lists(st.one_of(
    st.tuples(st.just("update"), KEYS, st.integers(0, 3), SUMMARIES,
              st.floats(0, 100)),
    st.tuples(st.just("forget"), KEYS),
    st.tuples(st.just("keep"), st.sets(st.integers(0, 3)))), max_size=120)


def same(active: ActiveJobs, model: DictJobs) -> None:
    everything = {0, 1, 2, 3}
    got = list(active.summaries(everything))
    assert got == model.summaries(everything)  # the same, in the same order
    assert build_snapshots(got, 1000.0, "w", everything, 30.0) == build_snapshots(
        model.summaries(everything), 1000.0, "w", everything, 30.0)
    assert len(active) == len(got)
    for p in everything:
        for key in [f"c:{n}".encode() for n in range(41)]:
            assert active.tracks(key, p) == (key in model.by_partition.get(p, {}))
    active.partitions = everything
    assert active.expired(60.0, 10.0) == [k for k, (p, t) in model.done.items()
                                          if 60.0 - t >= 10.0]


@settings(max_examples=300, deadline=None)
@given(OPS)
def test_active_jobs_give_what_a_dict_of_summaries_gave(ops: list[tuple]) -> None:
    active, model = ActiveJobs(), DictJobs()
    for op, *args in ops:
        getattr(active, op)(*args)
        getattr(model, op)(*args)
    same(active, model)


def test_removed_jobs_are_dropped_in_order_when_they_outnumber_the_others() -> None:
    """Past a chunk of removed records the records are copied without them: the order,
    the index and the size follow."""
    active, model = ActiveJobs(), DictJobs()
    summary = JobSummary("c", "batch", "pending", 1, 2, 0, 5, 60.0, None)
    for n in range(12_000):
        for view in (active, model):
            view.update(f"c:{n}".encode(), n % 2, summary._replace(cores=n), 0.0)
    full = active.nbytes
    gone = [n for n in range(12_000) if n % 15]
    for n in gone[1::2] + gone[::2]:  # a compaction midway, with removed records left
        for view in (active, model):
            view.forget(f"c:{n}".encode())
    for view in (active, model):
        view.update(b"c:1", 0, summary, 0.0)  # back, last
    assert list(active.summaries({0, 1})) == model.summaries({0, 1})
    assert len(active) == 1 + 12_000 // 15 and active.tracks(b"c:1", 0)
    assert not active.tracks(b"c:2", 0) and active.tracks(b"c:15", 1)
    assert active.nbytes < full / 2


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.booleans(), st.integers(0, 300)), max_size=400))
def test_digest_index_answers_as_a_dict(ops: list[tuple[bool, int]]) -> None:
    """Adds and removes of digests, many in the same runs of a small table (every probe
    and backward shift of a removal), against a dict."""
    records: list[bytes] = []
    index = DigestIndex(lambda n: records[n])
    model: dict[bytes, int] = {}
    for add, n in ops:
        digest = hashlib.blake2b(str(n).encode(), digest_size=16).digest()
        if add and digest not in model:
            records.append(digest)
            model[digest] = len(records) - 1
            index.add(digest, model[digest])
        elif not add:
            assert index.remove(digest) == model.pop(digest, -1)
        assert len(index) == len(model)
    for n in range(301):
        digest = hashlib.blake2b(str(n).encode(), digest_size=16).digest()
        assert index.find(digest) == model.get(digest, -1)
    assert sorted(index.numbers()) == sorted(model.values())


@settings(max_examples=300, deadline=None)
@given(st.integers(1, 6), st.lists(st.integers(0, 9), max_size=200))
def test_recent_ids_remember_an_id_for_the_next_capacity_ids(capacity: int,
                                                             ids: list[int]) -> None:
    """An id is seen iff it was among the last ``capacity`` ids seen before it."""
    recent = RecentIds(capacity)
    for n, id_ in enumerate(ids):
        assert recent.seen(str(id_).encode()) == (id_ in ids[max(0, n - capacity):n])
        assert len(recent) == len(set(ids[max(0, n + 1 - capacity):n + 1]))
