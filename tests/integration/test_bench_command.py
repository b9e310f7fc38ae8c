"""``jobstream bench`` on the real stack with a tiny workload: every figure is in the JSON,
the e2e documents equal the offline fold, and the run leaves nothing behind. No timing is
asserted: the figures depend on the machine."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from confluent_kafka.admin import AdminClient
from elasticsearch import Elasticsearch

from pipeline.runtime.children import config_env
from pipeline.runtime.config import Config
from pipeline.tooling.bench.report import FIGURES


def test_bench_reports_every_figure_and_the_flow_equals_the_offline_fold(
        stack_base_cfg: Config, tmp_path: Path) -> None:
    out = tmp_path / "bench.json"
    env = {k: v for k, v in os.environ.items() if not k.startswith("JOBSTREAM_")}
    env.update(config_env(stack_base_cfg))
    proc = subprocess.run(
        [sys.executable, "-c", "from pipeline.cli import main; main(prog_name='jobstream')",
         "bench", "--jobs", "150", "--rate", "400", "--latency-seconds", "3",
         "--sample-every", "5", "--baseline-seconds", "2", "--tracked-jobs", "300",
         "--memory-feed-s", "5", "--json", str(out), "--logs", str(tmp_path / "logs")],
        env=env, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    body = json.loads(out.read_text())

    assert body["machine"]["code"]  # which jobstream was measured (git describe)
    figures = body["figures"]
    assert set(FIGURES) <= set(figures)
    missing = [name for name in FIGURES if figures[name]["value"] is None]
    assert not missing, missing

    e2e = body["e2e"]
    assert e2e["check"]["ok"], e2e["check"]
    assert e2e["check"]["equal"] == e2e["jobs"] == 150
    assert e2e["writes"]["hpc-job-events"] == e2e["event_documents"]  # each indexed once
    assert e2e["event_documents"] <= e2e["events"]
    # every process on the cores, not only the flow's (the stack's services, the bench)
    names = set(e2e["cpu_s"])
    assert {"worker-0", "sink", "elasticsearch", "bench"} <= names, names
    assert any(n.startswith("kafka") for n in names), names
    assert 0 < e2e["cores_busy"] <= os.cpu_count(), e2e["cores_busy"]
    # the JVMs' JIT compiler threads, apart: the stack's Elasticsearch and Kafka only
    jit = e2e["jit_cpu_s"]
    assert "elasticsearch" in jit and not {"worker-0", "sink", "bench"} & set(jit), jit
    assert all(0 <= jit[n] <= e2e["cpu_s"][n] for n in jit), (jit, e2e["cpu_s"])
    assert body["latency"]["samples"] > 0 and body["latency"]["unobserved"] == 0
    assert body["replay"]["records"] == body["workload"]["records"]
    tracked = body["tracked"]
    assert tracked["flux_jobs"] + tracked["slurm_jobs"] == tracked["records"] == 300
    assert tracked["worker_rss_end_mib"] and tracked["flux_edge_rss_peak_mib"]
    assert tracked["held_jobs"] >= 300  # counted after the feed: the tracked jobs stay held
    feed = tracked["feed"]
    assert feed["records"] > 0 and feed["rss_end_mib"] and feed["growth_mib"] is not None

    token = body["run"]
    topics = AdminClient(stack_base_cfg.librdkafka()).list_topics(timeout=15).topics
    assert not [t for t in topics if token in t]
    es = Elasticsearch(stack_base_cfg.elasticsearch.url, request_timeout=30)
    left = es.options(ignore_status=404).indices.get(index=f"{token}-*",
                                                      expand_wildcards="all")
    assert not dict(left)
