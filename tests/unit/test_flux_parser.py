"""Flux parsers against the real vectors of ../shared/vectors/flux and the RFC test tables."""

from __future__ import annotations

import json
from collections import defaultdict
from typing import Any

import pytest
from datafiles import vector

from pipeline.core.fluid import decode_jobid, dothex_decode, dothex_encode, f58_decode, f58_encode
from pipeline.core.hostlist import expand_hostlist
from pipeline.core.model import FACT_FIELDS, JobEvent
from pipeline.parsers import parse_record
from pipeline.parsers.flux import (
    build_eventlog_record,
    parse_eventlog_record,
    parse_journal_response,
    wait_status_facts,
)
from pipeline.parsers.jobspec import (
    jobspec_facts,
    jobspec_update_facts,
    redact_jobspec,
    redact_update_context,
)
from pipeline.parsers.resources import R_facts
from pipeline.runtime.errors import ParseError

CLUSTER = "testc"


def read(name: str) -> str:
    return vector("flux", name).read_text()


def journal(name: str) -> list[JobEvent]:
    events: list[JobEvent] = []
    for line in vector("flux", name).read_bytes().splitlines():
        events.extend(parse_journal_response(line, cluster=CLUSTER))
    return events


def by_job(events: list[JobEvent]) -> dict[str, list[JobEvent]]:
    jobs: dict[str, list[JobEvent]] = defaultdict(list)
    for e in events:
        jobs[e.job_id].append(e)
    return jobs


def merged_facts(events: list[JobEvent]) -> dict[str, Any]:
    """What a job's facts add up to, later events winning (the fold's rule, in small)."""
    facts: dict[str, Any] = {}
    for e in sorted(events, key=lambda e: e.timestamp):
        facts.update(e.facts)
    return facts


def names(events: list[JobEvent]) -> list[str]:
    return [e.event for e in events]


@pytest.fixture(scope="module")
def flux_jobs() -> dict[str, dict[str, Any]]:
    """``flux jobs -a --json`` of the real 0.88 recording, by job name."""
    return {j["name"]: j for j in json.loads(read("real-0.88-flux-jobs.json"))["jobs"]}


@pytest.fixture(scope="module")
def backlog() -> dict[str, list[JobEvent]]:
    return by_job(journal("real-0.88-journal-backlog.jsonl"))


@pytest.fixture(scope="module")
def live() -> dict[str, list[JobEvent]]:
    return by_job(journal("real-0.88-journal-live.jsonl"))


def job_events(jobs: dict[str, list[JobEvent]], flux_jobs: dict[str, dict[str, Any]],
               name: str) -> list[JobEvent]:
    return jobs[str(flux_jobs[name]["id"])]


# --- FLUID -----------------------------------------------------------------------------

F58_VECTORS = [  # flux-core src/common/libutil/test/fluid.c
    (0, "ƒ1"), (1, "ƒ2"), (57, "ƒz"), (1234, "ƒNH"), (1888, "ƒZZ"), (3363, "ƒzz"),
    (3364, "ƒ211"), (4369, "ƒ2JL"), (65535, "ƒLUv"), (4294967295, "ƒ7YXq9G"),
    (633528662, "ƒxyzzy"), (6731191091817518, "ƒuZZybuNNy"),
    (18446744073709551614, "ƒjpXCZedGfVP"), (18446744073709551615, "ƒjpXCZedGfVQ"),
    (263721058304, "ƒ7vo8MjM"),
]


class TestFluid:
    @pytest.mark.parametrize(("n", "f58"), F58_VECTORS)
    def test_f58_round_trip(self, n: int, f58: str) -> None:
        assert f58_encode(n) == f58
        assert f58_decode(f58) == n
        assert f58_decode("f" + f58[1:]) == n  # f58plain
        assert decode_jobid(f58) == n

    def test_dothex(self) -> None:
        assert dothex_encode(263721058304) == "0000.003d.6700.0000"
        assert dothex_decode("0000.003d.6700.0000") == 263721058304
        assert dothex_decode("job.0017.e9fb.8df1.6c2e") == 6731191091817518
        assert f58_encode(dothex_decode("0017.e9fb.8df1.6c2e")) == "ƒuZZybuNNy"

    @pytest.mark.parametrize("text", ["263721058304", " 263721058304\n", "0x3d67000000",
                                      "ƒ7vo8MjM", "f7vo8MjM", "0000.003d.6700.0000"])
    def test_decode_any_encoding(self, text: str) -> None:
        assert decode_jobid(text) == 263721058304

    @pytest.mark.parametrize("bad", ["", "ƒ", "ƒ0", "ƒjpXCZedGfVR", "ƒ1234567890123",
                                     "18446744073709551616", "-5", "apple-banana",
                                     "12ab", "0000.003d.6700", True, 1.5, None, -1])
    def test_decode_refuses(self, bad: Any) -> None:
        with pytest.raises(ValueError):
            decode_jobid(bad)


# --- hostlists and idsets ------------------------------------------------------------------

class TestHostlist:
    @pytest.mark.parametrize(("text", "hosts"), [  # RFC 29's table
        ("[1-3,5-6]", ["1", "2", "3", "5", "6"]),
        ("foo[1-5]", [f"foo{i}" for i in range(1, 6)]),
        ("foo[0-4]-eth2", [f"foo{i}-eth2" for i in range(5)]),
        ("foo1,foo1,foo1", ["foo1"] * 3),
        ("[00-02]", ["00", "01", "02"]),
        ("[00-2]", ["00", "01", "02"]),
        ("foo[1,1,2,1]", ["foo1", "foo1", "foo2", "foo1"]),
    ])
    def test_rfc29(self, text: str, hosts: list[str]) -> None:
        assert expand_hostlist(text) == hosts

    def test_nodelist_entries_concatenate_in_order(self) -> None:
        R = {"version": 1, "execution": {
            "R_lite": [{"rank": "0-3", "children": {"core": "0"}}],
            "nodelist": ["login[2-3]", "n01,n00"]}}
        assert R_facts(R)["nodelist"] == ["login2", "login3", "n01", "n00"]

    @pytest.mark.parametrize("nodelist", ["node[1-", "node]1[", "node[a-b]", "node[5-2]"])
    def test_bad_hostlist(self, nodelist: str) -> None:
        R = {"version": 1, "execution": {"R_lite": [], "nodelist": [nodelist]}}
        with pytest.raises(ParseError) as err:
            R_facts(R)
        assert err.value.reason == "bad-hostlist"
        assert "nodelist[0]" in err.value.message

    @pytest.mark.parametrize("nodelist", ["n[0-999][0-999]", "a[0-99999],b[0-99999]",
                                          "n[0-9][0-9][0-9][0-9][0-9][0-9][0-9][0-9]"])
    def test_huge_hostlist_refused_without_expanding(self, nodelist: str) -> None:
        R = {"version": 1, "execution": {"R_lite": [], "nodelist": [nodelist]}}
        with pytest.raises(ParseError) as err:
            R_facts(R)
        assert err.value.reason == "bad-hostlist"


# --- R ---------------------------------------------------------------------------------

class TestR:
    def test_rfc20_example_counts_children_per_rank(self) -> None:
        facts = R_facts(json.loads(read("R_rfc20-example1.json")))
        assert facts == {"nnodes": 4, "ncores": 4 * 48, "ngpus": 4 * 8,
                         "nodelist": ["node186", "node187", "node188", "node189"],
                         "expiration": 1676562342}

    def test_dump_R_with_unset_expiration(self) -> None:
        assert R_facts(json.loads(read("R_dump-0.46.0.json"))) == {
            "nnodes": 1, "ncores": 1, "nodelist": ["catalyst160"]}

    def test_several_entries_and_shared_ranks(self) -> None:
        R = {"version": 1, "execution": {"R_lite": [
            {"rank": "0-1", "children": {"core": "0-3"}},
            {"rank": "[1,4]", "children": {"core": "0-1", "gpu": "0"}},
            {"rank": "5-1000000", "children": {"core": "0-99999"}},
        ]}}
        facts = R_facts(R)
        assert facts["nnodes"] == 2 + 1 + 999996  # rank 1 counted once
        assert facts["ncores"] == 2 * 4 + 2 * 2 + 999996 * 100000
        assert facts["ngpus"] == 2
        assert "nodelist" not in facts  # tolerated, though RFC 20 requires it

    @pytest.mark.parametrize(("R", "field"), [
        ([], "R must be an object"),
        ({"version": 2, "execution": {"R_lite": []}}, "version"),
        ({"version": True, "execution": {"R_lite": []}}, "version"),
        ({"version": 1}, "execution"),
        ({"version": 1, "execution": {"R_lite": {}}}, "R_lite"),
        ({"version": 1, "execution": {"R_lite": [{"rank": 3}]}}, "R_lite[0].rank"),
        ({"version": 1, "execution": {"R_lite": [{"rank": "4-2"}]}}, "R_lite[0].rank"),
        ({"version": 1, "execution": {"R_lite": [{"rank": "0", "children": {"core": "x"}}]}},
         "children.core"),
        ({"version": 1, "execution": {"R_lite": [], "expiration": -1}}, "expiration"),
        ({"version": 1, "execution": {"R_lite": [], "nodelist": [3]}}, "nodelist[0]"),
    ])
    def test_bad_R(self, R: Any, field: str) -> None:
        with pytest.raises(ParseError) as err:
            R_facts(R)
        assert err.value.reason == "bad-R"
        assert field in err.value.message


# --- jobspec ---------------------------------------------------------------------------

#: RFC 25 jobspec V1: what ``flux submit -N2 -n8 -c4 -g1 -q pbatch -B guests -t 2h
#: --job-name=lmp lmp -in in.lj`` gives.
LMP_JOBSPEC = {
    "version": 1,
    "resources": [{"type": "node", "count": 2, "with": [
        {"type": "slot", "count": 4, "label": "task",
         "with": [{"type": "core", "count": 4}, {"type": "gpu", "count": 1}]}]}],
    "tasks": [{"command": ["lmp", "-in", "in.lj"], "slot": "task", "count": {"per_slot": 1}}],
    "attributes": {"system": {"duration": 7200.0, "cwd": "/p/lustre1/alice/run1",
                              "queue": "pbatch", "bank": "guests", "job": {"name": "lmp"},
                              "environment": {"HOME": "/home/alice", "SECRET": "x"},
                              "files": {"script": {"data": "#!/bin/sh\n"}},
                              "batch": {"script": "#!/bin/sh\n"},
                              "shell": {"options": {"rlimit": {"core": 0}}}}},
}


class TestJobspec:
    def test_multi_node_gpu_request(self) -> None:
        assert jobspec_facts(LMP_JOBSPEC) == {
            "job_name": "lmp", "queue": "pbatch", "bank": "guests",
            "cwd": "/p/lustre1/alice/run1", "timelimit_s": 7200.0,
            "nodes_req": 2, "cores_req": 2 * 4 * 4, "gpus_req": 2 * 4 * 1}

    def test_dump_jobspec_unlimited_and_named_after_command(self) -> None:
        facts = jobspec_facts(json.loads(read("jobspec_dump-0.46.0.json")))
        assert facts == {"job_name": "true", "cores_req": 1,
                         "cwd": "/g/g0/achu/chaos/git/flux-framework/flux-core"}

    @pytest.mark.parametrize(("command", "name"), [
        (["/usr/bin/hostname"], "hostname"), (["a.out", "x"], "a.out"),
        (["/scratch/dir/"], "/scratch/dir/"), ([], None), ([7], None)])
    def test_name_fallback(self, command: list[Any], name: str | None) -> None:
        jobspec = {"version": 1, "resources": [], "tasks": [{"command": command}],
                   "attributes": {"system": {"duration": 0}}}
        assert jobspec_facts(jobspec).get("job_name") == name

    def test_range_count_counts_its_minimum(self) -> None:
        jobspec = {"resources": [{"type": "slot", "count": {"min": 3, "max": 9},
                                  "with": [{"type": "core", "count": 2}]}]}
        assert jobspec_facts(jobspec)["cores_req"] == 6

    def test_redaction_removes_scripts_and_environment_only(self) -> None:
        before = json.dumps(LMP_JOBSPEC, sort_keys=True)
        redacted = redact_jobspec(LMP_JOBSPEC)
        system = redacted["attributes"]["system"]
        assert not {"environment", "files", "batch"} & set(system)
        assert system["shell"] == LMP_JOBSPEC["attributes"]["system"]["shell"]
        assert redacted["tasks"] == LMP_JOBSPEC["tasks"]
        assert json.dumps(LMP_JOBSPEC, sort_keys=True) == before  # input untouched

    def test_update_facts_only_of_the_paths_set(self) -> None:
        assert jobspec_update_facts({"attributes.system.duration": 1200.0}) == {
            "timelimit_s": 1200.0}
        assert jobspec_update_facts({"attributes.system.bank": "lc",
                                     "attributes.system.queue": "pdebug",
                                     "attributes.system.job.name": "renamed"}) == {
            "bank": "lc", "queue": "pdebug", "job_name": "renamed"}
        assert jobspec_update_facts({"attributes.system": {"queue": "q", "cwd": "/tmp"}}) == {
            "queue": "q", "cwd": "/tmp"}
        assert jobspec_update_facts({"attributes.user.tag": "x"}) == {}

    def test_update_context_loses_private_paths(self) -> None:
        context = {"attributes.system.files.script": {"data": "secret"},
                   "attributes.system.environment": {"A": "1"},
                   "attributes.system": {"queue": "q", "batch": {"script": "s"}},
                   "attributes.system.duration": 60}
        assert redact_update_context(context) == {"attributes.system": {"queue": "q"},
                                                  "attributes.system.duration": 60}

    @pytest.mark.parametrize(("jobspec", "field"), [
        ("spec", "jobspec must be an object"),
        ({"attributes": []}, "attributes"),
        ({"attributes": {"system": {"queue": 5}}}, "attributes.system.queue"),
        ({"attributes": {"system": {"job": "x"}}}, "attributes.system.job"),
        ({"attributes": {"system": {"duration": -1}}}, "duration"),
        ({"attributes": {"system": {"duration": "1h"}}}, "duration"),
        ({"resources": {"type": "node"}}, "resources"),
        ({"resources": [{"type": "node", "count": 0}]}, "resources[0].count"),
        ({"resources": [{"type": "node", "count": True}]}, "resources[0].count"),
        ({"resources": [{"count": 1}]}, "resources[0].type"),
        ({"resources": [{"type": "slot", "count": 1, "with": [3]}]}, "resources[0].with[0]"),
        ({"resources": [{"type": "node", "count": 2**32, "with": [
            {"type": "core", "count": 2**32}]}]}, "resources[0].with[0].count multiplies"),
        ({"resources": [{"type": "core", "count": 2**62}, {"type": "core", "count": 2**62}]},
         "resources[1].count multiplies"),
    ])
    def test_bad_jobspec(self, jobspec: Any, field: str) -> None:
        with pytest.raises(ParseError) as err:
            jobspec_facts(jobspec)
        assert err.value.reason == "bad-jobspec"
        assert field in err.value.message

    def test_deep_resource_tree_refused(self) -> None:
        vertex: dict[str, Any] = {"type": "core", "count": 1}
        for _ in range(50):
            vertex = {"type": "slot", "count": 1, "with": [vertex]}
        with pytest.raises(ParseError, match="deeper"):
            jobspec_facts({"resources": [vertex]})


# --- wait status -----------------------------------------------------------------------

class TestWaitStatus:
    @pytest.mark.parametrize(("status", "facts"), [
        (0, {"exit_code": 0}),
        (768, {"exit_code": 3}),                        # fail: exit 3
        (32512, {"exit_code": 127}),                    # nocmd: command not found
        (35072, {"exit_code": 137, "signal": 9}),       # task killed by SIGKILL: 128+9
        (36352, {"exit_code": 142, "signal": 14}),      # timeout: SIGALRM
        (36608, {"exit_code": 143, "signal": 15}),      # cancel: SIGTERM
        (255 << 8, {"exit_code": 255}),                 # beyond 128+64: not a signal
        (9, {"exit_code": 137, "signal": 9}),           # the shell itself killed
        (0x80 | 11, {"exit_code": 139, "signal": 11}),  # ... with a core dump
        (0x137F, {}),                                   # stopped: no verdict
    ])
    def test_status(self, status: int, facts: dict[str, int]) -> None:
        assert wait_status_facts(status) == facts


# --- derived vectors (flux-core 0.46.0 dump) ---------------------------------------------

class TestDerivedVectors:
    def test_backlog_then_sentinel(self) -> None:
        lines = vector("flux", "journal-backlog_DERIVED.jsonl").read_bytes().splitlines()
        events = parse_journal_response(lines[0], cluster=CLUSTER)
        assert parse_journal_response(lines[1], cluster=CLUSTER) == []
        assert names(events) == ["submit", "validate", "depend", "priority", "alloc", "start",
                                 "finish", "release", "free", "clean"]
        assert [e.seq for e in events] == list(range(10))
        submit, alloc, finish = events[0], events[4], events[6]
        assert {e.job_id for e in events} == {"263721058304"}
        assert {e.job_id_f58 for e in events} == {"ƒ7vo8MjM"}
        assert {(e.cluster, e.scheduler, e.source) for e in events} == {
            (CLUSTER, "flux", "flux-journal")}
        assert submit.timestamp == 1669766565.6935942
        assert submit.context == {"userid": 8556, "urgency": 16, "flags": 0, "version": 1}
        assert submit.facts["uid"] == 8556
        assert submit.jobspec == json.loads(read("jobspec_dump-0.46.0.json"))
        assert alloc.R == json.loads(read("R_dump-0.46.0.json"))
        assert alloc.facts == {"nnodes": 1, "ncores": 1, "nodelist": ["catalyst160"]}
        assert finish.facts == {"exit_code": 0}
        assert all(e.jobspec is None for e in events[1:])
        assert all(e.R is None for e in events if e.event != "alloc")

    def test_live_carries_jobspec_on_submit_and_R_on_alloc(self) -> None:
        events = journal("journal-live_DERIVED.jsonl")
        assert [e.event for e in events if e.jobspec is not None] == ["submit"]
        assert [e.event for e in events if e.R is not None] == ["alloc"]
        assert [e.seq for e in events] == [0] + [None] * 10
        annotations = events[4]
        assert annotations.event == "annotations" and annotations.facts == {}
        assert annotations.context == {"annotations": {"sched": {
            "resource_summary": "rank0/core0"}}}

    def test_backlog_live_and_eventlog_file_give_one_set_of_ids(self) -> None:
        backlog = {e.event_id for e in journal("journal-backlog_DERIVED.jsonl")}
        live = {e.event_id for e in journal("journal-live_DERIVED.jsonl")
                if e.event != "annotations"}
        record = build_eventlog_record(read("eventlog-v1_dump-0.46.0.jsonl"),
                                       read("jobspec_dump-0.46.0.json"),
                                       read("R_dump-0.46.0.json"), "ƒ7vo8MjM")
        eventlog = parse_eventlog_record(record, cluster=CLUSTER)
        assert backlog == live == {e.event_id for e in eventlog}
        assert len(backlog) == 10
        other_cluster = parse_eventlog_record(record, cluster="other")
        assert not backlog & {e.event_id for e in other_cluster}

    def test_eventlog_record_matches_backlog(self) -> None:
        record = build_eventlog_record(read("eventlog-v1_dump-0.46.0.jsonl"),
                                       read("jobspec_dump-0.46.0.json"),
                                       read("R_dump-0.46.0.json"), "0000.003d.6700.0000")
        from_file = parse_eventlog_record(record, cluster=CLUSTER)
        from_backlog = journal("journal-backlog_DERIVED.jsonl")
        assert {e.source for e in from_file} == {"flux-eventlog"}
        strip = [(e.event, e.timestamp, e.seq, e.event_id, dict(e.context), dict(e.facts),
                  e.jobspec, e.R) for e in from_file]
        assert strip == [(e.event, e.timestamp, e.seq, e.event_id, dict(e.context),
                          dict(e.facts), e.jobspec, e.R) for e in from_backlog]

    def test_registry_dispatches_flux_formats(self) -> None:
        line = vector("flux", "journal-backlog_DERIVED.jsonl").read_bytes().splitlines()[0]
        assert len(parse_record("flux-journal", line, cluster=CLUSTER)) == 10


# --- the real flux-core 0.88 recording -----------------------------------------------------

REAL_JOBS = ["ok", "fail", "gpu-train", "mpi", "too-long", "cancel-run", "held", "urgent",
             "dep-parent", "dep-never", "raised", "updated", "memo", "batchjob", "signal",
             "nocmd", "array-1", "array-2", "array-3"]


class TestReal088:
    def test_all_nineteen_jobs(self, backlog: dict[str, list[JobEvent]],
                               live: dict[str, list[JobEvent]],
                               flux_jobs: dict[str, dict[str, Any]]) -> None:
        assert sorted(flux_jobs) == sorted(REAL_JOBS)
        assert set(backlog) == set(live) == {str(j["id"]) for j in flux_jobs.values()}

    @pytest.mark.parametrize("name", REAL_JOBS)
    def test_backlog_and_live_give_the_same_event_ids(
            self, name: str, backlog: dict[str, list[JobEvent]],
            live: dict[str, list[JobEvent]], flux_jobs: dict[str, dict[str, Any]]) -> None:
        b = job_events(backlog, flux_jobs, name)
        lv = [e for e in job_events(live, flux_jobs, name) if e.event != "annotations"]
        assert {e.event_id for e in b} == {e.event_id for e in lv}
        assert len({e.event_id for e in b}) == len(b)  # no two entries share an id

    @pytest.mark.parametrize("source", ["backlog", "live"])
    @pytest.mark.parametrize("name", REAL_JOBS)
    def test_facts_agree_with_flux_jobs(
            self, name: str, source: str, request: pytest.FixtureRequest,
            flux_jobs: dict[str, dict[str, Any]]) -> None:
        truth = flux_jobs[name]
        events = job_events(request.getfixturevalue(source), flux_jobs, name)
        facts = merged_facts(events)
        assert {e.job_id_f58 for e in events} == {truth["jobid"]}
        assert facts["job_name"] == truth["name"]
        assert facts["uid"] == truth["userid"]
        assert facts["queue"] == truth["queue"]
        assert facts.get("bank") == truth.get("bank")
        assert facts["cwd"] == truth["cwd"]
        assert facts["timelimit_s"] == truth["duration"]
        assert facts.get("ncores", facts["cores_req"]) == truth["ncores"]
        if truth.get("nnodes") is not None:
            assert facts["nnodes"] == truth["nnodes"]
            assert facts["nodelist"] == expand_hostlist(truth["nodelist"])
            assert facts["expiration"] == truth["expiration"]
        else:
            assert not {"nnodes", "nodelist", "ncores"} & set(facts)
        if truth.get("waitstatus") is not None:
            assert facts["exit_code"] == truth["returncode"]
        else:
            assert "exit_code" not in facts
        exceptions = [e for e in events if e.event == "exception"]
        if truth["exception"]["occurred"]:
            (exc,) = exceptions
            assert {k: exc.context[k] for k in ("type", "severity", "note")} == {
                k: truth["exception"][k] for k in ("type", "severity", "note")}
            assert exc.facts == {}
        else:
            assert exceptions == []
        assert set(facts) <= set(FACT_FIELDS) and None not in facts.values()

    def test_exit_codes(self, backlog: dict[str, list[JobEvent]],
                        flux_jobs: dict[str, dict[str, Any]]) -> None:
        def finish(name: str) -> dict[str, Any]:
            (f,) = [e for e in job_events(backlog, flux_jobs, name) if e.event == "finish"]
            return dict(f.facts)
        assert finish("ok") == {"exit_code": 0}
        assert finish("fail") == {"exit_code": 3}
        assert finish("dep-parent") == {"exit_code": 1}
        assert finish("nocmd") == {"exit_code": 127}
        assert finish("signal") == {"exit_code": 137, "signal": 9}
        assert finish("too-long") == {"exit_code": 142, "signal": 14}
        assert finish("cancel-run") == {"exit_code": 143, "signal": 15}

    def test_gpu_and_multi_node_jobs(self, backlog: dict[str, list[JobEvent]],
                                     flux_jobs: dict[str, dict[str, Any]]) -> None:
        gpu = merged_facts(job_events(backlog, flux_jobs, "gpu-train"))
        assert (gpu["nodes_req"], gpu["cores_req"], gpu["gpus_req"]) == (1, 4, 2)
        assert (gpu["nnodes"], gpu["ncores"], gpu["ngpus"]) == (1, 4, 2)
        assert (gpu["queue"], gpu["bank"]) == ("debug", "physics")
        mpi = merged_facts(job_events(backlog, flux_jobs, "mpi"))
        assert (mpi["nodes_req"], mpi["cores_req"], mpi["bank"]) == (2, 4, "chem")
        assert (mpi["nnodes"], mpi["nodelist"]) == (2, ["node2", "node3"])
        batch = merged_facts(job_events(backlog, flux_jobs, "batchjob"))
        assert (batch["cores_req"], batch["ncores"], batch["ngpus"]) == (1, 8, 2)

    def test_updated_job(self, backlog: dict[str, list[JobEvent]],
                         live: dict[str, list[JobEvent]],
                         flux_jobs: dict[str, dict[str, Any]]) -> None:
        for jobs in (backlog, live):
            events = job_events(jobs, flux_jobs, "updated")
            (update,) = [e for e in events if e.event == "jobspec-update"]
            assert update.context == {"attributes.system.duration": 1200.0}
            assert update.facts == {"timelimit_s": 1200.0}
            assert merged_facts(events)["timelimit_s"] == 1200.0
        # the backlog jobspec has the update applied already; live is as submitted
        (b_submit,) = [e for e in job_events(backlog, flux_jobs, "updated")
                       if e.event == "submit"]
        (l_submit,) = [e for e in job_events(live, flux_jobs, "updated")
                       if e.event == "submit"]
        assert (b_submit.facts["timelimit_s"], l_submit.facts["timelimit_s"]) == (1200.0, 600.0)

    def test_held_and_cancelled_never_ran(self, backlog: dict[str, list[JobEvent]],
                                          live: dict[str, list[JobEvent]],
                                          flux_jobs: dict[str, dict[str, Any]]) -> None:
        for jobs in (backlog, live):
            held = job_events(jobs, flux_jobs, "held")
            assert [n for n in names(held) if n != "annotations"] == [
                "submit", "validate", "depend", "priority", "exception", "clean"]
            assert held[0].context["urgency"] == 0
            assert held[-2].context["type"] == "cancel"
            assert all(e.R is None for e in held)
        urgent = job_events(live, flux_jobs, "urgent")
        assert ("urgency", {"userid": 0, "urgency": 16}) in [
            (e.event, dict(e.context)) for e in urgent]

    def test_dependency_exception(self, backlog: dict[str, list[JobEvent]],
                                  flux_jobs: dict[str, dict[str, Any]]) -> None:
        events = job_events(backlog, flux_jobs, "dep-never")
        assert names(events) == ["submit", "dependency-add", "validate", "exception", "clean"]
        assert events[1].context == {"description": "after-success=ƒ2sH4Yjh"}
        assert events[3].context["type"] == "dependency"
        assert events[3].context["severity"] == 0
        assert [e.seq for e in events] == [0, 1, 2, 3, 4]

    def test_batch_script_never_goes_downstream(self, backlog: dict[str, list[JobEvent]],
                                                live: dict[str, list[JobEvent]],
                                                flux_jobs: dict[str, dict[str, Any]]) -> None:
        raw = [json.loads(line) for line in read("real-0.88-journal-backlog.jsonl").splitlines()]
        (batch_raw,) = [r for r in raw if r["id"] == flux_jobs["batchjob"]["id"]]
        assert "script" in batch_raw["jobspec"]["attributes"]["system"]["files"]
        for jobs in (backlog, live):
            (submit,) = [e for e in job_events(jobs, flux_jobs, "batchjob")
                         if e.event == "submit"]
            assert submit.jobspec is not None
            assert "files" not in submit.jobspec["attributes"]["system"]
            assert "#!/bin/sh" not in json.dumps(submit.to_dict())

    def test_memos_and_annotations(self, live: dict[str, list[JobEvent]],
                                   flux_jobs: dict[str, dict[str, Any]]) -> None:
        memo = job_events(live, flux_jobs, "memo")
        assert ("memo", {"note": "hello"}) in [(e.event, dict(e.context)) for e in memo]
        cleared = [e for e in job_events(live, flux_jobs, "array-3")
                   if e.event == "annotations" and e.context == {"annotations": None}]
        assert len(cleared) == 2 and all(e.seq is None for e in cleared)

    def test_live_stream_opens_with_the_sentinel(self) -> None:
        first = vector("flux", "real-0.88-journal-live.jsonl").read_bytes().splitlines()[0]
        assert json.loads(first) == {"id": -1, "events": []}
        assert parse_journal_response(first, cluster=CLUSTER) == []


# --- the eventlog format ---------------------------------------------------------------

LEGACY = (
    '{"timestamp":1552593348.073045,"name":"submit","context":{"userid":5588,"priority":16,'
    '"flags":0}}\n'
    '{"timestamp":1552593348.088391,"name":"depend"}\n'
    '{"timestamp":1552593348.1,"name":"debug.free-request"}\n'
    '{"timestamp":1552593349,"name":"exception","context":{"type":"cancel","severity":0,'
    '"note":"","userid":5588}}\n'
    '{"timestamp":1552593349.5,"name":"clean"}\n'
)


class TestEventlogRecord:
    def test_legacy_eventlog_without_validate_or_version(self) -> None:
        events = parse_eventlog_record(build_eventlog_record(LEGACY, None, None, "1234"),
                                       cluster=CLUSTER)
        assert names(events) == ["submit", "depend", "debug.free-request", "exception", "clean"]
        assert events[0].facts == {"uid": 5588}
        assert events[3].timestamp == 1552593349.0 and isinstance(events[3].timestamp, float)
        assert events[0].job_id_f58 == "ƒNH" and events[0].source == "flux-eventlog"

    def test_integer_and_float_timestamps_are_one_event(self) -> None:
        as_int = parse_eventlog_record(build_eventlog_record(LEGACY, None, None, 7),
                                       cluster=CLUSTER)[3]
        as_float = parse_eventlog_record(build_eventlog_record(
            LEGACY.replace("1552593349,", "1552593349.0,"), None, None, 7), cluster=CLUSTER)[3]
        assert as_int.event_id == as_float.event_id

    def test_eventlog_as_list_or_json_array(self) -> None:
        entries = [json.loads(line) for line in LEGACY.splitlines()]
        as_list = json.dumps({"id": "ƒNH", "eventlog": entries}).encode()
        as_array = build_eventlog_record(json.dumps(entries), None, None, 1234)
        assert [e.to_dict() for e in parse_eventlog_record(as_list, cluster=CLUSTER)] == [
            e.to_dict() for e in parse_eventlog_record(as_array, cluster=CLUSTER)]

    def test_no_id_asks_for_it(self) -> None:
        with pytest.raises(ParseError) as err:
            build_eventlog_record(LEGACY, None, None, None)
        assert err.value.reason == "missing-field" and "--id" in err.value.message
        with pytest.raises(ParseError) as err:
            parse_eventlog_record(json.dumps({"eventlog": LEGACY}).encode(), cluster=CLUSTER)
        assert err.value.reason == "missing-field" and "--id" in err.value.message

    @pytest.mark.parametrize("payload", [
        LEGACY, LEGACY.splitlines()[0], json.dumps([json.loads(x) for x in LEGACY.splitlines()])])
    def test_bare_eventlog_asks_for_id(self, payload: str) -> None:
        with pytest.raises(ParseError) as err:
            parse_eventlog_record(payload.encode(), cluster=CLUSTER)
        assert err.value.reason == "missing-field" and "--id" in err.value.message

    def test_other_bad_json_is_not_mistaken_for_an_eventlog(self) -> None:
        with pytest.raises(ParseError) as err:
            parse_eventlog_record(b'{"id": 1, "eventlog": [}', cluster=CLUSTER)
        assert err.value.reason == "invalid-json"

    @pytest.mark.parametrize(("args", "reason", "field"), [
        ((LEGACY, "{", None, 1), "invalid-json", "jobspec"),
        ((LEGACY, None, "[1]", 1), "not-an-object", "R"),
        ((LEGACY, None, None, "ƒ0OIl"), "bad-jobid", "--id"),
        ((b"\xff\xfe", None, None, 1), "invalid-utf8", "eventlog"),
        # a surrogate in a str could not be encoded into the record (was UnicodeEncodeError)
        ((LEGACY + '{"timestamp":1552593350,"name":"x\ud800"}\n', None, None, 1),
         "invalid-utf8", "eventlog holds a lone UTF-16 surrogate"),
        ((LEGACY.encode() + rb'{"timestamp":1552593350,"name":"\udc00"}', None, None, 1),
         "invalid-utf8", r"eventlog escapes a lone UTF-16 surrogate, which is not text "
                         r"(\udc00 at byte 384)"),
    ])
    def test_build_errors(self, args: tuple[Any, ...], reason: str, field: str) -> None:
        with pytest.raises(ParseError) as err:
            build_eventlog_record(*args)
        assert (err.value.reason, field in err.value.message) == (reason, True)

    @pytest.mark.parametrize("brk", ["\u2028", "\u2029", "\x85"])
    def test_only_newline_ends_a_line(self, brk: str) -> None:
        # RFC 18: one entry per "\n"-ended line. Other Unicode line breaks may stand raw in a
        # JSON string (json.dumps(..., ensure_ascii=False) writes them so); "\r\n" is fine.
        text = LEGACY.replace('"flags":0}', f'"flags":0,"note":"a{brk}b"}}')
        for eventlog in (text, text.replace("\n", "\r\n")):
            events = parse_eventlog_record(build_eventlog_record(eventlog, None, None, 1),
                                           cluster=CLUSTER)
            assert len(events) == 5 and events[0].context["note"] == f"a{brk}b"
            with pytest.raises(ParseError) as err:  # still seen as a bare eventlog
                parse_eventlog_record(eventlog.encode(), cluster=CLUSTER)
            assert err.value.reason == "missing-field" and "--id" in err.value.message

    def test_bad_line_is_named(self) -> None:
        text = LEGACY + '{"timestamp":1552593350,"name":\n'
        with pytest.raises(ParseError) as err:
            parse_eventlog_record(build_eventlog_record(text, None, None, 1), cluster=CLUSTER)
        assert err.value.reason == "invalid-json" and "line 6" in err.value.message


# --- malformed journal responses -------------------------------------------------------------

def _response(**overrides: Any) -> bytes:
    response: dict[str, Any] = {"id": 263721058304, "events": [
        {"timestamp": 1669766565.69, "name": "submit",
         "context": {"userid": 8556, "urgency": 16, "flags": 0}}]}
    response.update(overrides)
    return json.dumps(response).encode()


def _event(**fields: Any) -> bytes:
    entry = {"timestamp": 1669766565.79, "name": "finish", "context": {"status": 0}}
    entry.update(fields)
    entry = {k: v for k, v in entry.items() if v is not ...}
    return _response(events=[entry])


class TestMalformed:
    @pytest.mark.parametrize(("payload", "reason", "field"), [
        (b"\xc3\x28", "invalid-utf8", "UTF-8"),
        (b'{"id": 1, "events": [', "invalid-json", "journal response"),
        (b"[" * 100000, "invalid-json", "journal response"),
        (b"", "invalid-json", "journal response"),
        (b"[]", "not-an-object", "JSON object"),
        (b'"x"', "not-an-object", "JSON object"),
        (b'{"events": []}', "missing-field", "id"),
        (b'{"id": 1}', "missing-field", "events"),
        (_response(id="nope"), "bad-jobid", "id"),
        (_response(id=2**64), "bad-jobid", "id"),
        (_response(id=True), "bad-jobid", "id"),
        (_response(id=None), "bad-jobid", "id"),
        (_response(id=-1), "bad-jobid", "FLUX_JOBID_ANY"),
        (_response(events={}), "bad-type", "events"),
        (_response(events=[3]), "bad-type", "events[0]"),
        (_response(jobspec=[]), "bad-jobspec", "jobspec"),
        (_response(R="R"), "bad-R", "R"),
        (_response(jobspec={"attributes": {"system": {"duration": "x"}}}), "bad-jobspec",
         "duration"),
        (_event(name=...), "missing-field", "events[0].name"),
        (_event(timestamp=...), "missing-field", "events[0].timestamp"),
        (_event(name=""), "bad-type", "name"),
        (_event(name=["finish"]), "bad-type", "name"),
        (_event(timestamp=-1.5), "bad-timestamp", "timestamp"),
        (_event(timestamp=0), "bad-timestamp", "timestamp"),
        (_event(timestamp="1669766565"), "bad-timestamp", "timestamp"),
        (_event(timestamp=True), "bad-timestamp", "timestamp"),
        (_event(timestamp=10**400), "bad-timestamp", "timestamp"),
        (_event(context=[]), "bad-type", "context"),
        (_event(context={}), "missing-field", "context.status"),
        (_event(context={"status": "0"}), "bad-type", "context.status"),
        (_event(context={"status": -1}), "bad-value", "context.status"),
        (_event(name="submit", context={"urgency": 16}), "missing-field", "userid"),
        (_event(name="exception", context={"type": "cancel"}), "missing-field", "severity"),
        (_event(name="exception", context={"type": 1, "severity": 0}), "bad-type", "type"),
        (_event(name="resource-update", context={"expiration": "soon"}), "bad-type",
         "expiration"),
        (_event(name="resource-update", context={"expiration": -5}), "bad-value",
         "expiration"),
        (_event(name="jobspec-update", context={"attributes.system.queue": 3}), "bad-jobspec",
         "jobspec-update"),
    ])
    def test_reason_and_field(self, payload: bytes, reason: str, field: str) -> None:
        with pytest.raises(ParseError) as err:
            parse_journal_response(payload, cluster=CLUSTER)
        assert err.value.reason == reason
        assert field in err.value.message

    @pytest.mark.parametrize("text", ["NaN", "Infinity", "-Infinity", "1e400"])
    def test_non_finite_numbers(self, text: str) -> None:
        ts = (b'{"id":1,"events":[{"timestamp":%s,"name":"start"}]}' % text.encode())
        with pytest.raises(ParseError) as err:
            parse_journal_response(ts, cluster=CLUSTER)
        assert err.value.reason == "bad-timestamp"
        ctx = (b'{"id":1,"events":[{"timestamp":1.5,"name":"memo","context":{"x":%s}}]}'
               % text.encode())
        with pytest.raises(ParseError) as err:
            parse_journal_response(ctx, cluster=CLUSTER)
        assert err.value.reason == "invalid-json"


def _memo(note: str) -> bytes:
    """A journal response whose memo's note is the JSON string body ``note``, as written."""
    return ('{"id":5,"events":[{"timestamp":1.5,"name":"memo","context":{"note":"' + note
            + '"}}]}').encode()


class TestSurrogates:
    """A lone UTF-16 surrogate is no character (it could not be encoded downstream): refused
    at parse time as ``invalid-utf8``, saying where; a pair is one character."""

    @pytest.mark.parametrize(("payload", "where"), [
        (_memo(r"\ud800"), r"\ud800 at byte 68"),  # a lone high surrogate
        (_memo(r"\uDC00"), r"\uDC00 at byte 68"),  # a lone low one, in capitals
        (_memo(r"x\ude00\ud83d"), r"\ude00 at byte 69"),  # a pair in the wrong order
        (_memo(r"\ud83d\ud83d\ude00"), r"\ud83d at byte 68"),  # a high one, then a pair
        (_memo(r"\\\ud800"), r"\ud800 at byte 70"),  # after an escaped backslash
        (_memo(r"\ud83d\\ude00"), r"\ud83d at byte 68"),  # then text, not an escape
        (_memo(r"éé\ud800"), r"\ud800 at byte 72"),  # é is two bytes
        (b"\xef\xbb\xbf" + _memo(r"\ud800"), r"\ud800 at byte 71"),  # so is the BOM (three)
        (b'{"id":5,"events":[],"\\udfff":1}', r"\udfff at byte 21"),  # in a key
    ])
    def test_escape_of_a_lone_surrogate_is_refused(self, payload: bytes, where: str) -> None:
        with pytest.raises(ParseError) as err:
            parse_journal_response(payload, cluster=CLUSTER)
        assert err.value.reason == "invalid-utf8"
        assert "lone UTF-16 surrogate" in err.value.message and where in err.value.message

    def test_encoded_surrogate_is_refused(self) -> None:
        # "\ud800" encoded as if it were a character (CESU-8, WTF-8) is not UTF-8
        with pytest.raises(ParseError) as err:
            parse_journal_response(_memo("?").replace(b"?", b"\xed\xa0\x80"), cluster=CLUSTER)
        assert err.value.reason == "invalid-utf8" and "byte 68" in err.value.message

    def test_surrogate_in_text_given_as_str_is_refused(self) -> None:
        text = '{"id":5,"events":[],"x":"é\ud800"}'
        with pytest.raises(ParseError) as err:
            parse_journal_response(text, cluster=CLUSTER)  # type: ignore[arg-type]
        assert err.value.reason == "invalid-utf8" and "character 26" in err.value.message

    def test_in_an_eventlog_line(self) -> None:
        line = r'{"timestamp":1.5,"name":"memo","context":{"n":"\udbff"}}'
        record = json.dumps({"id": 5, "eventlog": line + "\n"}).encode()
        with pytest.raises(ParseError) as err:
            parse_eventlog_record(record, cluster=CLUSTER)
        assert err.value.reason == "invalid-utf8"
        assert r"eventlog line 1 escapes a lone UTF-16 surrogate" in err.value.message
        assert r"\udbff at character 47" in err.value.message

    @pytest.mark.parametrize(("note", "text"), [
        (r"\ud83d\ude00", "\U0001f600"),  # a pair: one character
        (r"\uD83D\uDE00\ud83d\ude00", "\U0001f600" * 2),
        (r"\\ud800\\udc00", r"\ud800\udc00"),  # escaped backslashes: plain text
        (r"\ud7ff\ue000", "\ud7ff\ue000"),  # just outside the surrogates
    ])
    def test_pairs_and_look_alikes_are_accepted(self, note: str, text: str) -> None:
        (memo,) = parse_journal_response(_memo(note), cluster=CLUSTER)
        assert memo.context == {"note": text}


class TestTolerance:
    def test_unknown_events_and_keys_pass_through(self) -> None:
        payload = json.dumps({
            "id": 99, "future-key": {"x": 1}, "events": [
                {"timestamp": 5.5, "name": "debug.alloc-request", "extra": 1},
                {"timestamp": 6.0, "name": "shiny-new-event", "context": {"a": [1, 2]}},
                {"timestamp": 6.5, "name": "flux-restart", "context": None},
                {"timestamp": 7.0, "name": "invalidate"},
                {"timestamp": 8.0, "name": "finish", "context": {"status": 0, "new": "k"}},
            ]}).encode()
        events = parse_journal_response(payload, cluster=CLUSTER)
        assert names(events) == ["debug.alloc-request", "shiny-new-event", "flux-restart",
                                 "invalidate", "finish"]
        assert events[1].context == {"a": [1, 2]} and events[2].context == {}
        assert events[4].context == {"status": 0, "new": "k"}
        assert [e.seq for e in events] == [0, 1, 2, 3, 4]

    def test_backlog_with_all_events_filtered_out(self) -> None:
        assert parse_journal_response(b'{"id": 42, "events": []}', cluster=CLUSTER) == []

    def test_jobspec_on_validate_for_journals_before_0_63(self) -> None:
        jobspec = json.loads(read("jobspec_dump-0.46.0.json"))
        payload = json.dumps({"id": 5, "events": [{"timestamp": 2.0, "name": "validate"}],
                              "jobspec": jobspec}).encode()
        (validate,) = parse_journal_response(payload, cluster=CLUSTER)
        assert validate.jobspec == jobspec and validate.facts["job_name"] == "true"
        assert validate.seq is None

    def test_jobspec_and_R_stay_off_other_events(self) -> None:
        # flux-core 0.68-0.85 JournalConsumer put them on every event of a backlog job
        payload = json.dumps({"id": 5, "events": [{"timestamp": 3.0, "name": "start"}],
                              "jobspec": LMP_JOBSPEC,
                              "R": json.loads(read("R_dump-0.46.0.json"))}).encode()
        (start,) = parse_journal_response(payload, cluster=CLUSTER)
        assert (start.jobspec, start.R, dict(start.facts)) == (None, None, {})

    def test_privacy_of_journal_jobspec(self) -> None:
        payload = _response(jobspec=LMP_JOBSPEC)
        (submit,) = parse_journal_response(payload, cluster=CLUSTER)
        assert submit.jobspec is not None
        assert not {"environment", "files", "batch"} & set(
            submit.jobspec["attributes"]["system"])
        assert "SECRET" not in json.dumps(submit.to_dict())

    def test_update_context_is_redacted_on_the_event(self) -> None:
        (update,) = parse_journal_response(_event(
            name="jobspec-update", context={"attributes.system.files.script": {"data": "x"},
                                            "attributes.system.queue": "q"}), cluster=CLUSTER)
        assert update.context == {"attributes.system.queue": "q"}
        assert update.facts == {"queue": "q"}

    def test_str_payload_and_bom(self) -> None:
        text = "\ufeff" + _response().decode()
        assert names(parse_journal_response(text.encode(), cluster=CLUSTER)) == ["submit"]
        assert names(parse_journal_response(text, cluster=CLUSTER)) == ["submit"]  # type: ignore[arg-type]
