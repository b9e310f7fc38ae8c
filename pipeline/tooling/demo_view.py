"""What ``jobstream demo`` shows: the live summary and the final report (rich renderables).

Pure functions of the figures the demo gathers, so that they can be rendered (and read)
without any service.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from pipeline.replay.readback import JobCounts
from pipeline.tooling.demo_prometheus import PrometheusSeen
from pipeline.tooling.verify import KEY_FIELDS, Comparison

__all__ = ["LiveFigures", "final_report", "grafana_hint", "live_view", "node_report",
           "prometheus_report"]

STATES = ("pending", "running", "completing", "done")
RESULTS = ("completed", "failed", "cancelled", "timeout", "node_fail", "oom", "preempted",
           "exception")
_RESULT_STYLE = {"completed": "green", "failed": "red", "cancelled": "yellow",
                 "timeout": "magenta", "node_fail": "red", "oom": "red"}


@dataclass
class LiveFigures:
    """One refresh of the live summary."""

    elapsed_s: float = 0.0
    published: int = 0
    records: int = 0
    #: records/s published over the last few seconds
    rate: float = 0.0
    jobs: int = 0
    counts: JobCounts = field(default_factory=JobCounts)
    #: group -> records not yet committed (None until known)
    lag: dict[str, int | None] = field(default_factory=dict)
    dead_letters: int = 0
    #: the last error of the monitor (a service not answering), shown instead of hiding it
    error: str = ""
    phase: str = ""


def _joined(counts: Mapping[str, int], order: tuple[str, ...],
            styles: Mapping[str, str] | None = None) -> Text:
    text = Text()
    names = [n for n in order if counts.get(n)] + sorted(set(counts) - set(order))
    for i, name in enumerate(names):
        if i:
            text.append(" · ", style="dim")
        text.append(f"{name} ", style=(styles or {}).get(name, ""))
        text.append(str(counts[name]), style="bold")
    return text if names else Text("-", style="dim")


def live_view(f: LiveFigures, title: str) -> RenderableType:
    grid = Table.grid(padding=(0, 2))
    grid.add_column(style="cyan", no_wrap=True)
    grid.add_column()
    m, s = divmod(int(f.elapsed_s), 60)
    grid.add_row("demo", Text(f"{title}   elapsed {m}:{s:02d}   {f.phase}"))
    grid.add_row("published", Text.assemble(
        (f"{f.published}", "bold"), f" / {f.records} raw records   ",
        (f"{f.rate:.1f}", "bold"), " records/s"))
    grid.add_row("indexed", Text.assemble(
        (f"{f.counts.total}", "bold"), f" / {f.jobs} jobs   ",
        _joined(f.counts.by.get("state", {}), STATES)))
    grid.add_row("results", _joined(f.counts.by.get("result", {}), RESULTS, _RESULT_STYLE))
    lag = Text()
    for i, (group, n) in enumerate(f.lag.items()):
        if i:
            lag.append(" · ", style="dim")
        lag.append(f"{group} ")
        lag.append("?" if n is None else str(n), style="bold")
    grid.add_row("consumer lag", lag if f.lag else Text("-", style="dim"))
    grid.add_row("dead letters", Text(str(f.dead_letters),
                                      style="bold red" if f.dead_letters else "bold"))
    if f.error:
        grid.add_row("[red]note", Text(f.error[:200], style="red"))
    return grid


def _count_table(title: str, name: str, counts: JobCounts, truth: Mapping[str, int],
                 order: tuple[str, ...] = ()) -> Table:
    table = Table(title=title, title_justify="left", box=None, padding=(0, 2))
    table.add_column(name)
    table.add_column("indexed", justify="right")
    table.add_column("generated", justify="right")
    got = counts.by.get(name, {})
    keys = [k for k in order if k in got or k in truth]
    keys += sorted((set(got) | set(truth)) - set(keys))
    for key in keys:
        n, want = got.get(key, 0), truth.get(key, 0)
        table.add_row(key, Text(str(n), style="" if n == want else "bold red"), str(want))
    return table


def final_report(counts: JobCounts, truth: Mapping[str, Mapping[str, Any]],
                 result: Comparison, wall_s: float) -> RenderableType:
    def tally(name: str) -> dict[str, int]:
        out: dict[str, int] = {}
        for job in truth.values():
            # a job still running has no result yet: the index counts none either
            if job.get(name) is not None:
                out[str(job[name])] = out.get(str(job[name]), 0) + 1
        return out

    tables = Table.grid(padding=(0, 6))
    tables.add_row(_count_table("Jobs by result", "result", counts, tally("result"), RESULTS),
                   _count_table("Jobs by cluster", "cluster", counts, tally("cluster")))
    verdict = Text()
    verdict.append("✓ " if result.ok else "✗ ", style="bold green" if result.ok else "bold red")
    verdict.append(f"{result.key_matches}/{result.expected} documents match the generator's "
                   f"{'/'.join(KEY_FIELDS)}; {result.full_matches}/{result.expected} match every "
                   f"checked field")
    lines: list[RenderableType] = [tables, Text(""), verdict]
    problems = [(result.missing, "missing"), (result.unexpected, "not generated"),
                (result.duplicated, "duplicated")]
    for ids, what in problems:
        if ids:
            lines.append(Text(f"  {len(ids)} {what}: {', '.join(ids[:5])}"
                              f"{' ...' if len(ids) > 5 else ''}", style="red"))
    for job, name, got, want in result.examples:
        lines.append(Text(f"  {job}: {name} is {got!r}, generated {want!r}", style="red"))
    lines.append(Text(f"{result.expected} jobs end to end in {wall_s:.0f} s", style="dim"))
    return Group(*lines)


def node_report(result: Comparison) -> RenderableType:
    """The node documents' line of the demo's verdict (``verify.compare_nodes``)."""
    lines: list[RenderableType] = []
    verdict = Text()
    verdict.append("✓ " if result.ok else "✗ ", style="bold green" if result.ok else "bold red")
    verdict.append(f"{result.full_matches}/{result.expected} node documents match the "
                   "generator's state, reason, who and since when")
    lines.append(verdict)
    for ids, what in ((result.missing, "missing"), (result.unexpected, "not generated"),
                      (result.duplicated, "duplicated")):
        if ids:
            lines.append(Text(f"  {len(ids)} nodes {what}: {', '.join(ids[:5])}"
                              f"{' ...' if len(ids) > 5 else ''}", style="red"))
    for node, name, got, want in result.examples:
        lines.append(Text(f"  {node}: {name} is {got!r}, generated {want!r}", style="red"))
    return Group(*lines)


def prometheus_report(seen: PrometheusSeen, jobs: tuple[str, ...]) -> RenderableType:
    """What the demo's Prometheus saw: each of ``jobs`` scraped or not, the worker's
    records read and their rate, the alerts firing."""
    head = Text()
    head.append("Prometheus ", style="bold")
    head.append(f"({seen.url}) over the demo's {seen.window_s:.0f} s: ")
    if seen.error:
        head.append(f"no answer: {seen.error}", style="red")
        return head
    for i, job in enumerate(jobs):
        if i:
            head.append(", ")
        if job not in seen.scraped:
            head.append(f"✗ {job} not a target (Prometheus was started with other metrics "
                        "ports)", style="yellow")
        elif seen.scraped[job]:
            head.append(f"✓ {job} scraped", style="green")
        else:
            head.append(f"✗ {job} never scraped up", style="red")
    lines: list[RenderableType] = [head]
    if seen.records_read is not None and seen.rate is not None:
        lines.append(Text(f"  the worker read {seen.records_read:.0f} raw records "
                          f"({seen.rate:.1f}/s), as Prometheus counted them"))
    if seen.firing:
        lines.append(Text(f"  alerts firing: {', '.join(seen.firing)}", style="bold yellow"))
    else:
        lines.append(Text("  alerts firing: none", style="green"))
    return Group(*lines)


def grafana_hint(es_url: str, prefix: str, repo: Path | None) -> RenderableType:
    prov = repo / "grafana" / "provisioning" if repo else Path("grafana/provisioning")
    dash = repo / "grafana" / "dashboards" if repo else Path("grafana/dashboards")
    text = Text()
    text.append("Grafana: ", style="bold")
    text.append(f"provisioning in {prov} (data sources and the dashboards provider), "
                f"dashboards in {dash}; the data sources read ES_URL={es_url}"
                + (f" and JOBSTREAM_ELASTICSEARCH__INDEX_PREFIX={prefix}" if prefix else "")
                + f", aliases {prefix}hpc-jobs, {prefix}hpc-job-events, "
                  f"{prefix}hpc-queue-snapshots, {prefix}hpc-nodes. With Docker:\n")
    text.append(f"  docker run --network host -e GF_AUTH_ANONYMOUS_ENABLED=true -e ES_URL={es_url}"
                + (f" -e JOBSTREAM_ELASTICSEARCH__INDEX_PREFIX={prefix}" if prefix else "")
                + f" -v {prov}:/etc/grafana/provisioning:ro"
                  f" -v {dash}:/var/lib/grafana/dashboards:ro grafana/grafana:13.1.0",
                style="cyan")
    text.append("\n  then http://localhost:3000, folder \"HPC jobs (jobstream)\"")
    return text
