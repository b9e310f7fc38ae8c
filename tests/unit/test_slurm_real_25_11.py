"""The Slurm parsers on the real 25.11.7 recording: ``tests/data/vectors/slurm``.

A real Slurm 25.11.7 built with jobcomp/kafka (``enable_job_start``), data_parser v0.0.44:
the 33 message values jobcomp/kafka published (16 start records, 17 finish records),
``squeue --json`` at two moments, ``sacct --json`` and ``scontrol show job --json`` after
all 17 jobs ended. The truth they are checked against is not parsed by the code under
test: the vector README says which job is which (names, array ``-a 1-3``, the held job
cancelled while held, account chem / partition short / qos high / ``-t 10`` of ``acct``,
``-c 2`` of ``multi``, ``kill -9 $$`` of ``signal``, ``cancelrun``, ``tlimit`` TIMEOUT);
the rest of the table below is what that scenario means, written out by hand.
``scontrol show job --json`` is the same job-info response as ``squeue --json``
(docs/slurm.md, "sacct, squeue and scontrol"), so it is read as ``slurm-squeue``.
"""

from __future__ import annotations

import json
import random
from functools import cache
from typing import Any, NamedTuple

import pytest
from datafiles import vector

from pipeline.core.model import JobEvent
from pipeline.fold import fold
from pipeline.parsers import parse_record, split_records

CLUSTER = "kafkatest"
JOBCOMP = "jobcomp_kafka_25.11.jsonl"
#: file -> its format
FILES = {JOBCOMP: "slurm-jobcomp", "squeue_25.11.json": "slurm-squeue",
         "squeue_25.11_phase2.json": "slurm-squeue", "sacct_25.11.json": "slurm-sacct",
         "scontrol_show_job_25.11.json": "slurm-squeue"}
#: the files taken after every job ended
FINAL = (JOBCOMP, "sacct_25.11.json", "scontrol_show_job_25.11.json")


class Job(NamedTuple):
    name: str
    result: str
    exit_code: int
    bank: str = "physics"
    queue: str = "debug"
    qos: str = "normal"
    #: the array and task it was (``-a 1-3``: the task started last keeps the array's id)
    array: tuple[str, int] | None = None
    user: str = "s25user"
    started: bool = True


#: job id -> what the README's scenario says about it
JOBS: dict[str, Job] = {
    "1": Job("ok", "completed", 0),
    "2": Job("fail3", "failed", 3),
    "3": Job("arr", "completed", 0, array=("3", 3)),
    "4": Job("held", "cancelled", 0, started=False),
    "5": Job("acct", "completed", 0, bank="chem", queue="short", qos="high"),
    "6": Job("multi", "completed", 0),
    "7": Job("signal", "failed", 0),
    "8": Job("rootjob", "completed", 0, bank="root", user="root"),
    "9": Job("arr", "completed", 0, array=("3", 1)),
    "10": Job("arr", "completed", 0, array=("3", 2)),
    "11": Job("cancelrun", "cancelled", 0),
    "12": Job("tlimit", "timeout", 0),
    "13": Job("late", "completed", 0),
    "14": Job("down-ok", "completed", 0),
    "15": Job("down-exit2", "failed", 2),
    "16": Job("down-arr", "completed", 0, bank="chem", array=("16", 1)),
    "17": Job("down-arr", "completed", 0, bank="chem", array=("16", 0)),
}
STARTED = [j for j, job in JOBS.items() if job.started]


def parse(name: str) -> list[JobEvent]:
    fmt = FILES[name]
    events: list[JobEvent] = []
    for _, record in split_records(fmt, vector("slurm", name).read_bytes()):
        events += parse_record(fmt, record, cluster="fallback")
    return events


@cache
def docs(*names: str) -> dict[str, dict[str, Any]]:
    """job id -> document folded from the given files together."""
    return {d["job_id"]: d for d in fold(e for n in names for e in parse(n))}


def jobcomp_records() -> list[dict[str, Any]]:
    lines = vector("slurm", JOBCOMP).read_text().splitlines()
    return [json.loads(line) for line in lines if line.strip()]


# -- every record parses ----------------------------------------------------------------


@pytest.mark.parametrize("name", list(FILES))
def test_every_record_parses_into_events_of_the_recorded_jobs(name: str) -> None:
    events = parse(name)
    assert events
    assert {e.job_id for e in events} <= set(JOBS)
    assert {e.cluster for e in events} == {CLUSTER}
    assert {e.source for e in events} == {FILES[name]}


@pytest.mark.parametrize("name", ["squeue_25.11.json", "squeue_25.11_phase2.json",
                                  "sacct_25.11.json", "scontrol_show_job_25.11.json"])
def test_the_json_files_are_data_parser_v0_0_44_of_25_11(name: str) -> None:
    # the shapes under test, not older ones by mistake
    meta = json.loads(vector("slurm", name).read_text())["meta"]
    assert (meta["plugin"]["data_parser"], meta["slurm"]["release"]) == \
        ("data_parser/v0.0.44", "25.11.7")


def test_jobcomp_start_and_finish_records() -> None:
    records = jobcomp_records()
    starts = [r for r in records if r["state"] is None]
    assert (len(starts), len(records) - len(starts)) == (16, 17)
    for record in records:
        events = parse_record("slurm-jobcomp", json.dumps(record).encode(), cluster="x")
        names = {e.event for e in events}
        # a start record says the job started and nothing of its end
        assert ("end" in names) == (record["state"] is not None), record["jobid"]
        assert ("start" in names) == JOBS[str(record["jobid"])].started, record["jobid"]
    # every job that ran sent a start record; the held job never did
    assert sorted((str(r["jobid"]) for r in starts), key=int) == STARTED


# -- each final source, and all of them folded together ------------------------------------


def _expected(job_id: str) -> dict[str, Any]:
    job = JOBS[job_id]
    return {"state": "done", "result": job.result, "exit_code": job.exit_code,
            "job_name": job.name, "user": job.user, "bank": job.bank, "queue": job.queue,
            "qos": job.qos, "array_id": job.array[0] if job.array else None,
            "array_task": job.array[1] if job.array else None,
            "cancelled_before_start": not job.started}


@pytest.mark.parametrize("names", [(n,) for n in FINAL] + [tuple(FILES)],
                         ids=lambda n: "+".join(n) if len(n) == 1 else "all")
def test_final_sources_give_every_job_its_ending(names: tuple[str, ...]) -> None:
    got = docs(*names)
    assert sorted(got, key=int) == sorted(JOBS, key=int)
    for job_id in JOBS:
        doc = got[job_id]
        assert {k: doc.get(k) for k in _expected(job_id)} == _expected(job_id), \
            (names, job_id)


@pytest.mark.parametrize("names", [(n,) for n in FINAL] + [tuple(FILES)],
                         ids=lambda n: "+".join(n) if len(n) == 1 else "all")
def test_started_jobs_ran_on_the_node_and_the_held_one_never_did(
        names: tuple[str, ...]) -> None:
    got = docs(*names)
    for job_id, job in JOBS.items():
        doc = got[job_id]
        if job.started:
            assert doc["t_start"] is not None and doc["t_end"] >= doc["t_start"], job_id
            assert (doc["nnodes"], doc["nodelist"]) == (1, ["vm"]), job_id
            assert doc["ncores"] == (2 if job.name == "multi" else 1), job_id
            assert doc["t_start"] >= doc["t_submit"], job_id
        else:
            assert (doc["t_start"], doc["nnodes"], doc["nodelist"], doc["run_s"]) == \
                (None, None, None, None)
            assert doc["t_end"] >= doc["t_submit"]


@pytest.mark.parametrize("names", [(n,) for n in FINAL] + [tuple(FILES)],
                         ids=lambda n: "+".join(n) if len(n) == 1 else "all")
def test_time_limits(names: tuple[str, ...]) -> None:
    got = docs(*names)
    assert got["5"]["timelimit_s"] == 600   # -t 10 in the short partition
    assert got["12"]["timelimit_s"] == 60   # tlimit: one minute, then TIMEOUT
    assert got["12"]["run_s"] >= 60
    # the debug partition is UNLIMITED: no limit, but for the task backfill started,
    # which Slurm gives 365 days (as 22.05 did, docs/slurm.md, "jobcomp records")
    assert got["17"]["timelimit_s"] == 365 * 86400
    unlimited = set(JOBS) - {"5", "12", "17"}
    assert {got[j]["timelimit_s"] for j in unlimited} == {None}


def test_the_signal_that_ended_a_job() -> None:
    # kill -9 $$: the job line says 0:9 in jobcomp and sacct alike
    for name in FINAL:
        assert docs(name)["7"]["signal"] == 9, name
    # scontrol keeps the SIGTERM that ended the cancelled and the timed-out job
    scontrol = docs("scontrol_show_job_25.11.json")
    assert (scontrol["11"]["signal"], scontrol["12"]["signal"]) == (15, 15)
    assert docs(JOBCOMP)["11"]["signal"] is None


def test_sacct_of_25_11_has_trusted_exit_codes() -> None:
    # unlike 22.05's dbv0.0.38 (test_slurm_real_22_05), v0.0.44 exit codes are right
    sacct = docs("sacct_25.11.json")
    assert {j: sacct[j]["exit_code"] for j in ("2", "15")} == {"2": 3, "15": 2}


def test_order_of_records_does_not_matter() -> None:
    events = [e for n in FILES for e in parse(n)]
    random.Random(2511).shuffle(events)
    assert fold(events) == fold(e for n in FILES for e in parse(n))


# -- squeue while jobs pend and run --------------------------------------------------------


def test_squeue_while_jobs_pend_and_run() -> None:
    first = docs("squeue_25.11.json")
    assert first["1"]["state"] == "running"
    for job_id in ("4", "5", "6", "7", "8"):
        # pending: squeue's start_time is only an expectation (or 0 for the held job)
        assert (first[job_id]["state"], first[job_id]["t_start"]) == ("pending", None)
    # the pending array meta-record: the array's id, no task yet
    assert (first["3"]["state"], first["3"]["array_id"], first["3"]["array_task"]) == \
        ("pending", "3", None)
    assert (first["5"]["bank"], first["5"]["queue"], first["5"]["qos"],
            first["5"]["timelimit_s"]) == ("chem", "short", "high", 600)
    second = docs("squeue_25.11_phase2.json")
    assert {j: d["state"] for j, d in second.items()} == \
        {"11": "running", "12": "running", "13": "pending"}
    assert second["12"]["timelimit_s"] == 60


def test_the_held_job_never_became_eligible() -> None:
    for names in [("sacct_25.11.json",), tuple(FILES)]:
        assert docs(*names)["4"]["t_eligible"] is None, names
        assert all(docs(*names)[j]["t_eligible"] is not None for j in STARTED), names



def test_the_final_sources_agree_on_everything_they_all_tell() -> None:
    # differences allowed only where a source is silent (sacct has no uid, jobcomp no
    # restart count) and for the SIGTERM scontrol keeps (test_the_signal_that_ended_a_job)
    final = [docs(n) for n in FINAL]
    for job_id in JOBS:
        keys = set.intersection(*(set(d[job_id]) for d in final)) - \
            {"revision", "updated_at", "signal"}
        for key in keys:
            told = {repr(d[job_id][key]) for d in final if d[job_id][key] is not None}
            assert len(told) <= 1, (job_id, key, told)
