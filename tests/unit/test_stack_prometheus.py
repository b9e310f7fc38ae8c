"""The stack's Prometheus without running it: asked for or not, what status shows, the
scrape config it writes from ``[metrics]``, and a build kept inside the stack cache."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from pipeline.cli import main
from pipeline.runtime.config import Config
from pipeline.runtime.errors import ServiceError
from pipeline.tooling.stack import StackInfo, configured
from pipeline.tooling.stack import prometheus as prom
from pipeline.tooling.stack.ui import Reporter


def test_prometheus_runs_only_when_asked() -> None:
    assert configured(Config()) == ["kafka", "elasticsearch"]
    asked = Config().replace(stack={"prometheus": True})
    assert configured(asked) == ["kafka", "elasticsearch", "prometheus"]


@pytest.mark.parametrize(("env", "rows"), [
    ({}, ["kafka", "elasticsearch"]),
    ({"JOBSTREAM_STACK__PROMETHEUS": "true"}, ["kafka", "elasticsearch", "prometheus"]),
])
def test_status_shows_prometheus_when_it_is_asked_for(tmp_path: Path, env: dict[str, str],
                                                      rows: list[str]) -> None:
    env = {"JOBSTREAM_STACK__CACHE_DIR": str(tmp_path / "cache"), **env}
    result = CliRunner().invoke(main, ["stack", "status"], env=env)
    assert result.exit_code == ServiceError.exit_code, result.output
    assert [line.split()[0] for line in result.output.splitlines()[1:] if line.strip()] == rows


def test_the_client_config_of_a_stack_with_prometheus_names_it() -> None:
    info = StackInfo(kafka_bootstrap="127.0.0.1:9092", elasticsearch_url="http://127.0.0.1:9200",
                     kafka_version="4.2.1", elasticsearch_version="9.5.3", started=(),
                     prometheus_url="http://127.0.0.1:9090")
    assert info.client_config(Config()).metrics.prometheus_url == "http://127.0.0.1:9090"
    without = StackInfo(kafka_bootstrap="127.0.0.1:9092", elasticsearch_url="http://x:9200",
                        kafka_version="4.2.1", elasticsearch_version="9.5.3", started=())
    assert without.client_config(Config()).metrics.prometheus_url == ""


def test_the_scrape_config_follows_the_metrics_ports(tmp_path: Path) -> None:
    rules = tmp_path / "rules.yml"
    assert prom.scrape_config(Config(), rules)["scrape_configs"] == []  # every port off
    cfg = Config().replace(metrics={"bind": "0.0.0.0", "edge_flux_port": 9466,  # noqa: S104
                                    "token_file": "/etc/jobstream/token",
                                    "tls_cert": "/etc/jobstream/metrics.pem"})
    conf = prom.scrape_config(cfg, rules)
    assert conf["rule_files"] == [str(rules)]
    assert conf["scrape_configs"] == [{
        "job_name": "jobstream-edge-flux",
        "static_configs": [{"targets": ["127.0.0.1:9466"]}],
        "authorization": {"credentials_file": "/etc/jobstream/token"},
        "scheme": "https", "tls_config": {"ca_file": "/etc/jobstream/metrics.pem"}}]
    v6 = prom.scrape_config(Config().replace(metrics={"bind": "::1", "sink_port": 1}), rules)
    assert v6["scrape_configs"][0]["static_configs"] == [{"targets": ["[::1]:1"]}]


def test_the_build_stays_in_the_stack_cache(tmp_path: Path) -> None:
    env = prom.build_env(tmp_path, tmp_path / "bin", {"PATH": "/usr/bin", "GOFLAGS": "-x"})
    assert env["PATH"] == "/usr/bin"
    assert {k: env[k] for k in ("GOBIN", "GOCACHE", "GOMODCACHE")} == {
        "GOBIN": str(tmp_path / "bin"), "GOCACHE": str(tmp_path / "go" / "cache"),
        "GOMODCACHE": str(tmp_path / "go" / "mod")}
    assert env["GOFLAGS"] == "-mod=mod -modcacherw"


def test_without_go_the_build_says_so(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(prom.shutil, "which", lambda _name: None)
    service = prom.PrometheusService(
        Config().replace(stack={"cache_dir": str(tmp_path)}), [])
    assert not service.installed()
    with pytest.raises(ServiceError, match="'go' is not on PATH"):
        service.install(Reporter())
