"""``jobstream demo`` end to end on the real stack, checked against the generator's truth."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
from demo_cli import GUARD_S, MAIN, child_env, demo_config, run_demo
from elasticsearch import Elasticsearch

from pipeline.dashboards import render
from pipeline.fold import doc_id
from pipeline.replay.readback import job_documents, jobs_alias, nodes_alias, refresh
from pipeline.runtime.config import Config
from pipeline.tooling.demo import DemoOptions
from pipeline.tooling.stack.prometheus import PrometheusService
from pipeline.tooling.verify import compare, compare_nodes

#: what the issue asks the index to get right for every job
OUTCOME_FIELDS = ("state", "result", "exit_code", "user", "bank", "queue")


def test_the_index_holds_one_document_per_generated_job_as_generated(
        stack_cfg: Config, es: Elasticsearch, tmp_path: Path) -> None:
    cfg = demo_config(stack_cfg, tmp_path)
    workload, output = run_demo(cfg, tmp_path, jobs=150, seed=7)
    truth = workload.truth
    jobs = 150 + DemoOptions().long_jobs  # its long jobs, running at the end
    refresh(es, jobs_alias(cfg))
    docs = list(job_documents(es, jobs_alias(cfg)))
    by_id = {doc_id(d): d for d in docs}
    assert len(docs) == len(truth) == jobs
    assert set(by_id) == set(truth)
    for key, want in truth.items():
        got = by_id[key]
        for name in OUTCOME_FIELDS:
            if name in want:
                assert got.get(name) == want[name], (key, name, got.get(name), want[name])
    result = compare(truth, docs)
    assert result.ok, (result.field_errors, result.examples)
    # every outcome occurred, so the check above covered each of them
    assert {t["result"] for t in truth.values()} >= {"completed", "failed", "cancelled",
                                                     "timeout"}
    assert f"{jobs}/{jobs} documents match" in output
    # and its nodes: drained, resumed and downed while the jobs ran (issue 36)
    refresh(es, nodes_alias(cfg))
    nodes = list(job_documents(es, nodes_alias(cfg)))
    node_result = compare_nodes(workload.node_truth, nodes)
    assert node_result.ok, (node_result.missing, node_result.examples)
    assert {d["state"] for d in nodes} == {"up", "drained", "down"}
    assert f"{len(nodes)}/{len(nodes)} node documents match" in output
    # the demo ends with the dashboards' preview, under its logs by default
    preview = tmp_path / "demo-logs" / "preview"
    assert f"{preview / 'index.html'}" in output.replace("\n", "")
    pages = sorted(p.parent.name for p in preview.glob("*/index.html"))
    assert pages == sorted(b["uid"] for b in render.dashboards() + render.metrics_dashboards())
    assert (preview / "jobstream-overview" / "dashboard.png").stat().st_size > 10_000
    # the node page on a node drained or down at the end: its document, timeline, jobs
    assert re.search(r"node details: [1-9]\d* drawn", output), output[-3000:]
    # a real Prometheus (the stack's, when built: ./run builds it) scraped the worker and
    # the sink while the demo ran (issue 36)
    if PrometheusService(cfg, []).installed():
        for job in ("jobstream-worker", "jobstream-sink"):
            assert re.search(rf"✓\s+{job}\s+scraped", output), output[-3000:]
        assert re.search(r"the\s+worker\s+read\s+[1-9]\d*\s+raw\s+records", output)
    else:
        assert "Prometheus is not built" in output


def test_ctrl_c_stops_the_worker_and_sink_the_demo_started(stack_cfg: Config,
                                                           tmp_path: Path) -> None:
    cfg = demo_config(stack_cfg, tmp_path)
    logs = tmp_path / "logs"
    demo = subprocess.Popen(
        [sys.executable, "-c", MAIN, "demo", "--jobs", "1000", "--logs", str(logs)],
        env=child_env(cfg), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    parent = psutil.Process(demo.pid)
    try:
        deadline = time.monotonic() + GUARD_S
        # until the worker and the sink run and the workload is being published (beside
        # them, the stack's Prometheus when the demo started it)
        while not (len(_workers(parent)) == 2 and (logs / "sink.log").exists()
                   and _published(cfg) > 0):
            assert demo.poll() is None, demo.communicate()[0]
            assert time.monotonic() < deadline, "the demo did not start publishing"
            time.sleep(0.2)
        commands = sorted(next(a for a in c.cmdline() if a in ("worker", "sink"))
                          for c in _workers(parent))
        assert commands == ["sink", "worker"]
        children = parent.children()
        demo.send_signal(signal.SIGINT)
        output = demo.communicate(timeout=GUARD_S)[0]
    finally:
        if demo.poll() is None:
            # a failed test must not leave the demo's worker and sink running after it
            for child in parent.children(recursive=True):
                child.kill()
            demo.kill()
    assert demo.returncode == 130, output
    assert "interrupted" in output
    for child in children:
        assert not child.is_running() or child.status() == psutil.STATUS_ZOMBIE, child


def _workers(parent: psutil.Process) -> list[psutil.Process]:
    """The demo's ``jobstream worker`` and ``jobstream sink`` children."""
    return [c for c in parent.children() if {"worker", "sink"} & set(c.cmdline())]


def _published(cfg: Config) -> int:
    from confluent_kafka.admin import AdminClient

    from pipeline.kafka.positions import Positions

    return sum(Positions(AdminClient(cfg.librdkafka())).ends([cfg.topics.raw]).values())
