"""The node samples of a job, parsed and folded: usage so far, the final figures, and what
order, copies, resets, requeues and the bounds do (pipeline.parsers.node_usage,
pipeline.fold.usage)."""

from __future__ import annotations

import json
import random
from typing import Any

import pytest

from pipeline.core.model import JobEvent
from pipeline.fold import JobFold, fold
from pipeline.fold.usage import USAGE_COUNTERS
from pipeline.parsers import parse_record
from pipeline.runtime.errors import ParseError
from pipeline.sink.converter import Converter

T0 = 1_764_700_000.0
GIB = 2**30


def sample(i: int, cpu_s: float, *, node: str = "n1", epoch: str = "cg1", run: str = "r1",
           job_id: str = "42", scheduler: str = "slurm", interval: float | None = 30.0,
           cpu_interval: float | None = None, mem: int = GIB, peak: int | None = None,
           limit: int | None = 4 * GIB, gpus: list[dict[str, Any]] | None = None,
           gpu_busy: float | None = None, gpu_s: float | None = None,
           idle_since: float | None = None, final: bool = False, at: float | None = None,
           **extra: Any) -> bytes:
    record = {
        "v": 1, "scheduler": scheduler, "job_id": job_id, "node": node, "reader": "cgroup-v1",
        "sampled_at": T0 + 30 * i if at is None else at, "epoch": epoch, "run": run,
        "cpu_s": cpu_s, "cpu_user_s": cpu_s, "cpu_system_s": 0.0,
        "interval_s": interval if i else None,
        "cpu_interval_s": (cpu_interval if cpu_interval is not None else 30.0) if i else None,
        "mem_bytes": mem, "mem_peak_bytes": peak, "mem_rss_bytes": mem, "mem_file_bytes": 0,
        "mem_limit_bytes": limit, "processes": 1, "gpus": gpus or [], "gpu_busy_s": gpu_busy,
        "gpu_s": gpu_s, "gpu_idle_since": idle_since, "final": final,
        "reason": "cgroup removed" if final else None, **extra}
    return json.dumps(record).encode()


def events(*records: bytes) -> list[JobEvent]:
    out: list[JobEvent] = []
    for rec in records:
        out += parse_record("node-usage", rec, cluster="c")
    return out


def lifecycle(*, ncores: int = 4, nnodes: int = 1, end: float | None = None,
              sacct: dict[str, float] | None = None, job_id: str = "42") -> list[JobEvent]:
    """A Slurm job allocated at T0 (a hook), ended at ``end`` (jobcomp-like end event)."""
    def ev(name: str, ts: float, facts: dict[str, Any]) -> JobEvent:
        return JobEvent(cluster="c", scheduler="slurm", job_id=job_id, event=name,
                        timestamp=ts, source="slurm-hook", event_id=f"{name}-{ts}",
                        facts=facts)
    out = [ev("submit", T0 - 100, {"t_submit": T0 - 100}),
           ev("start", T0, {"t_start": T0, "ncores": ncores, "nnodes": nnodes,
                            "mem_alloc_mb": 8192 * nnodes})]
    if end is not None:
        out.append(JobEvent(cluster="c", scheduler="slurm", job_id=job_id, event="end",
                            timestamp=end, source="slurm-jobcomp", event_id=f"end-{end}",
                            facts={"t_end": end, "result": "completed", **(sacct or {})}))
    return out


def test_running_job_shows_its_usage_so_far() -> None:
    # one busy core of four for 90 s, then 2 of 4 in the last interval
    docs = fold(lifecycle() + events(sample(1, 30.0), sample(2, 60.0),
                                     sample(3, 120.0, cpu_interval=60.0, peak=2 * GIB)))
    doc = docs[-1]
    assert doc["state"] == "running"
    assert doc["usage_cpu_s"] == 120.0
    assert doc["usage_cpu_eff_pct"] == pytest.approx(100 * 120 / (90 * 4))
    assert doc["usage_cpu_now_pct"] == pytest.approx(100 * (60 / 30) / 4)
    assert doc["usage_mem_mb"] == 1024.0 and doc["usage_mem_peak_mb"] == 2048.0
    assert doc["usage_mem_peak_pct"] == pytest.approx(50.0)
    assert doc["usage_mem_now_pct"] == pytest.approx(25.0)
    assert doc["usage_sampled_at"] == round((T0 + 90) * 1000)
    assert doc["usage_nodes"] == 1 and doc["usage_reader"] == "cgroup-v1"
    # not ended: no final figures yet
    assert doc["cpu_eff_pct"] is None and doc["usage_source"] is None


def test_nodes_add_cpu_and_take_the_largest_peak() -> None:
    docs = fold(lifecycle(ncores=8, nnodes=2) + events(
        sample(2, 60.0, node="a", peak=3 * GIB, limit=None),
        sample(2, 30.0, node="b", peak=GIB, limit=None)))
    doc = docs[-1]
    assert doc["usage_cpu_s"] == 90.0 and doc["usage_nodes"] == 2
    assert doc["usage_mem_mb"] == 2048.0  # now: summed
    assert doc["usage_mem_peak_mb"] == 3072.0  # peak: per node
    # no cgroup limit: the allocation per node, 8192 MiB
    assert doc["usage_mem_peak_pct"] == pytest.approx(100 * 3072 / 8192)


def test_final_figures_come_from_the_samples_without_accounting() -> None:
    docs = fold(lifecycle(end=T0 + 100) + events(
        sample(1, 40.0), sample(3, 100.0, peak=2 * GIB),
        sample(4, 100.0, peak=2 * GIB, final=True, at=T0 + 105)))
    doc = docs[-1]
    assert doc["state"] == "done" and doc["usage_source"] == "node"
    assert doc["cpu_time_s"] == 100.0
    assert doc["cpu_eff_pct"] == pytest.approx(100 * 100 / (100 * 4))
    assert doc["mem_max_mb"] == 2048.0 and doc["mem_max_pct"] == pytest.approx(50.0)


def test_sacct_takes_precedence() -> None:
    sacct = {"cpu_time_s": 95.0, "cpu_eff_pct": 23.75, "mem_max_mb": 2000.0,
             "mem_max_pct": 24.4}
    docs = fold(lifecycle(end=T0 + 100, sacct=sacct) + events(sample(3, 100.0)))
    doc = docs[-1]
    assert doc["usage_source"] == "sacct"
    assert (doc["cpu_eff_pct"], doc["mem_max_mb"]) == (23.75, 2000.0)
    assert doc["gpu_util_pct"] is None  # all five are sacct's, as it gave them
    assert doc["usage_cpu_s"] == 100.0  # the samples' own figures stay beside them


def test_a_counter_reset_is_a_new_epoch_added_not_subtracted() -> None:
    # the cgroup was re-created at sample 3: its counter began again
    docs = fold(lifecycle() + events(sample(1, 30.0), sample(2, 60.0),
                                     sample(3, 20.0, epoch="cg2")))
    assert docs[-1]["usage_cpu_s"] == 80.0


def test_two_edge_processes_reading_one_counter_count_it_once() -> None:
    docs = fold(lifecycle() + events(sample(1, 30.0, run="r1"), sample(2, 60.0, run="r1"),
                                     sample(3, 90.0, run="r2")))
    assert docs[-1]["usage_cpu_s"] == 90.0


def test_gpu_figures() -> None:
    gpus = [{"index": 0, "uuid": "GPU-0", "util_pct": 2.0, "mem_bytes": 1, "mem_total_bytes": 2},
            {"index": 1, "uuid": "GPU-1", "util_pct": 4.0, "mem_bytes": 1, "mem_total_bytes": 2}]
    docs = fold(lifecycle() + events(
        sample(2, 60.0, gpus=gpus, gpu_busy=30.0, gpu_s=120.0, idle_since=T0 + 20)))
    doc = docs[-1]
    assert doc["usage_gpu_util_pct"] == pytest.approx(25.0)
    assert doc["usage_gpu_now_pct"] == pytest.approx(3.0)
    assert doc["usage_gpu_idle_since"] == round((T0 + 20) * 1000)
    busy = [{**gpus[0], "util_pct": 90.0}]
    docs = fold(lifecycle() + events(
        sample(2, 60.0, gpus=gpus, gpu_busy=30.0, gpu_s=120.0, idle_since=T0 + 20),
        sample(2, 60.0, node="n2", gpus=busy, gpu_busy=50.0, gpu_s=60.0)))
    assert docs[-1]["usage_gpu_idle_since"] is None  # one node's GPU is busy


def test_a_requeued_run_starts_its_figures_again() -> None:
    first = lifecycle() + events(sample(1, 30.0, node="a"), sample(2, 60.0, node="a"))
    second_start = T0 + 1000
    requeue = [JobEvent(cluster="c", scheduler="slurm", job_id="42", event="requeue",
                        timestamp=T0 + 70, source="slurm-squeue", event_id="rq"),
               JobEvent(cluster="c", scheduler="slurm", job_id="42", event="submit",
                        timestamp=T0 + 80, source="slurm-hook", event_id="s2",
                        facts={"t_submit": T0 + 80}),
               JobEvent(cluster="c", scheduler="slurm", job_id="42", event="start",
                        timestamp=second_start, source="slurm-hook", event_id="st2",
                        facts={"t_start": second_start, "ncores": 4, "nnodes": 1})]
    later = events(sample(1, 15.0, node="b", epoch="cgB", at=second_start + 30))
    doc = fold(first + requeue + later)[-1]
    assert doc["requeue_count"] == 1
    assert doc["usage_cpu_s"] == 15.0 and doc["usage_nodes"] == 1


def test_order_and_copies_do_not_matter() -> None:
    evs = lifecycle(end=T0 + 200) + events(
        *(sample(i, 10.0 * i, node=n, epoch=f"cg{n}{i // 4}", run=f"r{i % 2}",
                 peak=(i % 3 + 1) * GIB)
          for i in range(1, 8) for n in ("a", "b")))
    expected = fold(evs)
    rng = random.Random(7)
    for _ in range(20):
        shuffled = evs + rng.sample(evs, 5)
        rng.shuffle(shuffled)
        assert fold(shuffled) == expected


def test_the_state_round_trips_and_older_states_read() -> None:
    jf = JobFold()
    for ev in lifecycle() + events(sample(1, 30.0), sample(2, 60.0)):
        jf.add(ev)
    state = json.loads(jf.to_json())
    assert state["usage"] and JobFold.from_dict(state).documents() == jf.documents()
    del state["usage"]  # a state written before usage
    assert JobFold.from_dict(state).documents()[-1]["usage_cpu_s"] is None


def test_every_sample_is_a_new_revision_and_a_copy_is_not() -> None:
    jf = JobFold()
    for ev in lifecycle():
        jf.add(ev)
    before = jf.revision
    (ev,) = events(sample(1, 30.0))
    assert jf.add(ev) and jf.revision > before
    after = jf.revision
    assert not jf.add(ev) and jf.revision == after  # a copy
    (older,) = events(sample(0, 0.0))
    assert not jf.add(older) and jf.revision == after  # older than its counter's latest
    (newer,) = events(sample(2, 60.0))
    assert jf.add(newer) and jf.revision > after
    # the samples are not kept as events: a large job's samples do not fill its windows
    assert all(e.event != "usage" for e in jf.events()) and not jf.dropped


def test_a_job_known_only_by_its_samples_has_a_document() -> None:
    (doc,) = fold(events(sample(1, 30.0), sample(2, 60.0)))
    assert doc["usage_cpu_s"] == 60.0 and doc["state"] == "pending"
    assert doc["updated_at"] == round((T0 + 60) * 1000)


def test_a_flux_job_known_only_by_its_samples_is_found_by_its_f58_id() -> None:
    # the job page and the overview's tables look a Flux job up by its F58 id as well
    first, second = (sample(i, 30.0 * i, scheduler="flux", job_id="ƒ2bfE7Z1") for i in (1, 2))
    jf = JobFold()
    for ev in events(second, first):
        jf.add(ev)
    (doc,) = jf.documents()
    assert doc["job_id"] == "60817408000" and doc["job_id_f58"] == "ƒ2bfE7Z1"
    (again,) = JobFold.from_dict(json.loads(jf.to_json())).documents()
    assert again["job_id_f58"] == "ƒ2bfE7Z1"


def test_counters_beyond_the_bound_are_counted() -> None:
    evs = [e for n in range(USAGE_COUNTERS + 5)
           for e in events(sample(1, 1.0, node=f"n{n:05d}"))]
    doc = fold(lifecycle(ncores=4 * len(evs)) + evs)[-1]
    assert doc["usage_nodes"] == USAGE_COUNTERS and doc["usage_dropped"] == 5


def test_flux_ids_key_the_job_as_the_journal_does() -> None:
    (ev,) = events(sample(1, 1.0, scheduler="flux", job_id="ƒ2bfE7Z1"))
    (dec,) = events(sample(1, 1.0, scheduler="flux", job_id="60817408000"))
    assert ev.job_id == dec.job_id == "60817408000" and ev.event_id == dec.event_id
    assert ev.job_id_f58 == "ƒ2bfE7Z1" and ev.key == "c:60817408000"


@pytest.mark.parametrize(("record", "reason"), [
    (b"not json", "invalid-json"),
    (b"[1]", "bad-type"),
    (sample(1, 1.0, job_id="12x"), "bad-job-id"),
    (sample(1, 1.0, scheduler="flux", job_id="ƒ!!"), "bad-job-id"),
    (sample(1, 1.0, scheduler="pbs"), "unknown-scheduler"),
    (sample(1, -1.0), "bad-value"),
    (sample(1, float("nan")), "bad-value"),
    (sample(1, 1.0, reader="magic"), "bad-value"),
    (sample(1, 1.0, v=9), "bad-value"),
    (json.dumps({"v": 1, "scheduler": "slurm", "job_id": "1"}).encode(), "missing-field"),
])
def test_bad_samples_are_refused_with_a_reason(record: bytes, reason: str) -> None:
    with pytest.raises(ParseError) as err:
        parse_record("node-usage", record, cluster="c")
    assert err.value.reason == reason


def test_the_event_document_carries_its_series_point() -> None:
    (ev,) = events(sample(2, 60.0, cpu_interval=45.0, mem=GIB, limit=4 * GIB, gpus=[
        {"index": 0, "uuid": "GPU-0", "util_pct": 50.0, "mem_bytes": 1,
         "mem_total_bytes": 2}]))
    action = Converter().event(ev.to_dict())
    assert action.source["usage"] == {"node": "n1", "cpu_now_pct": 150.0, "cpu_s": 60.0,
                                      "mem_mb": 1024.0, "mem_pct": 25.0, "gpu_now_pct": 50.0}


def test_the_series_thinned_keeps_one_point_per_stretch() -> None:
    from pipeline.fold.usage import keeps_point

    kept = [i for i in range(1, 41)
            if keeps_point({"sampled_at": T0 + 30 * i, "interval_s": 30.0}, 300.0)]
    # one in ten 30 s samples, at the first sample of each 5-minute stretch
    assert len(kept) == 4
    assert all(keeps_point({"sampled_at": T0 + 30 * i, "interval_s": 30.0}, 0.0)
               for i in range(5))
    assert keeps_point({"sampled_at": T0, "interval_s": None}, 300.0)  # a first sample
