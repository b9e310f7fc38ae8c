"""Slurm's "unset" sentinels by field width (issue 31, class 5).

NO_VAL16/INFINITE16 (0xfffe, 0xffff) are values of Slurm's 32-bit fields: job 65534 is a
job, uid 65534 is ``nobody``, 65535 CPUs are 65535 CPUs. Only a field's own width's
sentinels (and a wider width's, which no value of it can be) mean unset; a number inside a
``{set, infinite, number}`` object is what it says.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from datafiles import vector

from pipeline.core.model import JobEvent
from pipeline.parsers import parse_record
from pipeline.parsers.slurm_common import slurm_int

# slurm/slurm.h.in
NO_VAL16, INFINITE16 = 0xFFFE, 0xFFFF
NO_VAL, INFINITE = 0xFFFFFFFE, 0xFFFFFFFF
NO_VAL64 = 0xFFFFFFFFFFFFFFFE

DATA = Path(__file__).resolve().parents[1] / "data" / "slurm"
JOBCOMP = json.loads(vector("slurm", "jobcomp_22.05_sample.jsonl").read_text().splitlines()[0])
SQUEUE = json.loads(vector("slurm", "squeue_running_22.05.json").read_text())
SQUEUE_41 = json.loads((DATA / "squeue_v0.0.41_24.05.json").read_text())
SACCT = json.loads(vector("slurm", "sacct_25.11.json").read_text())
HOOK = vector("slurm", "hooks", "prolog_ctld_1.env").read_text()
SUBMIT = {"kind": "submit", "time": 1_795_312_702, "job_id": 17, "uid": 1001,
          "partition": "debug"}


def parse(fmt: str, value: Any) -> list[JobEvent]:
    payload = value.encode() if isinstance(value, str) else json.dumps(value).encode()
    return parse_record(fmt, payload, cluster="c", received_at=1_795_312_800.0)


def facts(events: list[JobEvent]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for ev in events:
        out.update(ev.facts)
    return out


def squeue_job(doc: dict[str, Any], **changes: Any) -> dict[str, Any]:
    """``doc`` with its FAILED job (index 1 of the 22.05 vector, 0 of the 24.05 fixture)
    changed, and only that job."""
    jobs = [j for j in doc["jobs"] if j["job_id"] == 2]
    return {**doc, "jobs": [{**jobs[0], **changes}]}


def hook(**changes: str) -> str:
    lines = [ln for ln in HOOK.splitlines() if ln.split("=", 1)[0] not in changes]
    return "\n".join([*lines, *(f"{k}={v}" for k, v in changes.items())]) + "\n"


@pytest.mark.parametrize("value", [NO_VAL16, INFINITE16])
class TestSixteenBitSentinelsAreValuesOf32BitFields:
    def test_jobcomp_job_id_uid_gid_and_cpus(self, value: int) -> None:
        events = parse("slurm-jobcomp", {**JOBCOMP, "jobid": value, "user_id": value,
                                         "group_id": value, "total_cpus": value})
        assert {ev.job_id for ev in events} == {str(value)}
        got = facts(events)
        assert (got["uid"], got["gid"], got["ncores"]) == (value, value, value)

    def test_squeue_job_id_uid_gid(self, value: int) -> None:
        events = parse("slurm-squeue", squeue_job(SQUEUE, job_id=value, user_id=value,
                                                   group_id=value))
        assert {ev.job_id for ev in events} == {str(value)}
        assert (facts(events)["uid"], facts(events)["gid"]) == (value, value)

    def test_squeue_cpus_and_time_limit_in_minutes(self, value: int) -> None:
        events = parse("slurm-squeue", squeue_job(SQUEUE, cpus=value, time_limit=value,
                                                   tres_alloc_str=None, job_resources=None))
        got = facts(events)
        assert (got["ncores"], got["timelimit_s"]) == (value, value * 60)

    def test_sacct_job_id(self, value: int) -> None:
        job = {**SACCT["jobs"][0], "job_id": value}
        events = parse("slurm-sacct", {**SACCT, "jobs": [job]})
        assert {ev.job_id for ev in events} == {str(value)}

    def test_hook_job_id_uid_gid_and_node_count(self, value: int) -> None:
        v = str(value)
        events = parse("slurm-hook", hook(SLURM_JOB_ID=v, SLURM_JOBID=v, SLURM_JOB_UID=v,
                                          SLURM_JOB_GID=v, SLURM_JOB_NUM_NODES=v))
        [ev] = events
        assert ev.job_id == v
        assert (ev.facts["uid"], ev.facts["gid"], ev.facts["nnodes"]) == (value, value, value)

    def test_submit_plugin_job_id_and_uid(self, value: int) -> None:
        [ev] = parse("slurm-submit-plugin", {**SUBMIT, "job_id": value, "uid": value})
        assert (ev.job_id, ev.facts["uid"]) == (str(value), value)

    def test_submit_plugin_time_limit(self, value: int) -> None:
        modify = {**SUBMIT, "kind": "modify", "time_limit": value}
        [ev] = parse("slurm-submit-plugin", modify)
        assert ev.facts["timelimit_s"] == value * 60


@pytest.mark.parametrize("value", [NO_VAL, INFINITE, NO_VAL64])
def test_32_bit_fields_still_read_their_own_sentinels_as_unset(value: int) -> None:
    events = parse("slurm-jobcomp", {**JOBCOMP, "user_id": value, "group_id": value,
                                     "total_cpus": value, "time_limit": value})
    got = facts(events)
    assert not {"uid", "gid", "timelimit_s"} & got.keys()
    assert got["ncores"] == 1  # tres_alloc's, as when total_cpus is unset


@pytest.mark.parametrize("value", [NO_VAL16, INFINITE16])
def test_restart_cnt_is_16_bits_wide_and_its_sentinels_are_unset(value: int) -> None:
    events = parse("slurm-squeue", squeue_job(SQUEUE, restart_cnt=value))
    assert "restart_count" not in facts(events)
    assert not [ev for ev in events if ev.event == "requeue"]
    [ev] = parse("slurm-hook", hook(SLURM_JOB_RESTART_COUNT=str(value)))
    assert "restart_count" not in ev.facts


def test_a_set_number_object_carries_its_own_meaning() -> None:
    """data_parser v0.0.40+: ``set``/``infinite`` say unset and unlimited; the number of a
    set, finite object is a value whatever it is."""
    set_ = {"set": True, "infinite": False, "number": NO_VAL16}
    got = facts(parse("slurm-squeue", squeue_job(SQUEUE_41, cpus=set_, time_limit=set_,
                                                  tres_alloc_str=None, job_resources=None)))
    assert (got["ncores"], got["timelimit_s"]) == (NO_VAL16, NO_VAL16 * 60)
    unset = {"set": False, "infinite": False, "number": 5}
    unlimited = {"set": True, "infinite": True, "number": 0}
    got = facts(parse("slurm-squeue", squeue_job(SQUEUE_41, time_limit=unlimited,
                                                  node_count=unset)))
    assert "timelimit_s" not in got


def test_tres_counts_are_64_bits_wide() -> None:
    job = SACCT["jobs"][0]
    allocated = [*job["tres"]["allocated"],
                 {"type": "gres", "name": "gpu", "id": 1001, "count": NO_VAL16}]
    job = {**job, "tres": {**job["tres"], "allocated": allocated}}
    assert facts(parse("slurm-sacct", {**SACCT, "jobs": [job]}))["ngpus"] == NO_VAL16
    allocated[-1] = {**allocated[-1], "count": NO_VAL64}
    assert "ngpus" not in facts(parse("slurm-sacct", {**SACCT, "jobs": [job]}))


def test_slurm_int_takes_the_fields_width() -> None:
    from pipeline.parsers.slurm_common import UINT16, UINT64

    assert slurm_int(NO_VAL16, "user_id") == NO_VAL16
    assert slurm_int(NO_VAL16, "restart_cnt", sentinels=UINT16) is None
    assert slurm_int(NO_VAL, "mem", sentinels=UINT64) == NO_VAL
    assert slurm_int(NO_VAL64, "mem", sentinels=UINT64) is None
    assert slurm_int(str(INFINITE16), "SLURM_JOB_UID") == INFINITE16
