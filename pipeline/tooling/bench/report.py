"""The benchmark's figures: one flat list (name, value, unit, target, whether it is met),
shown as a rich table and written with the details as JSON."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from rich.table import Table

__all__ = ["FIGURES", "OPTIONAL_FIGURES", "Figure", "figures_table", "write_json"]


@dataclass(frozen=True)
class Figure:
    name: str
    value: float | None
    unit: str
    #: the target as people read it ("≥ 0.5"), empty when there is none
    target: str = ""
    #: whether the target is met (None: no target, or not measured)
    ok: bool | None = None
    note: str = ""


#: Every figure a full run reports, by name (the test checks the JSON has each one).
FIGURES: tuple[str, ...] = (
    "consume_decode_ceiling_events_per_s",
    "bulk_job_docs_per_s",
    "bulk_event_docs_per_s",
    "e2e_events_per_s",
    "e2e_ratio_to_ceiling",
    "e2e_cores_busy",
    "e2e_flow_cpu_ms_per_event",
    "e2e_cpu_limit_events_per_s",
    "e2e_cpu_limit_ratio_to_ceiling",
    "worker_cpu_ms_per_event",
    "stage_cpu_ms_per_event",
    "latency_p50_s",
    "latency_p99_s",
    "events_per_job",
    "job_doc_writes_per_job",
    "all_writes_per_job",
    "worker_rss_peak_mib",
    "worker_rss_end_mib",
    "sink_rss_peak_mib",
    "replay_records_per_s",
    "baseline_events_per_s",
    "e2e_vs_baseline",
)

#: The figures of the phases run only when named (node-usage, node-edge, burst), after
#: those.
OPTIONAL_FIGURES: tuple[str, ...] = (
    "usage_p99_s",
    "usage_sustained_samples_per_s",
    "worker_cpu_ms_per_sample",
    "node_edge_cpu_ms_per_interval",
    "node_edge_rss_mib",
    "burst_all_searchable_s",
    "burst_live_p99_s",
)


def at_least(limit: float) -> Callable[[float], bool]:
    return lambda v: v >= limit


def below(limit: float) -> Callable[[float], bool]:
    return lambda v: v < limit


def figure(name: str, value: float | None, unit: str, target: str = "",
           test: Callable[[float], bool] | None = None, note: str = "") -> Figure:
    ok = None if value is None or test is None else bool(test(value))
    return Figure(name, None if value is None else round(float(value), 4), unit, target, ok,
                  note)


def _fmt(value: float | None, unit: str) -> str:
    if value is None:
        return "—"
    if abs(value) >= 100:
        return f"{value:,.0f} {unit}".strip()
    if abs(value) >= 10:
        return f"{value:,.1f} {unit}".strip()
    return f"{value:,.3g} {unit}".strip()


def figures_table(figures: list[Figure], title: str) -> Table:
    table = Table(title=title, title_justify="left")
    table.add_column("figure")
    table.add_column("value", justify="right")
    table.add_column("target")
    table.add_column("", justify="center")
    table.add_column("note", style="dim")
    for f in figures:
        mark = {True: "[green]✓[/]", False: "[red]✗[/]", None: ""}[f.ok]
        table.add_row(f.name, _fmt(f.value, f.unit), f.target, mark, f.note)
    return table


def write_json(path: Path, figures: list[Figure], details: dict[str, Any]) -> None:
    body = {"figures": {f.name: asdict(f) for f in figures}, **details}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(body, indent=2, default=str) + "\n")
