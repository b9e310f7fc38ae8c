"""pipeline.runtime.metrics: the server and its guard, and the helpers that keep metrics honest."""

from __future__ import annotations

import socket
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client import REGISTRY

from pipeline.edges.spool import Spool
from pipeline.runtime import metrics
from pipeline.runtime.config import Config, Secret
from pipeline.runtime.errors import ConfigError


def scrape(port: int, token: str | None = None) -> str:
    req = urllib.request.Request(f"http://127.0.0.1:{port}/metrics")
    if token is not None:
        req.add_header("Authorization", f"Bearer {token}")
    with urllib.request.urlopen(req, timeout=10) as resp:
        return resp.read().decode()


@pytest.fixture
def servers() -> Iterator[list]:
    started: list = []
    yield started
    for server in started:
        server.shutdown()
        server.server_close()


def value(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


def test_serve_answers_with_the_jobstream_metrics_and_the_process_ones(servers: list) -> None:
    metrics.DLQ_RECORDS.labels("test", "unit-serve").inc()
    server = metrics.serve("127.0.0.1", 0)
    servers.append(server)
    text = scrape(server.server_port)
    assert 'jobstream_dlq_records_total{reason="unit-serve",stage="test"}' in text
    assert "process_resident_memory_bytes" in text  # an edge's memory target needs it


def test_a_bind_beyond_loopback_without_a_token_is_refused() -> None:
    with pytest.raises(ConfigError, match="metrics.token_file"):
        metrics.serve("0.0.0.0", 0)  # noqa: S104
    with pytest.raises(ConfigError, match="not loopback"):
        metrics.serve("", 0)


def test_with_a_token_only_a_scrape_that_carries_it_is_answered(servers: list) -> None:
    server = metrics.serve("127.0.0.1", 0, token=Secret("s3cret-token-of-16+"))
    servers.append(server)
    port = server.server_port
    for wrong in (None, "nope"):
        with pytest.raises(urllib.error.HTTPError) as exc:
            scrape(port, wrong)
        assert exc.value.code == 401
    assert "jobstream_" in scrape(port, "s3cret-token-of-16+")


def test_a_port_in_use_is_a_clear_configuration_error() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        with pytest.raises(ConfigError, match="cannot listen on 127.0.0.1"):
            metrics.serve("127.0.0.1", taken.getsockname()[1])


def test_start_serves_the_configured_port_of_a_process_and_nothing_when_it_is_0(
        servers: list, tmp_path: Path) -> None:
    assert metrics.start(Config(), "worker") is None
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    token = tmp_path / "token"
    token.write_text("a-token-of-sixteen-chars\n")
    token.chmod(0o600)
    cfg = Config().replace(metrics={"sink_port": port, "token_file": str(token)})
    assert metrics.start(cfg, "worker") is None
    server = metrics.start(cfg, "sink")
    assert server is not None
    servers.append(server)
    assert "jobstream_" in scrape(port, "a-token-of-sixteen-chars")


def test_the_last_event_time_only_moves_forward() -> None:
    last = metrics.LastEventTime()
    last.saw("unit-c1", 200.0)
    last.saw("unit-c1", 100.0)  # an older event of another job, read later
    last.saw("unit-c2", 50.0)
    assert value("jobstream_last_event_timestamp_seconds", cluster="unit-c1") == 200.0
    assert value("jobstream_last_event_timestamp_seconds", cluster="unit-c2") == 50.0
    last.saw("unit-c1", 300.0)
    assert value("jobstream_last_event_timestamp_seconds", cluster="unit-c1") == 300.0


def test_a_partition_no_longer_reported_leaves_the_lag_metric() -> None:
    lag = metrics.LagReporter("unit-group")
    lag.report({("t", 0): 5, ("t", 1): 7})
    assert value("jobstream_consumer_lag", group="unit-group", topic="t", partition="1") == 7
    lag.report({("t", 0): 2, ("t", 2): -3})  # partition 1 revoked; a negative lag is 0
    assert REGISTRY.get_sample_value(
        "jobstream_consumer_lag", {"group": "unit-group", "topic": "t", "partition": "1"}
    ) is None
    assert value("jobstream_consumer_lag", group="unit-group", topic="t", partition="0") == 2
    assert REGISTRY.get_sample_value(
        "jobstream_consumer_lag", {"group": "unit-group", "topic": "t", "partition": "2"}
    ) == 0


def test_a_tracked_spool_reports_its_depth_and_oldest_age_until_untracked(
        tmp_path: Path) -> None:
    spool = Spool(tmp_path / "unit-spool.db", topic="t")
    untrack = metrics.track_spool(spool)
    try:
        assert value("jobstream_spool_depth", spool="unit-spool") == 0
        spool.append(b"k", b"v1")
        spool.append(b"k", b"v22")
        assert value("jobstream_spool_depth", spool="unit-spool") == 2
        assert value("jobstream_spool_bytes", spool="unit-spool") == 5
        assert value("jobstream_spool_oldest_age_seconds", spool="unit-spool") >= 0
        spool.delete([1, 2])
        assert value("jobstream_spool_depth", spool="unit-spool") == 0
    finally:
        untrack()
        spool.close()
    assert REGISTRY.get_sample_value("jobstream_spool_depth", {"spool": "unit-spool"}) is None


def test_a_closed_spool_still_tracked_does_not_break_a_scrape(tmp_path: Path) -> None:
    spool = Spool(tmp_path / "unit-closed.db", topic="t")
    untrack = metrics.track_spool(spool)
    spool.close()
    try:
        assert REGISTRY.get_sample_value("jobstream_spool_depth",
                                         {"spool": "unit-closed"}) is None
    finally:
        untrack()


def test_a_process_says_which_it_is_even_with_its_port_off() -> None:
    # the alert rules tell the worker's restart from the sink's by it
    assert metrics.start(Config(), "sink") is None
    assert REGISTRY.get_sample_value("jobstream_process_info", {"process": "sink"}) == 1.0
    metrics.start(Config(), "worker")
    assert REGISTRY.get_sample_value("jobstream_process_info", {"process": "worker"}) == 1.0
