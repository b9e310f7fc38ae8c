"""The overview's "Efficiency" row (issue 13 part 5): CPU and memory efficiency weighted by
node-hours per user and bank, jobs that waste their CPU or memory, GPU jobs with idle
GPUs. No scripts: weighted means divide two sums by a Grafana expression."""

from __future__ import annotations

from typing import Any

import pytest

from pipeline.dashboards import overview


def _panel(title: str) -> dict[str, Any]:
    (found,) = [p for p in overview.build()["panels"] if p["title"] == title]
    return found


def _buckets(target: dict[str, Any]) -> list[tuple[str, str]]:
    return [(b["type"], b.get("field", "")) for b in target["bucketAggs"]]


def test_the_efficiency_row_follows_the_usage_row() -> None:
    titles = [p["title"] for p in overview.build()["panels"]]
    start = titles.index("Efficiency")
    assert titles[start + 1:] == [
        "CPU efficiency by user (node-hour weighted)",
        "CPU efficiency by bank (node-hour weighted)",
        "Memory efficiency by user (node-hour weighted)",
        "Memory efficiency by bank (node-hour weighted)",
        "Jobs under 10 % of their CPU or memory, by user",
        "GPU jobs with idle GPUs, by user",
        # and of the jobs running now (test_dashboards_usage.py)
        "Running jobs under 10 % of their cores now, by user and bank",
        "GPU jobs idle for $gpu_idle_min minutes, by user",
        "Jobs within 10 % of their memory limit now",
    ]


@pytest.mark.parametrize(("what", "eff", "product"), [
    ("CPU efficiency", "cpu_eff_pct", "cpu_eff_x_nh"),
    ("Memory efficiency", "mem_max_pct", "mem_eff_x_nh")])
@pytest.mark.parametrize("by", ["user", "bank"])
def test_weighted_efficiency_divides_two_sums_of_the_same_jobs(
        what: str, eff: str, product: str, by: str) -> None:
    p = _panel(f"{what} by {by} (node-hour weighted)")
    a, b, c = p["targets"]
    assert [m["field"] for m in a["metrics"]] == [product]
    assert [m["field"] for m in b["metrics"]] == ["node_hours"]
    assert {m["type"] for m in a["metrics"] + b["metrics"]} == {"sum"}
    # the denominator counts only jobs with the efficiency: Flux jobs and jobs without
    # sacct usage would otherwise pull the mean towards 0
    assert a["query"] == b["query"] and a["query"].startswith(f"_exists_:{eff} AND ")
    assert _buckets(a) == _buckets(b) == [("terms", by), ("date_histogram", "t_end")]
    assert a["datasource"]["uid"] == b["datasource"]["uid"] == "jobstream-jobs-end"
    assert a["hide"] and b["hide"] and "hide" not in c
    assert (c["type"], c["expression"]) == ("math", "$A / $B")
    assert p["fieldConfig"]["defaults"]["unit"] == "percent"


def test_wasted_cpu_or_memory_by_user() -> None:
    (t,) = _panel("Jobs under 10 % of their CPU or memory, by user")["targets"]
    assert t["query"].startswith("(cpu_eff_pct:<10 OR mem_max_pct:<10) AND ")
    assert [(m["type"], m.get("field")) for m in t["metrics"]] == [
        ("count", None), ("sum", "node_hours"), ("sum", "core_hours")]
    assert _buckets(t) == [("terms", "user"), ("filters", "")]
    rows = t["bucketAggs"][1]["settings"]["filters"]
    assert rows == [{"query": "cpu_eff_pct:<10", "label": "CPU"},
                    {"query": "mem_max_pct:<10", "label": "memory"}]


def test_idle_gpus_and_gpu_jobs_without_data() -> None:
    p = _panel("GPU jobs with idle GPUs, by user")
    (t,) = p["targets"]
    no_data = "(*:* NOT _exists_:gpu_util_pct)"
    assert t["query"].startswith(f"ngpus:>0 AND (gpu_util_pct:<10 OR {no_data}) AND ")
    rows = t["bucketAggs"][1]["settings"]["filters"]
    assert rows == [{"query": "gpu_util_pct:<10", "label": "GPUs under 10 %"},
                    {"query": no_data, "label": "no data"}]
    assert [m.get("field") for m in t["metrics"]] == [None, "gpu_hours"]
    assert "no data" in p["description"] and "gres/gpuutil" in p["description"]
