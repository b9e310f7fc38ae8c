"""``jobstream stack up | down | status``: the local Kafka and Elasticsearch."""

from __future__ import annotations

import sys

import click
from rich.console import Console
from rich.table import Table

from pipeline.runtime.config import Config
from pipeline.runtime.errors import ServiceError
from pipeline.runtime.invocation import get_config
from pipeline.tooling.stack import SERVICES, ensure_up, status, stop

__all__ = ["stack"]

_names = click.argument("services", nargs=-1, type=click.Choice(SERVICES))
_brokers = click.option(
    "--brokers", type=click.IntRange(min=1), default=None,
    help="Kafka nodes (stack.kafka_brokers), each broker and controller; node n on "
         "kafka_port + 2(n-1). Default: the configured count (1); for status, the "
         "running Kafka's count when the configured one is not running.")


def _config(ctx: click.Context, brokers: int | None) -> Config:
    cfg = get_config(ctx)
    return cfg if brokers is None else cfg.replace(stack={"kafka_brokers": brokers})


@click.group("stack")
def stack() -> None:
    """Run Kafka and Elasticsearch on loopback (fetched once into stack.cache_dir)."""


@stack.command("up")
@click.option("--fresh", is_flag=True, help="Stop, wipe the data directories, then start.")
@_brokers
@_names
@click.pass_context
def up(ctx: click.Context, fresh: bool, brokers: int | None,
       services: tuple[str, ...]) -> None:
    """Start the services (all by default) and wait until they answer."""
    cfg = _config(ctx, brokers)
    info = ensure_up(cfg, fresh=fresh, console=Console(stderr=True), services=services)
    where = {"kafka": f"Kafka {info.kafka_bootstrap}",
             "elasticsearch": f"Elasticsearch {info.elasticsearch_url}"}
    shown = ", ".join(where[name] for name in (services or SERVICES))
    if not info.started:
        click.echo(f"stack already up, nothing to do: {shown}")
    else:
        click.echo(f"stack up ({', '.join(info.started)} started): {shown}")


@stack.command("down")
@_names
@click.pass_context
def down(ctx: click.Context, services: tuple[str, ...]) -> None:
    """Stop the services this stack started (by their pid files), every Kafka node."""
    stopped = stop(get_config(ctx), console=Console(stderr=True), services=services)
    click.echo("stopped: " + ", ".join(stopped) if stopped else "nothing was running")


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
