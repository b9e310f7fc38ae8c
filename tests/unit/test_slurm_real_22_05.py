"""The Slurm parsers on real 22.05 records: ``tests/data/slurm/real-22.05``.

The records test saved them from a running cluster (jobcomp/elasticsearch POSTs, slurmctld
hook environments, squeue and sacct ``--json``). The truth they are checked against is
not parsed by the code under test: ``manifest.json`` says which job is which scenario, and
``sacct.txt`` is ``sacct --parsable2`` text of the same jobs (its times are UTC: the
cluster ran in UTC, as the jobcomp times show).
"""

from __future__ import annotations

import json
from calendar import timegm
from functools import cache
from pathlib import Path
from time import strptime
from typing import Any

import pytest

from pipeline.core.model import JobEvent
from pipeline.fold import fold
from pipeline.parsers import parse_record, split_records
from pipeline.runtime.errors import ParseError

REAL = Path(__file__).resolve().parents[1] / "data" / "slurm" / "real-22.05"
MANIFEST: dict[str, Any] = json.loads((REAL / "manifest.json").read_text())
JOBS: dict[str, str] = MANIFEST["jobs"]
TASKS: list[str] = MANIFEST["array_tasks"]
RAW_IDS = sorted([j for n, j in JOBS.items() if n != "array"] + TASKS, key=int)
NEVER_STARTED = [JOBS["cancelled_pending"], JOBS["dependency_never"]]
STARTED = [j for j in RAW_IDS if j not in NEVER_STARTED]
HOOKS = sorted((REAL / "hooks").glob("*.env"))
#: the captures have no JOBSTREAM_HOOK_TIME (the stand-in hook did not add it): the
#: edge's receive time stands in, as it does for hooks without it
RECEIVED = 1795318700.0

#: file -> its format (the hooks apart)
FILES = {"jobcomp.jsonl": "slurm-jobcomp", "squeue_active.json": "slurm-squeue",
         "squeue_finished.json": "slurm-squeue", "sacct.json": "slurm-sacct"}
#: the sources that state how each job ended
FINAL = ("jobcomp.jsonl", "squeue_finished.json", "sacct.json")


def parse(fmt: str, path: Path, received_at: float | None = RECEIVED) -> list[JobEvent]:
    events: list[JobEvent] = []
    for _, record in split_records(fmt, path.read_bytes()):
        events += parse_record(fmt, record, cluster="fallback", received_at=received_at)
    return events


@cache
def docs(*names: str) -> dict[str, dict[str, Any]]:
    """job id -> document folded from the given files (``hooks`` for all hook files)."""
    events: list[JobEvent] = []
    for name in names:
        if name == "hooks":
            events += [e for p in HOOKS for e in parse("slurm-hook", p)]
        else:
            events += parse(FILES[name], REAL / name)
    return {d["job_id"]: d for d in fold(events)}


def _epoch_ms(text: str) -> int | None:
    if text in ("Unknown", "None", ""):
        return None
    return timegm(strptime(text, "%Y-%m-%dT%H:%M:%S")) * 1000


def _seconds(limit: str) -> int | None:
    """sacct's ``[D-]HH:MM:SS`` time limit; None for UNLIMITED and Partition_Limit."""
    if not limit[:1].isdigit():
        return None
    days, _, hms = limit.rpartition("-")
    h, m, s = (int(x) for x in hms.split(":"))
    return ((int(days) if days else 0) * 24 + h) * 3600 + m * 60 + s


@cache
def sacct_text() -> dict[str, dict[str, str]]:
    """The job lines (not steps) of sacct.txt by raw job id."""
    header, *lines = (REAL / "sacct.txt").read_text().splitlines()
    rows = [dict(zip(header.split("|"), line.split("|"), strict=True)) for line in lines]
    return {r["JobIDRaw"]: r for r in rows if "." not in r["JobIDRaw"]}


# -- every record parses ----------------------------------------------------------------


@pytest.mark.parametrize(("fmt", "path"),
                         [(f, REAL / n) for n, f in FILES.items()]
                         + [("slurm-hook", p) for p in HOOKS],
                         ids=lambda v: getattr(v, "name", v))
def test_every_record_parses_into_events_of_the_manifest_jobs(fmt: str, path: Path) -> None:
    events = parse(fmt, path)
    assert events
    assert {e.job_id for e in events} <= set(RAW_IDS)
    assert {e.cluster for e in events} == {MANIFEST["cluster"]}
    assert {e.source for e in events} == {fmt}


def test_hook_records_without_a_time_are_refused_with_a_reason() -> None:
    with pytest.raises(ParseError) as err:
        parse("slurm-hook", HOOKS[0], received_at=None)
    assert err.value.reason == "missing-time"


@pytest.mark.parametrize("name", [*FILES, "hooks"])
def test_each_source_knows_the_jobs_slurm_showed_it(name: str) -> None:
    # hooks run only for jobs that started; every other source lists every job
    assert sorted(docs(name), key=int) == (STARTED if name == "hooks" else RAW_IDS)


# -- the final records against sacct's text ----------------------------------------------


@pytest.mark.parametrize("name", FINAL)
def test_final_records_agree_with_sacct_text(name: str) -> None:
    for job_id, row in sacct_text().items():
        doc = docs(name)[job_id]
        got = {k: doc.get(k) for k in ("state", "result", "job_name", "user", "group", "bank",
                                       "queue", "qos", "t_submit", "t_start", "t_end")}
        started = job_id in STARTED
        want = {"state": "done", "result": row["State"].split()[0].lower(),
                "job_name": row["JobName"], "user": row["User"], "group": row["Group"],
                "bank": row["Account"], "queue": row["Partition"], "qos": row["QOS"],
                "t_submit": _epoch_ms(row["Submit"]),
                "t_start": _epoch_ms(row["Start"]) if started else None,
                "t_end": _epoch_ms(row["End"])}
        assert got == want, (name, job_id)


@pytest.mark.parametrize("name", FINAL)
def test_allocations_and_limits_agree_with_sacct_text(name: str) -> None:
    for job_id, row in sacct_text().items():
        doc = docs(name)[job_id]
        if job_id in STARTED:
            assert (doc["nnodes"], doc["ncores"], doc["nodelist"]) == \
                (int(row["NNodes"]), int(row["NCPUS"]), [row["NodeList"]]), (name, job_id)
            assert doc["t_eligible"] == _epoch_ms(row["Eligible"]), (name, job_id)
        else:
            assert (doc["nnodes"], doc["nodelist"], doc["t_eligible"]) == (None, None, None)
        limit = _seconds(row["Timelimit"])
        if limit is not None:
            assert doc["timelimit_s"] == limit, (name, job_id)


@pytest.mark.parametrize("name", ["jobcomp.jsonl", "squeue_finished.json"])
def test_exit_codes_agree_with_sacct_text(name: str) -> None:
    for job_id, row in sacct_text().items():
        code = int(row["ExitCode"].split(":")[0])
        assert docs(name)[job_id]["exit_code"] == code, (name, job_id)


def test_squeue_has_the_signal_that_killed_the_batch_step() -> None:
    # the job lines say 0:0; squeue's wait status and the batch steps say signal 15
    steps = (REAL / "sacct.txt").read_text()
    for name in ("timeout", "cancelled_running"):
        assert f"{JOBS[name]}.batch|batch|||physics|||CANCELLED|0:15|" in steps
        assert docs("squeue_finished.json")[JOBS[name]]["signal"] == 15
        assert docs("jobcomp.jsonl")[JOBS[name]]["signal"] is None


def test_sacct_json_exit_codes_of_22_05_are_left_out() -> None:
    # dbv0.0.38 says SUCCESS/0 for the job that exited 3 (sacct.txt: 3:0)
    assert sacct_text()[JOBS["failed"]]["ExitCode"] == "3:0"
    assert all(d["exit_code"] is None for d in docs("sacct.json").values())


def test_array_tasks_by_raw_id_tied_to_their_array() -> None:
    for name in (*FINAL, "squeue_active.json", "hooks"):
        tasks = {j: (d["array_id"], d["array_task"]) for j, d in docs(name).items()
                 if j in TASKS}
        want = {row["JobIDRaw"]: tuple(row["JobID"].split("_")) for row in
                sacct_text().values() if "_" in row["JobID"]}
        assert {j: (a, str(t)) for j, (a, t) in tasks.items()} == want, name
        others = [(d["array_id"], d["array_task"]) for j, d in docs(name).items()
                  if j not in TASKS]
        assert set(others) == {(None, None)}, name


# -- the scenarios of the manifest ---------------------------------------------------------

#: scenario -> (result, exit code, cancelled before start), as its manifest entry says
SCENARIOS = {
    "completed": ("completed", 0, False),
    "failed": ("failed", 3, False),
    "cancelled_running": ("cancelled", 0, False),
    "cancelled_pending": ("cancelled", 0, True),
    "timeout": ("timeout", 0, False),
    "dependency_never": ("cancelled", 0, True),
}


def test_the_manifest_describes_these_scenarios() -> None:
    assert set(MANIFEST["scenarios"]) == {*SCENARIOS, "array"}
    assert "exit 3" in MANIFEST["scenarios"]["failed"]
    assert "TIMEOUT" in MANIFEST["scenarios"]["timeout"]


@pytest.mark.parametrize("name", list(SCENARIOS))
def test_all_sources_together_give_the_scenario_ending(name: str) -> None:
    doc = docs(*FILES, "hooks")[JOBS[name]]
    result, exit_code, before_start = SCENARIOS[name]
    assert (doc["state"], doc["result"], doc["exit_code"], doc["cancelled_before_start"]) \
        == ("done", result, exit_code, before_start)


def test_array_tasks_completed() -> None:
    all_docs = docs(*FILES, "hooks")
    assert sorted(all_docs[j]["array_task"] for j in TASKS) == [1, 2, 3]
    assert {(all_docs[j]["state"], all_docs[j]["result"], all_docs[j]["array_id"])
            for j in TASKS} == {("done", "completed", JOBS["array"])}


def test_squeue_while_jobs_pend_and_run() -> None:
    active = docs("squeue_active.json")
    for name in ("failed", "cancelled_pending", "dependency_never"):
        assert (active[JOBS[name]]["state"], active[JOBS[name]]["t_start"]) == \
            ("pending", None), name
    for name in ("timeout", "cancelled_running", "completed"):
        assert active[JOBS[name]]["state"] == "running", name
    # the array tasks were COMPLETING: ended, but squeue does not say how yet
    assert {active[j]["result"] for j in TASKS} == {None}


def test_hooks_give_placement_and_the_epilog_exit_code() -> None:
    hooks = docs("hooks")
    assert hooks[JOBS["failed"]]["exit_code"] == 3
    assert {(d["state"], d["result"]) for d in hooks.values()} == {("completing", None)}
    for job_id, doc in hooks.items():
        row = sacct_text()[job_id]
        assert (doc["user"], doc["bank"], doc["queue"], doc["nodelist"]) == \
            (row["User"], row["Account"], row["Partition"], [row["NodeList"]]), job_id
