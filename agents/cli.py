"""``jobstream worker``: run the Faust agents until stopped."""

from __future__ import annotations

import gc

import click

__all__ = ["worker"]

#: Python's cyclic collector, for a process that allocates some hundred objects per event
#: and frees nearly all of them by reference counting: at the default (700, 10, 10) it ran
#: every few events and rescanned the Faust, aiokafka and fold-cache objects, 4 % of the
#: worker's CPU in a bench run, 1 % with these (docs/benchmarks-history.md, issue 11).
GC_THRESHOLDS = (50_000, 20, 100)


@click.command()
@click.option("--name", default=None, help="Worker name in snapshots (default host:web-port).")
@click.option("--web-port", type=int, default=None, help="Web port (default worker.web_port).")
@click.option("--store-dir", default=None, help="RocksDB store (default worker.store_dir).")
@click.option("--loglevel", default="warning", show_default=True,
              type=click.Choice(["debug", "info", "warning", "error"]))
@click.pass_context
def worker(ctx: click.Context, name: str | None, web_port: int | None, store_dir: str | None,
           loglevel: str) -> None:
    """Run the stream agents: raw records -> canonical events, job states and snapshots.

    Several workers (on several hosts) with the same worker.app_id share the work by
    partitions. GET http(s)://<host>:<web-port>/jobs/<cluster>/<job_id> answers a job's current
    state from whichever worker owns it.
    """
    from agents.app import Runner, create_app, internal_topics
    from pipeline.kafka.topics import ensure_topics, resolve_replication
    from pipeline.runtime import metrics
    from pipeline.runtime.invocation import get_config
    from pipeline.runtime.malloc import map_large_blocks, two_arenas

    map_large_blocks()
    two_arenas()
    cfg = get_config(ctx)
    overrides: dict[str, object] = {}
    if web_port is not None:
        overrides["web_port"] = web_port
    if store_dir is not None:
        overrides["store_dir"] = store_dir
    if overrides:
        cfg = cfg.replace(worker=overrides)
    # once, before Faust: it needs the number of replicas of its internal topics
    replication = resolve_replication(cfg)
    w = create_app(cfg, name=name, replication=replication)
    configs, partitions = internal_topics(w)
    ensure_topics(cfg, extra=configs, partitions=partitions, replication=replication)
    click.echo(f"jobstream worker: {replication.describe()}; producers acks=all", err=True)
    metrics.start(cfg, "worker")
    runner = Runner(w.app, loglevel=loglevel, quiet=True)
    # Faust's progress spinner sets the root logger to DEBUG (so that every record spins
    # it): every aiokafka and Faust debug call then builds a LogRecord, a fifth of the
    # worker's CPU under load. Without the spinner the root keeps ``loglevel``.
    runner.spinner = None
    # what startup made (modules, the app, the codecs) lives as long as the process:
    # out of every collection
    gc.collect()
    gc.freeze()
    gc.set_threshold(*GC_THRESHOLDS)
    runner.execute_from_commandline()
