"""The burst phase's job arrays (pipeline.tooling.workload_burst): every record parses as
the edge would key it, N tasks fold into N job documents with the events named, and the
Slurm array reads as the real 22.05 cluster's ``--array=1-3`` did."""

from __future__ import annotations

from collections import defaultdict

import pytest

from pipeline.core.model import RawRecord
from pipeline.parsers.normalize import normalize
from pipeline.tooling.bench.feed import feed_of, raw_record
from pipeline.tooling.workload import WorkloadSpec
from pipeline.tooling.workload_burst import (
    FLUX_EVENTS,
    SLURM_EVENTS,
    burst_records,
    flux_array,
    slurm_array,
    split_tasks,
)
from tests.datafiles import REPO

T0 = 1_790_000_000.25
REAL = REPO / "tests" / "data" / "slurm" / "real-22.05"


def _events_by_job(records):  # type: ignore[no-untyped-def]
    out: dict[str, list[str]] = defaultdict(list)
    for rec in records:
        events = normalize(raw_record(rec))
        assert events, f"{rec.format} record of {rec.key} has no events"
        for ev in events:
            # the key the edge publishes it under is the parser's (edges.base.record_key)
            assert ev.key == rec.key
            out[rec.key].append(ev.event)
    return out


def _fold(records):  # type: ignore[no-untyped-def]
    return feed_of(WorkloadSpec(jobs=1, start=T0), records, {})


class TestFluxArray:
    def test_each_task_is_a_job_with_the_six_journal_events(self) -> None:
        records = flux_array("burst-flux", 70, T0)
        assert len(records) == 70 * len(FLUX_EVENTS)
        assert all(r.format == "flux-journal" and r.scheduler == "flux" for r in records)
        by_job = _events_by_job(records)
        assert len(by_job) == 70
        assert all(names == list(FLUX_EVENTS) for names in by_job.values())

    def test_n_tasks_fold_into_n_running_documents(self) -> None:
        feed = _fold(flux_array("burst-flux", 70, T0))
        assert feed.jobs == 70 and feed.total_events == 70 * len(FLUX_EVENTS)
        docs = list(feed.documents.values())
        assert {d["state"] for d in docs} == {"running"}
        assert {d["revision"] for d in docs} == {len(FLUX_EVENTS)}
        assert all(d["t_submit"] <= d["t_alloc"] <= d["t_start"] for d in docs)
        assert {(d["ncores"], d["nnodes"], d["queue"]) for d in docs} == {(1, 1, "batch")}
        # one core each, 32 to a node: 70 tasks on 3 nodes, no core given twice
        assert {d["nodelist"][0] for d in docs} == {f"burst-flux-n{i:04d}" for i in range(3)}

    def test_records_come_in_time_order(self) -> None:
        times = [r.time for r in flux_array("burst-flux", 50, T0)]
        assert times == sorted(times)


class TestSlurmArray:
    def test_one_meta_record_then_a_prolog_and_a_running_poll_per_task(self) -> None:
        records = slurm_array("burst-slurm", 40, T0)
        assert [r.format for r in records] == (["slurm-squeue"] + ["slurm-hook"] * 40
                                               + ["slurm-squeue"] * 40)
        times = [r.time for r in records]
        assert times == sorted(times)

    def test_n_tasks_fold_into_n_documents_of_one_array(self) -> None:
        records = slurm_array("burst-slurm", 40, T0)
        feed = _fold(records)
        assert feed.jobs == 40
        docs = {d["job_id"]: d for d in feed.documents.values()}
        array_id = records[0].key.split(":")[1]
        assert {d["array_id"] for d in docs.values()} == {array_id}
        assert sorted(d["array_task"] for d in docs.values()) == list(range(1, 41))
        # as Slurm numbers them: task t < N gets the array's id + t, the last keeps its id
        assert docs[array_id]["array_task"] == 40
        assert docs[str(int(array_id) + 1)]["array_task"] == 1
        assert {d["state"] for d in docs.values()} == {"running"}
        assert all(d["t_start"] is not None and d["pending_reason"] is None
                   for d in docs.values())

    def test_the_events_named(self) -> None:
        records = slurm_array("burst-slurm", 5, T0)
        by_job = _events_by_job(records)
        array_key = records[0].key
        assert set(by_job[array_key]) == set(SLURM_EVENTS)
        for key, names in by_job.items():
            if key != array_key:
                assert sorted(names) == sorted(["alloc", "submit", "eligible", "start"])

    def test_the_array_reads_as_the_real_clusters_did(self) -> None:
        """The facts a real task's prolog and squeue record give (22.05, job 82 = 81_1)
        are the facts the generated ones give: same keys, same array facts."""
        real_env = (REAL / "hooks" / "prolog_slurmctld_82.env").read_bytes()
        real = normalize(RawRecord(cluster="testcluster", scheduler="slurm",
                                   format="slurm-hook", received_at=T0, payload=real_env))
        records = slurm_array("testcluster", 3, T0)
        ours = normalize(raw_record(records[1]))  # task 1's prolog
        assert [e.event for e in ours] == [e.event for e in real] == ["alloc"]
        assert set(ours[0].facts) == set(real[0].facts)
        assert (real[0].facts["array_id"], real[0].facts["array_task"]) == ("81", 1)
        array_id = records[0].key.split(":")[1]
        assert (ours[0].facts["array_id"], ours[0].facts["array_task"]) == (array_id, 1)
        real_env_keys = {line.split("=", 1)[0] for line in real_env.decode().splitlines()
                         if line.startswith("SLURM_ARRAY_")}
        our_env_keys = {line.split("=", 1)[0]
                        for line in records[1].payload.decode().splitlines()
                        if line.startswith("SLURM_ARRAY_")}
        assert our_env_keys == real_env_keys


class TestBurst:
    @pytest.mark.parametrize(("scheduler", "want"), [
        ("flux", {"flux": 11}), ("slurm", {"slurm": 11}),
        ("both", {"flux": 6, "slurm": 5})])
    def test_the_tasks_are_split_between_the_schedulers(self, scheduler: str,
                                                         want: dict[str, int]) -> None:
        assert split_tasks(11, scheduler) == want
        feed = _fold(burst_records(11, scheduler, T0))
        got: dict[str, int] = defaultdict(int)
        for doc in feed.documents.values():
            got[doc["scheduler"]] += 1
        assert got == want

    def test_an_unknown_scheduler_is_refused(self) -> None:
        with pytest.raises(ValueError, match="pbs"):
            split_tasks(10, "pbs")

    def test_both_arrays_merge_in_time_order_each_job_in_its_order(self) -> None:
        records = burst_records(30, "both", T0)
        assert [r.time for r in records] == sorted(r.time for r in records)
        feed = _fold(records)
        last: dict[str, int] = {}
        for rec, revision in zip(feed.records, feed.revisions, strict=True):
            assert revision > last.get(rec.key, 0)  # every record adds to its job
            last[rec.key] = revision
        assert {d["cluster"] for d in feed.documents.values()} == {"burst-flux",
                                                                   "burst-slurm"}
