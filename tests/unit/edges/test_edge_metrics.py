"""What an edge counts: records received (spooled, so acknowledged to the scheduler) and
published (confirmed by Kafka), and its spool in the spool gauges until it stops."""

from __future__ import annotations

from pathlib import Path

from prometheus_client import REGISTRY

from pipeline.core.model import RawRecord
from pipeline.edges.base import EdgeRuntime
from pipeline.runtime.config import Config


def value(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


def record(n: int) -> RawRecord:
    return RawRecord(cluster="unit", scheduler="slurm", format="slurm-jobcomp",
                     received_at=1.0, payload=b'{"jobid": %d}' % n, key=f"unit:{n}")


def test_an_edge_counts_what_it_spools_and_what_kafka_confirms(tmp_path: Path) -> None:
    cfg = Config().replace(cluster="unit-metrics", edge={"spool_dir": str(tmp_path)})
    runtime = EdgeRuntime(cfg, "unit-edge")  # not started: nothing is sent
    labels = {"edge": "unit-edge", "cluster": "unit-metrics"}
    received = value("jobstream_edge_records_received_total", **labels)
    published = value("jobstream_edge_records_published_total", **labels, topic=cfg.topics.raw)
    try:
        seqs = [runtime.publish(record(1)), *runtime.publish_many([record(2), record(3)])]
        assert value("jobstream_edge_records_received_total", **labels) == received + 3
        assert value("jobstream_spool_depth", spool="unit-edge") == 3
        runtime.spool.delete(seqs[:2])
        runtime._acked(seqs[:2])  # the drainer's report of what Kafka confirmed
        assert value("jobstream_edge_records_published_total", **labels,
                     topic=cfg.topics.raw) == published + 2
        assert value("jobstream_spool_depth", spool="unit-edge") == 1
    finally:
        runtime.stop()
    assert REGISTRY.get_sample_value("jobstream_spool_depth", {"spool": "unit-edge"}) is None
