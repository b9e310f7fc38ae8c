"""The ``jobstream`` command.

Each area keeps its commands beside its code (``pipeline/<area>_cli.py`` or a
``commands`` object in its module); this file only assembles them, loads the
configuration once (:class:`~pipeline.runtime.invocation.LazyConfig`, which the areas read
with :func:`~pipeline.runtime.invocation.get_config`: no area imports this module but
the entry point ``python -m pipeline.edges``), sets up logging, and turns errors into exit
codes:

0 ok; 1 some input records were bad (parse/fold/publish) or a check failed;
2 usage error (click); 65 bad data; 69 a service is unavailable; 74 I/O error (spool);
78 configuration error; 130 interrupted.
"""

from __future__ import annotations

import importlib
import json
import logging
import sys
from typing import Any

import click

from pipeline.runtime.errors import JobstreamError
from pipeline.runtime.invocation import LazyConfig, get_config

__all__ = ["main"]

#: (module, attribute) of every command or group added to the top level; the attribute is
#: the command's name, with ``_`` for ``-`` (``install_units``: ``install-units``). Modules
#: are imported only when their command runs (or for ``--help``), so a daemon such as
#: ``jobstream edge`` does not pay for the others' imports.
COMMANDS: list[tuple[str, str]] = [
    ("pipeline.sink.cli", "sink"),
    ("pipeline.tooling.stack.cli", "stack"),
    ("pipeline.edges.cli", "edge"),
    ("pipeline.edges.publish", "publish"),
    ("pipeline.tooling.fold_cli", "parse"),
    ("pipeline.tooling.fold_cli", "fold"),
    ("agents.cli", "worker"),
    ("pipeline.tooling.demo", "demo"),
    ("pipeline.replay.reprocess", "replay"),
    ("pipeline.dashboards.cli", "dashboards"),
    ("pipeline.tooling.bench.cli", "bench"),
    ("pipeline.deploy.cli", "install_units"),
]


class JobstreamGroup(click.Group):
    """A group that loads area commands lazily, prints jobstream errors as one line and
    exits with their code."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx),
                       *(attr.replace("_", "-") for _, attr in COMMANDS)})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        for module_name, attr in COMMANDS:
            if attr.replace("_", "-") == cmd_name:
                return getattr(importlib.import_module(module_name), attr)
        return super().get_command(ctx, cmd_name)

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except JobstreamError as exc:
            click.secho(f"jobstream: error: {exc}", fg="red", err=True)
            sys.exit(exc.exit_code)
        except KeyboardInterrupt:
            click.echo("jobstream: interrupted", err=True)
            sys.exit(130)


@click.group(cls=JobstreamGroup)
@click.option("--config", "config_path", envvar="JOBSTREAM_CONFIG", default=None,
              help="TOML config file (default: ./jobstream.toml if present).")
@click.option("-v", "--verbose", count=True, help="More log output (-vv for debug).")
@click.pass_context
def main(ctx: click.Context, config_path: str | None, verbose: int) -> None:
    """Stream the life of every HPC job from Flux and Slurm into Elasticsearch."""
    level = logging.WARNING - 10 * min(verbose, 2)
    logging.basicConfig(level=level, format="%(asctime)s %(levelname)-5s %(name)s: %(message)s")
    ctx.obj = LazyConfig(config_path)


@main.group()
def config() -> None:
    """Show the effective configuration."""


@config.command("show")
@click.option("--kafka", "ask_kafka", is_flag=True,
              help="Also ask Kafka what the cluster's defaults make of the replication "
                   "settings (0 = the cluster's default).")
@click.pass_context
def config_show(ctx: click.Context, ask_kafka: bool) -> None:
    """Print the effective config (file + environment), secrets masked, as JSON."""
    cfg = get_config(ctx)
    click.echo(json.dumps(cfg.masked(), indent=2, default=str))
    if ask_kafka:
        from pipeline.kafka.topics import resolve_replication

        click.echo(f"{cfg.kafka.bootstrap}: {resolve_replication(cfg).describe()}", err=True)
