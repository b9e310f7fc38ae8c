"""Usage while jobs run, end to end on the real Slurm test cluster: the node edge reads the
jobs' cgroups, the worker folds its samples into the jobs' documents, the sink indexes
them, and Elasticsearch shows each job's CPU and memory while it runs; at the end the
documents' figures from the samples agree with sacct's, which the Slurm edge's poller
brings (issue 33, "Proven on real systems").

A Flux job on the process path is here too: real processes carrying ``FLUX_JOB_ID`` as
flux-shell sets it (in F58), read by the same node edge, keyed as the Flux journal keys
the job.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from slurm_cluster import SlurmCluster
from slurm_e2e import EdgeProcess, module_config, wait_for
from slurm_usage import MIB, UsageJobs, agree, submit_usage_jobs

from pipeline.core.fluid import f58_encode
from pipeline.kafka.topics import ensure_topics
from pipeline.replay.readback import NOT_YET, client, jobs_alias
from pipeline.runtime.children import Child, free_port
from pipeline.runtime.config import Config
from pipeline.tooling.demo import wait_ready

pytest_plugins = ["conftest_slurm"]

#: the node edge's interval here (30 s in production)
INTERVAL_S = 3.0
RUN_S = 45
TOUCHED_MIB = 200
#: a job's running document shows its usage within two intervals of its start, plus the
#: flow's own latency (the worker's and the sink's flushes, Elasticsearch's refresh)
SHOWN_WITHIN_S = 2 * INTERVAL_S + 6.0
#: what the busy job gets of its core at least, beside the flow on two cores
BUSY_PCT = 50.0
#: the Flux job: a busy process and a sleeping one under one FLUX_JOB_ID
FLUX_JOB = 2**40 + 12345


@dataclass
class Observed:
    jobs: UsageJobs
    #: job name -> its first running document showing what it does, and when
    running: dict[str, dict[str, Any]] = field(default_factory=dict)
    shown_after_s: dict[str, float] = field(default_factory=dict)
    final: dict[str, dict[str, Any]] = field(default_factory=dict)
    flux: dict[str, Any] = field(default_factory=dict)


def docs_by_id(cfg: Config, ids: list[str]) -> dict[str, dict[str, Any]]:
    with client(cfg) as es:
        try:
            resp = es.search(index=jobs_alias(cfg), size=len(ids),
                             query={"terms": {"job_id": ids}})
        except NOT_YET:
            return {}
    return {h["_source"]["job_id"]: h["_source"] for h in resp["hits"]["hits"]}


def describe(cfg: Config, ids: list[str]) -> str:
    """Every document and usage event of the jobs, for a wait's failure message."""
    with client(cfg) as es:
        docs = es.search(index=jobs_alias(cfg), size=100, query={"terms": {"job_id": ids}})
        samples = es.count(index=f"{cfg.elasticsearch.index_prefix}*events*",
                           query={"term": {"event": "usage"}})
    return str({"documents": [
        {"_id": h["_id"], **{k: v for k, v in h["_source"].items()
                             if k.startswith("usage") or k in ("state", "t_start", "revision")}}
        for h in docs["hits"]["hits"]], "usage_events": samples["count"]})


def shows_its_work(name: str, doc: dict[str, Any]) -> bool:
    """Whether a running document shows what the job does (``usage_cpu_now_pct`` is of
    the job's one core)."""
    if doc.get("state") != "running" or doc.get("usage_cpu_now_pct") is None:
        return False
    if name == "busy":
        # the busy loop shares this 2-core machine with the worker, the sink, Kafka and
        # Elasticsearch: half a core at least; its exact CPU is checked against sacct
        return doc["usage_cpu_now_pct"] >= BUSY_PCT
    if name == "sleeping":
        return doc["usage_cpu_now_pct"] < 5.0 and doc.get("usage_cpu_eff_pct") is not None
    return doc.get("usage_mem_mb", 0.0) >= TOUCHED_MIB


@pytest.fixture(scope="module")
def flow_cfg(stack_base_cfg: Config, tmp_path_factory: pytest.TempPathFactory,
             slurm_cluster: SlurmCluster) -> Iterator[Config]:
    # the node edge's cluster is Slurm's ClusterName, which Slurm's records state
    with module_config(stack_base_cfg, slurm_cluster.spec.cluster,
                       tmp_path_factory.mktemp("usage-flow")) as cfg:
        yield cfg.replace(edge={
            "slurm": {"receiver_port": free_port(), "poller": True, "poll_interval_s": 2.0,
                      "catchup_max_s": 120.0},
            "node": {"interval_s": INTERVAL_S, "gpus": False}})


@pytest.fixture(scope="module")
def observed(slurm_cluster: SlurmCluster, flow_cfg: Config,
             tmp_path_factory: pytest.TempPathFactory) -> Iterator[Observed]:
    cfg = flow_cfg
    logs = tmp_path_factory.mktemp("usage-flow-logs")
    ensure_topics(cfg)
    poller = EdgeProcess(cfg, logs / "edge-slurm.log", env=slurm_cluster.env)
    node = Child("edge node", cfg, ["-v", "node"], logs / "edge-node.log",
                 module="pipeline.edges")
    worker = Child("worker", cfg, ["worker", "--name", "usage-flow"], logs / "worker.log")
    sink = Child("sink", cfg, ["sink"], logs / "sink.log")
    flux_env = {**os.environ, "FLUX_JOB_ID": f58_encode(FLUX_JOB)}
    flux_tasks: list[subprocess.Popen[bytes]] = []
    try:
        worker.start()
        sink.start()
        wait_ready(cfg, [worker, sink], [cfg.worker.app_id, f"{cfg.worker.app_id}-sink"])
        poller.start()
        node.start()
        checks = [poller.check, node.check, worker.check, sink.check]
        jobs = submit_usage_jobs(slurm_cluster, run_s=RUN_S, touched_mib=TOUCHED_MIB)
        flux_tasks = [subprocess.Popen(
            # 2 s of CPU, then asleep: it must not take the Slurm job's CPU
            [sys.executable, "-c", "import time\nwhile time.process_time() < 2: pass\n"
             f"time.sleep({RUN_S})" if busy else
             f"import time; time.sleep({RUN_S})"], env=flux_env) for busy in (True, False)]
        r = Observed(jobs)
        names = jobs.by_name()

        def all_shown() -> bool:
            docs = docs_by_id(cfg, jobs.ids())
            for name, job_id in names.items():
                doc = docs.get(job_id)
                if name not in r.running and doc is not None and shows_its_work(name, doc):
                    r.running[name] = doc
                    r.shown_after_s[name] = time.time() - doc["t_start"] / 1000
            return len(r.running) == len(names)

        wait_for("every job's running document showing its usage", all_shown, checks,
                 guard_s=RUN_S, interval=0.5,
                 detail=lambda: describe(cfg, jobs.ids()))

        def flux_seen() -> bool:
            r.flux = docs_by_id(cfg, [str(FLUX_JOB)]).get(str(FLUX_JOB), {})
            return (r.flux.get("usage_cpu_s") or 0.0) >= 1.9

        wait_for("the Flux job's usage", flux_seen, checks, guard_s=RUN_S, interval=0.5)

        def all_final() -> bool:
            docs = docs_by_id(cfg, jobs.ids())
            r.final = {n: docs[j] for n, j in names.items() if j in docs}
            return len(r.final) == len(names) and all(
                d.get("state") == "done" and d.get("usage_source") == "sacct"
                for d in r.final.values())

        wait_for("every job done with sacct's usage", all_final, checks,
                 guard_s=RUN_S + 120, interval=1.0)
        # the figures of the closing note, in the -s output
        print({"shown_after_start_s": r.shown_after_s, "final": {
            n: {k: d.get(k) for k in ("usage_cpu_s", "cpu_time_s", "usage_mem_peak_mb",
                                      "mem_max_mb", "usage_cpu_eff_pct", "cpu_eff_pct")}
            for n, d in r.final.items()}})
        yield r
    finally:
        for task in flux_tasks:
            task.kill()
        node.stop()
        poller.stop()
        for child in (worker, sink):
            child.stop()


def test_running_jobs_show_their_usage_within_two_intervals(observed: Observed) -> None:
    for name, after in observed.shown_after_s.items():
        assert after <= SHOWN_WITHIN_S, (name, after)
    busy, sleeping = observed.running["busy"], observed.running["sleeping"]
    assert busy["usage_reader"] == "cgroup-v1" and busy["usage_nodes"] == 1
    assert sleeping["usage_cpu_eff_pct"] < 5.0
    assert observed.running["memory"]["usage_mem_now_pct"] >= 100 * TOUCHED_MIB / 400 - 5


def test_final_figures_agree_with_sacct(observed: Observed) -> None:
    for name, doc in observed.final.items():
        # the samples miss the CPU of the job's last interval (its cgroup is gone at the
        # next read): at most one interval of its one core below sacct's
        missed = doc["cpu_time_s"] - doc["usage_cpu_s"]
        assert -2.0 <= missed <= INTERVAL_S + 2.0, (name, missed, doc)
        assert agree(doc["usage_mem_peak_mb"] * MIB, doc["mem_max_mb"] * MIB,
                     floor=10 * MIB), (name, doc)
    busy = observed.final["busy"]
    # the efficiency so far at the last sample, and sacct's over the whole run
    assert abs(busy["usage_cpu_eff_pct"] - busy["cpu_eff_pct"]) <= 10.0, busy


def test_a_flux_job_on_the_process_path(observed: Observed) -> None:
    doc = observed.flux
    assert doc["scheduler"] == "flux" and doc["job_id_f58"] == f58_encode(FLUX_JOB)
    assert doc["usage_reader"] == "procs"
    assert doc["usage_mem_mb"] > 5.0  # two Python interpreters' resident sets
    # its journal never came: no allocation, so no share of cores, but its CPU is known
    assert doc.get("ncores") is None and doc.get("usage_cpu_now_pct") is None
