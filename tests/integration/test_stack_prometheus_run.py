"""The stack's own Prometheus, on a cache directory of this test's (the built binaries
linked in): ``stack up prometheus`` starts it on its port, scraping the configured metrics
ports, ``status`` and the client config know it, a second ``up`` leaves it, ``down`` stops
it; a config promtool refuses fails the start with promtool's reason."""

from __future__ import annotations

import json
import urllib.request
from pathlib import Path

import pytest
from prometheus_bin import prometheus_binaries
from waiting import wait_until

from pipeline.runtime.children import free_port
from pipeline.runtime.config import Config
from pipeline.runtime.errors import ServiceError
from pipeline.tooling.stack import ensure_up, status, stop
from pipeline.tooling.stack.prometheus import VERSION, PrometheusService

pytestmark = pytest.mark.integration


@pytest.fixture
def cfg(tmp_path: Path) -> Config:
    binary, _ = prometheus_binaries()
    cache = tmp_path / "cache"
    (cache / "prometheus" / VERSION).mkdir(parents=True)
    (cache / "prometheus" / VERSION / "bin").symlink_to(binary.parent)
    # Kafka's and Elasticsearch's ports too: their state is read, and nothing must answer
    return Config().replace(
        stack={"cache_dir": str(cache), "prometheus": True, "prometheus_port": free_port(),
               "kafka_port": free_port(), "elasticsearch_port": free_port()},
        metrics={"sink_port": free_port()})


def test_up_status_and_down(cfg: Config) -> None:
    url = f"http://127.0.0.1:{cfg.stack.prometheus_port}"
    try:
        info = ensure_up(cfg, services=["prometheus"])
        assert info.started == ("prometheus",)
        assert info.client_config(cfg).metrics.prometheus_url == url
        [state] = [s for s in status(cfg) if s.name == "prometheus"]
        assert state.running and state.ready and state.version == VERSION
        assert ensure_up(cfg, services=["prometheus"]).started == ()
        scraped: list[tuple[str, str]] = []

        def discovered() -> bool:
            # the scrape manager takes its targets a moment after the server is ready
            with urllib.request.urlopen(f"{url}/api/v1/targets", timeout=10) as resp:  # noqa: S310
                active = json.load(resp)["data"]["activeTargets"]
            scraped[:] = [(t["labels"]["job"], t["scrapeUrl"]) for t in active]
            return bool(scraped)

        wait_until(discovered, timeout=30, what="Prometheus's scrape targets")
        assert scraped == [("jobstream-sink",
                            f"http://127.0.0.1:{cfg.metrics.sink_port}/metrics")]
    finally:
        stopped = stop(cfg, services=["prometheus"])
    assert stopped == ["prometheus"]
    assert PrometheusService(cfg, []).process() is None


def test_a_config_promtool_refuses_fails_the_start(cfg: Config, tmp_path: Path) -> None:
    missing = cfg.replace(metrics={"token_file": str(tmp_path / "no-such-token")})
    try:
        with pytest.raises(ServiceError, match="promtool refused") as err:
            ensure_up(missing, services=["prometheus"])
        assert "no-such-token" in str(err.value)
        assert PrometheusService(missing, []).process() is None
    finally:
        stop(missing, services=["prometheus"])  # whatever a start that should fail left
