"""``python -m pipeline.edges flux | slurm | status | install-hook``: the edge commands
without the rest of ``jobstream``, whose other areas (sink, agents) pull in libraries a
producer edge must not carry in memory (design 6: an edge stays under 50 MB resident)."""

from __future__ import annotations

import logging
import sys

import click

from pipeline.config import Config, load_config
from pipeline.edges.cli import edge
from pipeline.errors import JobstreamError


class _LazyConfig:
    def __init__(self, path: str | None) -> None:
        self.path = path
        self._cfg: Config | None = None

    def get(self) -> Config:
        if self._cfg is None:
            self._cfg = load_config(self.path)
        return self._cfg


class _Group(click.Group):
    def invoke(self, ctx: click.Context) -> object:
        try:
            return super().invoke(ctx)
        except JobstreamError as exc:
            click.secho(f"jobstream: error: {exc}", fg="red", err=True)
            sys.exit(exc.exit_code)


@click.group(cls=_Group, commands=edge.commands, help=edge.help)
@click.option("--config", "config_path", envvar="JOBSTREAM_CONFIG", default=None,
              help="TOML config file (default: ./jobstream.toml if present).")
@click.option("-v", "--verbose", count=True, help="More log output (-vv for debug).")
@click.pass_context
def main(ctx: click.Context, config_path: str | None, verbose: int) -> None:
    level = logging.WARNING - 10 * min(verbose, 2)
    logging.basicConfig(level=level, format="%(asctime)s %(levelname)-5s %(name)s: %(message)s")
    ctx.obj = _LazyConfig(config_path)


if __name__ == "__main__":
    main(prog_name="python -m pipeline.edges")
