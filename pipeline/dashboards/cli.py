"""``jobstream dashboards check | preview | build``."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import click
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from pipeline.dashboards import alerts, health, job, node, overview, render
from pipeline.dashboards.check import Checker, PanelReport, Status, summarize
from pipeline.dashboards.grafana_time import QueryError, TimeRange, parse_time
from pipeline.dashboards.promql import Prometheus
from pipeline.runtime.errors import ConfigError
from pipeline.runtime.invocation import get_config
from pipeline.sink.client import make_client

__all__ = ["dashboards"]

#: the dashboards ``preview`` draws, by the name ``--dashboard`` takes
PREVIEWABLE = {"overview": overview.build, "job": job.build, "node": node.build,
               "pipeline": health.build}

_STYLE = {Status.OK: "green", Status.EMPTY: "yellow", Status.BROKEN: "bold red"}


@click.group("dashboards")
def dashboards() -> None:
    """The Grafana dashboards shipped in grafana/: check them, regenerate them."""


@dashboards.command("check")
@click.option("--from", "from_", default="now-24h", show_default=True,
              help="Start of the time range (now-24h, epoch ms, ISO 8601).")
@click.option("--to", "to", default="now", show_default=True, help="End of the time range.")
@click.option("--dashboard", "files", multiple=True, type=click.Path(exists=True,
                                                                      dir_okay=False),
              help="Check this dashboard JSON instead of the shipped ones (repeatable).")
@click.option("--var", "var_args", multiple=True, metavar="NAME=VALUE",
              help="Set a template variable, as a user would (repeatable), e.g. "
                   "--var job_id=1234 for the job dashboard, which shows no job without.")
@click.option("--strict", is_flag=True, help="Fail on empty panels too.")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
@click.pass_context
def check(ctx: click.Context, from_: str, to: str, files: tuple[str, ...],
          var_args: tuple[str, ...], strict: bool, as_json: bool) -> None:
    """Run every panel's queries against Elasticsearch, as Grafana would send them, and
    the PromQL ones against metrics.prometheus_url when it is set; and (without
    --dashboard) the queries of the shipped Grafana alert rules, over their own ranges.

    Reports each panel ok, empty (nothing in the time range) or broken (an unknown field,
    a field of the wrong type, an aggregation Elasticsearch lacks, a PromQL expression
    Prometheus refuses). Template variables
    are set to All (or their default) unless --var sets them. Exit status 1 if a panel
    is broken (or, with --strict, empty).
    """
    cfg = get_config(ctx)
    time_range, now = _time_range(from_, to)
    boards = [_load(Path(f)) for f in files] if files else render.dashboards()
    variables = _variables(var_args, boards)
    url = cfg.metrics.prometheus_url
    with make_client(cfg.elasticsearch, request_timeout=30.0) as es:
        checker = Checker(es, prefix=cfg.elasticsearch.index_prefix, now_ms=now,
                          variables=variables,
                          prometheus=Prometheus(url) if url else None)
        reports = checker.check(boards, time_range)
        if not files:
            reports += checker.check_alert_rules(alerts.provisioning())
    counts = summarize(reports)
    if as_json:
        click.echo(json.dumps({"from_ms": time_range.from_ms, "to_ms": time_range.to_ms,
                               "index_prefix": cfg.elasticsearch.index_prefix,
                               "prometheus_url": url,
                               "summary": counts,
                               "panels": [r.to_dict() for r in reports]}, indent=2))
    else:
        _print(reports, counts, prometheus=bool(url))
    failed = counts[Status.BROKEN.value] or (strict and counts[Status.EMPTY.value])
    sys.exit(1 if failed else 0)


@dashboards.command("preview")
@click.option("--out", type=click.Path(file_okay=False, path_type=Path), required=True,
              help="Directory to write the images and pages to.")
@click.option("--dashboard", "names", multiple=True,
              type=click.Choice(sorted(PREVIEWABLE)),
              help="Preview only this dashboard (repeatable) [default: all].")
@click.option("--from", "from_", default="now-24h", show_default=True,
              help="Start of the time range (now-24h, epoch ms, ISO 8601).")
@click.option("--to", "to", default="now", show_default=True, help="End of the time range.")
@click.option("--var", "var_args", multiple=True, metavar="NAME=VALUE",
              help="Set a template variable (repeatable), e.g. --var job_id=1234 for the "
                   "job dashboard.")
@click.pass_context
def preview(ctx: click.Context, out: Path, names: tuple[str, ...], from_: str, to: str,
            var_args: tuple[str, ...]) -> None:
    """Draw every panel from Elasticsearch's answers to Grafana's queries, without Grafana.

    Writes one PNG per panel, one picture per dashboard and an index.html laying the
    panels out on the dashboard's grid. Panels the preview cannot draw (a Prometheus
    panel, a query Elasticsearch refused, a panel type it does not know) are drawn as
    labelled placeholders and counted. Exit status 1 if a query was refused.
    """
    # matplotlib takes a while to import: only this command pays for it
    from pipeline.dashboards.preview.previewer import Previewer

    cfg = get_config(ctx)
    time_range, now = _time_range(from_, to)
    boards = [PREVIEWABLE[n]() for n in (names or PREVIEWABLE)]
    variables = _variables(var_args, boards)
    with make_client(cfg.elasticsearch, request_timeout=30.0) as es:
        checker = Checker(es, prefix=cfg.elasticsearch.index_prefix, now_ms=now,
                          variables=variables)
        done = Previewer(checker, out).preview(boards, time_range)
    console = Console()
    for board in done:
        console.print(f"[bold]{escape(board.title)}[/]: {board.count('ok')} drawn, "
                      f"{board.count('empty')} empty, {board.count('placeholder')} "
                      f"placeholders -> [cyan]{escape(str(board.page))}[/]")
    placeholders = sum(b.count("placeholder") for b in done)
    console.print(f"{placeholders} placeholders in all; open [cyan]{out / 'index.html'}[/]")
    refused = any(p.refused for b in done for p in b.panels)
    sys.exit(1 if refused else 0)


@dashboards.command("build")
@click.option("--out", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Directory to write to (default: the repository's grafana/).")
@click.option("--check", "only_check", is_flag=True,
              help="Write nothing; exit 1 if a file differs from the code's output.")
def build(out: Path | None, only_check: bool) -> None:
    """Regenerate grafana/ (provisioning and dashboard JSON) from pipeline/dashboards."""
    root = out or render.GRAFANA_DIR
    if only_check:
        stale = render.stale(root)
        for rel in stale:
            click.echo(f"out of date: {root / rel}")
        sys.exit(1 if stale else 0)
    for rel in render.write(root):
        click.echo(f"wrote {root / rel}")


def _time_range(from_: str, to: str) -> tuple[TimeRange, int]:
    """``--from``/``--to`` as Grafana reads them, and "now" (epoch ms)."""
    try:
        now = parse_time("now")
        time_range = TimeRange(parse_time(from_, now), parse_time(to, now))
    except QueryError as exc:
        raise click.BadParameter(str(exc)) from exc
    if time_range.span_ms <= 0:
        raise click.BadParameter("--from must be before --to")
    return time_range, now


def _variables(args: tuple[str, ...], boards: list[dict[str, Any]]) -> dict[str, str]:
    """``--var NAME=VALUE`` options; each name must be a variable of a dashboard checked."""
    known = {str(v.get("name")) for b in boards
             for v in (b.get("templating") or {}).get("list") or []}
    out: dict[str, str] = {}
    for arg in args:
        name, sep, value = arg.partition("=")
        if not sep or not name:
            raise click.BadParameter(f"{arg!r} is not NAME=VALUE", param_hint="--var")
        if name not in known:
            raise click.BadParameter(f"no dashboard checked has a variable {name!r} "
                                     f"(known: {', '.join(sorted(known))})",
                                     param_hint="--var")
        out[name] = value
    return out


def _load(path: Path) -> dict[str, Any]:
    try:
        board = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ConfigError(f"cannot read dashboard {path}: {exc}") from exc
    if not isinstance(board, dict) or not isinstance(board.get("panels"), list):
        raise ConfigError(f"{path} is not a Grafana dashboard (no panels)")
    return board


def _print(reports: list[PanelReport], counts: dict[str, int], *, prometheus: bool) -> None:
    console = Console()
    against = "Elasticsearch and Prometheus" if prometheus else \
        "Elasticsearch (no metrics.prometheus_url: Prometheus panels left aside)"
    table = Table(title=f"Dashboard panels and alert rules against {against}",
                  title_justify="left")
    table.add_column("dashboard")
    table.add_column("panel")
    table.add_column("status")
    table.add_column("detail", overflow="fold")
    for r in reports:
        table.add_row(escape(r.dashboard), escape(r.title),
                      f"[{_STYLE[r.status]}]{r.status.value}[/]", escape(r.detail))
    console.print(table)
    console.print(", ".join(f"{n} {s}" for s, n in counts.items()))
