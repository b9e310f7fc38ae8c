"""The pure parts of ``jobstream bench``: what the workload must turn into, how the e2e
documents are judged, the latency quantiles, the tracked-jobs generator."""

from __future__ import annotations

import json
import os
import time

import pytest

from pipeline.fold import doc_id
from pipeline.tooling.bench import tracked
from pipeline.tooling.bench.feed import build_feed, workload_spec
from pipeline.tooling.bench.flow import check_documents, quantile, sampled
from pipeline.tooling.bench.memos import memo_feed
from pipeline.tooling.bench.report import FIGURES, OPTIONAL_FIGURES
from pipeline.tooling.bench.rss import jit_threads_cpu_s
from pipeline.tooling.bench.run import BenchOptions, _figures


@pytest.fixture(scope="module")
def feed():  # type: ignore[no-untyped-def]
    return build_feed(workload_spec(3, 60, 1000.0, 0.05, start=1_790_000_000.0))


def test_each_record_knows_its_jobs_revision_and_the_last_one_is_the_documents(feed) -> None:
    last: dict[str, int] = {}
    for rec, revision, events in zip(feed.records, feed.revisions, feed.events, strict=True):
        assert revision >= last.get(rec.key, 0)  # a job's revision never goes back
        assert revision - last.get(rec.key, 0) <= events  # at most one per new event
        last[rec.key] = revision
    assert last == {key: doc["revision"] for key, doc in feed.documents.items()}
    assert feed.revision_sum == sum(last.values())
    assert feed.total_events == sum(feed.events) > len(feed.records)


def test_the_offline_documents_are_the_workloads_truth(feed) -> None:
    assert set(feed.documents) == set(feed.truth)
    for key, want in feed.truth.items():
        assert feed.documents[key]["result"] == want["result"]


def test_document_check_finds_missing_unexpected_and_different_documents(feed) -> None:
    expected = {k: dict(v) for k, v in feed.documents.items()}
    indexed = [dict(d) for d in expected.values()]
    assert check_documents(expected, indexed).ok

    changed = [dict(d) for d in indexed]
    changed[0]["state"] = "running"
    dropped = changed[:-1]
    stray = {**changed[1], "job_id": "no-such-job"}
    out = check_documents(expected, [*dropped, stray])
    assert not out.ok
    assert out.missing == [doc_id(indexed[-1])]
    assert out.unexpected == [doc_id(stray)]
    assert (doc_id(indexed[0]), "state", "running", indexed[0]["state"]) in out.differences
    assert out.equal == len(expected) - 2


def test_quantiles() -> None:
    values = [float(v) for v in range(1, 101)]
    assert quantile([], 0.5) is None
    assert quantile([2.0], 0.99) == 2.0
    assert quantile(values, 0.5) == pytest.approx(50.5, abs=0.1)
    assert quantile(values, 0.99) == pytest.approx(99.0, abs=0.1)


def test_sampling_picks_about_one_in_n() -> None:
    keys = [f"c:{i}" for i in range(5000)]
    chosen = [k for k in keys if sampled(k, 50)]
    assert 50 <= len(chosen) <= 150
    assert all(sampled(k, 1) for k in keys[:10])


def test_tracked_jobs_have_distinct_ids_across_chunks(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tracked, "CHUNK", 40)
    records = list(tracked.pending_jobs(130, seed=5))
    keys = [r.key for r in records]
    assert len(keys) == len(set(keys)) == 130
    assert {r.format for r in records} == {"flux-journal", "slurm-squeue"}


def test_tracked_jobs_were_submitted_before_now(monkeypatch: pytest.MonkeyPatch) -> None:
    # the worker refuses events dated more than a day ahead: the jobs of a long queue
    # must all lie in the past, or most of a million would never be tracked
    monkeypatch.setattr(tracked, "CHUNK", 40)
    before = time.time()
    records = list(tracked.pending_jobs(130, seed=5))
    assert all(before - 131 <= r.time <= time.time() for r in records)


@pytest.mark.parametrize("flux", [True, False])
def test_the_squeue_document_lists_the_slurm_jobs(tmp_path, monkeypatch: pytest.MonkeyPatch,
                                                  flux: bool) -> None:
    monkeypatch.setattr(tracked, "CHUNK", 40)
    flux_jobs, slurm_jobs, size = tracked._write_sources(tmp_path, 130, seed=5, flux=flux)
    doc = json.loads((tmp_path / "squeue.json").read_bytes())
    assert size == (tmp_path / "squeue.json").stat().st_size
    ids = [job["job_id"] for job in doc["jobs"]]
    assert len(ids) == len(set(ids)) == slurm_jobs
    assert "meta" in doc
    journal = (tmp_path / "journal.jsonl").read_bytes().splitlines()
    if flux:  # the tracked jobs, half and half
        assert flux_jobs + slurm_jobs == 130 and len(journal) == flux_jobs > 0
    else:  # the Slurm edge alone: that many Slurm jobs
        assert (flux_jobs, slurm_jobs, journal) == (0, 130, [])


def test_every_figure_is_reported_even_when_not_measured() -> None:
    figures = _figures({}, BenchOptions())
    assert [f.name for f in figures] == list(FIGURES) + list(OPTIONAL_FIGURES)
    assert all(f.value is None and f.ok is None for f in figures)
    met = {f.name: f.ok for f in _figures(
        {"consume_decode_ceiling_events_per_s": 1000.0, "e2e_events_per_s": 600.0,
         "latency_p99_s": 2.0, "events_per_job": 10.0, "job_doc_writes_per_job": 2.0},
        BenchOptions())}
    assert met["e2e_ratio_to_ceiling"] is True
    assert met["latency_p99_s"] is False
    assert met["job_doc_writes_per_job"] is True


def test_the_memo_feed_is_one_job_s_memos_then_the_other_jobs() -> None:
    spec = workload_spec(3, 21, 1000.0, 0.05)
    plain = build_feed(spec)
    feed, key = memo_feed(spec, 500)
    at = [r.key for r in feed.records].index(key)
    memos = feed.records[at + 1:at + 501]
    assert {r.key for r in memos} == {key}
    assert all(json.loads(r.payload)["events"][0]["name"] == "memo" for r in memos)
    # every memo is an event of its own, indexed; they change their job's annotations
    # (and its revision, and past the window its dropped count), no other document
    assert feed.distinct_events == plain.distinct_events + 500
    assert feed.total_events == plain.total_events + 500
    assert ({k: v for k, v in feed.documents.items() if k != key}
            == {k: v for k, v in plain.documents.items() if k != key})
    doc, before = feed.documents[key], plain.documents[key]
    assert doc["user_annotations"] == {"progress": "step 500 of 500"}
    assert {k for k in doc if doc[k] != before[k]} == {"user_annotations", "revision",
                                                        "events_dropped"}
    assert [r for r in feed.records if r not in memos] == list(plain.records)


def test_the_jobs_stage_alone_folds_every_job_and_says_what_it_cost(feed) -> None:
    from pipeline.runtime.config import Config
    from pipeline.tooling.bench.stage import stage_cost

    cost = stage_cost(Config(), feed)
    assert cost.wrong == 0
    assert cost.events == feed.total_events and cost.records == len(feed.records)
    assert feed.jobs <= cost.states <= cost.events  # a state per job per batch
    assert cost.cpu_s > 0 and cost.cpu_ms_per_event == 1000 * cost.cpu_s / cost.events



def test_a_process_that_is_not_a_jvm_has_no_jit_figure() -> None:
    # a JVM's figure is checked in tests/integration/test_bench_command.py (the stack's)
    assert jit_threads_cpu_s(os.getpid()) is None
    assert jit_threads_cpu_s(2**22 + 1) is None  # no such process


def test_the_memory_run_fails_when_the_worker_holds_fewer_than_the_tracked_jobs() -> None:
    from pathlib import Path

    from pipeline.runtime.errors import ServiceError

    log = Path("worker-0.log")
    changes = [(b"c:1", b"{}"), (b"c:2", b"{}"), (b"c:1", b"{}"), (b"c:3", b"{}")]
    assert tracked.require_held(changes, 3, "app-jobs-changelog", log) == 3
    # a job whose last change is a tombstone is no longer held
    with pytest.raises(ServiceError, match="holds 2 of the 3 tracked jobs .*app-jobs-changelog"):
        tracked.require_held([*changes, (b"c:2", None)], 3, "app-jobs-changelog", log)
    with pytest.raises(ServiceError, match="holds 0 of the 3"):
        tracked.require_held([], 3, "app-jobs-changelog", log)
