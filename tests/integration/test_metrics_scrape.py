"""The processes watch themselves: ``jobstream edge slurm``, ``worker`` and ``sink`` run as
processes with their metrics ports on, records flow from the edge's jobcomp receiver to
Elasticsearch, and each port's counters follow the records: what the edge received and
published, what the worker read, folded and dead-lettered, what the sink read and wrote."""

from __future__ import annotations

import http.client
import json
import time
import urllib.request
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from pipeline.runtime.children import Child, free_port
from pipeline.runtime.config import Config

pytestmark = pytest.mark.integration

JOBCOMP = (Path(__file__).resolve().parents[1] / "data/slurm/jobcomp_25.05_kafka_finish.json"
           ).read_bytes()
JOBS = 20

Samples = list[tuple[str, dict[str, str], float]]


def scrape(port: int) -> Samples:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as resp:
        text = resp.read().decode()
    return [(s.name, s.labels, s.value) for family in text_string_to_metric_families(text)
            for s in family.samples]


def total(samples: Samples, name: str, **labels: str) -> float:
    return sum(v for n, ls, v in samples if n == name
               and all(ls.get(k) == want for k, want in labels.items()))


def has(samples: Samples, name: str, **labels: str) -> bool:
    return any(n == name and all(ls.get(k) == v for k, v in labels.items())
               for n, ls, _ in samples)


def wait_until(what: str, children: list[Child], condition: Callable[[], bool],
               timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while True:
        for child in children:
            child.check()
        try:
            if condition():
                return
        except OSError:
            pass  # a port not listening yet
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.5)


def post(port: int, body: bytes) -> None:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        conn.request("POST", "/slurm/_doc", body=body,
                     headers={"Content-Type": "application/json"})
        assert conn.getresponse().status == 201
    finally:
        conn.close()


def test_each_process_counts_the_records_that_flow_through_it(stack_cfg: Config,
                                                               tmp_path: Path) -> None:
    ports = {"worker": free_port(), "sink": free_port(), "edge": free_port()}
    receiver = free_port()
    cfg = stack_cfg.replace(
        metrics={"worker_port": ports["worker"], "sink_port": ports["sink"],
                 "edge_slurm_port": ports["edge"]},
        worker={"web_port": free_port(), "stall_check_s": 2.0},
        edge={"slurm": {"receiver_port": receiver, "poller": False, "nodes": False,
                        "hooks": False}})
    children = [Child("worker", cfg, ["worker", "--name", "metrics-w"], tmp_path / "w.log"),
                Child("sink", cfg, ["sink"], tmp_path / "sink.log"),
                Child("edge slurm", cfg, ["edge", "slurm"], tmp_path / "edge.log")]
    for child in children:
        child.start()
    try:
        wait_until("every metrics port", children,
                   lambda: all(scrape(p) for p in ports.values()))
        record = json.loads(JOBCOMP)
        for jobid in range(JOBS):
            post(receiver, json.dumps({**record, "jobid": 500 + jobid}).encode())
        post(receiver, b"{not json")  # spooled and published: the worker dead-letters it
        sent = JOBS + 1

        def edge_done() -> bool:
            s = scrape(ports["edge"])
            return (total(s, "jobstream_edge_records_published_total", edge="slurm",
                          topic=cfg.topics.raw) == sent
                    and total(s, "jobstream_spool_depth", spool="slurm") == 0)

        wait_until("the edge to publish every record", children, edge_done)
        edge = scrape(ports["edge"])
        assert total(edge, "jobstream_edge_records_received_total", edge="slurm") == sent
        assert has(edge, "jobstream_spool_oldest_age_seconds", spool="slurm")
        assert total(edge, "process_resident_memory_bytes") > 0

        def worker_done() -> bool:
            s = scrape(ports["worker"])
            return (total(s, "jobstream_worker_records_read_total", topic=cfg.topics.raw)
                    == sent and total(s, "jobstream_dlq_records_total", stage="normalize") == 1
                    and total(s, "jobstream_worker_events_folded_total") > 0)

        wait_until("the worker to read every raw record", children, worker_done)

        # each job's events are folded and published once (the records are all different)
        def worker_settled() -> bool:
            s = scrape(ports["worker"])
            folded = total(s, "jobstream_worker_events_folded_total", cluster="testcluster")
            return (folded >= JOBS * 2 and folded == total(
                s, "jobstream_worker_records_published_total", topic=cfg.topics.events)
                    and has(s, "jobstream_consumer_lag", group=cfg.worker.app_id,
                            topic=cfg.topics.raw))

        wait_until("the worker's events and its lag", children, worker_settled)
        worker = scrape(ports["worker"])
        folded = total(worker, "jobstream_worker_events_folded_total", cluster="testcluster")
        assert total(worker, "jobstream_dlq_records_total", stage="normalize",
                     reason="invalid-json") == 1
        # the newest event of these jobs is their end
        end = datetime.fromisoformat(record["@end"]).replace(tzinfo=UTC).timestamp()
        assert total(worker, "jobstream_last_event_timestamp_seconds",
                     cluster="testcluster") == end
        assert total(worker, "jobstream_worker_records_published_total",
                     topic=cfg.topics.state) >= JOBS

        def sink_done() -> bool:
            s = scrape(ports["sink"])
            return (total(s, "jobstream_sink_records_read_total", topic=cfg.topics.events)
                    == folded
                    and total(s, "jobstream_sink_bulk_items_total", index="hpc-job-events",
                              outcome="ok") == folded)

        wait_until("the sink to write every event", children, sink_done)
        sink = scrape(ports["sink"])
        assert total(sink, "jobstream_sink_bulk_seconds_count") > 0
        assert total(sink, "jobstream_sink_bulk_items_total", index="hpc-jobs", outcome="ok") > 0
        assert total(sink, "jobstream_sink_bulk_items_total", outcome="reject") == 0
        wait_until("the sink's lag", children, lambda: has(
            scrape(ports["sink"]), "jobstream_consumer_lag", group=f"{cfg.worker.app_id}-sink",
            topic=cfg.topics.events), timeout=30)
    finally:
        for child in reversed(children):
            child.stop()
