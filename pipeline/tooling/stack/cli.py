"""``jobstream stack up | down | status | fetch``: the local Kafka and Elasticsearch, and
optionally Prometheus."""

from __future__ import annotations

import sys

import click
from rich.console import Console
from rich.table import Table

from pipeline.runtime.config import Config
from pipeline.runtime.errors import ServiceError
from pipeline.runtime.invocation import get_config
from pipeline.tooling.stack import SERVICES, configured, ensure_up, fetch, status, stop
from pipeline.tooling.stack.prometheus import targets

__all__ = ["stack"]

_names = click.argument("services", nargs=-1, type=click.Choice(SERVICES))
_brokers = click.option(
    "--brokers", type=click.IntRange(min=1), default=None,
    help="Kafka nodes (stack.kafka_brokers), each broker and controller; node n on "
         "kafka_port + 2(n-1). Default: the configured count (1); for status, the "
         "running Kafka's count when the configured one is not running.")


_prometheus = click.option(
    "--prometheus", is_flag=True, default=False,
    help="Also run Prometheus (stack.prometheus), built with go install on first use, "
         "scraping the [metrics] ports with jobstream's alert rules.")


def _config(ctx: click.Context, brokers: int | None, prometheus: bool = False) -> Config:
    cfg = get_config(ctx)
    if brokers is not None:
        cfg = cfg.replace(stack={"kafka_brokers": brokers})
    return cfg.replace(stack={"prometheus": True}) if prometheus else cfg


@click.group("stack")
def stack() -> None:
    """Run Kafka and Elasticsearch on loopback (fetched once into stack.cache_dir), and
    Prometheus when asked."""


@stack.command("up")
@click.option("--fresh", is_flag=True, help="Stop, wipe the data directories, then start.")
@_brokers
@_prometheus
@_names
@click.pass_context
def up(ctx: click.Context, fresh: bool, brokers: int | None, prometheus: bool,
       services: tuple[str, ...]) -> None:
    """Start the services (Kafka and Elasticsearch by default, Prometheus too with
    --prometheus or stack.prometheus) and wait until they answer."""
    cfg = _config(ctx, brokers, prometheus)
    info = ensure_up(cfg, fresh=fresh, console=Console(stderr=True), services=services)
    where = {"kafka": f"Kafka {info.kafka_bootstrap}",
             "elasticsearch": f"Elasticsearch {info.elasticsearch_url}",
             "prometheus": f"Prometheus {info.prometheus_url}"}
    names = services or configured(cfg)
    shown = ", ".join(where[name] for name in names)
    if "prometheus" in names and not targets(cfg):
        click.echo("note: every [metrics] port is 0 (off), so Prometheus scrapes nothing; "
                   "set worker_port, sink_port, edge_flux_port or edge_slurm_port", err=True)
    if not info.started:
        click.echo(f"stack already up, nothing to do: {shown}")
    else:
        click.echo(f"stack up ({', '.join(info.started)} started): {shown}")


@stack.command("down")
@_names
@click.pass_context
def down(ctx: click.Context, services: tuple[str, ...]) -> None:
    """Stop the services this stack started (by their pid files), every Kafka node, and
    Prometheus if it runs."""
    stopped = stop(get_config(ctx), console=Console(stderr=True), services=services)
    click.echo("stopped: " + ", ".join(stopped) if stopped else "nothing was running")


@stack.command("fetch")
@_prometheus
@_names
@click.pass_context
def fetch_cmd(ctx: click.Context, prometheus: bool, services: tuple[str, ...]) -> None:
    """Fetch (Prometheus: build) into stack.cache_dir what is not there yet; start nothing."""
    fetched = fetch(_config(ctx, None, prometheus), console=Console(stderr=True),
                    services=services)
    click.echo("fetched: " + ", ".join(fetched) if fetched else "all in the cache already")


@stack.command("status")
@_brokers
@click.pass_context
def status_cmd(ctx: click.Context, brokers: int | None) -> None:
    """Show what runs where, one row per Kafka node; exit 69 when one is not running and
    ready."""
    states = status(_config(ctx, brokers), running_shape_first=brokers is None)
    table = Table("service", "version", "address", "pid", "state", box=None)
    for st in states:
        state = ("[green]ready[/]" if st.ready else
                 "[yellow]running, not ready[/]" if st.running else "[red]stopped[/]")
        table.add_row(st.name, st.version, st.address, str(st.pid or "-"), state)
    Console(width=120).print(table)
    if not all(st.running and st.ready for st in states):
        sys.exit(ServiceError.exit_code)
