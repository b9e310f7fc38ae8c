"""Real Slurm 22.05 jobs of every ending, and the records Slurm emits about them.

One scenario run submits, as alice, a completed job, a failing job (exit 3), a 3-task array,
a job cancelled while pending, one cancelled while running, one killed at its 1-minute time
limit and one whose dependency can never be satisfied. It checks what the jobcomp/
elasticsearch plugin POSTed, what PrologSlurmctld/EpilogSlurmctld saw, and what sacct and
squeue say. The records are kept as test vectors for the parsers: under the cluster root
always, and in ``tests/data/slurm/real-22.05/`` when ``JOBSTREAM_SAVE_SLURM_VECTORS=1``.

When the edge's receiver replaces the stand-in, these assertions move to the job documents
in Elasticsearch.

:class:`TestNodePoll` drains, resumes and downs the cluster's node under the edge's node
poller (its records stay in the spool: no Kafka here), after the scenario's jobs ended.
"""

from __future__ import annotations

import json
import os
import pwd
import shutil
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import pytest
from slurm_cluster import TERMINAL_STATES, SlurmCluster
from slurm_standins import HookCapture, JobcompReceiver
from waiting import wait_until

from pipeline.codecs.codec import raw_from_avro
from pipeline.core.nodes import NodeEvent
from pipeline.edges.base import EdgeRuntime
from pipeline.edges.slurm.nodes import NodePoller
from pipeline.edges.slurm.polling import PollError
from pipeline.parsers import parse_record
from pipeline.runtime.config import Config

pytest_plugins = ["conftest_slurm"]

REPO_VECTORS = Path(__file__).resolve().parents[1] / "data" / "slurm" / "real-22.05"
# Generous bounds for waits, never assertions about speed. The time-limit check of
# slurmctld runs every 30 s, so a 1-minute job times out 60-90 s after it starts; the
# jobcomp/elasticsearch thread holds records up to 30 s after slurmctld starts.
JOB_WAIT_S = 240.0
RECORD_WAIT_S = 120.0

STARTED = ("completed", "failed", "array", "cancelled_running", "timeout")
SACCT_FIELDS = ("JobID", "JobIDRaw", "JobName", "User", "Group", "Account", "Partition", "QOS",
                "State", "ExitCode", "DerivedExitCode", "Reason", "Submit", "Eligible", "Start",
                "End", "Elapsed", "Timelimit", "NNodes", "NCPUS", "NodeList")
NEVER_STARTED = ("cancelled_pending", "dependency_never")
# What each scenario's job is, for the vectors' manifest (all submitted by alice).
SCENARIOS = {
    "completed": "sbatch --wrap 'echo hello' (partition debug, qos normal): COMPLETED 0:0",
    "failed": "sbatch --partition=short --qos=high --time=10 --hold --wrap 'sleep 1; exit 3', "
              "released after its dependant was queued: FAILED 3:0",
    "array": "sbatch --array=1-3: three COMPLETED tasks; see array_tasks for their raw ids",
    "cancelled_running": "sleep 600 in debug, scancel about 1 s after its script started",
    "cancelled_pending": "sbatch --hold, scancel while held: never started",
    "timeout": "sbatch --partition=short --time=1 --wrap 'sleep 600': TIMEOUT after 60-90 s",
    "dependency_never": "--dependency=afterok:<failed>: cancelled by "
                        "DependencyParameters=kill_invalid_depend, never started",
}


@dataclass
class Scenario:
    """The jobs of one run: scenario name -> job id, array task ids, captured outputs."""

    jobs: dict[str, str] = field(default_factory=dict)
    array_tasks: list[str] = field(default_factory=list)
    squeue_active: dict[str, Any] = field(default_factory=dict)
    squeue_finished: dict[str, Any] = field(default_factory=dict)
    sacct: dict[str, Any] = field(default_factory=dict)
    sacct_text: str = ""
    final: dict[str, dict[str, str]] = field(default_factory=dict)  # scontrol records

    def raw_ids(self) -> list[str]:
        """Every job id a record is about (array tasks by their own ids)."""
        return [j for name, j in self.jobs.items() if name != "array"] + self.array_tasks


def _run_scenario(cluster: SlurmCluster, hooks: HookCapture) -> Scenario:
    s = Scenario()
    # The time-limit job goes first: it is the slowest, everything else runs beside it.
    s.jobs["timeout"] = cluster.submit("sleep 600", name="timeout-job", partition="short",
                                       time_limit="1")
    s.jobs["cancelled_running"] = cluster.submit("echo started; sleep 600",
                                                 name="cancel-running")
    # Held so that its dependant is submitted while it still can succeed, deterministically.
    s.jobs["failed"] = cluster.submit("sleep 1; exit 3", name="fail-job", partition="short",
                                      account="physics", qos="high", time_limit="10",
                                      hold=True)
    s.jobs["dependency_never"] = cluster.submit(
        "echo never", name="never-runs", dependency=f"afterok:{s.jobs['failed']}")
    s.jobs["cancelled_pending"] = cluster.submit("echo never", name="cancel-pending",
                                                 hold=True)
    s.jobs["completed"] = cluster.submit("echo hello", name="ok-job")
    s.jobs["array"] = cluster.submit("echo task $SLURM_ARRAY_TASK_ID", name="array-job",
                                     array="1-3")

    cluster.wait_for(s.jobs["cancelled_running"], {"RUNNING"}, timeout=JOB_WAIT_S)
    cluster.wait_for(s.jobs["timeout"], {"RUNNING"}, timeout=JOB_WAIT_S)
    # Pending (two held, one waiting on its dependency) and running jobs side by side.
    s.squeue_active = cluster.squeue_json()

    # Cancel only once the batch script itself runs (RUNNING comes before that).
    output = cluster.jobs_dir / f"cancel-running-{s.jobs['cancelled_running']}.out"
    wait_until(lambda: output.exists() and "started" in output.read_text(),
               timeout=JOB_WAIT_S, what="the running job's script started")
    time.sleep(1.0)  # so that its run time is not 0 s in every record
    cluster.cancel(s.jobs["cancelled_running"])
    cluster.cancel(s.jobs["cancelled_pending"])
    cluster.release(s.jobs["failed"])

    for job_id in s.jobs.values():
        cluster.wait_for(job_id, TERMINAL_STATES, timeout=JOB_WAIT_S)
        for rec in cluster.job_records(job_id):
            s.final[rec["JobId"]] = rec
    s.array_tasks = sorted(
        (r["JobId"] for r in s.final.values() if r.get("ArrayJobId") == s.jobs["array"]),
        key=int)
    s.squeue_finished = cluster.squeue_json()
    return s


def _wait_for_records(s: Scenario, cluster: SlurmCluster, receiver: JobcompReceiver,
                      hooks: HookCapture) -> None:
    wanted = set(s.raw_ids())
    wait_until(lambda: wanted <= receiver.records_by_job().keys(), timeout=RECORD_WAIT_S,
               what=f"jobcomp records for jobs {sorted(wanted, key=int)}", interval=0.5)
    started = [s.jobs[n] for n in STARTED if n != "array"] + s.array_tasks
    wait_until(lambda: all(hooks.env("epilog_slurmctld", j) for j in started),
               timeout=RECORD_WAIT_S, what="EpilogSlurmctld of every started job")

    def accounted() -> bool:
        # A job's accounting record is final only once its batch step has ended too: a
        # time-limit kill first records exit 0:0 and gets 0:15 from the step afterwards.
        s.sacct_text = cluster.sacct_parsable(s.jobs.values(), SACCT_FIELDS)
        rows = _sacct_rows(s.sacct_text)
        ended = all(rows.get(j, {}).get("State", "").split(" ")[0] in TERMINAL_STATES
                    for j in wanted)
        stepped = all(f"{j}.batch" in rows for j in started)
        return ended and stepped

    wait_until(accounted, timeout=RECORD_WAIT_S, what="sacct showing every job and step ended",
               interval=0.5)
    s.sacct = cluster.sacct_json(s.jobs.values())


def _sacct_rows(text: str) -> dict[str, dict[str, str]]:
    """``sacct --parsable2`` text keyed by JobIDRaw (steps as ``<id>.batch``)."""
    header, *lines = text.splitlines() or [""]
    fields = header.split("|")
    rows = [dict(zip(fields, line.split("|"), strict=True)) for line in lines]
    return {r["JobIDRaw"]: r for r in rows}


@pytest.fixture(scope="module")
def scenario(
    slurm_cluster: SlurmCluster,
    slurm_jobcomp_receiver: JobcompReceiver,
    slurm_hooks: HookCapture,
) -> Iterator[Scenario]:
    t0 = time.monotonic()
    s = _run_scenario(slurm_cluster, slurm_hooks)
    _wait_for_records(s, slurm_cluster, slurm_jobcomp_receiver, slurm_hooks)
    slurm_cluster.timings["scenario_s"] = time.monotonic() - t0
    _save_vectors(s, slurm_cluster, slurm_jobcomp_receiver, slurm_hooks,
                  slurm_cluster.root / "vectors")
    if os.environ.get("JOBSTREAM_SAVE_SLURM_VECTORS") == "1":
        _save_vectors(s, slurm_cluster, slurm_jobcomp_receiver, slurm_hooks, REPO_VECTORS)
    yield s


@pytest.fixture(scope="module")
def jobcomp(scenario: Scenario, slurm_jobcomp_receiver: JobcompReceiver) -> dict[str, Any]:
    """Job id -> the jobcomp record the plugin POSTed for it."""
    return slurm_jobcomp_receiver.records_by_job()


@pytest.fixture(scope="module")
def alice() -> pwd.struct_passwd:
    return pwd.getpwnam("alice")


def _job(jobcomp: dict[str, Any], scenario: Scenario, name: str) -> dict[str, Any]:
    return jobcomp[scenario.jobs[name]]


class TestJobcompRecords:
    def test_every_job_has_one_record_posted_as_json_to_the_index(
        self, scenario: Scenario, slurm_jobcomp_receiver: JobcompReceiver
    ) -> None:
        ours = [p for p in slurm_jobcomp_receiver.posts()
                if str(p.record()["jobid"]) in scenario.raw_ids()]
        assert sorted(str(p.record()["jobid"]) for p in ours) == sorted(scenario.raw_ids())
        assert {p.path for p in ours} == {"/slurm/_doc"}
        assert {p.content_type for p in ours} == {"application/json"}

    @pytest.mark.parametrize(
        ("name", "state", "exit_code", "partition", "qos"),
        [
            ("completed", "COMPLETED", "0:0", "debug", "normal"),
            ("failed", "FAILED", "3:0", "short", "high"),
            ("cancelled_running", "CANCELLED", "0:0", "debug", "normal"),
            ("cancelled_pending", "CANCELLED", "0:0", "debug", "normal"),
            ("timeout", "TIMEOUT", "0:0", "short", "normal"),
            ("dependency_never", "CANCELLED", "0:0", "debug", "normal"),
        ],
    )
    def test_state_exit_code_and_placement(
        self, jobcomp: dict[str, Any], scenario: Scenario, alice: pwd.struct_passwd,
        name: str, state: str, exit_code: str, partition: str, qos: str,
    ) -> None:
        rec = _job(jobcomp, scenario, name)
        assert (rec["state"], rec["exit_code"]) == (state, exit_code)
        assert (rec["partition"], rec["qos"], rec["account"]) == (partition, qos, "physics")
        assert (rec["username"], rec["user_id"]) == ("alice", alice.pw_uid)
        assert (rec["groupname"], rec["group_id"]) == ("alice", alice.pw_gid)
        assert rec["cluster"] == "testcluster"
        assert rec["parent_accounts"] == "/root/research/physics/physics"

    def test_array_tasks_each_have_a_record_tied_to_the_array(
        self, jobcomp: dict[str, Any], scenario: Scenario
    ) -> None:
        array_id = int(scenario.jobs["array"])
        tasks = [jobcomp[j] for j in scenario.array_tasks]
        assert sorted(t["array_task_id"] for t in tasks) == [1, 2, 3]
        assert {t["array_job_id"] for t in tasks} == {array_id}
        assert {t["state"] for t in tasks} == {"COMPLETED"}
        # The array's own id is reused by one of its tasks.
        assert array_id in {t["jobid"] for t in tasks}

    def test_time_limits_are_in_seconds(self, jobcomp: dict[str, Any],
                                        scenario: Scenario) -> None:
        assert _job(jobcomp, scenario, "timeout")["time_limit"] == 60
        assert _job(jobcomp, scenario, "failed")["time_limit"] == 600

    def test_timeout_ran_to_its_limit(self, jobcomp: dict[str, Any],
                                      scenario: Scenario) -> None:
        assert _job(jobcomp, scenario, "timeout")["elapsed"] >= 60

    def test_cancelled_while_pending_never_ran(self, jobcomp: dict[str, Any],
                                               scenario: Scenario) -> None:
        for name in NEVER_STARTED:
            rec = _job(jobcomp, scenario, name)
            assert rec["elapsed"] == 0
            assert rec["@start"] == rec["@end"]


class TestHookEnvironments:
    def test_started_jobs_have_prolog_and_epilog(
        self, scenario: Scenario, slurm_hooks: HookCapture
    ) -> None:
        started = [scenario.jobs[n] for n in STARTED if n != "array"] + scenario.array_tasks
        for job_id in started:
            for context in ("prolog_slurmctld", "epilog_slurmctld"):
                env = slurm_hooks.env(context, job_id)
                assert env is not None, f"no {context} for job {job_id}"
                assert env["SLURM_SCRIPT_CONTEXT"] == context
                assert env["SLURM_JOB_ID"] == job_id
                assert (env["SLURM_JOB_USER"], env["SLURM_JOB_ACCOUNT"]) == ("alice", "physics")

    def test_jobs_that_never_started_have_no_hooks(
        self, scenario: Scenario, slurm_hooks: HookCapture
    ) -> None:
        for name in NEVER_STARTED:
            job_id = scenario.jobs[name]
            for context in ("prolog_slurmctld", "epilog_slurmctld"):
                assert slurm_hooks.env(context, job_id) is None

    def test_epilog_carries_the_exit_code(self, scenario: Scenario,
                                          slurm_hooks: HookCapture) -> None:
        failed = slurm_hooks.env("epilog_slurmctld", scenario.jobs["failed"])
        ok = slurm_hooks.env("epilog_slurmctld", scenario.jobs["completed"])
        assert failed is not None and ok is not None
        assert (failed["SLURM_JOB_EXIT_CODE"], failed["SLURM_JOB_EXIT_CODE2"]) == ("768", "3:0")
        assert (ok["SLURM_JOB_EXIT_CODE"], ok["SLURM_JOB_EXIT_CODE2"]) == ("0", "0:0")
        assert failed["SLURM_JOB_PARTITION"] == "short"

    def test_prolog_has_no_exit_code(self, scenario: Scenario,
                                     slurm_hooks: HookCapture) -> None:
        env = slurm_hooks.env("prolog_slurmctld", scenario.jobs["completed"])
        assert env is not None
        assert "SLURM_JOB_EXIT_CODE" not in env

    def test_array_task_hooks_name_the_array(self, scenario: Scenario,
                                             slurm_hooks: HookCapture) -> None:
        envs = [slurm_hooks.env("prolog_slurmctld", j) for j in scenario.array_tasks]
        assert {e["SLURM_ARRAY_JOB_ID"] for e in envs if e} == {scenario.jobs["array"]}
        assert sorted(e["SLURM_ARRAY_TASK_ID"] for e in envs if e) == ["1", "2", "3"]


class TestAccountingAndQueue:
    def test_sacct_states(self, scenario: Scenario) -> None:
        jobs = {str(j["job_id"]): j for j in scenario.sacct["jobs"]}
        expected = {"completed": "COMPLETED", "failed": "FAILED", "timeout": "TIMEOUT",
                    "cancelled_running": "CANCELLED", "cancelled_pending": "CANCELLED",
                    "dependency_never": "CANCELLED"}
        got = {name: jobs[scenario.jobs[name]]["state"]["current"] for name in expected}
        assert got == expected
        for job_id in scenario.raw_ids():
            job = jobs[job_id]
            assert (job["user"], job["account"]) == ("alice", "physics")

    def test_sacct_keeps_the_reason_from_before_the_end(self, scenario: Scenario) -> None:
        # Accounting keeps the last reason it was sent while the job pended, never
        # slurmctld's final "DependencyNeverSatisfied" (see the scontrol test below):
        # "Dependency", or "None" when the parent failed before slurmctld sent the pending
        # reason on to slurmdbd (a loaded machine: seen once in a full CI run).
        jobs = {str(j["job_id"]): j for j in scenario.sacct["jobs"]}
        assert jobs[scenario.jobs["dependency_never"]]["state"]["reason"] in (
            "Dependency", "None")

    def test_sacct_exit_codes(self, scenario: Scenario) -> None:
        jobs = _sacct_rows(scenario.sacct_text)
        failed, timeout = scenario.jobs["failed"], scenario.jobs["timeout"]
        assert (jobs[failed]["ExitCode"], jobs[f"{failed}.batch"]["State"]) == ("3:0", "FAILED")
        # Killed jobs: the batch step shows signal 15 (CANCELLED), while the job's own line
        # and jobcomp say 0:0 (the job line of a time-out turns 0:15 only later, when
        # slurmctld resends its jobs to slurmdbd at its next start).
        for name in ("timeout", "cancelled_running"):
            step = jobs[f"{scenario.jobs[name]}.batch"]
            assert (step["State"], step["ExitCode"]) == ("CANCELLED", "0:15")
        assert jobs[timeout]["State"] == "TIMEOUT"
        assert jobs[scenario.jobs["cancelled_running"]]["State"] == "CANCELLED by 0"

    def test_sacct_json_of_22_05_loses_the_exit_code(self, scenario: Scenario) -> None:
        # openapi/v0.0.38 prints SUCCESS/0 for the job that exited 3: parsers must not
        # trust it on 22.05 (text sacct, jobcomp and the epilog have the real code).
        jobs = {str(j["job_id"]): j for j in scenario.sacct["jobs"]}
        assert jobs[scenario.jobs["failed"]]["exit_code"] == \
            {"status": "SUCCESS", "return_code": 0}

    def test_squeue_saw_pending_and_running_jobs(self, scenario: Scenario) -> None:
        states = {str(j["job_id"]): j["job_state"] for j in scenario.squeue_active["jobs"]}
        assert states[scenario.jobs["timeout"]] == "RUNNING"
        assert states[scenario.jobs["cancelled_running"]] == "RUNNING"
        for name in ("failed", "cancelled_pending", "dependency_never"):
            assert states[scenario.jobs[name]] == "PENDING"

    def test_scontrol_reason_of_the_never_satisfied_dependency(self,
                                                                scenario: Scenario) -> None:
        rec = scenario.final[scenario.jobs["dependency_never"]]
        assert (rec["JobState"], rec["Reason"]) == ("CANCELLED", "DependencyNeverSatisfied")


class TestNodePoll:
    """The edge's node poller against the real slurmctld: each change of the node's state
    by ``scontrol update`` is one ``slurm-nodes`` record, and nothing else is."""

    @pytest.fixture
    def poller(self, slurm_cluster: SlurmCluster, tmp_path: Path) -> Iterator[NodePoller]:
        cfg = Config().replace(cluster=slurm_cluster.spec.cluster,
                               kafka={"bootstrap": "127.0.0.1:9"},
                               edge={"spool_dir": str(tmp_path / "spool")})

        def runner(argv: list[str], timeout: float, out: IO[bytes]) -> None:
            done = subprocess.run(argv, stdout=out, stderr=subprocess.PIPE,
                                  env=slurm_cluster.env, timeout=timeout, check=False)
            if done.returncode != 0:
                raise PollError(f"{argv} exited {done.returncode}: {done.stderr!r}")

        runtime = EdgeRuntime(cfg, "slurm")  # not started: the records stay spooled
        yield NodePoller(runtime, runner=runner)
        runtime.spool.close()

    @staticmethod
    def _events_after(poller: NodePoller, seq: int) -> tuple[int, list[NodeEvent]]:
        """(newest seq, the events of the records spooled after ``seq``)."""
        events: list[NodeEvent] = []
        for rec in poller.runtime.spool.read(seq, 1000):
            raw = raw_from_avro(poller.runtime.codec.decode(rec.value))
            events += parse_record("slurm-nodes", raw.payload, cluster=raw.cluster,
                                   received_at=raw.received_at)
            seq = rec.seq
        return seq, events

    def _change(self, cluster: SlurmCluster, poller: NodePoller, seq: int, settled: str,
                *update: str) -> tuple[int, NodeEvent, float, float]:
        """Run ``scontrol update``, wait until sinfo shows the node ``settled``, poll, and
        return the one event the poll published. The wait: a resumed node is
        IDLE+NOT_RESPONDING until slurmctld next pings its slurmd, a state of its own that
        a poll in between publishes as one more record."""
        before = time.time()
        cluster.run(["scontrol", "update", f"nodename={cluster.spec.host}", *update])
        after = time.time()
        wait_until(lambda: cluster.node_state() == settled, timeout=60,
                   what=f"node {cluster.spec.host} {settled} in sinfo", interval=0.5)
        assert poller.poll_once() == 1
        seq, events = self._events_after(poller, seq)
        assert [e.node for e in events] == [cluster.spec.host]
        time.sleep(2.0)  # slurmctld's own updates of the node (load, pings) publish nothing
        published = poller.poll_once()
        _, later = self._events_after(poller, seq)
        assert published == 0, json.dumps(
            {"first": events[0].to_dict(), "then": [e.to_dict() for e in later]})
        return seq, events[0], before, after

    def test_drain_resume_and_down_are_each_one_record(self, slurm_cluster: SlurmCluster,
                                                       poller: NodePoller) -> None:
        host = slurm_cluster.spec.host
        assert poller.poll_once() >= 1  # the node as it is now, once
        seq, events = self._events_after(poller, 0)
        assert host in {e.node for e in events}
        assert poller.poll_once() == 0
        try:
            seq, drain, t0, t1 = self._change(slurm_cluster, poller, seq, "drained",
                                              "state=drain", "reason=jobstream test: drain")
            assert "DRAIN" in drain.context["state"]
            assert (drain.reason, drain.by) == ("jobstream test: drain", "root")
            assert t0 - 1 <= drain.context["reason_changed_at"] <= t1 + 1

            seq, resume, _, _ = self._change(slurm_cluster, poller, seq, "idle",
                                             "state=resume")
            assert resume.context["state"] == ["IDLE"]
            assert (resume.reason, resume.by) == (None, None)

            seq, down, t0, t1 = self._change(slurm_cluster, poller, seq, "down",
                                             "state=down", "reason=jobstream test: down")
            assert down.context["state"][0] == "DOWN"
            assert (down.reason, down.by) == ("jobstream test: down", "root")
            assert t0 - 1 <= down.context["reason_changed_at"] <= t1 + 1
        finally:
            slurm_cluster.run(["scontrol", "update", f"nodename={host}", "state=resume"],
                              check=False)
            wait_until(lambda: slurm_cluster.node_state() == "idle", timeout=60,
                       what=f"node {host} idle again", interval=0.5)


def _save_vectors(s: Scenario, cluster: SlurmCluster, receiver: JobcompReceiver,
                  hooks: HookCapture, target: Path) -> None:
    """Write the run's real records where parser tests can read them."""
    ours = set(s.raw_ids())
    if target.exists():
        shutil.rmtree(target)
    (target / "hooks").mkdir(parents=True)
    with (target / "jobcomp.jsonl").open("wb") as out:
        for post in receiver.posts():
            if str(post.record()["jobid"]) in ours:
                out.write(post.body.rstrip(b"\n") + b"\n")
    for path in hooks.files():
        job_id = path.stem.rsplit("_", 1)[1]
        if job_id in ours:
            shutil.copyfile(path, target / "hooks" / path.name)
    for name, doc in (("squeue_active.json", _only(s.squeue_active, ours)),
                      ("squeue_finished.json", _only(s.squeue_finished, ours)),
                      ("sacct.json", s.sacct)):
        (target / name).write_text(json.dumps(doc, indent=2) + "\n")
    (target / "sacct.txt").write_text(s.sacct_text)
    manifest = {
        "slurm": cluster.version(),
        "cluster": cluster.spec.cluster,
        "jobs": s.jobs,
        "array_tasks": s.array_tasks,
        "scenarios": SCENARIOS,
        "files": {
            "jobcomp.jsonl": "jobcomp/elasticsearch POST bodies, one per line, as received",
            "hooks/": "PrologSlurmctld/EpilogSlurmctld environments (env | sort), "
                      "<context>_<job id>.env",
            "squeue_active.json": "squeue --json with jobs pending (held, dependency) and "
                                  "running",
            "squeue_finished.json": "squeue --json after every job ended",
            "sacct.json": "sacct --json -a -j <the jobs>",
            "sacct.txt": f"sacct -a -j <the jobs> --parsable2 -o {','.join(SACCT_FIELDS)}",
        },
        "notes": [
            "squeue files: jobs of earlier runs still in slurmctld's memory are left out of "
            "the 'jobs' list; everything else is as printed",
            "sacct --json of 22.05 reports exit_code SUCCESS/0 for the job that exited 3; "
            "sacct.txt, jobcomp and the epilog have 3:0",
            "sacct captured right after the jobs ended: the time-out job's own ExitCode is "
            "0:0 here and becomes 0:15 after slurmctld restarts",
        ],
    }
    (target / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")


def _only(squeue: dict[str, Any], job_ids: set[str]) -> dict[str, Any]:
    """The squeue document with only the given jobs in its ``jobs`` list."""
    return {**squeue, "jobs": [j for j in squeue.get("jobs", [])
                               if str(j.get("job_id")) in job_ids]}
