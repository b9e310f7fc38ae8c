"""The Slurm parsers against the real 22.05 vectors and the derived fixtures.

Real records: tests/data/vectors/slurm (values stated in its README).
Derived records: tests/data/slurm (see its README: each is built from a real vector and the
shapes docs/slurm.md describes, not produced by a running Slurm).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from datafiles import vector

from pipeline.core.model import CANONICAL_EVENTS, FACT_FIELDS, RESULTS, JobEvent, make_event_id
from pipeline.parsers import parse_record, split_records
from pipeline.parsers.slurm import parse_hook, parse_jobcomp, parse_sacct, parse_squeue
from pipeline.parsers.slurm_common import decode_json, slurm_int
from pipeline.runtime.errors import ParseError

DATA = Path(__file__).resolve().parents[1] / "data" / "slurm"
T = 1795312702.0  # 2026-11-22T01:58:22Z, submit time of the vector jobs

Parser = Callable[..., list[JobEvent]]


def parse_file(fmt: str, path: Path, received_at: float | None = None) -> list[JobEvent]:
    events: list[JobEvent] = []
    for _, record in split_records(fmt, path.read_bytes()):
        events.extend(parse_record(fmt, record, cluster="fallback", received_at=received_at))
    return events


def one(events: list[JobEvent], job_id: str, event: str) -> JobEvent:
    found = [e for e in events if e.job_id == job_id and e.event == event]
    assert len(found) == 1, f"{len(found)} {event} events for job {job_id}"
    return found[0]


def names(events: list[JobEvent], job_id: str) -> list[str]:
    return [e.event for e in events if e.job_id == job_id]


def jobcomp_lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def jobcomp(record: dict[str, Any]) -> list[JobEvent]:
    return parse_jobcomp(json.dumps(record).encode(), cluster="fallback")


VECTOR_JOBCOMP = vector("slurm", "jobcomp_22.05_sample.jsonl")
VECTOR_SQUEUE = vector("slurm", "squeue_running_22.05.json")

ALL_INPUTS = [
    ("slurm-jobcomp", VECTOR_JOBCOMP),
    ("slurm-squeue", VECTOR_SQUEUE),
    *[("slurm-hook", p) for p in sorted(vector("slurm", "hooks").glob("*.env"))],
    *[("slurm-jobcomp", p) for p in sorted(DATA.glob("jobcomp_*"))],
    *[("slurm-squeue", p) for p in sorted(DATA.glob("squeue_*"))],
    *[("slurm-sacct", p) for p in sorted(DATA.glob("sacct_*"))],
    *[("slurm-hook", p) for p in sorted(DATA.glob("hook_*"))],
]


# --------------------------------------------------------------------------- every input

@pytest.mark.parametrize(("fmt", "path"), ALL_INPUTS, ids=lambda v: getattr(v, "name", v))
class TestEveryInput:
    def test_events_follow_the_model(self, fmt: str, path: Path) -> None:
        events = parse_file(fmt, path, received_at=T + 1000)
        assert events
        for e in events:
            assert e.scheduler == "slurm"
            assert e.source == fmt
            assert e.event in CANONICAL_EVENTS
            assert isinstance(e.timestamp, float) and e.timestamp > 1.7e9
            assert e.job_id.isdigit()
            for key, value in e.facts.items():
                assert key in FACT_FIELDS, key
                assert value is not None and not isinstance(value, bool), key
                assert isinstance(value, FACT_FIELDS[key]), (key, value)
            if "result" in e.facts:
                assert e.facts["result"] in RESULTS
            json.dumps(e.to_dict())  # what `jobstream parse` prints

    def test_parsing_twice_gives_the_same_ids(self, fmt: str, path: Path) -> None:
        first = parse_file(fmt, path, received_at=T + 1000)
        again = parse_file(fmt, path, received_at=T + 1000)
        assert [e.event_id for e in first] == [e.event_id for e in again]

    def test_events_of_one_record_have_distinct_ids(self, fmt: str, path: Path) -> None:
        for _, record in split_records(fmt, path.read_bytes()):
            events = parse_record(fmt, record, cluster="c", received_at=T + 1000)
            assert len({e.event_id for e in events}) == len(events)

    def test_no_script_or_environment_goes_downstream(self, fmt: str, path: Path) -> None:
        for e in parse_file(fmt, path, received_at=T + 1000):
            text = json.dumps(e.to_dict())
            assert "#!/bin/bash" not in text and "#!\\/bin\\/bash" not in text
            assert "secret" not in text and "hunter2" not in text
            assert "PWD" not in e.context and "script" not in (e.record or {})


# --------------------------------------------------------------------------- real vectors

class TestJobcompVector:
    events = parse_file("slurm-jobcomp", VECTOR_JOBCOMP)

    def test_failed_job_2(self) -> None:
        end = one(self.events, "2", "end")
        assert end.cluster == "testcluster"
        assert end.timestamp == T + 2
        assert end.facts["result"] == "failed"
        assert end.facts["exit_code"] == 3 and "signal" not in end.facts
        assert {k: end.facts[k] for k in ("user", "uid", "group", "gid", "bank", "queue", "qos",
                                          "job_name")} == {
            "user": "alice", "uid": 1001, "group": "alice", "gid": 1001, "bank": "physics",
            "queue": "short", "qos": "high", "job_name": "fail-job"}
        assert end.facts["nodelist"] == ["vm"]
        assert (end.facts["nnodes"], end.facts["ncores"]) == (1, 1)
        assert (end.facts["nodes_req"], end.facts["cores_req"]) == (1, 1)
        assert end.facts["t_submit"] == end.facts["t_start"] == T
        assert end.facts["t_end"] == T + 2

    def test_time_limit_is_seconds_in_jobcomp(self) -> None:
        # --time=10 (minutes) is written as time_limit 600 by jobcomp
        # (docs/slurm.md, "jobcomp records")
        assert one(self.events, "2", "end").facts["timelimit_s"] == 600

    def test_one_record_gives_submit_eligible_start_end(self) -> None:
        assert names(self.events, "2") == ["submit", "eligible", "start", "end"]
        assert one(self.events, "2", "start").facts["nodelist"] == ["vm"]
        assert "result" not in one(self.events, "2", "start").facts

    def test_array_task_keeps_its_raw_id(self) -> None:
        end = one(self.events, "10", "end")
        assert (end.facts["array_id"], end.facts["array_task"]) == ("3", 1)
        assert end.facts["result"] == "completed"
        assert "timelimit_s" not in end.facts  # UNLIMITED partition: no time_limit key
        assert one(self.events, "10", "start").timestamp == T + 8  # @queue_wait 8

    def test_root_job_1(self) -> None:
        end = one(self.events, "1", "end")
        assert (end.facts["user"], end.facts["uid"], end.facts["bank"]) == ("root", 0, "root")
        assert (end.facts["result"], end.facts["exit_code"]) == ("completed", 0)
        assert end.facts["queue"] == "debug"

    def test_end_carries_the_record_without_script(self) -> None:
        record = one(self.events, "2", "end").record
        assert record is not None
        assert "script" not in record
        assert record["parent_accounts"] == "/root/research/physics/physics"
        assert record["exit_code"] == "3:0"
        assert one(self.events, "2", "submit").record is None

    def test_event_id_is_made_from_the_documented_parts(self) -> None:
        end = one(self.events, "2", "end")
        assert end.event_id == make_event_id("testcluster", "slurm", "2", "end", T + 2,
                                             "jobcomp")

    def test_trailing_nul_byte_of_old_kafka_plugin(self) -> None:
        line = VECTOR_JOBCOMP.read_bytes().splitlines()[0]
        plain = parse_jobcomp(line, cluster="c")
        with_nul = parse_jobcomp(line + b"\x00", cluster="c")
        assert [e.to_dict() for e in with_nul] == [e.to_dict() for e in plain]


class TestSqueueVector:
    events = parse_file("slurm-squeue", VECTOR_SQUEUE)

    def test_running_job_1_started_and_not_ended(self) -> None:
        assert names(self.events, "1") == ["submit", "eligible", "start"]
        start = one(self.events, "1", "start")
        assert start.facts["nodelist"] == ["vm"]
        assert (start.facts["user"], start.facts["uid"], start.facts["bank"]) == ("root", 0, "root")
        # time_limit null is UNLIMITED; end_time is only start + 365 days
        assert "timelimit_s" not in start.facts

    def test_failed_job_2_exit_code_from_wait_status(self) -> None:
        end = one(self.events, "2", "end")
        assert end.timestamp == T + 2
        assert (end.facts["result"], end.facts["exit_code"]) == ("failed", 3)  # 768
        assert (end.facts["bank"], end.facts["queue"], end.facts["qos"]) == (
            "physics", "short", "high")
        assert (end.facts["user"], end.facts["uid"]) == ("alice", 1001)
        assert end.facts["timelimit_s"] == 600  # time_limit 10 is minutes in squeue

    def test_pending_array_meta_record_gives_events_for_its_own_id_only(self) -> None:
        assert names(self.events, "3") == ["submit", "eligible", "reason"]
        assert one(self.events, "3", "reason").context["state_reason"] == "Resources"
        submit = one(self.events, "3", "submit")
        assert submit.facts["array_id"] == "3" and "array_task" not in submit.facts
        assert submit.context["array_task_string"] == "1-3"
        assert {e.job_id for e in self.events} == {"1", "2", "3"}

    def test_old_job_resources_layout(self) -> None:
        doc = json.loads(VECTOR_SQUEUE.read_text())
        del doc["jobs"][0]["nodes"]
        events = parse_squeue(json.dumps(doc).encode(), cluster="c")
        assert one(events, "1", "start").facts["nodelist"] == ["vm"]
        doc["jobs"][0]["job_resources"]["nodes"] = None
        events = parse_squeue(json.dumps(doc).encode(), cluster="c")
        assert one(events, "1", "start").facts["nodelist"] == ["vm"]  # allocated_nodes


class TestHookVectors:
    def test_prolog_is_the_allocation(self) -> None:
        events = parse_file("slurm-hook", vector("slurm", "hooks", "prolog_ctld_1.env"),
                            received_at=T + 0.5)
        [alloc] = events
        assert (alloc.event, alloc.job_id, alloc.cluster) == ("alloc", "1", "testcluster")
        assert alloc.timestamp == T + 0.5
        assert alloc.facts == {
            "job_name": "ok-job", "user": "root", "uid": 0, "group": "root", "gid": 0,
            "bank": "root", "queue": "debug", "cwd": "/home/slurmtest/jobs",
            "nodelist": ["vm"], "nnodes": 1, "ncores": 1, "restart_count": 0}
        assert alloc.event_id == make_event_id("testcluster", "slurm", "1", "alloc", T + 0.5,
                                               "hook")

    def test_only_used_slurm_keys_stay_in_context(self) -> None:
        [alloc] = parse_file("slurm-hook", vector("slurm", "hooks", "prolog_ctld_1.env"),
                             received_at=T)
        assert all(k.startswith("SLURM_") for k in alloc.context)
        assert "SLURM_JOB_COMMENT" not in alloc.context  # user text, not needed
        assert "SLURM_JOB_STDOUT" not in alloc.context
        assert alloc.context["SLURM_SCRIPT_CONTEXT"] == "prolog_slurmctld"

    def test_epilog_of_failed_job_2(self) -> None:
        [end] = parse_file("slurm-hook", vector("slurm", "hooks", "epilog_ctld_2.env"),
                           received_at=T + 3)
        assert (end.event, end.job_id) == ("end", "2")
        assert end.facts["exit_code"] == 3 and "signal" not in end.facts
        assert "result" not in end.facts  # the environment does not state it
        assert (end.facts["user"], end.facts["uid"], end.facts["bank"], end.facts["queue"]) == (
            "alice", 1001, "physics", "short")

    def test_epilog_of_job_1(self) -> None:
        [end] = parse_file("slurm-hook", vector("slurm", "hooks", "epilog_ctld_1.env"),
                           received_at=T + 21)
        assert (end.facts["exit_code"], end.facts["user"]) == (0, "root")

    def test_hook_without_any_time_is_rejected(self) -> None:
        data = vector("slurm", "hooks", "epilog_ctld_1.env").read_bytes()
        with pytest.raises(ParseError) as err:
            parse_hook(data, cluster="c")
        assert err.value.reason == "missing-time"


# --------------------------------------------------------------------------- jobcomp versions

class TestJobcompVersions:
    def test_25_05_finish_reads_like_22_05(self) -> None:
        events = parse_file("slurm-jobcomp", DATA / "jobcomp_25.05_kafka_finish.json")
        new = one(events, "2", "end").facts
        old = one(parse_file("slurm-jobcomp", VECTOR_JOBCOMP), "2", "end").facts
        assert {k: v for k, v in new.items() if k != "cwd"} == {
            k: v for k, v in old.items() if k != "cwd"}

    def test_25_05_start_record_gives_a_start_and_no_end(self) -> None:
        events = parse_file("slurm-jobcomp", DATA / "jobcomp_25.05_kafka_start.json")
        assert names(events, "2") == ["submit", "eligible", "start"]
        start = one(events, "2", "start")
        assert start.facts["nodelist"] == ["vm"] and start.facts["t_start"] == T
        assert start.record is not None and start.record["state"] is None
        # the same moment as the finish record's start: same id, the dedupe keeps one
        finish = parse_file("slurm-jobcomp", DATA / "jobcomp_25.05_kafka_finish.json")
        assert start.event_id == one(finish, "2", "start").event_id

    def test_26_05_sluid_in_context(self) -> None:
        events = parse_file("slurm-jobcomp", DATA / "jobcomp_26.05_sluid.json")
        assert all(e.context["sluid"] == "01JQ8Z5V6N4KX3T2R1P0M9B8A7" for e in events)
        assert one(events, "2", "end").record["admin_comment"] == "site-uuid=5d1c"

    @pytest.mark.parametrize("name", ["jobcomp_cancelled_pending.json",
                                      "jobcomp_cancelled_pending_unknown_start.json"])
    def test_cancelled_before_start_has_no_start(self, name: str) -> None:
        events = parse_file("slurm-jobcomp", DATA / name)
        assert names(events, "5") == ["submit", "eligible", "end"]
        end = one(events, "5", "end")
        assert end.facts["result"] == "cancelled"
        assert end.context["never_started"] is True
        for key in ("t_start", "nodelist", "nnodes", "ncores"):
            assert key not in end.facts

    def test_zero_length_run_with_nodes_did_start(self) -> None:
        record = json.loads((DATA / "jobcomp_cancelled_pending.json").read_text())
        record["nodes"] = "vm"
        assert names(jobcomp(record), "5") == ["submit", "eligible", "start", "end"]

    def test_state_to_result(self) -> None:
        events = parse_file("slurm-jobcomp", DATA / "jobcomp_states.jsonl")
        results = {e.job_id: (e.facts["result"], e.facts["exit_code"], e.facts.get("signal"))
                   for e in events if e.event == "end"}
        assert results == {
            "21": ("timeout", 0, None), "22": ("oom", 0, 125), "23": ("node_fail", 0, 9),
            "24": ("preempted", 0, 15), "25": ("failed", 0, None), "26": ("failed", 0, None),
            "27": ("cancelled", 0, 15)}

    def test_cancelled_by_uid_wording(self) -> None:
        record = jobcomp_lines(VECTOR_JOBCOMP)[0]
        record["state"] = "CANCELLED by 0"
        assert one(jobcomp(record), "2", "end").facts["result"] == "cancelled"

    def test_gpus_nodes_and_cores_from_tres(self) -> None:
        events = parse_file("slurm-jobcomp", DATA / "jobcomp_states.jsonl")
        end = one(events, "23", "end").facts
        assert end["nodelist"] == ["node01", "node02", "node03", "node04"]
        assert (end["nnodes"], end["ncores"], end["ngpus"]) == (4, 128, 8)
        assert (end["nodes_req"], end["cores_req"], end["gpus_req"]) == (4, 128, 8)
        assert one(events, "21", "end").facts["timelimit_s"] == 60

    def test_requeued_run_is_a_requeue_not_an_end(self) -> None:
        rq, rq_masked, final = jobcomp_lines(DATA / "jobcomp_requeued.jsonl")
        for record in (rq, rq_masked):
            events = jobcomp(record)
            assert names(events, "30") == ["submit", "eligible", "start", "requeue"]
            requeue = one(events, "30", "requeue")
            assert requeue.timestamp == T + 100 and "result" not in requeue.facts
        events = jobcomp(final)
        assert names(events, "30") == ["submit", "eligible", "start", "end"]
        assert one(events, "30", "submit").timestamp == T + 101  # the rerun's own submit
        assert one(events, "30", "end").facts["result"] == "completed"

    def test_het_components(self) -> None:
        events = parse_file("slurm-jobcomp", DATA / "jobcomp_het_cancelled.jsonl")
        ends = {e.job_id: e.facts for e in events if e.event == "end"}
        assert {j: (f["het_id"], f["het_offset"]) for j, f in ends.items()} == {
            "40": ("40", 0), "41": ("40", 1)}
        assert "start" not in [e.event for e in events]

    def test_non_het_jobs_get_no_het_facts(self) -> None:
        end = one(parse_file("slurm-jobcomp", VECTOR_JOBCOMP), "2", "end")
        assert "het_id" not in end.facts and "het_offset" not in end.facts
        assert "array_id" not in end.facts

    def test_old_pack_names(self) -> None:
        end = one(parse_file("slurm-jobcomp", DATA / "jobcomp_pack_only.json"), "51", "end")
        assert (end.facts["het_id"], end.facts["het_offset"]) == ("50", 1)

    def test_requested_partition_list_is_not_a_queue(self) -> None:
        end = one(parse_file("slurm-jobcomp", DATA / "jobcomp_partition_list.json"), "60", "end")
        assert "queue" not in end.facts
        assert end.context["partition"] == "short,debug"

    def test_epoch_numbers_read_like_utc_strings(self) -> None:
        events = parse_file("slurm-jobcomp", DATA / "jobcomp_epoch_times.json")
        assert [(e.event, e.timestamp) for e in events] == [
            ("submit", T), ("eligible", T), ("start", T), ("end", T + 2)]

    def test_utc_strings_are_utc(self) -> None:
        record = jobcomp_lines(VECTOR_JOBCOMP)[0]
        record["@submit"] = "1970-01-02T00:00:00"
        assert one(jobcomp(record), "2", "submit").timestamp == 86400.0

    def test_resize_record(self) -> None:
        events = parse_file("slurm-jobcomp", DATA / "jobcomp_resizing.json")
        assert names(events, "62") == ["submit", "eligible", "resource-update"]

    def test_record_private_fields_removed(self) -> None:
        record = jobcomp_lines(VECTOR_JOBCOMP)[0]
        record["environment"] = {"TOKEN": "x"}
        end = one(jobcomp(record), "2", "end")
        assert end.record is not None
        assert "environment" not in end.record and "script" not in end.record

    def test_cluster_argument_when_record_has_none(self) -> None:
        record = jobcomp_lines(VECTOR_JOBCOMP)[0]
        del record["cluster"]
        assert {e.cluster for e in jobcomp(record)} == {"fallback"}


# --------------------------------------------------------------------------- squeue versions

SQUEUE_SHAPES = [VECTOR_SQUEUE, DATA / "squeue_v0.0.39_23.02.json",
                 DATA / "squeue_v0.0.40_23.11.json"]


class TestSqueueVersions:
    @pytest.mark.parametrize("path", SQUEUE_SHAPES[1:], ids=lambda p: p.name)
    def test_every_shape_reads_like_the_22_05_vector(self, path: Path) -> None:
        def summary(events: list[JobEvent]) -> list[tuple[str, str, float, dict[str, Any]]]:
            return [(e.job_id, e.event, e.timestamp, dict(e.facts)) for e in events]
        assert summary(parse_file("slurm-squeue", path)) == summary(
            parse_file("slurm-squeue", VECTOR_SQUEUE))

    def test_24_05_running_gpu_job(self) -> None:
        events = parse_file("slurm-squeue", DATA / "squeue_v0.0.41_24.05.json")
        start = one(events, "70", "start")
        assert start.timestamp == T + 560
        assert start.facts["nodelist"] == ["node01", "node02"]
        assert (start.facts["nnodes"], start.facts["ncores"], start.facts["ngpus"]) == (2, 16, 4)
        assert start.facts["gpus_req"] == 4
        assert start.facts["timelimit_s"] == 7200  # 120 minutes
        assert "end" not in names(events, "70")

    def test_requeue_events_one_per_restart_index(self) -> None:
        events = parse_file("slurm-squeue", DATA / "squeue_v0.0.41_24.05.json")
        requeues = [e for e in events if e.job_id == "70" and e.event == "requeue"]
        assert [e.facts["restart_count"] for e in requeues] == [1, 2]
        assert len({e.event_id for e in requeues}) == 2
        assert all(e.timestamp == T + 500 for e in requeues)  # the current submit time

    def test_24_05_job_resources_layout(self) -> None:
        doc = json.loads((DATA / "squeue_v0.0.41_24.05.json").read_text())
        job = doc["jobs"][1]
        del job["nodes"]
        events = parse_squeue(json.dumps(doc).encode(), cluster="c")
        assert one(events, "70", "start").facts["nodelist"] == ["node01", "node02"]
        del job["job_resources"]["nodes"]["list"]
        events = parse_squeue(json.dumps(doc).encode(), cluster="c")
        assert one(events, "70", "start").facts["nodelist"] == ["node01", "node02"]

    def test_split_off_array_task_and_state_list_with_flags(self) -> None:
        events = parse_file("slurm-squeue", DATA / "squeue_v0.0.41_24.05.json")
        start = one(events, "11", "start")
        assert (start.facts["array_id"], start.facts["array_task"]) == ("3", 2)
        assert "end" not in names(events, "11")  # COMPLETING: result not known yet
        meta = one(events, "3", "submit")
        assert "array_task" not in meta.facts and meta.context["array_task_string"] == "3"

    def test_exit_object_of_v0_0_41(self) -> None:
        events = parse_file("slurm-squeue", DATA / "squeue_v0.0.41_24.05.json")
        assert one(events, "2", "end").facts["exit_code"] == 3

    def test_cluster_from_meta_then_argument(self) -> None:
        doc = json.loads((DATA / "squeue_v0.0.41_24.05.json").read_text())
        for job in doc["jobs"]:
            del job["cluster"]
        events = parse_squeue(json.dumps(doc).encode(), cluster="arg")
        assert {e.cluster for e in events} == {"testcluster"}
        del doc["meta"]
        events = parse_squeue(json.dumps(doc).encode(), cluster="arg")
        assert {e.cluster for e in events} == {"arg"}

    def test_old_single_state_flag(self) -> None:
        doc = json.loads(VECTOR_SQUEUE.read_text())
        doc["jobs"][1]["job_state"] = "COMPLETING"
        events = parse_squeue(json.dumps(doc).encode(), cluster="c")
        assert names(events, "2") == ["submit", "eligible", "start"]
        doc["jobs"][1]["job_state"] = "REQUEUED"
        doc["jobs"][1]["restart_cnt"] = 1
        events = parse_squeue(json.dumps(doc).encode(), cluster="c")
        # the interrupted run, still completing: it did start
        assert names(events, "2") == ["submit", "eligible", "start", "requeue"]
        doc["jobs"][1]["job_state"] = "PENDING"
        events = parse_squeue(json.dumps(doc).encode(), cluster="c")
        assert names(events, "2") == ["submit", "eligible", "reason", "requeue"]

    def test_pending_job_expected_start_is_not_a_start(self) -> None:
        doc = json.loads(VECTOR_SQUEUE.read_text())
        doc["jobs"][2]["start_time"] = int(T) + 3600
        doc["jobs"][2]["nodes"] = "vm"  # even with planned nodes
        events = parse_squeue(json.dumps(doc).encode(), cluster="c")
        assert names(events, "3") == ["submit", "eligible", "reason"]

    def test_source_errors_without_jobs(self) -> None:
        doc = {"errors": [{"error": "Unable to contact slurm controller"}]}
        with pytest.raises(ParseError) as err:
            parse_squeue(json.dumps(doc).encode(), cluster="c")
        assert err.value.reason == "source-error"


# --------------------------------------------------------------------------- sacct versions

class TestSacct:
    v38 = parse_file("slurm-sacct", DATA / "sacct_v0.0.38_22.05.json")
    v42 = parse_file("slurm-sacct", DATA / "sacct_v0.0.42_24.11.json")

    def test_22_05_exit_codes_are_not_trusted(self) -> None:
        end = one(self.v38, "2", "end")
        assert end.facts["result"] == "failed"
        assert "exit_code" not in end.facts and "signal" not in end.facts
        assert end.context["exit_code_untrusted"] is True
        assert (end.facts["user"], end.facts["bank"], end.facts["queue"], end.facts["qos"]) == (
            "alice", "physics", "short", "high")
        assert end.facts["timelimit_s"] == 600  # time.limit 10 minutes

    def test_23_02_exit_codes_are_not_trusted(self) -> None:
        end = one(parse_file("slurm-sacct", DATA / "sacct_v0.0.39_23.02.json"), "2", "end")
        assert "exit_code" not in end.facts
        assert end.facts["timelimit_s"] == 600

    def test_24_11_exit_codes_are_trusted(self) -> None:
        assert one(self.v42, "2", "end").facts["exit_code"] == 3
        killed = one(self.v42, "71", "end").facts
        assert (killed["result"], killed["exit_code"], killed["signal"]) == ("cancelled", 0, 9)
        assert (killed["ngpus"], killed["ncores"], killed["nnodes"]) == (4, 16, 2)
        assert killed["nodelist"] == ["node01", "node02"]

    def test_trust_follows_the_slurm_version_when_the_parser_is_not_named(self) -> None:
        doc = json.loads((DATA / "sacct_v0.0.42_24.11.json").read_text())
        del doc["meta"]["plugin"]
        events = parse_sacct(json.dumps(doc).encode(), cluster="c")
        assert one(events, "2", "end").facts["exit_code"] == 3
        doc["meta"]["slurm"]["version"] = {"major": "23", "minor": "02", "micro": "8"}
        events = parse_sacct(json.dumps(doc).encode(), cluster="c")
        assert "exit_code" not in one(events, "2", "end").facts

    def test_unknown_version_is_rejected(self) -> None:
        doc = json.loads((DATA / "sacct_v0.0.42_24.11.json").read_text())
        del doc["meta"]
        with pytest.raises(ParseError) as err:
            parse_sacct(json.dumps(doc).encode(), cluster="c")
        assert err.value.reason == "unknown-version"

    def test_array_task(self) -> None:
        end = one(self.v38, "10", "end").facts
        assert (end["array_id"], end["array_task"]) == ("3", 1)
        timeout = one(self.v42, "12", "end").facts
        assert (timeout["result"], timeout["array_id"], timeout["array_task"]) == (
            "timeout", "3", 3)
        assert timeout["timelimit_s"] == 60

    def test_never_started_job(self) -> None:
        assert names(self.v38, "5") == ["submit", "eligible", "end"]
        end = one(self.v38, "5", "end")
        assert end.facts["result"] == "cancelled" and "nodelist" not in end.facts

    def test_requeued_state_without_restart_count(self) -> None:
        assert names(self.v38, "30") == ["submit", "eligible", "start", "requeue"]
        assert one(self.v38, "30", "requeue").timestamp == T + 100

    def test_restart_count(self) -> None:
        assert names(self.v42, "72") == ["submit", "eligible", "start", "requeue", "requeue",
                                         "end"]
        assert one(self.v42, "72", "end").facts["restart_count"] == 2

    def test_pending_with_infinite_limit(self) -> None:
        assert names(self.v42, "73") == ["submit", "eligible"]
        assert "timelimit_s" not in one(self.v42, "73", "submit").facts

    def test_het_components(self) -> None:
        facts = {e.job_id: e.facts for e in self.v42 if e.event == "end"}
        assert (facts["80"]["het_id"], facts["80"]["het_offset"]) == ("80", 0)
        assert (facts["81"]["het_id"], facts["81"]["het_offset"]) == ("80", 1)

    def test_record_is_scrubbed(self) -> None:
        record = one(self.v42, "2", "end").record
        assert record is not None and record["job_id"] == 2
        assert "script" not in record and "submit_line" not in record

    def test_sources_have_their_own_ids_for_the_same_moment(self) -> None:
        squeue_end = one(parse_file("slurm-squeue", VECTOR_SQUEUE), "2", "end")
        sacct_end = one(self.v38, "2", "end")
        jobcomp_end = one(parse_file("slurm-jobcomp", VECTOR_JOBCOMP), "2", "end")
        assert squeue_end.timestamp == sacct_end.timestamp == jobcomp_end.timestamp
        assert len({squeue_end.event_id, sacct_end.event_id, jobcomp_end.event_id}) == 3


# --------------------------------------------------------------------------- hooks

class TestHooks:
    def test_prolog_as_json(self) -> None:
        [alloc] = parse_file("slurm-hook", DATA / "hook_prolog_25.11.json")
        assert (alloc.event, alloc.job_id, alloc.timestamp) == ("alloc", "70", T + 560.25)
        f = alloc.facts
        assert f["nodelist"] == ["node01", "node02", "node03", "login1"]
        assert (f["nnodes"], f["ncores"], f["qos"], f["restart_count"]) == (4, 28, "high", 2)
        assert (f["array_id"], f["array_task"]) == ("69", 1)
        assert f["t_start"] == T + 560 and f["expiration"] == T + 560 + 7200
        assert "t_end" not in f

    def test_private_variables_are_dropped(self) -> None:
        [alloc] = parse_file("slurm-hook", DATA / "hook_prolog_25.11.json")
        assert "SLURM_SPANK_TOKEN" not in alloc.context
        assert "SLURM_JOB_COMMENT" not in alloc.context
        assert "JOBSTREAM_HOOK_TIME" not in alloc.context
        assert alloc.record is None

    def test_epilog_env_with_signal_het_and_odd_private_lines(self) -> None:
        [end] = parse_file("slurm-hook", DATA / "hook_epilog_23.02.env")
        assert (end.event, end.job_id, end.timestamp) == ("end", "81", T + 66.5)
        f = end.facts
        assert (f["exit_code"], f["signal"]) == (0, 9)
        assert (f["het_id"], f["het_offset"]) == ("80", 1)
        assert (f["t_start"], f["t_end"]) == (T + 5, T + 65)
        assert "result" not in f

    def test_hook_time_beats_received_at(self) -> None:
        [alloc] = parse_file("slurm-hook", DATA / "hook_prolog_25.11.json", received_at=1.8e9)
        assert alloc.timestamp == T + 560.25

    def test_exit_code2_when_raw_status_is_missing(self) -> None:
        env = b"SLURM_SCRIPT_CONTEXT=epilog_slurmctld\nSLURM_JOB_ID=7\nSLURM_JOB_EXIT_CODE2=3:0\n"
        [end] = parse_hook(env, cluster="c", received_at=T)
        assert end.facts == {"exit_code": 3} and end.cluster == "c"

    def test_old_pack_variables(self) -> None:
        env = (b"SLURM_SCRIPT_CONTEXT=prolog_slurmctld\nSLURM_JOBID=7\n"
               b"SLURM_PACK_JOB_ID=6\nSLURM_PACK_JOB_OFFSET=1\n")
        [alloc] = parse_hook(env, cluster="c", received_at=T)
        assert (alloc.job_id, alloc.facts["het_id"], alloc.facts["het_offset"]) == ("7", "6", 1)


# --------------------------------------------------------------------------- bad input

JOB2 = jobcomp_lines(VECTOR_JOBCOMP)[0]
SQUEUE_DOC = json.loads(VECTOR_SQUEUE.read_text())


def _squeue_with(**changes: Any) -> bytes:
    doc = json.loads(json.dumps(SQUEUE_DOC))
    doc["jobs"][1].update(changes)
    return json.dumps(doc).encode()


def _enc(record: dict[str, Any]) -> bytes:
    return json.dumps(record).encode()


BAD_INPUTS: list[tuple[Parser, bytes, str, str]] = [
    (parse_jobcomp, b"{\"jobid\": 2,", "invalid-json", "JSON"),
    (parse_jobcomp, b"\xff\xfe{}", "invalid-utf8", "UTF-8"),
    (parse_jobcomp, b"", "invalid-json", "empty"),
    (parse_jobcomp, b"[1, 2]", "not-an-object", "object"),
    (parse_jobcomp, b"{\"jobid\": NaN}", "invalid-json", "JSON"),
    (parse_jobcomp, b"[" * 100_000, "invalid-json", "JSON"),
    (parse_jobcomp, _enc({k: v for k, v in JOB2.items() if k != "jobid"}), "missing-field",
     "jobid"),
    (parse_jobcomp, _enc({**JOB2, "jobid": "two"}), "bad-type", "jobid"),
    (parse_jobcomp, _enc({**JOB2, "jobid": 0}), "bad-value", "jobid"),
    (parse_jobcomp, _enc({**JOB2, "user_id": True}), "bad-type", "user_id"),
    (parse_jobcomp, _enc({**JOB2, "@end": "yesterday"}), "bad-time", "@end"),
    (parse_jobcomp, _enc({**JOB2, "@submit": -5}), "bad-time", "@submit"),
    (parse_jobcomp, _enc({k: v for k, v in JOB2.items() if k != "@end"}), "missing-field",
     "@end"),
    (parse_jobcomp, _enc({k: v for k, v in JOB2.items() if k != "state"}), "missing-field",
     "state"),
    (parse_jobcomp, _enc({**JOB2, "state": "EXPLODED"}), "bad-state", "state"),
    (parse_jobcomp, _enc({**JOB2, "state": "RUNNING"}), "bad-state", "state"),
    (parse_jobcomp, _enc({**JOB2, "exit_code": "three"}), "bad-exit-code", "exit_code"),
    (parse_jobcomp, _enc({**JOB2, "nodes": "vm[1-"}), "bad-hostlist", "nodes"),
    (parse_jobcomp, _enc({**JOB2, "tres_req": 5}), "bad-type", "tres_req"),
    (parse_squeue, b"{}", "missing-field", "jobs"),
    (parse_squeue, b"{\"jobs\": {}}", "bad-type", "jobs"),
    (parse_squeue, b"{\"jobs\": [3]}", "not-an-object", "jobs[0]"),
    (parse_squeue, _squeue_with(job_state=7), "bad-type", "jobs[1].job_state"),
    (parse_squeue, _squeue_with(job_state=[]), "bad-type", "jobs[1].job_state"),
    (parse_squeue, _squeue_with(submit_time="soon"), "bad-time", "jobs[1].submit_time"),
    (parse_squeue, _squeue_with(end_time=0), "missing-field", "end time"),
    (parse_squeue, _squeue_with(exit_code=-1), "bad-exit-code", "jobs[1].exit_code"),
    (parse_squeue, _squeue_with(time_limit={"number": []}), "bad-type", "jobs[1].time_limit"),
    (parse_squeue, _squeue_with(restart_cnt=1_000_000), "bad-value", "restart_cnt"),
    (parse_squeue, _squeue_with(job_resources=[], nodes=""), "bad-type", "job_resources"),
    (parse_squeue, _squeue_with(job_id=None), "bad-value", "job_id"),
    (parse_sacct, b"{\"meta\": 3, \"jobs\": []}", "bad-type", "meta"),
    (parse_hook, b"SLURM_JOB_ID=1\n", "missing-field", "SLURM_SCRIPT_CONTEXT"),
    (parse_hook, b"SLURM_SCRIPT_CONTEXT=prolog_slurmd\nSLURM_JOB_ID=1\n", "bad-value",
     "SLURM_SCRIPT_CONTEXT"),
    (parse_hook, b"SLURM_SCRIPT_CONTEXT=prolog_slurmctld\n", "missing-field", "SLURM_JOB_ID"),
    (parse_hook, b"SLURM_SCRIPT_CONTEXT=prolog_slurmctld\nSLURM_JOB_ID=x\nJOBSTREAM_HOOK_TIME=1",
     "bad-type", "SLURM_JOB_ID"),
    (parse_hook, b"SLURM_SCRIPT_CONTEXT=prolog_slurmctld\nSLURM_JOB_ID=1\nJOBSTREAM_HOOK_TIME=x",
     "bad-time", "JOBSTREAM_HOOK_TIME"),
    (parse_hook, b"SLURM_SCRIPT_CONTEXT=prolog_slurmctld\nSLURM_JOB_ID=1\n"
                 b"SLURM_JOB_CPUS_PER_NODE=2(x)\nJOBSTREAM_HOOK_TIME=1", "bad-value",
     "SLURM_JOB_CPUS_PER_NODE"),
    (parse_hook, b"SLURM_SCRIPT_CONTEXT=prolog_slurmctld\nSLURM_JOB_ID=1\n"
                 b"SLURM_JOB_ID=2\nJOBSTREAM_HOOK_TIME=1", "bad-value", "twice"),
    (parse_hook, b"SLURM_SCRIPT_CONTEXT=prolog_slurmctld\nSLURM_JOB_ID=1\n"
                 b"SLURM_JOB_USER=\xff\nJOBSTREAM_HOOK_TIME=1", "invalid-utf8", "SLURM_JOB_USER"),
    (parse_hook, b"{\"SLURM_SCRIPT_CONTEXT\": [\"x\"]}", "bad-type", "SLURM_SCRIPT_CONTEXT"),
    (parse_hook, b"[\"SLURM_JOB_ID=1\"]", "not-an-object", "object"),
]


@pytest.mark.parametrize(("parser", "payload", "reason", "mentions"), BAD_INPUTS,
                         ids=[f"{p.__name__}-{r}-{i}" for i, (p, _, r, _) in enumerate(BAD_INPUTS)])
def test_bad_input_is_a_parse_error_naming_the_field(
        parser: Parser, payload: bytes, reason: str, mentions: str) -> None:
    with pytest.raises(ParseError) as err:
        parser(payload, cluster="c", received_at=None)
    assert err.value.reason == reason
    assert mentions in err.value.message


def test_hook_received_at_must_be_a_time() -> None:
    env = b"SLURM_SCRIPT_CONTEXT=prolog_slurmctld\nSLURM_JOB_ID=1\n"
    with pytest.raises(ParseError) as err:
        parse_hook(env, cluster="c", received_at=float("nan"))
    assert err.value.reason == "bad-time"


# --------------------------------------------------------------------------- lone surrogates

class TestSurrogates:
    """A lone UTF-16 surrogate is no character (it could not be encoded downstream): refused
    at parse time as ``invalid-utf8``, like bytes that are not UTF-8; a pair is one
    character (parsers.surrogates, shared with the Flux parser)."""

    @pytest.mark.parametrize(("fmt", "payload", "where"), [
        ("slurm-jobcomp", _enc({**JOB2, "job_name": "?"}).replace(b'"?"', rb'"\ud800"'),
         "jobcomp record escapes"),
        ("slurm-jobcomp", b'{"jobid":2,"job_name":"\xc3\xa9\\uDC00"}\x00', r"\uDC00 at byte 25"),
        ("slurm-squeue", b'{"jobs":[{"name":"x\\ude00\\ud83d"}]}', r"\ude00 at byte 19"),
        ("slurm-sacct", b'{"jobs":[],"\\udbff":1}', r"\udbff at byte 12"),  # in a key
        ("slurm-hook", b'{"SLURM_JOB_NAME":"\\\\\\ud800"}', r"\ud800 at byte 21"),
        ("slurm-submit-plugin", b'{"kind":"submit","time":1,"job_id":5,"job_name":"\\ud83d"}',
         "submit plugin line escapes"),
    ])
    def test_escape_of_a_lone_surrogate_is_refused(self, fmt: str, payload: bytes,
                                                   where: str) -> None:
        with pytest.raises(ParseError) as err:
            parse_record(fmt, payload, cluster="c", received_at=T)
        assert err.value.reason == "invalid-utf8"
        assert "lone UTF-16 surrogate" in err.value.message and where in err.value.message

    def test_encoded_surrogate_is_refused(self) -> None:
        # "\ud800" encoded as if it were a character (CESU-8, WTF-8) is not UTF-8
        with pytest.raises(ParseError) as err:
            parse_jobcomp(b'{"jobid":2,"job_name":"\xed\xa0\x80"}', cluster="c")
        assert err.value.reason == "invalid-utf8" and "byte 23" in err.value.message

    @pytest.mark.parametrize(("text", "where"), [
        ('{"jobid":2,"job_name":"é\\ud800"}', r"\ud800 at character 24"),
        ('{"jobid":2,"job_name":"é\ud800"}', "holds a lone UTF-16 surrogate, which is not "
                                             "text (character 24)"),
    ])
    def test_surrogate_in_text_given_as_str_is_refused(self, text: str, where: str) -> None:
        with pytest.raises(ParseError) as err:
            decode_json(text, what="jobcomp record")
        assert err.value.reason == "invalid-utf8" and where in err.value.message

    @pytest.mark.parametrize("fmt", ["slurm-hook", "slurm-submit-plugin"])
    def test_surrogate_in_a_payload_given_as_str_is_refused(self, fmt: str) -> None:
        # a str payload's lone surrogates outside surrogateescape's range are no bytes
        payload = ("SLURM_SCRIPT_CONTEXT=prolog_slurmctld\nSLURM_JOB_NAME=\ud800\n"
                   if fmt == "slurm-hook" else '{"kind":"submit","job_name":"\ud800"}')
        with pytest.raises(ParseError) as err:
            parse_record(fmt, payload, cluster="c", received_at=T)  # type: ignore[arg-type]
        assert err.value.reason == "invalid-utf8" and "lone surrogate" in err.value.message

    @pytest.mark.parametrize(("escaped", "name"), [
        (r"\ud83d\ude00", "\U0001f600"),  # a pair: one character
        (r"\\ud800\\udc00", r"\ud800\udc00"),  # escaped backslashes: plain text
        (r"\ud7ff\ue000", "\ud7ff\ue000"),  # just outside the surrogates
    ])
    def test_pairs_and_look_alikes_are_accepted(self, escaped: str, name: str) -> None:
        payload = _enc({**JOB2, "job_name": "?"}).replace(b'"?"', f'"{escaped}"'.encode())
        assert {e.facts.get("job_name") for e in parse_jobcomp(payload, cluster="c")} == {name}


# --------------------------------------------------------------------------- 64-bit integers

@pytest.mark.parametrize("value", [2**63, -(2**63) - 1, 2**70, str(10**19), {"set": True,
                                                                         "number": 2**64}])
def test_an_integer_beyond_64_bits_is_refused(value: Any) -> None:
    # a job state holds them as Avro longs: one that cannot be written must not be folded
    with pytest.raises(ParseError) as err:
        slurm_int(value, "user_id")
    assert err.value.reason == "bad-value" and "beyond a 64-bit integer" in err.value.message


@pytest.mark.parametrize(("value", "expected"), [
    (2**63 - 1, 2**63 - 1), (-(2**63), -(2**63)), (0xFFFFFFFFFFFFFFFE, None),
    (str(0xFFFFFFFFFFFFFFFF), None)])
def test_64_bit_integers_and_the_64_bit_sentinels_pass(value: Any, expected: int | None) -> None:
    assert slurm_int(value, "user_id") == expected


def test_a_jobcomp_record_with_a_uid_beyond_64_bits_is_refused() -> None:
    with pytest.raises(ParseError) as err:
        parse_jobcomp(_enc({**JOB2, "user_id": 2**70}), cluster="c")
    assert err.value.reason == "bad-value" and "user_id" in err.value.message
