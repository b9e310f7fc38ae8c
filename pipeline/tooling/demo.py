"""``jobstream demo``: the whole flow on the local stack, with a synthetic workload.

1. ``stack up`` (a running stack is reused and left running), with the stack's Prometheus
   when it is built (:mod:`pipeline.tooling.demo_prometheus`), the topics;
2. ``jobstream worker`` and ``jobstream sink`` as child processes (logs under
   ``<stack.cache_dir>/demo/``), waited for until their consumer groups are stable;
3. a seeded synthetic Flux + Slurm workload (:mod:`pipeline.tooling.workload`) published to the raw
   topic in real time -- each record when its time comes, ``--speed`` times faster --
   with the edges' producer settings;
4. a live summary: records/s, the run's jobs in ``hpc-jobs`` by state and result, the
   worker's and the sink's consumer lag, dead letters;
5. once every generated job is in the index and done -- the long jobs (``--long-jobs``),
   running since before the workload, running -- (or after ``--timeout``): the counts
   read back by result and cluster, the documents checked against the generator's ground
   truth, what Prometheus saw (the worker and the sink scraped, the worker's records read,
   the alerts firing), and where to point Grafana. Exit 0 when the index matches the
   truth, 1 if not (an alert firing is reported, not failed on).

Then (or on Ctrl-C) it stops the workers it started and the stack services it started,
unless ``--keep``.

A little over 400 lines because the publisher, the monitor and the run are the command's
steps, read in order; none is used elsewhere.
"""

from __future__ import annotations

import errno
import socket
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from contextlib import ExitStack
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import click
from confluent_kafka import KafkaError, Producer
from confluent_kafka.admin import AdminClient
from elasticsearch import Elasticsearch
from rich.console import Console
from rich.live import Live

from pipeline import PACKAGE_DIR
from pipeline.codecs.codec import raw_to_avro
from pipeline.core.model import RawRecord
from pipeline.dashboards.promql import Prometheus
from pipeline.edges.base import raw_codec
from pipeline.kafka.positions import Positions
from pipeline.kafka.producer import producer_config
from pipeline.kafka.topics import canonical_topic, ensure_topics
from pipeline.replay.readback import (
    client,
    job_counts,
    job_documents,
    jobs_alias,
    node_count,
    nodes_alias,
    refresh,
)
from pipeline.runtime.children import Child, free_port, stop_on_signals
from pipeline.runtime.config import Config
from pipeline.runtime.errors import ServiceError
from pipeline.runtime.invocation import get_config
from pipeline.tooling.demo_prometheus import JOBS, observe, with_prometheus
from pipeline.tooling.demo_view import (
    LiveFigures,
    final_report,
    grafana_hint,
    live_view,
    node_report,
    prometheus_report,
)
from pipeline.tooling.verify import Comparison, compare, compare_nodes
from pipeline.tooling.workload import GeneratedRecord, Workload, WorkloadSpec

__all__ = ["DemoOptions", "demo", "parse_clusters", "run_demo"]

#: how long the worker and the sink may take to join their groups
READY_TIMEOUT_S = 180.0
REFRESH_S = 1.0
#: how long the node documents may take to match once every job did
NODES_WAIT_S = 30.0


@dataclass(frozen=True)
class DemoOptions:
    seed: int = 1
    jobs: int = 300
    #: job arrivals per second, all clusters together
    rate: float = 5.0
    time_scale: float = 0.04
    speed: float = 1.0
    flux_clusters: tuple[str, ...] = ("tioga",)
    slurm_clusters: tuple[str, ...] = ("quartz",)
    #: seconds to wait, after the last record, for every job to be indexed and done
    timeout: float = 180.0
    keep: bool = False
    #: the workload's first instant (epoch seconds); None = now
    start: float | None = None
    #: where the children's logs go; None = <stack.cache_dir>/demo/<UTC time>
    logs: Path | None = None
    #: where the dashboards' preview goes; None = <logs>/preview
    preview: Path | None = None
    #: jobs running since 1-2 hours before the workload and still at its end (the
    #: overview's "now" panels: every other job ends before the demo does)
    long_jobs: int = 6
    #: what the edges say of the clusters' nodes: drains, resumes and downs (the overview's
    #: "Nodes" row and the node page), checked against ``Workload.node_truth``
    node_events: bool = True

    def spec(self) -> WorkloadSpec:
        extra = {} if self.start is None else {"start": self.start}
        return WorkloadSpec(seed=self.seed, jobs=self.jobs, rate=self.rate,
                            time_scale=self.time_scale, flux_clusters=self.flux_clusters,
                            slurm_clusters=self.slurm_clusters, long_jobs=self.long_jobs,
                            node_events=self.node_events, **extra)


def parse_clusters(text: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """``flux:tioga,slurm:quartz`` -> (flux clusters, slurm clusters)."""
    flux: list[str] = []
    slurm: list[str] = []
    for item in (p.strip() for p in text.split(",")):
        sched, sep, name = item.partition(":")
        if not sep or not name or sched not in ("flux", "slurm"):
            raise click.BadParameter(f"{item!r}: expected flux:<name> or slurm:<name>",
                                     param_hint="--clusters")
        (flux if sched == "flux" else slurm).append(name)
    if len(set(flux + slurm)) != len(flux + slurm):
        raise click.BadParameter("cluster names must differ", param_hint="--clusters")
    return tuple(flux), tuple(slurm)


# -- publishing ------------------------------------------------------------------------


class RawPublisher:
    """Generated records -> the raw topic, as an edge would send them."""

    def __init__(self, cfg: Config) -> None:
        self.topic = cfg.topics.raw
        self.codec = raw_codec(cfg)
        self.producer = Producer(producer_config(cfg, "jobstream-demo"))
        self.sent = 0
        self.failed = 0
        self.last_error = ""

    def _delivered(self, err: KafkaError | None, _msg: Any) -> None:
        if err is not None:
            self.failed += 1
            self.last_error = f"{err.name()}: {err.str()}"

    def send(self, rec: GeneratedRecord) -> None:
        # received_at is the record's own time, so a replay folds exactly what the live
        # flow folded
        raw = RawRecord(cluster=rec.cluster, scheduler=rec.scheduler,  # type: ignore[arg-type]
                        format=rec.format, received_at=rec.time, payload=rec.payload,
                        key=rec.key)
        value = self.codec.encode(raw_to_avro(raw))
        while True:
            try:
                self.producer.produce(self.topic, value=value, key=rec.key.encode(),
                                      on_delivery=self._delivered)
                break
            except BufferError:
                self.producer.poll(0.1)
        self.sent += 1

    def wait(self, seconds: float) -> None:
        """Serve delivery reports for up to ``seconds``: at least a millisecond when it is
        more than 0. librdkafka waits in whole milliseconds, so a shorter wait would return
        at once, and a loop pacing records (``publish_paced``) would spin until each one
        is due, taking a core from the flow it feeds."""
        self.producer.poll(max(seconds, 0.001) if seconds > 0 else 0.0)

    def flush(self, timeout: float = 60.0) -> None:
        left = self.producer.flush(timeout)
        if left or self.failed:
            raise ServiceError(f"{left + self.failed} raw record(s) not delivered to Kafka "
                               f"({self.last_error or 'timed out'})")


def publish_paced(records: Sequence[GeneratedRecord], publisher: RawPublisher, speed: float,
                  tick: Callable[[], None]) -> None:
    """Send each record when its time comes (``speed`` times faster than generated)."""
    if not records:
        return
    t0, wall0 = records[0].time, time.monotonic()
    for rec in records:
        due = wall0 + (rec.time - t0) / speed
        while (left := due - time.monotonic()) > 0:
            publisher.wait(min(left, 0.2))
            tick()
        publisher.send(rec)
    publisher.wait(0)


# -- watching --------------------------------------------------------------------------


class Monitor:
    """Gathers the live figures every REFRESH_S in a thread of its own."""

    #: of ``ids``, the jobs still running at the workload's end (its long jobs)
    running: int = 0

    def __init__(self, cfg: Config, ids: list[str], records: int,
                 published: Callable[[], int], *, running: int = 0) -> None:
        self.cfg = cfg
        self.ids = ids
        self.running = running
        self.figures = LiveFigures(records=records, jobs=len(ids))
        self._published = published
        self._es = client(cfg, timeout=10.0)
        self._positions = Positions(AdminClient(cfg.librdkafka()))
        app = cfg.worker.app_id
        t = cfg.topics
        self._groups = {"worker": (app, [t.raw, canonical_topic(app)]),
                        "sink": (f"{app}-sink", [t.state, t.events, t.snapshots])}
        self._dlq_start = sum(self._positions.ends([t.dlq]).values())
        self._samples: deque[tuple[float, int]] = deque(maxlen=6)
        self._started = time.monotonic()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="demo-monitor", daemon=True)
        self.phase = ""

    def start(self) -> Monitor:
        self.update()
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=15)

    def _loop(self) -> None:
        while not self._stop.wait(REFRESH_S):
            self.update()

    def update(self) -> LiveFigures:
        now = time.monotonic()
        published = self._published()
        self._samples.append((now, published))
        t_old, n_old = self._samples[0]
        f = LiveFigures(elapsed_s=now - self._started, published=published,
                        records=self.figures.records, jobs=self.figures.jobs,
                        rate=(published - n_old) / (now - t_old) if now > t_old else 0.0,
                        counts=self.figures.counts, lag=dict(self.figures.lag),
                        dead_letters=self.figures.dead_letters, phase=self.phase)
        try:
            f.counts = job_counts(self._es, jobs_alias(self.cfg), self.ids)
            for name, (group, topics) in self._groups.items():
                f.lag[name] = self._positions.lag(group, topics)
            f.dead_letters = (sum(self._positions.ends([self.cfg.topics.dlq]).values())
                              - self._dlq_start)
        except Exception as exc:  # noqa: BLE001 -- shown live; the demo goes on
            f.error = f"{type(exc).__name__}: {exc}"
        self.figures = f
        return f

    @property
    def finished(self) -> bool:
        """Every generated job is in the index, and done (those still running at the
        workload's end: running), and every record published has been through the worker
        and the sink (no lag): a done job still gets a revision when sacct reports its
        usage, seconds after the end, which the truth checks."""
        f = self.figures
        c = f.counts
        return (c.total >= len(self.ids)
                and c.of("state", "done") >= len(self.ids) - self.running
                and c.of("state", "running") >= self.running
                and f.published >= f.records and set(f.lag) >= set(self._groups)
                and all(f.lag[name] == 0 for name in self._groups))


def _port_free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("0.0.0.0", port))  # noqa: S104 -- the worker binds here
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                return False
            raise
    return True


def wait_ready(cfg: Config, children: Sequence[Child], groups: Sequence[str],
               timeout: float = READY_TIMEOUT_S) -> None:
    """Until every group has members and is stable; fails if a child exits meanwhile."""
    admin = AdminClient(cfg.librdkafka())
    deadline = time.monotonic() + timeout
    while True:
        for child in children:
            child.check()
        futures = admin.describe_consumer_groups(list(groups), request_timeout=10)
        states = {}
        for group, future in futures.items():
            try:
                desc = future.result(timeout=15)
                states[group] = (desc.state.name, len(desc.members))
            except Exception as exc:  # noqa: BLE001 -- not there yet
                states[group] = (str(exc), 0)
        if all(state == "STABLE" and members for state, members in states.values()):
            return
        if time.monotonic() > deadline:
            raise ServiceError(f"the workers did not join their consumer groups within "
                               f"{timeout:.0f} s: {states}")
        time.sleep(0.5)


# -- the run ---------------------------------------------------------------------------


def run_demo(cfg: Config, opts: DemoOptions, console: Console) -> int:
    """The whole demo; returns the exit code (0: the index matches the truth)."""
    from pipeline.tooling.stack import ensure_up, status, stop

    started_at = time.monotonic()
    with ExitStack() as cleanup:
        # the stack's Prometheus (when built) scrapes the ports of the config it starts
        # with: the worker's and sink's are set before
        cfg = with_prometheus(cfg, console)
        # what is not running now is ours to stop, even if Ctrl-C comes while it starts
        down = [s.name for s in status(cfg) if not s.running]
        if down and not opts.keep:
            cleanup.callback(lambda: stop(cfg, console=console, services=down))
        info = ensure_up(cfg, console=console)
        cfg = info.client_config(cfg)
        ensure_topics(cfg)
        stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
        logs = opts.logs or Path(cfg.stack.cache_dir).expanduser() / "demo" / stamp
        if not _port_free(cfg.worker.web_port):
            cfg = cfg.replace(worker={"web_port": free_port()})
        workers_started = time.time()
        worker = Child("worker", cfg, ["worker", "--name", "demo-worker"],
                       logs / "worker.log").start()
        sink = Child("sink", cfg, ["sink"], logs / "sink.log").start()
        if not opts.keep:
            cleanup.callback(lambda: _stop_children(console, [worker, sink]))
        console.print(f"worker (pid {worker.pid}) and sink (pid {sink.pid}) started; "
                      f"logs: [cyan]{logs}[/]")
        with console.status("waiting for the worker and the sink to join their groups"):
            wait_ready(cfg, [worker, sink], [cfg.worker.app_id, f"{cfg.worker.app_id}-sink"])

        workload = Workload(opts.spec())
        records = list(workload.records())
        es = client(cfg)
        # a node's document folds every run's events: the truth of this run's nodes holds
        # only where no earlier run wrote them (a fresh index prefix)
        earlier_nodes = node_count(es, nodes_alias(cfg), {t["cluster"] for t in
                                                          workload.node_truth.values()})
        span = records[-1].time - records[0].time if records else 0.0
        console.print(f"workload: seed {opts.seed}, {opts.jobs} jobs on "
                      f"{', '.join(opts.flux_clusters + opts.slurm_clusters)}, "
                      f"{len(records)} raw records over {span:.0f} s"
                      + (f" (published in {span / opts.speed:.0f} s at {opts.speed:g}x)"
                         if opts.speed != 1 else ""))
        publisher = RawPublisher(cfg)
        ids = sorted(workload.truth)
        monitor = Monitor(cfg, ids, len(records), lambda: publisher.sent,
                          running=sum(t["state"] == "running"
                                      for t in workload.truth.values())).start()
        cleanup.callback(monitor.stop)
        title = (f"seed {opts.seed} · {opts.jobs} jobs · "
                 f"{len(opts.flux_clusters) + len(opts.slurm_clusters)} clusters")
        t_run = time.monotonic()
        with Live(live_view(monitor.figures, title), console=console,
                  refresh_per_second=4, transient=False) as live:
            def tick() -> None:
                for child in (worker, sink):
                    child.check()
                live.update(live_view(monitor.figures, title))

            monitor.phase = "publishing"
            publish_paced(records, publisher, opts.speed, tick)
            publisher.flush()
            monitor.phase = "waiting for the last jobs"
            deadline = time.monotonic() + opts.timeout
            while not monitor.finished and time.monotonic() < deadline:
                publisher.wait(0.25)
                tick()
            monitor.phase = "done" if monitor.finished else "timed out"
            monitor.update()
            live.update(live_view(monitor.figures, title))
        wall = time.monotonic() - t_run
        flow_ended = time.time()

        refresh(es, jobs_alias(cfg))
        counts = job_counts(es, jobs_alias(cfg), ids)
        result = compare(workload.truth, job_documents(es, jobs_alias(cfg), ids))
        nodes = node_result(es, cfg, workload.node_truth) \
            if workload.node_truth and not earlier_nodes else None
        console.print()
        console.print(final_report(counts, workload.truth, result, wall))
        if nodes is not None:
            console.print(node_report(nodes))
        elif earlier_nodes:
            console.print(f"[dim]node documents not checked: the index held {earlier_nodes} "
                          "of these clusters' nodes before this run, whose events fold into "
                          "them too (a fresh elasticsearch.index_prefix checks them)[/]")
        if cfg.stack.prometheus and cfg.metrics.prometheus_url:
            with console.status("asking Prometheus what it saw"):
                seen = observe(Prometheus(cfg.metrics.prometheus_url, timeout=10.0), cfg,
                               workers_started, flow_ended)
            console.print(prometheus_report(seen, JOBS))
        console.print()
        console.print(grafana_hint(cfg.elasticsearch.url, cfg.elasticsearch.index_prefix,
                                   _source_tree()))
        write_preview(es, cfg, workload, records, opts.preview or logs / "preview", console)
        if opts.keep:
            console.print(f"[bold]--keep[/]: worker (pid {worker.pid}), sink (pid {sink.pid}) "
                          "and the stack are left running; `jobstream stack down` stops the "
                          "stack")
        else:
            console.print("stopping what the demo started (--keep leaves it running)")
        console.print(f"[dim]total {time.monotonic() - started_at:.0f} s[/]")
        return 0 if result.ok and (nodes is None or nodes.ok) else 1


def node_result(es: Elasticsearch, cfg: Config, truth: dict[str, dict[str, Any]],
                wait_s: float = NODES_WAIT_S) -> Comparison:
    """The node documents against the workload's node truth, read again for up to
    ``wait_s`` until they match: the demo waited for the jobs, and the last node records
    may still be between the worker and the index."""
    deadline = time.monotonic() + wait_s
    while True:
        refresh(es, nodes_alias(cfg))
        result = compare_nodes(truth, job_documents(es, nodes_alias(cfg)))
        if result.ok or time.monotonic() >= deadline:
            return result
        time.sleep(REFRESH_S)


def write_preview(es: Elasticsearch, cfg: Config, workload: Workload,
                  records: Sequence[GeneratedRecord], out: Path, console: Console) -> None:
    """The dashboards' preview of what the demo indexed: from a minute before its first
    record to now, or to a minute after its last where the workload's clock ran ahead
    (``--speed``) or was set in the past (``--start``); the job page on a completed job,
    the node page on a node drained or down at the end."""
    # matplotlib takes a while to import: only the demo's end pays for it
    from pipeline.dashboards import health, job, node, overview
    from pipeline.dashboards.check import Checker
    from pipeline.dashboards.grafana_time import TimeRange
    from pipeline.dashboards.preview.previewer import Previewer

    if not records:
        return
    end_ms = int(max(time.time(), records[-1].time + 60) * 1000)
    window = TimeRange(int((records[0].time - 60) * 1000), end_ms)
    finished = next((t for t in workload.truth.values() if t.get("result") == "completed"),
                    None)
    variables = {"job_id": str(finished["job_id"])} if finished else {}
    # the node page on a node that took no work at the end (its drain beside its jobs),
    # of any cluster: a variable set here is set on every page, the overview's too
    bad = next((n for n in workload.node_truth.values()
                if n.get("state") in ("drained", "draining", "down")), None)
    if bad is not None:
        variables["node"] = str(bad["node"])
    checker = Checker(es, prefix=cfg.elasticsearch.index_prefix, now_ms=end_ms,
                      variables=variables)
    with console.status("drawing the dashboards' preview"):
        boards = Previewer(checker, out).preview(
            [overview.build(), job.build(), node.build(), health.build()], window)
    console.print(f"preview of the dashboards: [cyan]{out / 'index.html'}[/]")
    for b in boards:
        console.print(f"  {b.title}: {b.count('ok')} drawn, {b.count('empty')} without data, "
                      f"{b.count('placeholder')} placeholders")


def _stop_children(console: Console, children: Sequence[Child]) -> None:
    for child in children:
        code = child.stop()
        if code not in (0, None, -15):
            console.print(f"[yellow]{child.name} exited with {code}; see {child.log}")


def _source_tree() -> Path | None:
    """The source checkout holding ``grafana/``, when jobstream runs from one."""
    root = PACKAGE_DIR.parent
    return root if (root / "grafana" / "provisioning").is_dir() else None


@click.command("demo")
@click.option("--seed", type=int, default=1, show_default=True, help="Workload seed.")
@click.option("--jobs", type=click.IntRange(1), default=None,
              help="Jobs to generate [default: rate x duration].")
@click.option("--rate", type=click.FloatRange(min=0.01), default=5.0, show_default=True,
              help="Job arrivals per second, all clusters together.")
@click.option("--duration", type=click.FloatRange(min=1), default=60.0, show_default=True,
              help="Seconds of job arrivals (when --jobs is not given).")
@click.option("--time-scale", type=click.FloatRange(min=0.001), default=0.04,
              show_default=True, help="Scales every wait and run time (0.04: a 15-minute "
                                      "time limit becomes 36 s).")
@click.option("--speed", type=click.FloatRange(min=0.01), default=1.0, show_default=True,
              help="Publish this many times faster than real time.")
@click.option("--clusters", default="flux:tioga,slurm:quartz", show_default=True,
              help="Clusters as scheduler:name, comma separated.")
@click.option("--long-jobs", type=click.IntRange(0), default=DemoOptions.long_jobs,
              show_default=True,
              help="Jobs running since 1-2 hours before the workload and still at its end "
                   "(idle, near their memory limit, idle GPUs, busy), for the overview's "
                   "running-jobs panels.")
@click.option("--timeout", type=click.FloatRange(min=1), default=180.0, show_default=True,
              help="Seconds to wait after the last record for every job to be indexed.")
@click.option("--start", type=float, default=None,
              help="The workload's first instant, epoch seconds [default: now]; with the "
                   "same seed and options, the same workload.")
@click.option("--logs", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Directory for the worker's and sink's logs "
                   "[default: <stack.cache_dir>/demo/<time>].")
@click.option("--preview", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Directory for the dashboards' preview drawn at the end "
                   "[default: <logs>/preview].")
@click.option("--keep", is_flag=True,
              help="Leave the worker, the sink and the stack running at the end (and on "
                   "Ctrl-C), e.g. for Grafana.")
@click.pass_context
def demo(ctx: click.Context, seed: int, jobs: int | None, rate: float, duration: float,
         time_scale: float, speed: float, clusters: str, long_jobs: int, timeout: float,
         start: float | None, logs: Path | None, preview: Path | None, keep: bool) -> None:
    """The whole flow on the local stack: a synthetic Flux + Slurm workload, live.

    Starts the stack (or reuses a running one), the worker and the sink, publishes the
    workload in real time and shows what reaches Elasticsearch; at the end, checks every
    job document against the generator's ground truth (exit 1 if any differs) and says
    where to point Grafana. Ctrl-C stops what it started.
    """
    flux, slurm = parse_clusters(clusters)
    opts = DemoOptions(seed=seed, jobs=jobs if jobs is not None else max(round(rate * duration),
                                                                         1),
                       rate=rate, time_scale=time_scale, speed=speed, flux_clusters=flux,
                       slurm_clusters=slurm, timeout=timeout, keep=keep, start=start,
                       logs=logs, preview=preview, long_jobs=long_jobs)
    stop_on_signals()
    ctx.exit(run_demo(get_config(ctx), opts, Console()))
