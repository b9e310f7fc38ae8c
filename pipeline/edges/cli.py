"""``jobstream edge flux | slurm | node | status | install-hook | install-lua``.

The same group runs standalone as ``python -m pipeline.edges ...`` (:mod:`pipeline.edges.__main__`),
which imports nothing of the other areas: the daemons stay small.
"""

from __future__ import annotations

import json
import logging
import signal
import threading
import time
from pathlib import Path
from types import FrameType

import click

from pipeline.edges.spool import spool_dir, spool_stats
from pipeline.runtime import metrics
from pipeline.runtime.invocation import get_config
from pipeline.runtime.malloc import one_arena

__all__ = ["edge"]

logger = logging.getLogger(__name__)


def _stop_on_signals() -> threading.Event:
    stop = threading.Event()

    def handler(signum: int, frame: FrameType | None) -> None:
        logger.info("signal %d: stopping", signum)
        stop.set()

    signal.signal(signal.SIGTERM, handler)
    signal.signal(signal.SIGINT, handler)
    return stop


@click.group("edge")
def edge() -> None:
    """Producer edges: scheduler records -> durable spool -> hpc.jobs.raw."""


@edge.command("flux")
@click.option("--recorded", "recorded", multiple=True, type=click.Path(exists=True,
              dir_okay=False), help="Replay recorded flux-journal JSON lines instead of a "
              "live instance (repeatable; played in order). Exits when all are delivered.")
@click.option("--recorded-resources", "recorded_resources", multiple=True,
              type=click.Path(exists=True, dir_okay=False),
              help="Replay recorded resource.journal JSON lines beside --recorded "
              "(repeatable). With either option only recordings play: a journal given none "
              "is not followed.")
@click.option("--pace", type=float, default=None,
              help="Replay at this many times the recorded speed.")
@click.option("--interval", type=float, default=None,
              help="Replay with this many seconds between responses.")
@click.option("--disconnect-after", "disconnect_after", multiple=True, type=int, hidden=True,
              help="Break recorded connection k after N responses (tests).")
@click.option("--uri", default=None, help="Flux URI (default: edge.flux.uri, then FLUX_URI).")
@click.pass_context
def edge_flux(ctx: click.Context, recorded: tuple[str, ...],
              recorded_resources: tuple[str, ...], pace: float | None,
              interval: float | None, disconnect_after: tuple[int, ...],
              uri: str | None) -> None:
    """Publish the Flux job-manager journal, and the resource journal unless
    edge.flux.resource_journal is false (run as the instance owner)."""
    from pipeline.edges.base import EdgeRuntime
    from pipeline.edges.flux import (
        FluxEdge,
        FluxJournalSource,
        JournalSource,
        RecordedJournalSource,
    )
    from pipeline.edges.flux_resource import FluxResourceEdge, FluxResourceSource

    cfg = get_config(ctx)
    one_arena()
    metrics.start(cfg, "edge flux")
    source: JournalSource
    resource_source: JournalSource | None = None
    if recorded or recorded_resources:
        # an empty recording plays nothing: the journal without one is not followed
        source = RecordedJournalSource(recorded, pace=pace, interval=interval,
                                       disconnect_after=disconnect_after)
        if recorded_resources:
            resource_source = RecordedJournalSource(recorded_resources, pace=pace,
                                                    interval=interval)
    else:
        source = FluxJournalSource(uri or cfg.edge.flux.uri)
        if cfg.edge.flux.resource_journal:
            resource_source = FluxResourceSource(uri or cfg.edge.flux.uri)
    stop = _stop_on_signals()
    runtime = EdgeRuntime(cfg, "flux")
    resources = ([FluxResourceEdge(cfg, resource_source, runtime=runtime)]
                 if resource_source is not None else [])
    flux_edge = FluxEdge(cfg, source, runtime=runtime, also=resources)
    journals = [name for name, on in (("job journal", recorded or not recorded_resources),
                                      ("resource journal", resources)) if on]
    click.echo(f"jobstream edge flux: {' and '.join(journals)}, spool {runtime.spool.path}, "
               f"topic {cfg.topics.raw}", err=True)
    flux_edge.run(stop)
    click.echo(f"jobstream edge flux: {flux_edge.published} published, "
               f"{flux_edge.skipped} already delivered", err=True)
    for follower in resources:
        click.echo(f"jobstream edge flux: {follower.what}: {follower.published} published, "
                   f"{follower.skipped} already delivered", err=True)


@edge.command("slurm")
@click.pass_context
def edge_slurm(ctx: click.Context) -> None:
    """Run the Slurm sources enabled in [edge.slurm] until SIGTERM."""
    from pipeline.edges.slurm import SlurmEdge

    cfg = get_config(ctx)
    one_arena()
    metrics.start(cfg, "edge slurm")
    stop = _stop_on_signals()
    slurm_edge = SlurmEdge(cfg).start()
    try:
        parts = [f"spool {slurm_edge.runtime.spool.path}"]
        if slurm_edge.receiver:
            parts.append(f"JobCompLoc={slurm_edge.receiver.url}")
        if slurm_edge.hooks:
            parts.append(f"hook socket {slurm_edge.hook_socket}")
        if slurm_edge.poller:
            parts.append(f"polling every {cfg.edge.slurm.poll_interval_s:g} s")
        if slurm_edge.bridge:
            parts.append(f"bridging topics {', '.join(slurm_edge.bridge.topics)}")
        click.echo("jobstream edge slurm: ready: " + "; ".join(parts), err=True)
        stop.wait()
    finally:
        slurm_edge.stop()


@edge.command("node")
@click.option("--once", is_flag=True,
              help="Sample once, wait for Kafka to confirm the records, and exit.")
@click.option("--print", "print_only", is_flag=True,
              help="With --once: print the payloads as JSON lines instead (no spool, no "
                   "Kafka).")
@click.option("--interval", type=float, default=None,
              help="Seconds between samples [default: edge.node.interval_s].")
@click.option("--timeout", type=float, default=60.0, show_default=True,
              help="With --once: how long to wait for Kafka.")
@click.pass_context
def edge_node(ctx: click.Context, once: bool, print_only: bool, interval: float | None,
              timeout: float) -> None:
    """Sample the usage of the jobs on this compute node until SIGTERM (as root, for
    every user's processes; see docs/node.md)."""
    from pipeline.edges.base import EdgeRuntime
    from pipeline.edges.node.daemon import NodeEdge, build_sampler, print_payloads
    from pipeline.runtime.errors import ServiceError

    if print_only and not once:
        raise click.UsageError("--print goes with --once")
    if interval is not None and not interval > 0:
        raise click.UsageError("--interval: seconds, over 0")
    cfg = get_config(ctx)
    sampler = build_sampler(cfg)
    if print_only:
        print_payloads(sampler, click.echo)
        return
    one_arena()
    node_edge = NodeEdge(cfg, sampler, EdgeRuntime(cfg, "node"), interval_s=interval)
    if once:
        payloads = node_edge.sample_once()
        waiting = node_edge.deliver(timeout)
        if waiting:
            raise ServiceError(f"{waiting} record(s) not confirmed by Kafka within "
                               f"{timeout:g} s; they wait in {node_edge.runtime.spool.path}")
        click.echo(f"jobstream edge node: {len(payloads)} sample(s) delivered", err=True)
        return
    metrics.start(cfg, "edge node", port=cfg.edge.node.metrics_port, bind="127.0.0.1")
    stop = _stop_on_signals()
    click.echo(f"jobstream edge node: node {sampler.node}, every "
               f"{node_edge.interval_s:g} s, spool {node_edge.runtime.spool.path}, "
               f"topic {cfg.topics.raw}", err=True)
    node_edge.run(stop)
    click.echo(f"jobstream edge node: {node_edge.published} sample(s) spooled in "
               f"{node_edge.intervals} interval(s)", err=True)


def _age(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    if seconds < 120:
        return f"{seconds:.1f} s"
    if seconds < 7200:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.1f} h"


@edge.command("status")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
@click.pass_context
def edge_status(ctx: click.Context, as_json: bool) -> None:
    """Spool depth and oldest record age of every edge spool."""
    cfg = get_config(ctx)
    directory = spool_dir(cfg)
    stats = spool_stats(directory) if directory.is_dir() else []
    if as_json:
        click.echo(json.dumps([{
            "spool": s.name, "path": s.path, "depth": s.depth, "oldest_age_s": s.oldest_age_s,
            "bytes": s.bytes, "quarantined": s.quarantined, "meta": s.meta,
        } for s in stats], indent=2))
        return
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"edge spools in {directory}")
    for col in ("spool", "depth", "oldest record", "bytes", "quarantined", "marks"):
        table.add_column(col, justify="right" if col in ("depth", "bytes") else "left")
    for s in stats:
        marks = ", ".join(f"{k}={_mark(v)}" for k, v in sorted(s.meta.items()))
        table.add_row(s.name, str(s.depth), _age(s.oldest_age_s), str(s.bytes),
                      str(s.quarantined), marks or "-")
    if not stats:
        click.echo(f"no edge spools in {directory}")
        return
    Console().print(table)


def _mark(value: str) -> str:
    try:
        ts = float(value)
    except ValueError:
        return value
    if not ts > 0:  # NaN too
        return value
    try:
        return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(ts))
    except (OverflowError, OSError, ValueError):  # past what the C library's time_t holds
        return value


@edge.command("install-hook")
@click.argument("dest", type=click.Path(dir_okay=False))
@click.option("--timeout", type=float, default=0.5, show_default=True,
              help="Seconds the hook waits for the edge before it drops a file.")
@click.pass_context
def edge_install_hook(ctx: click.Context, dest: str, timeout: float) -> None:
    """Write the PrologSlurmctld/EpilogSlurmctld hook script with this config's paths."""
    from pipeline.edges.slurm.hooks import hook_paths, install_hook

    cfg = get_config(ctx)
    path = install_hook(cfg, Path(dest), timeout=timeout)
    sock, drop = hook_paths(cfg)
    click.echo(f"installed {path} (socket {sock}, drop directory {drop}); in slurm.conf:\n"
               f"  PrologSlurmctld={path}\n  EpilogSlurmctld={path}")
    click.echo("the lua plugins (submissions with their job id, changes of queued jobs, "
               "refused submissions): jobstream edge install-lua <slurm.conf's directory>")


@edge.command("install-lua")
@click.argument("dest_dir", type=click.Path(file_okay=False))
@click.option("--site-policy", type=click.Path(dir_okay=False), default=None,
              help="The site's own job_submit.lua, renamed, which ours calls "
                   "[default: DEST_DIR/job_submit.site.lua].")
@click.pass_context
def edge_install_lua(ctx: click.Context, dest_dir: str, site_policy: str | None) -> None:
    """Write job_submit.lua and cli_filter.lua, with this config's submit spool, into
    slurm.conf's directory (on slurmctld's host and on every submit host)."""
    from pipeline.edges.slurm.hooks import LUA_SCRIPTS, install_lua
    from pipeline.edges.slurm.submit import submit_spool_path

    cfg = get_config(ctx)
    spool = submit_spool_path(cfg)
    paths = install_lua(spool, Path(dest_dir), site_policy=site_policy)
    lines = "\n".join(f"  {LUA_SCRIPTS[p.name]}" for p in paths if p.name in LUA_SCRIPTS)
    click.echo(f"installed {', '.join(str(p) for p in paths)} (submit spool {spool}); "
               f"in slurm.conf:\n{lines}\nscontrol reconfigure (slurmctld) loads "
               "job_submit.lua; the clients read cli_filter.lua at each command")
