"""The shipped alert rules (pipeline/deploy/prometheus/jobstream-rules.yml): promtool's unit
tests of tests/data/prometheus pass, every rule fires in them and resolves after, and the
rules name only metrics jobstream exports. The stack's generated Prometheus config loads."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path
from typing import Any

import yaml
from prometheus_bin import prometheus_binaries
from prometheus_client import REGISTRY

from pipeline.runtime.config import Config
from pipeline.tooling.stack.alert_rules import parse_duration, scale_durations, scaled_expr
from pipeline.tooling.stack.prometheus import RULES, scrape_config

TESTS = Path(__file__).resolve().parents[1] / "data" / "prometheus" / "jobstream-rules_test.yml"

#: what a metric family's samples are called, by its type
_DURATION = re.compile(r"\b\d+(?:ms|[smhdwy])\b")

_SUFFIXES = {"counter": ("_total",), "info": ("_info",), "gauge": ("",),
             "histogram": ("_bucket", "_sum", "_count"), "summary": ("_sum", "_count", "")}


def _rules() -> list[dict[str, Any]]:
    return [rule for group in yaml.safe_load(RULES.read_text())["groups"]
            for rule in group["rules"]]


def test_promtool_unit_tests_pass() -> None:
    _, promtool = prometheus_binaries()
    run = subprocess.run([str(promtool), "test", "rules", str(TESTS)], capture_output=True,
                         text=True, check=False, timeout=120)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "SUCCESS" in run.stdout + run.stderr


def test_every_rule_fires_in_a_test_and_resolves_after() -> None:
    checks: dict[str, list[tuple[int, bool]]] = {}
    for case in yaml.safe_load(TESTS.read_text())["tests"]:
        for check in case.get("alert_rule_test") or []:
            minutes = int(str(check["eval_time"]).removesuffix("m"))
            checks.setdefault(check["alertname"], []).append(
                (minutes, bool(check.get("exp_alerts"))))
    for rule in _rules():
        name = rule["alert"]
        seen = sorted(checks.get(name, []))
        fired = [t for t, firing in seen if firing]
        assert fired, f"{name} fires in no test"
        assert any(t > fired[0] and not firing for t, firing in seen), \
            f"{name} does not resolve in its test after it fired"


def _exported() -> set[str]:
    names = {"up"}  # Prometheus's own, per target
    for family in REGISTRY.collect():
        names.update(family.name + s for s in _SUFFIXES.get(family.type, ("",)))
    return names


def test_the_rules_name_only_metrics_jobstream_exports() -> None:
    exported = _exported()
    for rule in _rules():
        used = set(re.findall(r"\b(?:jobstream|process)_[a-z_]+\b|\bup(?=\{)", rule["expr"]))
        assert used, rule["alert"]
        assert used <= exported, f"{rule['alert']}: unknown {sorted(used - exported)}"


def test_the_stacks_prometheus_config_loads(tmp_path: Path) -> None:
    _, promtool = prometheus_binaries()
    rules = tmp_path / "rules.yml"
    rules.write_text(RULES.read_text())
    cfg = Config().replace(metrics={"worker_port": 9464, "sink_port": 9465,
                                    "edge_slurm_port": 9467})
    conf = scrape_config(cfg, rules)
    assert [(j["job_name"], j["static_configs"][0]["targets"]) for j in conf["scrape_configs"]] \
        == [("jobstream-worker", ["127.0.0.1:9464"]), ("jobstream-sink", ["127.0.0.1:9465"]),
            ("jobstream-edge-slurm", ["127.0.0.1:9467"])]
    path = tmp_path / "prometheus.yml"
    path.write_text(json.dumps(conf))
    run = subprocess.run([str(promtool), "check", "config", str(path)], capture_output=True,
                         text=True, check=False, timeout=60)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "10 rules found" in run.stdout + run.stderr


def test_scaled_rules_keep_the_expressions_on_a_shorter_clock() -> None:
    assert parse_duration("1h30m") == 5_400_000
    assert scaled_expr('rate(x{le="5m"}[10m]) > 1000 and time() - t > 30m offset 1h',
                       1 / 300) == 'rate(x{le="5m"}[2s]) > 1000 and time() - t > 6s offset 12s'
    shipped = {r["alert"]: r for r in _rules()}
    scaled = {r["alert"]: r for g in yaml.safe_load(scale_durations(RULES.read_text(), 1 / 300))
              ["groups"] for r in g["rules"]}
    assert scaled.keys() == shipped.keys()
    for name, rule in shipped.items():
        # the same expression but for its durations (and their text)
        assert _DURATION.sub("D", scaled[name]["expr"]) == _DURATION.sub("D", rule["expr"])
        if "for" in rule:
            assert parse_duration(scaled[name]["for"]) * 300 == parse_duration(rule["for"])
    assert "[2s]" in scaled["JobstreamConsumerLagGrowing"]["expr"]
    assert "changes(jobstream_last_event_timestamp_seconds[6s])" in \
        scaled["JobstreamClusterStale"]["expr"]
    assert scaled["JobstreamSpoolOld"]["expr"].endswith("> 1s")


def test_scaled_rules_load_in_promtool(tmp_path: Path) -> None:
    _, promtool = prometheus_binaries()
    path = tmp_path / "scaled.yml"
    path.write_text(scale_durations(RULES.read_text(), 1 / 300))
    run = subprocess.run([str(promtool), "check", "rules", str(path)], capture_output=True,
                         text=True, check=False, timeout=60)
    assert run.returncode == 0, run.stdout + run.stderr
