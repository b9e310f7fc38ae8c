"""``jobstream replay``: reprocess the raw topic into a new index generation, then swap.

The replay runs the *same* code as the live flow, as child processes (``jobstream worker``
and ``jobstream sink``, configured through ``JOBSTREAM_*`` variables): no second
implementation of the agents to drift, and a crash of the replay cannot touch the live
processes. Child processes rather than an in-process Faust app because Faust owns its
event loop and signal handling, and the sink loop blocks; two children are also what an
operator would run by hand.

What the replay of generation ``vN`` uses, beside the live flow (which keeps running):

* the raw topic, read by a worker of its own app id ``<worker.app_id>-replay-vN`` (its own
  consumer group, state table, RocksDB directory and canonical topic);
* its own output topics ``<topic>.replay-vN`` (events, job states, snapshots, node
  states and events, DLQ), so that nothing the live sink or other consumers read is written twice;
* a sink writing generation ``vN`` (``<prefix>hpc-jobs-vN-*``, ...,
  ``<prefix>hpc-nodes-vN-current``) from those topics.

It starts from the beginning of the raw topic, or from ``--since`` (the first offset of
each partition at or after that time). It has *caught up* when (1) the replay worker has
committed every raw partition up to its end offset at the start of the replay, then
(2) its canonical topic up to the end seen at that moment, then (3) the replay sink its
output topics up to the ends seen after (2): Faust flushes its producer before it
commits, so each stage's end is complete when the stage before it has committed.

With ``--swap`` it then moves the aliases to ``vN`` atomically and keeps its worker and sink
running for a while longer (the sinks of the live flow notice the move within
``FOLLOW_INTERVAL_S``; until then what they write still goes to the old generation, and
the replay's own sink writes it into ``vN``). An interrupted replay resumes where it was
(its groups' commits and state are kept).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Mapping
from contextlib import ExitStack
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import click
from confluent_kafka.admin import AdminClient
from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
)

from pipeline.kafka.positions import TP, Positions
from pipeline.kafka.topics import canonical_topic, ensure_topics
from pipeline.replay.readback import client, job_counts, jobs_alias, jobs_pattern, refresh
from pipeline.runtime.children import Child, free_port, stop_on_signals
from pipeline.runtime.config import Config
from pipeline.runtime.errors import ConfigError, ServiceError
from pipeline.runtime.invocation import get_config
from pipeline.sink.cli import generation_option
from pipeline.sink.names import Family, check_generation, index_pattern
from pipeline.sink.runner import FOLLOW_INTERVAL_S
from pipeline.sink.templates import live_generation, swap_aliases

__all__ = ["ReplayPlan", "advanced", "reached", "replay", "replay_config", "run_replay"]

#: after a swap, how long the replay keeps writing (the live sinks move over meanwhile)
HANDOVER_S = FOLLOW_INTERVAL_S + 10.0
POLL_S = 1.0


def replay_config(cfg: Config, generation: str) -> Config:
    """``cfg`` as the replay of ``generation`` sees it: own app id, store, outputs."""
    suffix = f"replay-{check_generation(generation)}"
    app = f"{cfg.worker.app_id}-{suffix}"
    base_store = cfg.worker.store_dir or str(Path(cfg.stack.cache_dir) / "worker-store")
    t = cfg.topics
    return cfg.replace(
        worker={"app_id": app, "store_dir": f"{base_store}-{suffix}", "web_port": free_port()},
        # the live worker and sink hold the configured metrics ports
        metrics={"worker_port": 0, "sink_port": 0},
        # every topic but the raw one it reads: an output topic added later is the
        # replay's own too
        topics={f.name: f"{getattr(t, f.name)}.{suffix}" for f in dataclasses.fields(t)
                if f.name != "raw"})


def advanced(starts: Mapping[TP, int], targets: Mapping[TP, int],
             committed: Mapping[TP, int]) -> int:
    """Records between ``starts`` and ``targets`` already committed (uncommitted = none)."""
    done = 0
    for tp, target in targets.items():
        begin = starts.get(tp, 0)
        pos = committed.get(tp, -1)
        if pos >= 0:
            done += max(min(pos, target) - begin, 0)
    return done


def reached(targets: Mapping[TP, int], committed: Mapping[TP, int],
            starts: Mapping[TP, int] | None = None) -> bool:
    """Every partition committed up to its target (an empty one needs no commit)."""
    for tp, target in targets.items():
        pos = committed.get(tp, -1)
        if pos < 0:
            pos = (starts or {}).get(tp, 0)
        if pos < target:
            return False
    return True


@dataclass(frozen=True)
class ReplayPlan:
    generation: str
    #: the replay's configuration (replay_config)
    cfg: Config
    #: where the worker starts in each raw partition
    starts: dict[TP, int]
    #: raw end offsets when the replay started
    targets: dict[TP, int]

    @property
    def total(self) -> int:
        return sum(max(t - self.starts.get(tp, 0), 0) for tp, t in self.targets.items())


def plan(cfg: Config, generation: str, since_ms: int | None, positions: Positions
         ) -> ReplayPlan:
    """Decide where the replay starts and ends; set the worker group's start for ``since``."""
    rcfg = replay_config(cfg, generation)
    raw = cfg.topics.raw
    if not positions.partitions([raw]):
        raise ServiceError(f"the raw topic {raw} does not exist: nothing to replay")
    targets = positions.ends([raw])
    committed = positions.committed_for(rcfg.worker.app_id, [raw])
    resumed = any(off >= 0 for off in committed.values())
    if since_ms is not None:
        if resumed:
            raise ConfigError(f"a replay into {generation} was started before (group "
                              f"{rcfg.worker.app_id} has offsets): run it again without "
                              f"--since to resume it, or replay into a new generation")
        starts = positions.at_time([raw], since_ms)
        positions.commit(rcfg.worker.app_id, starts)
    else:
        starts = positions.starts([raw])
    return ReplayPlan(generation, rcfg, starts, targets)


class _Stage:
    """One "committed up to the end" condition whose ends are fixed when it begins."""

    def __init__(self, group: str, topics: list[str], positions: Positions) -> None:
        self.group = group
        self.ends = positions.ends(topics)
        self.starts = positions.starts(topics)
        self.topics = topics

    def done(self, positions: Positions) -> bool:
        return reached(self.ends, positions.committed(self.group, list(self.ends)),
                       self.starts)


def run_replay(cfg: Config, generation: str, *, since_ms: int | None, swap: bool,
               console: Console, logs: Path | None = None) -> int:
    prefix = cfg.elasticsearch.index_prefix
    es = client(cfg)
    live = live_generation(es, prefix)
    if live == generation:
        raise ConfigError(f"generation {generation} is the live one (the aliases point at "
                          f"it); replay into a new generation, e.g. v{int(generation[1:]) + 1}")
    positions = Positions(AdminClient(cfg.librdkafka()))
    p = plan(cfg, generation, since_ms, positions)
    rcfg = p.cfg
    ensure_topics(rcfg)
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    logs = logs or Path(cfg.stack.cache_dir).expanduser() / "replay" / f"{generation}-{stamp}"
    started = time.monotonic()
    with ExitStack() as cleanup:
        worker = Child("worker", rcfg, ["worker", "--name", f"replay-{generation}"],
                       logs / "worker.log").start()
        cleanup.callback(worker.stop)
        sink = Child("sink", rcfg, ["sink", "--generation", generation], logs / "sink.log"
                     ).start()
        cleanup.callback(sink.stop)
        console.print(f"replaying {cfg.topics.raw} ({p.total} records"
                      + (f" since {datetime.fromtimestamp(since_ms / 1000, UTC):%Y-%m-%d %H:%M:%S}"
                         " UTC" if since_ms is not None else "")
                      + f") into generation {generation}; live generation: {live or 'none'}")
        console.print(f"worker (pid {worker.pid}, group {rcfg.worker.app_id}) and sink "
                      f"(pid {sink.pid}); logs: [cyan]{logs}[/]")
        _follow(p, positions, [worker, sink], console)
        refresh(es, jobs_pattern(cfg, generation))
        new = job_counts(es, jobs_pattern(cfg, generation))
        old = job_counts(es, jobs_alias(cfg)) if live else None
        console.print(f"caught up in {time.monotonic() - started:.0f} s: {new.total} job "
                      f"documents in {jobs_pattern(cfg, generation)}"
                      + (f" ({old.total} behind the alias {jobs_alias(cfg)}, generation {live})"
                         if old is not None else ""))
        if swap:
            if live is None:
                console.print(f"no aliases yet: generation {generation} carries them already")
            else:
                swap_aliases(es, prefix, live, generation)
                console.print(f"[green]✓[/] aliases moved from {live} to {generation}: "
                              + ", ".join(index_pattern(prefix, f, generation) for f in Family))
                with console.status(f"handing over to the live sinks ({HANDOVER_S:.0f} s)"):
                    _wait(HANDOVER_S, [worker, sink])
        elif live is not None:
            console.print(f"the aliases still point at {live}; `jobstream replay --generation "
                          f"{generation} --swap` catches up again and moves them")
    return 0


def _wait(seconds: float, children: list[Child]) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        for child in children:
            child.check()
        time.sleep(min(POLL_S, max(deadline - time.monotonic(), 0.0)))


def _follow(p: ReplayPlan, positions: Positions, children: list[Child],
            console: Console) -> None:
    """Show progress until the replay has caught up (stages 1-3 of the module doc)."""
    rcfg = p.cfg
    group = rcfg.worker.app_id
    columns = (TextColumn("{task.description:<10}"), BarColumn(), MofNCompleteColumn(),
               TextColumn("{task.fields[rate]:>9}"), TimeElapsedColumn())
    with Progress(*columns, console=console, transient=False) as progress:
        task: TaskID = progress.add_task("processed", total=p.total, rate="")
        samples: list[tuple[float, int]] = []
        while True:
            for child in children:
                child.check()
            done = advanced(p.starts, p.targets, positions.committed(group, list(p.targets)))
            now = time.monotonic()
            samples = [*samples[-9:], (now, done)]
            rate = ((done - samples[0][1]) / (now - samples[0][0])
                    if now > samples[0][0] else 0.0)
            progress.update(task, completed=done, rate=f"{rate:,.0f}/s")
            if reached(p.targets, positions.committed(group, list(p.targets)), p.starts):
                break
            time.sleep(POLL_S)
        progress.update(task, completed=p.total)
        stage = _Stage(group, [canonical_topic(group)], positions)
        while not stage.done(positions):
            for child in children:
                child.check()
            time.sleep(POLL_S)
        t = rcfg.topics
        out = _Stage(f"{group}-sink", [t.state, t.events, t.snapshots, t.nodes,
                                          t.node_events], positions)
        total_out = sum(out.ends.values()) - sum(out.starts.values())
        index_task = progress.add_task("indexed", total=max(total_out, 1), rate="")
        while True:
            for child in children:
                child.check()
            committed = positions.committed(out.group, list(out.ends))
            progress.update(index_task, completed=advanced(out.starts, out.ends, committed))
            if reached(out.ends, committed, out.starts):
                break
            time.sleep(POLL_S)
        progress.update(index_task, completed=max(total_out, 1))


def _since(_: click.Context, __: click.Parameter, value: str | None) -> int | None:
    if value is None:
        return None
    try:
        when = datetime.fromisoformat(value)
    except ValueError as exc:
        raise click.BadParameter(f"{value!r} is not an ISO time (2026-11-01T00:00:00Z)") \
            from exc
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return int(when.timestamp() * 1000)


@click.command("replay")
@click.option("--generation", required=True, callback=generation_option,
              help="The new index generation to write (v2, v3, ...).")
@click.option("--since", default=None, callback=_since, metavar="ISO-TIME",
              help="Start at the first raw record of this time (UTC unless it says) "
                   "instead of the beginning of the raw topic.")
@click.option("--swap", is_flag=True,
              help="Move the aliases to the new generation once it has caught up.")
@click.option("--logs", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Directory for the replay worker's and sink's logs "
                   "[default: <stack.cache_dir>/replay/<generation>-<time>].")
@click.pass_context
def replay(ctx: click.Context, generation: str, since: int | None, swap: bool,
           logs: Path | None) -> None:
    """Reprocess the raw topic into a new index generation; --swap moves the aliases.

    The same agents and sink as the live flow run as a separate worker and sink (own
    consumer groups, state and topics ``<topic>.replay-<generation>``) while the live flow
    goes on. Progress shows raw records processed against the raw topic's end at the
    start; "caught up" means all of those processed and indexed. Ctrl-C stops the replay;
    running it again resumes.
    """
    stop_on_signals()
    ctx.exit(run_replay(get_config(ctx), generation, since_ms=since, swap=swap,
                        console=Console(), logs=logs))
