"""Slurm 22.05 -> the jobstream Slurm edge -> Kafka -> worker -> sink -> Elasticsearch.

The session's test cluster (``conftest_slurm``, started once) is pointed at a real edge
for this module: ``JobCompLoc`` at the edge's jobcomp receiver, PrologSlurmctld and
EpilogSlurmctld at the hook script ``python -m pipeline.edges install-hook`` writes, and
the edge polls ``squeue``/``sacct`` too. It runs as a site runs it,
``python -m pipeline.edges slurm`` configured by ``JOBSTREAM_*`` variables; a real
``jobstream worker`` and ``jobstream sink`` carry its records to Elasticsearch.

Seven jobs of every ending run at once as alice (the scenario of the records test):
completed, failed (exit 3), a 3-task array, cancelled while pending, cancelled while
running, timed out, and one whose dependency can never be satisfied. The tests check the
job documents against what Slurm itself reported for such jobs (``tests/data/slurm/
real-22.05``): one document per job and per array task, states, results, exit codes,
users, accounts and partitions, and that every source reached them.

jobstream's lua plugins run too (issue 13 part 3; ``install-lua`` into the cluster's
slurm.conf directory, the test's site policy chained): every sbatch's job id comes from
cli_filter; a held job's time limit changed and the job held again by root while it
waits (slurm_job_modify) shows in its document before it ends; a submission the policy
refuses is the one record of the DLQ (``submit-refused``: no job id, no job).
Three more measure usage (issue 13), beside the time-out job so they add no wall time:
one keeping a core busy, one sleeping, one touching 200 MiB against ``--mem=400M``. Their
documents must carry the CPU efficiency and peak memory sacct's steps give
(``pipeline.parsers.slurm_json``); the figures are reported as ``e2e_usage_*``.

Figures, reported and never asserted (terminal summary and ``<slurm root>/e2e-figures.json``):
latency from a job's end to a search finding its document done; the edge's resident memory
and CPU per 1,000 records, over the run and over a burst of 1,000 jobcomp POSTs and 1,000
hook records to a second edge of its own.
"""

from __future__ import annotations

import json
import pwd
import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from slurm_cluster import TERMINAL_STATES, SlurmCluster
from slurm_e2e import (
    DocWatcher,
    EdgeProcess,
    Usage,
    end_offsets,
    feed,
    lua_plugins,
    module_config,
    percentile,
    read_dlq,
    read_raw,
    routed,
    wait_for,
)
from waiting import wait_until

from pipeline.core.model import RawRecord
from pipeline.kafka.topics import ensure_topics
from pipeline.parsers import parse_record
from pipeline.parsers.slurm_submit import time_limit_s
from pipeline.replay.readback import NOT_YET, client, jobs_alias, refresh
from pipeline.runtime.children import Child, config_env, free_port
from pipeline.runtime.config import Config
from pipeline.runtime.errors import ParseError
from pipeline.sink.names import Family, alias_name
from pipeline.tooling.demo import wait_ready

pytest_plugins = ["conftest_slurm"]

CLUSTER = "testcluster"
REAL = Path(__file__).resolve().parents[1] / "data" / "slurm" / "real-22.05"
# Guards against hangs, never assertions about speed. A 1-minute job times out 60-90 s
# after it starts (slurmctld checks limits every 30 s); kill_invalid_depend cancels the
# never-satisfied dependant up to 30 s after its dependency failed.
JOB_WAIT_S = 240.0
DOCS_WAIT_S = 300.0
#: a few polls of the edge's poller and the pipeline's latency
SOURCES_WAIT_S = 90.0
#: seconds between the edge's squeue/sacct polls (default 60: too slow for a test)
POLL_S = 5.0
#: records of each kind in the burst that measures the edge's cost per record
BURST = 1000

#: the usage jobs (issue 13): one core kept busy, a sleep, 200 MiB touched against 400M
USAGE_JOBS = ("cpu_bound", "sleeping", "memory")
BUSY_S = 15
MEM_TOUCHED_MB = 200
MEM_ASKED_MB = 400

STARTED = ("completed", "failed", "cancelled_running", "timeout", *USAGE_JOBS)
# Held or waiting on a dependency until cancelled: never started, never even eligible.
# sacct on 22.05 leaves such jobs out of every --starttime/--endtime window (without
# --state it selects on the eligible time, which they lack), so the poller's sacct never
# reports them; squeue does, for MinJobAge after their end, and jobcomp does.
NEVER_STARTED = ("cancelled_pending", "dependency_never", "modified")
#: the test's site policy, chained by jobstream's job_submit.lua: it refuses this name
REFUSED_NAME = "refused-job"
SITE_POLICY = f"""
function slurm_job_submit(job_desc, part_list, submit_uid)
    if job_desc.name == "{REFUSED_NAME}" then
        slurm.log_user("jobs named {REFUSED_NAME} are not allowed here")
        return slurm.ERROR
    end
    return slurm.SUCCESS
end
"""


@dataclass
class Run:
    """What one run of the scenario left: jobs, documents, events, records, figures."""

    jobs: dict[str, str] = field(default_factory=dict)
    array_tasks: list[str] = field(default_factory=list)
    docs: list[dict[str, Any]] = field(default_factory=list)
    #: job id -> {(source, event)} of its canonical events in Elasticsearch
    events: dict[str, set[tuple[str, str]]] = field(default_factory=dict)
    raw: list[RawRecord] = field(default_factory=list)
    dlq: list[tuple[dict[str, str], bytes]] = field(default_factory=list)
    #: the refused sbatch (its exit status and message), the modified job while pending
    refused: tuple[int, str] = (0, "")
    modified_pending: dict[str, Any] = field(default_factory=dict)
    figures: dict[str, float] = field(default_factory=dict)

    def ids(self) -> list[str]:
        """Every job id a document is expected for (array tasks by their raw ids)."""
        return [j for n, j in self.jobs.items() if n != "array"] + self.array_tasks

    def started_ids(self) -> list[str]:
        return [self.jobs[n] for n in STARTED] + self.array_tasks

    def never_eligible_ids(self) -> list[str]:
        return [self.jobs[n] for n in NEVER_STARTED]

    def doc(self, name: str) -> dict[str, Any]:
        [doc] = [d for d in self.docs if d["job_id"] == self.jobs[name]]
        return doc


# -- configuration and clean-up -----------------------------------------------------------


@pytest.fixture(scope="module")
def e2e_cfg(stack_base_cfg: Config, tmp_path_factory: pytest.TempPathFactory
            ) -> Iterator[Config]:
    with module_config(stack_base_cfg, CLUSTER, tmp_path_factory.mktemp("slurm-e2e")) as cfg:
        yield cfg


@pytest.fixture(scope="module")
def hook_dir(slurm_root: Path) -> Iterator[Path]:
    """Where the hook script, its socket and drop directory live: under the cluster root,
    reachable by the ``slurm`` user that runs the hooks (pytest's tmp dirs are not)."""
    path = slurm_root / f"e2e-{uuid.uuid4().hex[:8]}"
    path.mkdir(mode=0o755)
    path.chmod(0o755)
    yield path
    shutil.rmtree(path, ignore_errors=True)


def edge_config(cfg: Config, hook_dir: Path, *, port: int, poller: bool,
                name: str = "") -> Config:
    s = {"receiver_port": port, "poller": poller, "poll_interval_s": POLL_S,
         # the node records have their own flow (test_slurm_records.TestNodePoll): here
         # they would be refused records beside the one the DLQ checks
         "nodes": False,
         # the first sacct window: the module's own jobs, not the cluster's history
         "catchup_max_s": 120.0, "hook_scan_s": 1.0,
         "hook_socket": str(hook_dir / f"hook{name}.sock"),
         "hook_drop_dir": str(hook_dir / f"hook{name}-drop"),
         "submit_plugins": True, "submit_scan_s": 1.0,
         "submit_spool_dir": str(hook_dir / f"submit{name}-spool"),
         # the edge runs as root here, the hooks as SlurmUser: the socket and drop
         # directory are given to it
         "hook_user": "slurm"}
    return cfg.replace(edge={"slurm": s})


def site_policy(hook_dir: Path) -> Path:
    """The test's site policy file, readable by slurmctld (SlurmUser)."""
    path = hook_dir / "job_submit.site.lua"
    path.write_text(SITE_POLICY)
    path.chmod(0o644)
    return path


def install_hook(cfg: Config, dest: Path) -> Path:
    """The shipped hook, written by the edge's own installer with ``cfg``'s paths."""
    env = {"PATH": "/usr/bin:/bin", **config_env(cfg)}
    done = subprocess.run([sys.executable, "-m", "pipeline.edges", "install-hook", str(dest)],
                          env=env, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    return dest


# -- the scenario -------------------------------------------------------------------------


def submit_jobs(cluster: SlurmCluster) -> dict[str, str]:
    """The seven jobs; the slowest (the time-out) first, everything else beside it."""
    jobs: dict[str, str] = {}
    jobs["timeout"] = cluster.submit("sleep 600", name="timeout-job", partition="short",
                                     time_limit="1")
    jobs["cancelled_running"] = cluster.submit("echo started; sleep 600",
                                               name="cancel-running")
    # Held so that its dependant is queued while it still can succeed, deterministically.
    jobs["failed"] = cluster.submit("sleep 1; exit 3", name="fail-job", partition="short",
                                    account="physics", qos="high", time_limit="10",
                                    hold=True)
    jobs["dependency_never"] = cluster.submit("echo never", name="never-runs",
                                              dependency=f"afterok:{jobs['failed']}")
    jobs["cancelled_pending"] = cluster.submit("echo never", name="cancel-pending",
                                               hold=True)
    jobs["completed"] = cluster.submit("echo hello", name="ok-job")
    jobs["array"] = cluster.submit("echo task $SLURM_ARRAY_TASK_ID", name="array-job",
                                   array="1-3")
    # jobacct_gather samples every 30 s by default: short jobs would have no MaxRSS
    sampled = ["--acctg-freq=task=1"]
    jobs["cpu_bound"] = cluster.submit(f"timeout {BUSY_S} sh -c 'while :; do :; done' || true",
                                       name="usage-busy", extra=sampled)
    jobs["sleeping"] = cluster.submit(f"sleep {BUSY_S}", name="usage-sleep", extra=sampled)
    # bytes * n writes every page, so all of it is resident while the job sleeps
    jobs["memory"] = cluster.submit(
        f"python3 -c 'import time; b = bytes([1]) * ({MEM_TOUCHED_MB} * 2**20); "
        "time.sleep(8)'", name="usage-mem", extra=[*sampled, f"--mem={MEM_ASKED_MB}M"])
    return jobs


def modify_and_refuse(cluster: SlurmCluster, jobs: dict[str, str]) -> tuple[int, str]:
    """A held job's time limit changed and the job held again by root (slurm_job_modify
    twice), and a submission the site policy refuses; the refused sbatch's status and
    message."""
    jobs["modified"] = cluster.submit("echo never", name="modified-held", time_limit="10",
                                      hold=True)
    cluster.run(["scontrol", "update", f"jobid={jobs['modified']}", "TimeLimit=7"])
    cluster.run(["scontrol", "hold", jobs["modified"]])
    done = cluster.run(["sbatch", "--parsable", f"--job-name={REFUSED_NAME}", "--wrap=true"],
                       user="alice", check=False)
    return done.returncode, done.stderr


def modified_while_pending(cfg: Config, job_id: str) -> dict[str, Any] | None:
    """The modified job's document once it shows the new limit and the change's events."""
    events = events_by_job(cfg, [job_id]).get(job_id, set())
    if not {("slurm-submit-plugin", "jobspec-update"),
            ("slurm-submit-plugin", "reason")} <= events:
        return None
    docs = job_documents(cfg, [job_id])
    if len(docs) == 1 and docs[0]["timelimit_s"] == 420 and docs[0]["state"] == "pending":
        return docs[0]
    return None


def end_the_waiting_jobs(cluster: SlurmCluster, jobs: dict[str, str]) -> None:
    """Cancel the running one once its script runs, the held one while pending; release
    the one that fails (so its dependant can never run)."""
    cluster.wait_for(jobs["cancelled_running"], {"RUNNING"}, timeout=JOB_WAIT_S)
    output = cluster.jobs_dir / f"cancel-running-{jobs['cancelled_running']}.out"
    wait_until(lambda: output.exists() and "started" in output.read_text(),
               timeout=JOB_WAIT_S, what="the running job's script started")
    time.sleep(1.0)  # so that its run time is not 0 s
    cluster.cancel(jobs["cancelled_running"])
    cluster.cancel(jobs["cancelled_pending"])
    cluster.release(jobs["failed"])


def array_tasks(cluster: SlurmCluster, array_id: str) -> list[str]:
    """The raw job ids of the array's tasks, once all have ended."""
    cluster.wait_for(array_id, TERMINAL_STATES, timeout=JOB_WAIT_S)
    return sorted((r["JobId"] for r in cluster.job_records(array_id)
                   if r.get("ArrayJobId") == array_id), key=int)


def events_by_job(cfg: Config, ids: list[str]) -> dict[str, set[tuple[str, str]]]:
    """job id -> {(source, event)} of its events in the events alias."""
    alias = alias_name(cfg.elasticsearch.index_prefix, Family.EVENTS)
    with client(cfg) as es:
        refresh(es, alias)
        resp = es.options(ignore_status=NOT_YET).search(
            index=alias, size=0, query={"terms": {"job_id": ids}},
            ignore_unavailable=True, allow_no_indices=True,
            aggs={"job": {"terms": {"field": "job_id", "size": 1000}, "aggs": {
                "source": {"terms": {"field": "source", "size": 20}, "aggs": {
                    "event": {"terms": {"field": "event", "size": 50}}}}}}})
    out: dict[str, set[tuple[str, str]]] = {}
    for job in resp.get("aggregations", {}).get("job", {}).get("buckets", []):
        out[job["key"]] = {(s["key"], e["key"]) for s in job["source"]["buckets"]
                           for e in s["event"]["buckets"]}
    return out


def missing_sources(run: Run, events: dict[str, set[tuple[str, str]]]
                    ) -> dict[str, set[tuple[str, str]]]:
    """job id -> the (source, event) still missing of: its end from jobcomp, squeue and
    sacct, and, for a job that started, its PrologSlurmctld and EpilogSlurmctld."""
    missing = {}
    for job_id in run.ids():
        wanted = {("slurm-jobcomp", "end"), ("slurm-squeue", "end")}
        if job_id in run.jobs.values():  # not an array task: cli_filter saw its sbatch
            wanted.add(("slurm-submit-plugin", "validate"))
        if job_id not in run.never_eligible_ids():
            wanted.add(("slurm-sacct", "end"))
        if job_id in run.started_ids():
            wanted |= {("slurm-hook", "alloc"), ("slurm-hook", "end")}
        if wanted - events.get(job_id, set()):
            missing[job_id] = wanted - events.get(job_id, set())
    return missing


def job_documents(cfg: Config, ids: list[str]) -> list[dict[str, Any]]:
    """Every document of the alias with one of these job ids, as a search finds them."""
    with client(cfg) as es:
        refresh(es, jobs_alias(cfg))
        resp = es.search(index=jobs_alias(cfg), size=1000, query={"terms": {"job_id": ids}})
    return [hit["_source"] for hit in resp["hits"]["hits"]]


# -- figures --------------------------------------------------------------------------------


def end_arrivals(raw: list[RawRecord]) -> dict[str, float]:
    """job id -> when the edge received the first record stating the job's end."""
    first: dict[str, float] = {}
    for rec in raw:
        try:
            events = parse_record(rec.format, rec.payload, cluster=CLUSTER,
                                  received_at=rec.received_at)
        except ParseError:
            continue
        for ev in events:
            if ev.event == "end" and ev.facts.get("result"):
                first[ev.job_id] = min(first.get(ev.job_id, rec.received_at), rec.received_at)
    return first


def hook_times(raw: list[RawRecord], context: str) -> dict[str, float]:
    """job id -> JOBSTREAM_HOOK_TIME of its hook run in ``context``."""
    out: dict[str, float] = {}
    for rec in raw:
        if rec.format != "slurm-hook":
            continue
        env = json.loads(rec.payload)
        if env.get("SLURM_SCRIPT_CONTEXT") == context:
            out[env["SLURM_JOB_ID"]] = float(env["JOBSTREAM_HOOK_TIME"])
    return out


def latency_figures(run: Run, first_done: dict[str, float]) -> dict[str, float]:
    """p50/max of: Slurm's end (whole seconds, so up to 1 s too high) -> searchable; the
    epilog -> searchable; the edge receiving the first end record -> searchable; and
    Slurm's own jobcomp delay (end -> the POST reaching the edge)."""
    by_id = {d["job_id"]: d for d in run.docs}
    epilog = hook_times(run.raw, "epilog_slurmctld")
    arrival = end_arrivals(run.raw)
    jobcomp = {str(json.loads(r.payload)["jobid"]): r.received_at for r in run.raw
               if r.format == "slurm-jobcomp"}
    series: dict[str, list[float]] = {"end": [], "epilog": [], "edge": [], "jobcomp_delay": []}
    for job_id in run.ids():
        done, t_end = first_done[job_id], by_id[job_id]["t_end"] / 1000.0
        series["end"].append(done - t_end)
        series["edge"].append(done - arrival[job_id])
        series["jobcomp_delay"].append(jobcomp[job_id] - t_end)
        if job_id in epilog:
            series["epilog"].append(done - epilog[job_id])
    out: dict[str, float] = {}
    for name, values in series.items():
        out[f"lat_{name}_p50_s"] = percentile(values, 0.5)
        out[f"lat_{name}_max_s"] = max(values)
    return out


def usage_figures(prefix: str, before: Usage, after: Usage, records: int
                  ) -> dict[str, float]:
    cpu = after.cpu_s - before.cpu_s
    return {f"{prefix}_records": float(records), f"{prefix}_cpu_s": cpu,
            f"{prefix}_cpu_s_per_1000": cpu / records * 1000 if records else float("nan"),
            f"{prefix}_rss_mb": after.rss / 2**20, f"{prefix}_peak_rss_mb": after.peak_rss / 2**20}


def burst(cfg: Config, hook_dir: Path, logs: Path) -> dict[str, float]:
    """1,000 jobcomp POSTs and 1,000 hook records through a second edge of its own (its own
    raw topic: nothing of it reaches the documents under test); its CPU and memory."""
    port = free_port()
    bcfg = edge_config(cfg, hook_dir, port=port, poller=False, name="-burst").replace(
        topics={"raw": f"{cfg.topics.raw}.burst"},
        edge={"spool_dir": f"{cfg.edge.spool_dir}-burst"})
    ensure_topics(bcfg)
    template = json.loads(next(line for line in (REAL / "jobcomp.jsonl").read_text()
                               .splitlines() if '"ok-job"' in line))
    env = dict(line.split("=", 1) for line in
               (REAL / "hooks" / f"epilog_slurmctld_{_manifest_id('failed')}.env")
               .read_text().splitlines() if "=" in line)
    base = 10_000_000
    bodies = (json.dumps({**template, "jobid": base + i}).encode() for i in range(BURST))
    hooks = ({**env, "SLURM_JOB_ID": str(base + i), "SLURM_JOBID": str(base + i),
              "JOBSTREAM_HOOK_TIME": f"{time.time():.6f}"} for i in range(BURST))
    edge = EdgeProcess(bcfg, logs / "edge-burst.log").start()
    try:
        before = edge.usage()
        t0 = time.monotonic()
        n = feed(port, Path(bcfg.edge.slurm.hook_socket), bodies, hooks)
        wait_for("the burst on the broker",
                 lambda: sum(end_offsets(bcfg, bcfg.topics.raw).values()) >= n, [edge.check])
        wall = time.monotonic() - t0
        after = edge.usage()
    finally:
        edge.stop()
    figures = usage_figures("burst_edge", before, after, n)
    figures["burst_wall_s"] = wall
    figures["burst_records_per_s"] = n / wall
    return figures


def _manifest_id(name: str) -> str:
    return json.loads((REAL / "manifest.json").read_text())["jobs"][name]


# -- the run --------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def run(slurm_cluster: SlurmCluster, slurm_root: Path, e2e_cfg: Config, hook_dir: Path,
        tmp_path_factory: pytest.TempPathFactory) -> Run:
    t0 = time.monotonic()
    logs = tmp_path_factory.mktemp("slurm-e2e-logs")
    cfg = edge_config(e2e_cfg, hook_dir, port=free_port(), poller=True)
    ensure_topics(cfg)
    hook = install_hook(cfg, hook_dir / "jobstream-hook")
    # the poller's squeue and sacct talk to the test cluster
    edge = EdgeProcess(cfg, logs / "edge.log", env=slurm_cluster.env).start()
    worker = Child("worker", cfg, ["worker", "--name", "slurm-e2e"], logs / "worker.log")
    sink = Child("sink", cfg, ["sink"], logs / "sink.log")
    watcher = DocWatcher(cfg, jobs_alias(cfg))
    r = Run()
    try:
        worker.start()
        sink.start()
        wait_ready(cfg, [worker, sink], [cfg.worker.app_id, f"{cfg.worker.app_id}-sink"])
        checks = [edge.check, worker.check, sink.check]
        edge_start = edge.usage()
        watcher.start()
        url = f"http://127.0.0.1:{cfg.edge.slurm.receiver_port}/slurm/_doc"
        with routed(slurm_cluster, url, hook), \
                lua_plugins(slurm_cluster, cfg, site_policy(hook_dir)):
            t_jobs = time.monotonic()
            r.jobs = submit_jobs(slurm_cluster)
            r.refused = modify_and_refuse(slurm_cluster, r.jobs)
            end_the_waiting_jobs(slurm_cluster, r.jobs)
            r.array_tasks = array_tasks(slurm_cluster, r.jobs["array"])

            def modified_seen() -> bool:
                r.modified_pending = modified_while_pending(cfg, r.jobs["modified"]) or {}
                return bool(r.modified_pending)

            wait_for("the modified job's new limit while pending", modified_seen, checks,
                     SOURCES_WAIT_S, interval=1.0)
            slurm_cluster.cancel(r.jobs["modified"])
            quick = [j for j in r.ids() if j != r.jobs["timeout"]]
            wait_for("the documents of the quick jobs done",
                     lambda: set(quick) <= watcher.done().keys(), checks, DOCS_WAIT_S)
            # the burst runs while the time-out job sleeps towards its limit
            r.figures.update(burst(e2e_cfg, hook_dir, logs))
            wait_for("every document done", lambda: set(r.ids()) <= watcher.done().keys(),
                     checks, DOCS_WAIT_S)
            r.figures["jobs_to_last_doc_s"] = time.monotonic() - t_jobs
            wait_for("every source's records in the events",
                     lambda: not missing_sources(r, events_by_job(cfg, r.ids())), checks,
                     SOURCES_WAIT_S, interval=1.0,
                     detail=lambda: str(missing_sources(r, events_by_job(cfg, r.ids()))))
            # sacct's end event is indexed; the state it updated may be a flush behind
            usage_ids = [r.jobs[n] for n in USAGE_JOBS]
            wait_for("the usage jobs' documents with their usage",
                     lambda: all(d.get("cpu_time_s") is not None
                                 for d in job_documents(cfg, usage_ids)), checks,
                     SOURCES_WAIT_S, interval=1.0)
        watcher.stop()
        r.events = events_by_job(cfg, r.ids())
        r.docs = job_documents(cfg, r.ids())
        r.figures.update(usage_report(r))
        r.raw = read_raw(cfg, cfg.topics.raw)
        r.dlq = read_dlq(cfg, cfg.topics.dlq)
        r.figures.update(usage_figures("edge", edge_start, edge.usage(), len(r.raw)))
        r.figures.update(latency_figures(r, watcher.done()))
    finally:
        watcher.stop()
        edge.stop()
        for child in (worker, sink):
            child.stop()
    r.figures["module_s"] = time.monotonic() - t0
    _report(slurm_cluster, slurm_root, r)
    return r


def usage_report(r: Run) -> dict[str, float]:
    """The usage jobs' figures, as the documents state them (NaN where one is missing)."""
    out: dict[str, float] = {}
    for name in USAGE_JOBS:
        doc = r.doc(name)
        for key in ("cpu_time_s", "cpu_eff_pct", "run_s", "mem_max_mb", "mem_max_pct",
                    "mem_alloc_mb"):
            value = doc.get(key)
            out[f"usage_{name}_{key}"] = float("nan") if value is None else float(value)
    return out


def _report(cluster: SlurmCluster, root: Path, r: Run) -> None:
    """The figures into the cluster's timings (printed in the terminal summary) and a file."""
    for key, value in r.figures.items():
        cluster.timings[f"e2e_{key}"] = value
    (root / "e2e-figures.json").write_text(json.dumps(
        {"jobs": r.jobs, "array_tasks": r.array_tasks, "figures": r.figures}, indent=2) + "\n")


# -- the documents ----------------------------------------------------------------------------

# What Slurm 22.05 reported for each ending (tests/data/slurm/real-22.05, its manifest):
# jobcomp's state and exit code, squeue's wait status (signal 15 for the killed jobs, whose
# batch step sacct shows as 0:15), the partition and qos asked for.
EXPECTED: dict[str, dict[str, Any]] = {
    "completed": {"job_name": "ok-job", "result": "completed", "exit_code": 0,
                  "signal": None, "cancelled_before_start": False, "queue": "debug",
                  "qos": "normal"},
    "failed": {"job_name": "fail-job", "result": "failed", "exit_code": 3, "signal": None,
               "cancelled_before_start": False, "queue": "short", "qos": "high"},
    "cancelled_running": {"job_name": "cancel-running", "result": "cancelled",
                          "exit_code": 0, "signal": 15, "cancelled_before_start": False,
                          "queue": "debug", "qos": "normal"},
    "cancelled_pending": {"job_name": "cancel-pending", "result": "cancelled",
                          "exit_code": 0, "signal": None, "cancelled_before_start": True,
                          "queue": "debug", "qos": "normal"},
    "timeout": {"job_name": "timeout-job", "result": "timeout", "exit_code": 0, "signal": 15,
                "cancelled_before_start": False, "queue": "short", "qos": "normal"},
    # jobcomp, sacct and squeue all say CANCELLED (squeue's reason:
    # DependencyNeverSatisfied); it never ran.
    "dependency_never": {"job_name": "never-runs", "result": "cancelled", "exit_code": 0,
                         "signal": None, "cancelled_before_start": True, "queue": "debug",
                         "qos": "normal"},
}


def _view(doc: dict[str, Any], keys: list[str]) -> dict[str, Any]:
    return {k: doc.get(k) for k in keys}


def test_one_document_per_job_and_array_task(run: Run) -> None:
    assert sorted(d["job_id"] for d in run.docs) == sorted(run.ids())
    assert {d["cluster"] for d in run.docs} == {CLUSTER}
    assert {d["scheduler"] for d in run.docs} == {"slurm"}


def test_only_the_refused_submission_went_to_the_dead_letter_queue(run: Run) -> None:
    """It has no job id, so no job event: the DLQ keeps who, where and why."""
    assert run.refused[0] != 0 and f"jobs named {REFUSED_NAME}" in run.refused[1]
    [(headers, _)] = run.dlq
    assert headers["reason"] == "submit-refused"
    assert "alice" in headers["error"] and f"jobs named {REFUSED_NAME}" in headers["error"]
    [raw] = [r for r in run.raw if r.format == "slurm-submit-plugin"
             and b'"refused"' in r.payload]
    assert raw.key is None


def test_a_time_limit_changed_while_held_shows_before_the_job_ends(run: Run) -> None:
    doc = run.modified_pending
    assert (doc["state"], doc["timelimit_s"]) == ("pending", 420)
    assert doc["pending_reason"] in ("JobHeldUser", "JobHeldAdmin")
    assert run.doc("modified")["timelimit_s"] == 420
    assert run.doc("modified")["pending_reason"] in ("JobHeldUser", "JobHeldAdmin")


def test_cli_filter_gave_every_sbatch_its_job_id(run: Run) -> None:
    submits = {}
    for rec in run.raw:
        if rec.format == "slurm-submit-plugin" and b'"submit"' in rec.payload:
            submits[json.loads(rec.payload)["job_id"]] = rec
    assert {str(j) for j in submits} >= set(run.jobs.values())
    for job_id in run.jobs.values():
        assert ("slurm-submit-plugin", "validate") in run.events[job_id], job_id
    failed = json.loads(submits[int(run.jobs["failed"])].payload)
    # --time=10 as typed, or as Slurm's option getter formats it (00:10:00)
    assert (failed["partition"], failed["account"], failed["qos"], failed["job_name"],
            time_limit_s(failed["time_str"])) == ("short", "physics", "high", "fail-job", 600)


def _signals_stated(run: Run, job_id: str) -> set[int]:
    """The signals any of Slurm's records of ``job_id`` states, as the parsers read them."""
    signals: set[int] = set()
    for r in run.raw:
        try:
            events = parse_record(r.format, r.payload, cluster=r.cluster,
                                  received_at=r.received_at)
        except ParseError:
            continue  # the refused submission: the DLQ's
        signals |= {ev.facts["signal"] for ev in events
                    if ev.job_id == job_id and ev.facts.get("signal")}
    return signals


@pytest.mark.parametrize("name", list(EXPECTED))
def test_each_ending_as_slurm_reported_it(run: Run, name: str) -> None:
    doc = run.doc(name)
    want = {"state": "done", **EXPECTED[name]}
    if name in ("cancelled_running", "timeout"):
        # slurmctld sends the batch step SIGTERM, and Slurm states SIGTERM or nothing for
        # the job ("0:15" or "0:0": jobcomp, the epilog and the polls each as the batch
        # step's status reached slurmctld before or after they were written): the document
        # has the signal if any record stated it
        said = _signals_stated(run, doc["job_id"])
        assert said <= {15}
        want["signal"] = 15 if said else None
    assert _view(doc, list(want)) == want


def test_who_and_where(run: Run) -> None:
    alice = pwd.getpwnam("alice")
    who = {(d["user"], d["uid"], d["group"], d["bank"]) for d in run.docs}
    assert who == {("alice", alice.pw_uid, "alice", "physics")}


def test_jobs_that_never_started_have_no_start(run: Run) -> None:
    for name in NEVER_STARTED:
        doc = run.doc(name)
        assert _view(doc, ["t_start", "run_s", "nodelist"]) == dict.fromkeys(
            ["t_start", "run_s", "nodelist"]), name
    for name in STARTED:
        doc = run.doc(name)
        assert doc.get("t_start") and doc.get("nodelist"), name


def test_time_limits(run: Run) -> None:
    assert run.doc("timeout")["timelimit_s"] == 60
    assert run.doc("timeout")["run_s"] >= 60
    assert run.doc("failed")["timelimit_s"] == 600


def test_array_tasks_are_jobs_of_their_own_tied_to_the_array(run: Run) -> None:
    tasks = [d for d in run.docs if d["job_id"] in run.array_tasks]
    assert sorted(d["array_task"] for d in tasks) == [1, 2, 3]
    assert {d["array_id"] for d in tasks} == {run.jobs["array"]}
    assert {(d["state"], d["result"], d["exit_code"], d["queue"], d["job_name"])
            for d in tasks} == {("done", "completed", 0, "debug", "array-job")}
    others = [d for d in run.docs if d["job_id"] not in run.array_tasks]
    assert {(d.get("array_id"), d.get("array_task")) for d in others} == {(None, None)}


def test_every_source_reached_the_documents(run: Run) -> None:
    for job_id in run.started_ids():
        sources = {s for s, _ in run.events[job_id]}
        assert sources - {"slurm-submit-plugin"} == {
            "slurm-jobcomp", "slurm-squeue", "slurm-sacct", "slurm-hook"}, job_id
    for job_id in run.never_eligible_ids():
        # no hooks for jobs that never started; sacct's windows miss them (see above)
        sources = {s for s, _ in run.events[job_id]}
        assert {"slurm-jobcomp", "slurm-squeue"} <= sources <= \
            {"slurm-jobcomp", "slurm-squeue", "slurm-sacct", "slurm-submit-plugin"}, job_id


def test_the_shipped_hook_delivered_every_prolog_and_epilog_through_the_socket(
        run: Run) -> None:
    envs = [json.loads(r.payload) for r in run.raw if r.format == "slurm-hook"]
    seen = {(e["SLURM_SCRIPT_CONTEXT"], e["SLURM_JOB_ID"]) for e in envs}
    want = {(c, j) for c in ("prolog_slurmctld", "epilog_slurmctld")
            for j in run.started_ids()}
    assert want <= seen
    assert not any(e["SLURM_JOB_ID"] in {run.jobs[n] for n in NEVER_STARTED} for e in envs)
    # each hook record carries its own time (the script adds it)
    assert all(float(e["JOBSTREAM_HOOK_TIME"]) > 0 for e in envs)


def test_usage_of_a_busy_core_a_sleep_and_touched_memory(run: Run) -> None:
    """seff's figures from sacct's steps, after the end (issue 13). The busy job shares the
    host's cores with Kafka, Elasticsearch and the pipeline, so its efficiency is bounded
    well below 100 % here; a sleeping job's is near 0 either way."""
    busy, sleeping, memory = (run.doc(n) for n in USAGE_JOBS)
    for doc in (busy, sleeping, memory):
        assert doc["state"] == "done" and doc["result"] == "completed", doc["job_id"]
        assert doc["ncores"] == 1 and doc["run_s"] >= 1, doc["job_id"]
        assert doc["cpu_eff_pct"] == pytest.approx(
            100 * doc["cpu_time_s"] / (doc["run_s"] * doc["ncores"])), doc["job_id"]
    assert 60 <= busy["cpu_eff_pct"] <= 105
    assert busy["cpu_time_s"] >= 0.6 * BUSY_S
    assert sleeping["cpu_eff_pct"] < 2
    # MaxRSS: the touched bytes plus the interpreter and the batch shell, of the 400M given
    assert memory["mem_alloc_mb"] == MEM_ASKED_MB
    assert MEM_TOUCHED_MB <= memory["mem_max_mb"] <= MEM_TOUCHED_MB + 40
    assert memory["mem_max_pct"] == pytest.approx(100 * memory["mem_max_mb"] / MEM_ASKED_MB)
    assert 50 <= memory["mem_max_pct"] <= 60
    # the sink leaves null fields out of the indexed document
    assert {d.get("gpu_util_pct") for d in (busy, sleeping, memory)} == {None}


def test_jobcomp_records_came_through_the_receiver_keyed_by_job(run: Run) -> None:
    jobcomp = [r for r in run.raw if r.format == "slurm-jobcomp"]
    ids = {str(json.loads(r.payload)["jobid"]) for r in jobcomp}
    assert set(run.ids()) <= ids
    assert all(r.key == f"{CLUSTER}:{json.loads(r.payload)['jobid']}" for r in jobcomp)
