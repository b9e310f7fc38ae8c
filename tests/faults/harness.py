"""The fault-injection harness: a private stack, the whole flow as real processes, a
workload with ground truth, and the final check of Elasticsearch against that truth.

A scenario builds a :class:`Flow` (its own topics, indices, consumer groups and state
directories on the private stack), starts ``jobstream worker`` and ``jobstream sink`` as
subprocesses, publishes a seeded :class:`~pipeline.tooling.workload.Workload` through a real edge
runtime (durable spool + drainer, the code every producer edge runs), injects its fault,
waits until everything published is committed by every stage, and :meth:`Flow.verify`
reads Elasticsearch back (:func:`judge`):

* every generated job has exactly one document, and it equals, in every field, the
  document of the offline fold of the same records (as the sink indexes it), which itself
  matches the workload's truth: a record processed twice moves ``revision``,
  ``requeue_count``, ``exceptions`` or a time, and shows;
* the events indices hold exactly the event ids the generator says its records hold
  (:meth:`~pipeline.tooling.workload.Workload.event_ids`, not what the parsers make of
  them: an event a parser drops is lost), each once.

A scenario also shows that its fault bit: a kill landed while its victim had records it
had not committed (:meth:`Flow.kill`), a frozen worker was evicted, a stopped broker made
the edge's spool grow.

The private stack (Kafka and Elasticsearch of the local stack's distributions on free
ports, with their own run directory) is what scenarios stop and start: the shared stack
other tests use is never touched.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import wait
from pathlib import Path
from typing import IO, Any
from wsgiref.simple_server import WSGIServer

from confluent_kafka import Consumer, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, ConsumerGroupDescription
from elasticsearch import ApiError, Elasticsearch, helpers
from topic_reads import read_topic

from agents.canonical import decode_item
from pipeline.core.nodes import NodeEvent
from pipeline.edges.base import EdgeRuntime
from pipeline.kafka.positions import TP, Positions, group_lag
from pipeline.kafka.topics import canonical_topic, ensure_topics
from pipeline.replay.readback import client, job_documents, jobs_alias, not_yet
from pipeline.runtime import metrics as run_metrics
from pipeline.runtime.children import config_env, free_port, free_port_block, log_tail
from pipeline.runtime.config import Config
from pipeline.sink.names import Family, alias_name
from pipeline.tooling.bench.feed import expected_documents, feed_of, raw_record
from pipeline.tooling.bench.flow import check_documents
from pipeline.tooling.stack import broker_address, kafka_nodes, service, start_service, stop_service
from pipeline.tooling.verify import compare
from pipeline.tooling.workload import EventParts, GeneratedRecord, Workload, WorkloadSpec

__all__ = ["GROUPS_WAIT_S", "RESULTS", "STEADY_RATE", "UNCOMPARED_FIELDS",
           "WORKER_SESSION_TIMEOUT_S", "DepthWatch", "Flow", "Kill", "Proc", "Publisher",
           "Reference", "Result", "all_in_sync", "busiest_broker", "coordinator",
           "describe_group", "describe_groups", "judge", "leaders", "member_ids",
           "private_stack", "record", "reference", "replication_factors", "spec",
           "wait_until", "write_table"]

#: Guard against a hang only; every wait ends on its condition long before.
GUARD_S = 420.0
#: The workload's first instant: fixed, so a scenario's records are the same every run.
WORKLOAD_START = 1_780_000_000.0  # 2026-05-28T20:26:40Z
#: Records per second the edge sends in steady state.
STEADY_RATE = 100.0

# A killed consumer stays in its group until its session times out; short sessions let a
# restarted worker or sink get its partitions back in seconds instead of a minute.
WORKER_SESSION_TIMEOUT_S = 10.0
SINK_PROPERTIES = "session.timeout.ms=6000\nheartbeat.interval.ms=500\n"

#: librdkafka logs of the harness's own admin clients (every refused connection while a
#: scenario has Kafka down) are noise
QUIET = logging.getLogger("faults.kafka")
QUIET.addHandler(logging.NullHandler())
QUIET.propagate = False

#: how long a look at consumer groups (descriptions, commits) waits for its answer
GROUPS_WAIT_S = 10.0
#: librdkafka's own deadline for a group description, far past GROUPS_WAIT_S: the client
#: is gone before any of its requests expires. A request to a group's coordinator that
#: expires while the coordinator is unknown or down stays queued in its client, which
#: sends it once the coordinator is up and then reads state it already freed: the whole
#: process aborts (rd_kafka_enq_once_del_source_return: Assertion 'eonce->refcnt > 0').
#: A broker killed or restarted is what brings the coordinator up again.
_GROUPS_REQUEST_TIMEOUT_S = 120.0


def spec(seed: int, jobs: int = 240, *, slurm: bool = True) -> WorkloadSpec:
    """A scenario's workload: Flux and Slurm jobs (about 10 raw records and 6 node samples
    a job). The samples come every 2 minutes of the jobs' time, not the node edge's 30 s:
    every running job still has its first, middle and final ones, at 40 % of the records
    instead of 55 %."""
    return WorkloadSpec(seed=seed, jobs=jobs, rate=5.0, time_scale=0.05,
                        flux_clusters=("flux-a",),
                        slurm_clusters=("slurm-b",) if slurm else (), start=WORKLOAD_START,
                        usage_interval_s=120.0)


def wait_until(what: str, condition: Callable[[], bool], *, guard_s: float = GUARD_S,
               poll_s: float = 0.25, alive: Sequence[Proc] = ()) -> float:
    """Wait for ``condition()``; the seconds it took. Fails if a process in ``alive`` exits
    or the hang guard expires."""
    t0 = time.monotonic()
    while not condition():
        for proc in alive:
            proc.check()
        if time.monotonic() - t0 > guard_s:
            logs = "\n".join(f"--- {p.name}:\n{log_tail(p.log, 40)}" for p in alive)
            raise AssertionError(f"hang guard: still waiting for {what}\n{logs}")
        time.sleep(poll_s)
    return time.monotonic() - t0


# -- the private stack ------------------------------------------------------------------


def private_stack(base: Config, brokers: int = 1) -> Iterator[Config]:
    """Kafka and Elasticsearch of this session alone: the shared stack's fetched
    distributions (symlinked), free ports, a run directory under /tmp. ``brokers`` > 1 is a
    KRaft cluster of that many nodes (each broker and controller) on a block of free ports.
    Yields a Config whose clients talk to it and whose ``stack.*`` let
    ``stop_service``/``start_service`` (and ``stop_broker``/``start_broker``) act on it;
    stops everything at the end."""
    from pipeline.tooling.stack import ensure_up

    shared_kafka, shared_es = service(base, "kafka"), service(base, "elasticsearch")
    if not (shared_kafka.installed() and shared_es.installed()):
        ensure_up(base)  # fetches the distributions once
    cache = Path(tempfile.mkdtemp(prefix="js-faults-", dir="/tmp"))
    cache.chmod(0o755)  # the Elasticsearch system user (when run as root) must traverse it
    # one block for all: node n listens on kafka_port + 2(n-1) and kafka_controller_port
    # + 2(n-1), Elasticsearch on the port after them (a port asked for apart could fall
    # inside the block, which is free again until the nodes start)
    kafka_port = free_port_block(2 * brokers + 1)
    cfg = base.replace(stack={"cache_dir": str(cache), "kafka_port": kafka_port,
                              "kafka_controller_port": kafka_port + 1,
                              "kafka_brokers": brokers,
                              "elasticsearch_port": kafka_port + 2 * brokers})
    for name, shared in (("kafka", shared_kafka), ("elasticsearch", shared_es)):
        own = service(cfg, name).home  # type: ignore[attr-defined]
        own.parent.mkdir(parents=True, exist_ok=True)
        own.symlink_to(shared.home)  # type: ignore[attr-defined]
    started: list[str] = []
    try:
        for name in ("kafka", "elasticsearch"):
            start_service(cfg, name)
            started.append(name)
        bootstrap = ",".join(broker_address(cfg, n) for n in kafka_nodes(cfg))
        yield cfg.replace(kafka={"bootstrap": bootstrap},
                          elasticsearch={"url":
                                         f"http://127.0.0.1:{cfg.stack.elasticsearch_port}"})
    finally:
        for name in reversed(started):
            stop_service(cfg, name)
        shutil.rmtree(cache, ignore_errors=True)


# -- the cluster's shape ----------------------------------------------------------------


def _metadata(cfg: Config) -> Any:
    return AdminClient(cfg.librdkafka(logger=QUIET)).list_topics(timeout=15)


def describe_groups(cfg: Config, groups: Sequence[str]
                    ) -> dict[str, ConsumerGroupDescription | BaseException]:
    """Each consumer group's description, or why there is none (not there yet, its
    coordinator moving or down, no answer within GROUPS_WAIT_S). The client lives for this
    call alone and is destroyed with its requests still pending (see
    _GROUPS_REQUEST_TIMEOUT_S)."""
    admin = AdminClient(cfg.librdkafka(logger=QUIET))
    futures = admin.describe_consumer_groups(list(groups),
                                             request_timeout=_GROUPS_REQUEST_TIMEOUT_S)
    wait(futures.values(), timeout=GROUPS_WAIT_S)
    # exception(), not result(): a failure raised in this frame would tie the frame, and
    # the client in it, to the traceback kept by the future, until the garbage collector
    # breaks the cycle; the client would live on past its requests' deadline
    return {group: (f.exception() or f.result()) if f.done()
            else TimeoutError(f"group {group}: no description within {GROUPS_WAIT_S:.0f} s")
            for group, f in futures.items()}


def describe_group(cfg: Config, group: str) -> ConsumerGroupDescription:
    """One consumer group's description (see :func:`describe_groups`); raises if none."""
    desc = describe_groups(cfg, [group])[group]
    if isinstance(desc, BaseException):
        raise desc
    return desc


def member_ids(cfg: Config, group: str) -> set[str] | None:
    """The ids of a consumer group's members as its coordinator sees them (None: no
    answer). A member the group evicted is not among them, and joins again under a new id."""
    desc = describe_groups(cfg, [group])[group]
    return None if isinstance(desc, BaseException) else {m.member_id for m in desc.members}


def leaders(cfg: Config, topics: Iterable[str]) -> Counter[int]:
    """How many partitions of ``topics`` each node of the stack leads (a node's number is
    its broker id)."""
    md = _metadata(cfg)
    count: Counter[int] = Counter()
    for topic in topics:
        meta = md.topics.get(topic)
        assert meta is not None and meta.error is None, f"topic {topic}: {meta and meta.error}"
        for part in meta.partitions.values():
            assert part.leader >= 0, f"{topic}[{part.id}] has no leader"
            count[part.leader] += 1
    return count


def busiest_broker(cfg: Config, topics: Iterable[str]) -> tuple[int, int]:
    """The node leading most partitions of ``topics``, and how many it leads."""
    node, n = leaders(cfg, topics).most_common(1)[0]
    return node, n


def replication_factors(cfg: Config, topics: Iterable[str]) -> dict[str, int]:
    """Each topic's replication factor (its partitions' fewest replicas)."""
    md = _metadata(cfg)
    out = {}
    for topic in topics:
        meta = md.topics.get(topic)
        assert meta is not None and meta.error is None, f"topic {topic}: {meta and meta.error}"
        out[topic] = min(len(part.replicas) for part in meta.partitions.values())
    return out


def coordinator(cfg: Config, group: str) -> int:
    """The node coordinating consumer group ``group`` (its heartbeats and commits)."""
    return int(describe_group(cfg, group).coordinator.id)


def all_in_sync(cfg: Config) -> bool:
    """Every node is in the metadata and every partition of every topic has its whole
    replica set in sync (a restarted broker has caught up)."""
    try:
        md = _metadata(cfg)
    except Exception:  # noqa: BLE001 -- a broker restarting: not in sync
        return False
    if len(md.brokers) < len(kafka_nodes(cfg)):
        return False
    return all(part.error is None and part.leader >= 0 and set(part.isrs) == set(part.replicas)
               for meta in md.topics.values() for part in meta.partitions.values())


# -- processes --------------------------------------------------------------------------


class Proc:
    """One ``jobstream`` subprocess (configured by ``JOBSTREAM_*`` variables), restartable;
    its output appends to ``log``. Only the process this object started is signalled."""

    def __init__(self, name: str, cfg: Config, args: Sequence[str], log: Path,
                 extra_env: dict[str, str] | None = None) -> None:
        self.name = name
        self.cfg = cfg
        self.args = list(args)
        self.log = log
        self.extra_env = dict(extra_env or {})
        self.proc: subprocess.Popen[bytes] | None = None
        self.starts = 0
        self.expected_exit = False
        self._fh: IO[bytes] | None = None

    def start(self) -> Proc:
        env = {k: v for k, v in os.environ.items() if not k.startswith("JOBSTREAM_")}
        env.update(config_env(self.cfg))
        env.update(self.extra_env, PYTHONUNBUFFERED="1", JOBSTREAM_CONFIG="/dev/null")
        self.starts += 1
        self.expected_exit = False
        self._close()
        self._fh = self.log.open("ab")
        self._fh.write(f"\n==== start {self.starts} ====\n".encode())
        self._fh.flush()
        self.proc = subprocess.Popen(
            [sys.executable, "-c", "from pipeline.cli import main; main(prog_name='jobstream')",
             *self.args], env=env, stdin=subprocess.DEVNULL, stdout=self._fh,
            stderr=subprocess.STDOUT, start_new_session=True)
        return self

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def check(self) -> None:
        if self.proc is not None and self.proc.poll() is not None and not self.expected_exit:
            raise AssertionError(f"jobstream {self.name} exited with {self.proc.returncode}:\n"
                                 f"{log_tail(self.log, 60)}")

    def kill(self) -> None:
        """SIGKILL: no flush, no commit, no clean-up."""
        if self.alive():
            assert self.proc is not None
            self.expected_exit = True
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(30)

    def stop(self, timeout: float = 60.0) -> int | None:
        """SIGTERM, then SIGKILL after ``timeout``; the exit code."""
        if self.proc is None:
            return None
        self.expected_exit = True
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(30)
        self._close()
        return self.proc.returncode

    def _close(self) -> None:
        if self._fh is not None:
            self._fh.close()
            self._fh = None


# -- results ----------------------------------------------------------------------------


@dataclasses.dataclass
class Result:
    """One row of the fault table."""

    scenario: str
    records: int
    jobs: int
    events: int
    lost_jobs: int
    duplicated_jobs: int
    wrong_jobs: int
    lost_events: int
    duplicated_events: int
    unexpected_events: int
    #: seconds from the end of the fault until Elasticsearch held everything published
    recovery_s: float
    wall_s: float
    note: str = ""
    #: field -> documents in which it differs from the offline fold (of ``wrong_jobs``)
    wrong_fields: dict[str, int] = dataclasses.field(default_factory=dict)
    details: list[str] = dataclasses.field(default_factory=list)

    @property
    def lost(self) -> int:
        return self.lost_jobs + self.lost_events

    @property
    def duplicated(self) -> int:
        return self.duplicated_jobs + self.duplicated_events + self.unexpected_events

    @property
    def ok(self) -> bool:
        return self.lost == 0 and self.duplicated == 0 and self.wrong_jobs == 0

    def line(self) -> str:
        return (f"FAULT {self.scenario}: records={self.records} jobs={self.jobs} "
                f"events={self.events} lost={self.lost} duplicated={self.duplicated} "
                f"wrong={_wrong(self.wrong_jobs, self.wrong_fields)} "
                f"recovery={self.recovery_s:.1f}s wall={self.wall_s:.0f}s {self.note}")

    def as_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d.update(lost=self.lost, duplicated=self.duplicated)
        return d


def _wrong(jobs: int, fields: dict[str, int], shown: int = 4) -> str:
    """The wrong jobs and the fields most often wrong in them: ``3 (revision 3, t_end 1)``."""
    if not fields:
        return str(jobs)
    top = sorted(fields.items(), key=lambda kv: (-kv[1], kv[0]))[:shown]
    more = ", ..." if len(fields) > shown else ""
    return f"{jobs} ({', '.join(f'{f} {n}' for f, n in top)}{more})"


# -- the check --------------------------------------------------------------------------

#: Fields of a job document left out of its comparison with the offline fold: none. Every
#: field is a function of the job's distinct events alone, whatever processed them and
#: when: ``updated_at`` is the latest event's time (not the moment the worker wrote the
#: state), ``revision`` the number of distinct events, and the fold's output depends on
#: neither the order nor the repetition of its input (docs/design.md, section 5). A field
#: that came to depend on processing time would go here, with its reason.
UNCOMPARED_FIELDS: frozenset[str] = frozenset()


@dataclasses.dataclass(frozen=True)
class Reference:
    """What a flow's indices must hold at the end, made offline from the records it was
    given: the truth, the offline fold's documents as the sink indexes them (document id
    -> fields), and the generator's event ids (id -> what it is made of)."""

    truth: Mapping[str, Mapping[str, Any]]
    documents: Mapping[str, Mapping[str, Any]]
    events: Mapping[str, EventParts]


def reference(cfg: Config, workload: Workload, records: Sequence[GeneratedRecord]
              ) -> Reference:
    """The :class:`Reference` of ``records`` (of ``workload``), folded offline once each:
    a record the flow was given twice must come out as once (the fold's contract), so
    that is what the documents are compared with. The offline fold must match the truth
    first, or a difference would be the generator's or the fold's, not the flow's."""
    documents = expected_documents(cfg, feed_of(workload.spec, records, workload.truth))
    sound = compare(workload.truth, documents.values())
    assert sound.ok, ("the offline fold of the workload does not match its truth: "
                      f"missing {sound.missing[:3]}, differences {sound.examples[:3]}")
    return Reference(workload.truth, documents, workload.event_ids(records))


def _comparable(doc: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in doc.items() if k not in UNCOMPARED_FIELDS}


def judge(scenario: str, ref: Reference, docs: Sequence[Mapping[str, Any]],
          seen: Counter[str], *, records: int, recovery_s: float, wall_s: float,
          note: str = "") -> Result:
    """The row of a flow whose indices hold ``docs`` (job documents) and the event ids
    ``seen`` (with their copies), against ``ref``. A job is wrong when its document differs
    from the offline fold's in any field but :data:`UNCOMPARED_FIELDS`; that covers the
    truth's checked fields too, since :func:`reference` made sure the fold matches them."""
    jobs = compare(ref.truth, docs)
    fold = check_documents({k: _comparable(d) for k, d in ref.documents.items()},
                           [_comparable(d) for d in docs])
    details = [f"missing job {k}" for k in jobs.missing[:5]]
    details += [f"job {k}: {f}={got!r}, offline fold {want!r}"
                for k, f, got, want in fold.differences[:8]]
    lost_events = set(ref.events) - set(seen)
    unexpected = set(seen) - set(ref.events)
    doubled = {e: n for e, n in seen.items() if n > 1}
    details += [f"missing event {e} {ref.events[e]}" for e in sorted(lost_events)[:5]]
    details += [f"unexpected event {e}" for e in sorted(unexpected)[:3]]
    details += [f"event {e} indexed {n} times" for e, n in sorted(doubled.items())[:3]]
    return Result(
        scenario=scenario, records=records, jobs=jobs.expected, events=len(ref.events),
        lost_jobs=len(jobs.missing),
        duplicated_jobs=len(jobs.duplicated) + len(jobs.unexpected),
        wrong_jobs=len(set(fold.different)), lost_events=len(lost_events),
        duplicated_events=sum(n - 1 for n in doubled.values()),
        unexpected_events=len(unexpected), recovery_s=recovery_s, wall_s=wall_s,
        note=note, wrong_fields=dict(fold.field_errors), details=details)


# -- the flow ---------------------------------------------------------------------------


class _Positions(Positions):
    """:class:`~pipeline.kafka.positions.Positions` whose groups' commits are read by a consumer of
    each group (``committed()`` alone: it never joins), not by the AdminClient: the flow
    polls them while brokers die, and the AdminClient, which lives as long as the flow,
    would keep an expired request to a dead coordinator (see _GROUPS_REQUEST_TIMEOUT_S).
    A consumer's lookup of its commits gives up without such a leftover."""

    def __init__(self, cfg: Config) -> None:
        super().__init__(AdminClient(cfg.librdkafka(logger=QUIET)))
        self._cfg = cfg
        self._consumers: dict[str, Consumer] = {}

    def committed(self, group: str, partitions: Iterable[TP]) -> dict[TP, int]:
        tps = [TopicPartition(t, p) for t, p in partitions]
        if not tps:
            return {}
        consumer = self._consumers.get(group)
        if consumer is None:
            consumer = self._consumers[group] = Consumer(self._cfg.librdkafka(
                logger=QUIET, **{"group.id": group, "enable.auto.commit": False}))
        out: dict[TP, int] = {}
        for tp in consumer.committed(tps, timeout=GROUPS_WAIT_S):
            if tp.error is not None:
                raise KafkaException(tp.error)
            out[(tp.topic, tp.partition)] = tp.offset if tp.offset >= 0 else -1
        return out

    def close(self) -> None:
        for consumer in self._consumers.values():
            consumer.close()
        self._consumers.clear()


@dataclasses.dataclass(frozen=True)
class Kill:
    """A SIGKILL of a worker or a sink, and what its group had not committed then, per
    input partition: the partition's end read before the kill less the group's commit
    read after it (when the victim can commit no more). A lower bound, since ends only
    grow and commits only advance: more than 0 and the victim surely died with records it
    had read, or was about to, and not committed."""

    victim: str
    #: records published when it was killed
    at_record: int
    uncommitted: dict[TP, int]

    @property
    def lag(self) -> int:
        return sum(self.uncommitted.values())

    def on(self, partitions: Iterable[TP]) -> int:
        """The uncommitted records of ``partitions`` only (the victim's own, in a group of
        several)."""
        mine = set(partitions)
        return sum(n for tp, n in self.uncommitted.items() if tp in mine)


def _nth(name: str, i: int) -> str:
    """The name of the ``i``-th of several processes (the first keeps the plain name)."""
    return name if i == 1 else f"{name}-{i}"


class Flow:
    """One scenario's flow on the private stack: worker and sink subprocesses, an edge
    runtime in this process that publishes the workload, and the checks.

    :param stack: the private stack's Config
    :param workdir: logs, spools, worker state
    :param spec: the workload
    :param workers: worker processes of the app (one app id and group; each its own name,
        web port and store directory); ``worker`` is the first
    :param sinks: sink processes (one group); ``sink`` is the first
    :param metrics: the worker, the sink and the edge runtime (as ``edge flux``) serve
        their metrics, each on a free port of ``[metrics]`` (one worker and one sink only)
    """

    def __init__(self, name: str, stack: Config, workdir: Path, spec: WorkloadSpec, *,
                 workers: int = 1, sinks: int = 1, metrics: bool = False) -> None:
        self.name = name
        self.workdir = workdir
        suffix = f"{name.replace('_', '-')}-{uuid.uuid4().hex[:6]}"
        props = workdir / "sink.properties"
        props.write_text(SINK_PROPERTIES)
        t = stack.topics
        self.cfg = stack.replace(
            topics={f.name: f"{getattr(t, f.name)}.{suffix}" for f in dataclasses.fields(t)},
            elasticsearch={"index_prefix": f"faults-{suffix}-"},
            worker={"app_id": f"jobstream-{suffix}", "store_dir": str(workdir / "store"),
                    "web_port": free_port(), "snapshot_interval_s": 5.0,
                    "session_timeout_s": WORKER_SESSION_TIMEOUT_S},
            sink={"max_batch": 500, "flush_interval_s": 0.5},
            edge={"spool_dir": str(workdir / "spool")},
        )
        if metrics:
            assert workers == sinks == 1, "a metrics port of [metrics] serves one process"
            # the sink's lag as often as Prometheus scrapes: the rules' windows are scaled
            self.cfg = self.cfg.replace(metrics={"worker_port": free_port(),
                                                 "sink_port": free_port(),
                                                 "edge_flux_port": free_port()},
                                        sink={"lag_interval_s": 0.5})
        self.workload = Workload(spec)
        self.records = list(self.workload.records())
        #: the records handed to the edge (by :meth:`publish`, or :meth:`published_by_edge`)
        self.given: set[GeneratedRecord] = set()
        self.workers = [self._worker(i) for i in range(1, workers + 1)]
        sink_cfg = self.cfg.replace(kafka={"properties_file": str(props)})
        self.sinks = [Proc(_nth("sink", i), sink_cfg, ["-v", "sink"],
                           workdir / f"{_nth('sink', i)}.log") for i in range(1, sinks + 1)]
        self.worker, self.sink = self.workers[0], self.sinks[0]
        self.edge: EdgeRuntime | None = None
        self._edge_metrics: WSGIServer | None = None
        self.published = 0
        self._positions = _Positions(self.cfg)
        self._t0 = time.monotonic()
        self._last_report = 0.0

    def _worker(self, i: int) -> Proc:
        """The ``i``-th worker (from 1): the first has the flow's own settings."""
        cfg = self.cfg if i == 1 else self.cfg.replace(
            worker={"web_port": free_port(), "store_dir": str(self.workdir / f"store-{i}")})
        return Proc(_nth("worker", i), cfg, ["worker", "--name", _nth(self.name, i),
                                             "--loglevel", "info"],
                    self.workdir / f"{_nth('worker', i)}.log")

    # -- life cycle -------------------------------------------------------------------

    @property
    def procs(self) -> list[Proc]:
        return [*self.workers, *self.sinks]

    def start(self, *, edge_cfg: Config | None = None) -> Flow:
        """Topics, the workers and the sinks (waited for until both groups are stable
        with all of them), and the in-process edge runtime (``edge_cfg`` changes its
        settings, e.g. a spool on a small disk)."""
        ensure_topics(self.cfg)
        for proc in self.procs:
            proc.start()
        self.wait_groups()
        # a first assignment without one of the worker's topics leaves a stage idle until
        # the next rebalance, which a fault may postpone by minutes
        for worker in self.workers:
            assert "Ignoring missing topic" not in worker.log.read_text(errors="replace"), \
                log_tail(worker.log, 60)
        self.edge = EdgeRuntime(edge_cfg or self.cfg, "faults").start()
        # this process's registry holds the edge runtime's metrics (its spool, its records)
        self._edge_metrics = run_metrics.start(self.cfg, "edge flux")
        self._t0 = time.monotonic()
        return self

    def close(self) -> None:
        if self.edge is not None:
            self.edge.stop(5.0)
            self.edge = None
        if self._edge_metrics is not None:
            self._edge_metrics.shutdown()
            self._edge_metrics.server_close()
            self._edge_metrics = None
        for proc in self.procs:
            proc.stop(30)
        self._positions.close()

    def groups(self) -> list[str]:
        return [self.cfg.worker.app_id, f"{self.cfg.worker.app_id}-sink"]

    def members(self) -> dict[str, int]:
        """Members of the worker's and the sink's groups, counted only when the group is
        stable (0 otherwise)."""
        return {group: len(desc.members)
                if isinstance(desc, ConsumerGroupDescription) and desc.state.name == "STABLE"
                else 0 for group, desc in describe_groups(self.cfg, self.groups()).items()}

    def worker_partitions(self) -> list[int]:
        """How many partitions each member of the worker's group is assigned."""
        desc = describe_group(self.cfg, self.cfg.worker.app_id)
        return sorted(len(m.assignment.topic_partitions) for m in desc.members)

    def wait_groups(self, workers: int | None = None, sinks: int | None = None) -> float:
        """Until the worker's and the sink's consumer groups are stable with ``workers``
        and ``sinks`` members (by default every one the flow has)."""
        want = [len(self.workers) if workers is None else workers,
                len(self.sinks) if sinks is None else sinks]
        return wait_until("the workers and the sinks to join their groups",
                          lambda: [self.members().get(g) for g in self.groups()] == want,
                          poll_s=0.5, alive=self.procs)

    # -- publishing -------------------------------------------------------------------

    def publish(self, records: Sequence[GeneratedRecord], rate: float,
                during: Callable[[int], None] | None = None) -> None:
        """Spool ``records`` through the edge runtime at ``rate`` records/s (10 batches a
        second); ``during(n)`` runs after each batch with the count published so far."""
        assert self.edge is not None
        step = max(1, round(rate / 10))
        t0 = time.monotonic()
        for i in range(0, len(records), step):
            batch = records[i:i + step]
            self.edge.publish_many(raw_record(r) for r in batch)
            self.given.update(batch)
            self.published += len(batch)
            if during is not None:
                during(self.published)
            due = t0 + (i + len(batch)) / rate
            while (left := due - time.monotonic()) > 0:
                time.sleep(min(left, 0.1))

    def published_by_edge(self, records: Sequence[GeneratedRecord]) -> None:
        """``records`` reached the raw topic through an edge process of the scenario's own
        (each at least once), not through :meth:`publish`."""
        self.given.update(records)
        self.published += len(records)

    # -- faults -----------------------------------------------------------------------

    def kill(self, proc: Proc) -> Kill:
        """SIGKILL ``proc``, a worker or a sink of the flow, measuring what its group had
        not committed at that moment (:class:`Kill`)."""
        group, topics = self._stages()["sink" if proc in self.sinks else "worker"]
        tps = self._positions.partitions(topics)
        ends = self._positions.ends(topics)
        proc.kill()
        committed = self._positions.committed(group, tps)
        uncommitted = {tp: end - max(committed.get(tp, -1), 0) for tp, end in ends.items()
                       if end > max(committed.get(tp, -1), 0)}  # no commit: from offset 0
        return Kill(proc.name, self.published, uncommitted)

    # -- progress ---------------------------------------------------------------------

    def _stages(self) -> dict[str, tuple[str, list[str]]]:
        """Per stage (worker, sink): its consumer group and its input topics."""
        app, t = self.cfg.worker.app_id, self.cfg.topics
        return {"worker": (app, [t.raw, canonical_topic(app)]),
                "sink": (f"{app}-sink", [t.state, t.events])}

    def group(self, stage: str) -> str:
        """The consumer group of ``stage`` (``worker`` or ``sink``)."""
        return self._stages()[stage][0]

    def _stage_positions(self) -> Iterator[tuple[str, str, list[Any], dict[Any, int],
                                                dict[Any, int]]]:
        """Per stage (worker, sink): its name, group, input partitions, their end offsets
        and the group's commits."""
        for name, (group, topics) in self._stages().items():
            tps = self._positions.partitions(topics)
            yield (name, group, tps, self._positions.ends(topics),
                   self._positions.committed(group, tps))

    def rekeyed(self) -> int:
        """Job records in the worker's canonical topic: job events re-keyed (none of
        jobstream's producers' records are) and expiry words (none within the scenarios'
        grace). A Flux job's node events (its ``alloc`` and ``free`` on each of its nodes,
        agents/jobs.py "Allocations") are keyed by node, and go there whenever the
        node's partition is not the job's: they are not counted."""
        messages = read_topic(self.cfg, canonical_topic(self.cfg.worker.app_id))
        return sum(not isinstance(decode_item(m.value or b""), NodeEvent) for m in messages)

    def lag(self) -> dict[str, int]:
        """Records not yet committed: the edge's spool, the worker's and the sink's groups."""
        out = {"spool": self.edge.spool.depth() if self.edge is not None else 0}
        for name, _, tps, ends, committed in self._stage_positions():
            out[name] = group_lag(ends, committed)
            if not tps:
                out[name] = -1  # topics not there yet: not caught up
        return out

    def caught_up(self) -> bool:
        try:
            lag = self.lag()
        except Exception:  # noqa: BLE001 -- Kafka restarting: not caught up
            return False
        now = time.monotonic()
        if now - self._last_report >= 10:
            self._last_report = now
            print(f"  [{self.name}] lag {lag}", flush=True)
        if lag["spool"] or lag["worker"] or lag["sink"]:
            return False
        # the raw topic holds everything published: only then is a zero lag the end
        ends = self._positions.ends([self.cfg.topics.raw])
        return sum(ends.values()) >= self.published

    def wait_caught_up(self, guard_s: float = GUARD_S) -> float:
        """Until every published record went through every stage; the seconds it took. A
        hang says where the flow stands (the logs' tails alone do not: a stalled stage
        logs nothing)."""
        try:
            return wait_until("the flow to catch up", self.caught_up, guard_s=guard_s,
                              poll_s=0.5, alive=self.procs)
        except AssertionError as exc:
            raise AssertionError(f"{exc}\n{self.where_it_stands()}") from None

    def where_it_stands(self) -> str:
        """Per group and partition, the committed offset against the end; and the
        warnings and errors of the worker's and the sink's logs (one of each kind)."""
        lines = []
        try:
            for _, group, _, ends, committed in self._stage_positions():
                behind = {f"{tp[0]}[{tp[1]}]": f"{committed.get(tp)}/{end}"
                          for tp, end in sorted(ends.items())
                          if max(committed.get(tp, 0), 0) < end}  # no commit: < 0
                lines.append(f"group {group}: committed/end where behind {behind or 'none'}")
        except Exception as exc:  # noqa: BLE001 -- the report must not hide the hang
            lines.append(f"positions unavailable: {exc}")
        for proc in self.procs:
            seen: dict[str, str] = {}
            for line in proc.log.read_text(errors="replace").splitlines():
                if "WARNING" in line or "ERROR" in line:
                    kind = " ".join(line.split("]")[-1].split()[:4])
                    seen.setdefault(kind, line[:300])
            lines.append(f"--- {proc.name}: {len(seen)} kinds of warnings and errors")
            lines.extend(seen.values())
        return "\n".join(lines)

    # -- the check --------------------------------------------------------------------

    def verify(self, recovery_s: float, note: str = "") -> Result:
        """Elasticsearch against the offline :func:`reference` of the workload's records
        (:func:`judge`); the table row (printed and returned). The flow must have been
        given exactly those records (some more than once, as an edge's replay does): else
        the offline fold would not be of its input."""
        records = set(self.records)
        assert self.given == records, (
            f"{len(records - self.given)} of the workload's records were never given to the "
            f"flow, and {len(self.given - records)} others were: the offline fold would not "
            "be of what it processed")
        ref = reference(self.cfg, self.workload, self.records)
        with client(self.cfg) as es:
            jobs_idx = jobs_alias(self.cfg)
            events_idx = alias_name(self.cfg.elasticsearch.index_prefix, Family.EVENTS)
            es.indices.refresh(index=f"{self.cfg.elasticsearch.index_prefix}*",
                               allow_no_indices=True, ignore_unavailable=True)
            docs = list(job_documents(es, jobs_idx))
            seen = Counter(_event_ids(es, events_idx))
        result = judge(self.name, ref, docs, seen, records=len(self.records),
                       recovery_s=recovery_s, wall_s=time.monotonic() - self._t0, note=note)
        print(result.line())
        return result

    def logs(self) -> str:
        return "\n".join(f"--- {p.name} ({p.log}):\n{log_tail(p.log, 40)}" for p in self.procs)


class Publisher:
    """:meth:`Flow.publish` in a thread, so that a fault that blocks (a broker restarting)
    happens while records keep coming; :meth:`join` re-raises what it raised."""

    def __init__(self, flow: Flow, records: Sequence[GeneratedRecord], rate: float) -> None:
        self.flow = flow
        #: when the last record was published (monotonic)
        self.ended = 0.0
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, args=(records, rate),
                                        name="publisher", daemon=True)

    def _run(self, records: Sequence[GeneratedRecord], rate: float) -> None:
        try:
            self.flow.publish(records, rate)
        except BaseException as exc:  # noqa: BLE001 -- handed to join()
            self._error = exc
        self.ended = time.monotonic()

    def start(self) -> Publisher:
        self._thread.start()
        return self

    def running(self) -> bool:
        return self._thread.is_alive()

    def join(self, guard_s: float = GUARD_S) -> float:
        """Until every record is published; the moment the last one was (monotonic)."""
        self._thread.join(guard_s)
        assert not self._thread.is_alive(), "hang guard: the publisher is still publishing"
        if self._error is not None:
            raise self._error
        return self.ended

    def wait_published(self, count: int) -> None:
        """Until ``count`` records are published."""
        wait_until(f"{count} records published", lambda: self.flow.published >= count or
                   not self.running(), poll_s=0.05, alive=self.flow.procs)
        if self._error is not None:
            raise self._error


class DepthWatch:
    """Samples the edge's spool depth and the records published, every ``period_s``, in a
    thread: how far the edge fell behind Kafka during a fault."""

    def __init__(self, flow: Flow, period_s: float = 0.1) -> None:
        self.flow = flow
        self.period_s = period_s
        #: (monotonic time, spool depth, records published)
        self.samples: list[tuple[float, int, int]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="depth-watch", daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(self.period_s):
            edge = self.flow.edge
            if edge is not None:
                self.samples.append((time.monotonic(), edge.spool.depth(),
                                     self.flow.published))

    def __enter__(self) -> DepthWatch:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(5.0)

    def timeline(self, t0: float, t1: float) -> str:
        """The largest depth of each second of [t0, t1] (for a failure's message)."""
        per_s: dict[int, int] = {}
        for t, d, _ in self.samples:
            if t0 <= t <= t1:
                per_s[int(t - t0)] = max(per_s.get(int(t - t0), 0), d)
        return " ".join(f"{s}s:{d}" for s, d in sorted(per_s.items()))

    def between(self, t0: float, t1: float) -> tuple[int, int]:
        """The largest depth sampled in [t0, t1], and the records published meanwhile."""
        window = [(d, n) for t, d, n in self.samples if t0 <= t <= t1]
        assert window, "no spool sample in the fault's window"
        return max(d for d, _ in window), window[-1][1] - window[0][1]


def _event_ids(es: Elasticsearch, index: str) -> Iterator[str]:
    """The ``_id`` of every event document of every events index (one per copy)."""
    read = 0
    try:
        for hit in helpers.scan(es, index=index, query={"query": {"match_all": {}}},
                                size=2000, _source=False):
            read += 1
            yield hit["_id"]
    except ApiError as exc:
        if read or not not_yet(exc):  # a scan broken off half-way is no empty index
            raise


#: the session's rows, in the order the scenarios ran (conftest prints the table)
RESULTS: list[dict[str, Any]] = []


def record(result: Result) -> None:
    """Add a row to the session's fault table, then assert it is clean."""
    RESULTS.append(result.as_dict())
    assert result.ok, f"{result.line()}\n" + "\n".join(result.details)


def write_table(results: Sequence[dict[str, Any]], path: Path) -> str:
    """The fault table as markdown (also written to ``path``), and JSON beside it."""
    head = ("| scenario | records | jobs | events | lost | duplicated | wrong | recovery s |"
            " wall s | note |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|---|\n")
    rows = "".join(
        f"| {r['scenario']} | {r['records']} | {r['jobs']} | {r['events']} | {r['lost']} | "
        f"{r['duplicated']} | {_wrong(r['wrong_jobs'], r['wrong_fields'])} | "
        f"{r['recovery_s']:.1f} | {r['wall_s']:.0f} | {r['note']} |\n" for r in results)
    table = head + rows
    path.write_text(table)
    path.with_suffix(".json").write_text(json.dumps(list(results), indent=2))
    return table
