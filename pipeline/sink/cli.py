"""``jobstream sink``: the Elasticsearch sink as a long-running worker process."""

from __future__ import annotations

import logging
import signal
from types import FrameType

import click

from pipeline.runtime import metrics
from pipeline.runtime.invocation import get_config
from pipeline.sink.names import check_generation
from pipeline.sink.runner import SinkRunner

__all__ = ["generation_option", "sink"]


def generation_option(_: click.Context, __: click.Parameter, value: str | None) -> str | None:
    """The click callback of a ``--generation`` option (the sink's, the replay's): the
    generation checked, a bad one a usage error; None when the option was not given."""
    if value is None:
        return None
    try:
        return check_generation(value)
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from exc


@click.command("sink")
@click.option("--generation", default=None, callback=generation_option,
              help="Index generation to write (v1, v2, ...); default: the one the aliases "
                   "point at, following them when a replay moves them.")
@click.option("--group", "group_id", default=None,
              help="Kafka consumer group (default: <worker.app_id>-sink).")
@click.pass_context
def sink(ctx: click.Context, generation: str | None, group_id: str | None) -> None:
    """Write job states, events and queue snapshots from Kafka to Elasticsearch.

    Offsets are committed only after Elasticsearch acknowledged the writes; SIGTERM or
    Ctrl-C flushes, commits and exits (a second one exits at once).
    """
    cfg = get_config(ctx)
    if not logging.getLogger().isEnabledFor(logging.DEBUG):
        # one line per HTTP request is debugging detail; the sink logs one line per flush
        logging.getLogger("elastic_transport.transport").setLevel(logging.WARNING)
    metrics.start(cfg, "sink")
    runner = SinkRunner(cfg, generation=generation, group_id=group_id)

    def on_signal(signum: int, _: FrameType | None) -> None:
        runner.stop()
        signal.signal(signum, signal.SIG_DFL)

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    stats = runner.run()
    click.echo(f"sink stopped: {stats.records} records, {stats.written} written, "
               f"{stats.duplicates} already applied, {stats.dead_lettered} to the DLQ",
               err=True)
