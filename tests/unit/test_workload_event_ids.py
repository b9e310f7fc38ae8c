"""The workload's own event ids (what the generator put in each record, hashed with
``make_event_id``) are exactly the ids the parsers give its records: the faults suite
expects the generator's, so this is what makes a parser that drops or renames an event
count as lost there, and fail here first."""

from __future__ import annotations

import pytest

from pipeline.core.model import job_key
from pipeline.parsers.normalize import normalize
from pipeline.tooling.bench.feed import raw_record
from pipeline.tooling.workload import GeneratedRecord, Workload, WorkloadSpec

START = 1_795_000_000.0
#: every format the generator writes: each parser it feeds is checked
FORMATS = {"flux-journal", "slurm-squeue", "slurm-hook", "slurm-jobcomp", "slurm-sacct",
           "node-usage"}


@pytest.mark.parametrize(("seed", "time_scale"), [(1, 0.05), (7, 0.05), (42, 1.0)])
def test_each_records_ids_are_those_its_parser_gives(seed: int, time_scale: float) -> None:
    w = Workload(WorkloadSpec(seed=seed, jobs=300, start=START, time_scale=time_scale))
    records = list(w.records())
    assert {r.format for r in records} == FORMATS
    for rec in records:
        parsed = {ev.event_id: (ev.event, ev.timestamp) for ev in normalize(raw_record(rec))}
        own = w.event_ids([rec])
        assert set(own) == set(parsed), (rec.format, rec.key, sorted(parsed.values()),
                                         sorted(own.values()))
    assert set(w.event_ids()) == {ev.event_id for rec in records
                                  for ev in normalize(raw_record(rec))}


def test_the_parts_name_the_records_job_event_and_time() -> None:
    w = Workload(WorkloadSpec(seed=5, jobs=60, start=START, time_scale=0.05))
    for rec in w.records():
        for cluster, scheduler, job_id, event, *rest in w.event_ids([rec]).values():
            assert (scheduler, job_key(cluster, job_id)) == (rec.scheduler, rec.key)
            # a node sample's time comes after its node, epoch and edge run
            ts = rest[-1] if event == "usage" else rest[0]
            assert isinstance(ts, float)
            if event == "usage":
                assert rec.format == "node-usage" and ts == rec.time


def test_a_record_the_workload_did_not_generate_has_no_known_ids() -> None:
    w = Workload(WorkloadSpec(seed=5, jobs=10, start=START))
    rec = next(w.records())
    other = GeneratedRecord(rec.time + 1, rec.cluster, rec.scheduler, rec.format, rec.key,
                            rec.payload)
    with pytest.raises(KeyError, match="not this workload's"):
        w.event_ids([rec, other])
