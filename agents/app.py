"""The Faust app: built from the configuration, nothing runs at import.

Topology (one stage; the canonical topic carries only the events of raw records that are
not in their job's partition, and the expiry of finished jobs)::

    hpc.jobs.raw ───────────jobs (table) ──> hpc.jobs.events, hpc.jobs.state, hpc.jobs.dlq
          └─ re-keyed ─> <app>-canonical ─┘  ├─ timers ──> hpc.queue.snapshots, expiry
                                             └─ nodes (table) ──> hpc.nodes.state

A node format's records take the same path; their events fold into the ``nodes`` table
(keyed ``cluster:node``), a table of the same class as ``jobs``, its changelog
``<app>-nodes-changelog`` written and confirmed with the batch's other outputs.

The jobs topics' records are taken one at a time, in the order Faust's fetch loop reads
them (agents.intake); scale comes from partitions and workers.
"""

from __future__ import annotations

import logging
import socket
from pathlib import Path

import faust

from agents import faust_patches
from agents.context import WorkerContext
from agents.outputs import Outputs
from agents.table import JobsTable
from pipeline.codecs.wire import Wire
from pipeline.core.anonymize import Anonymizer
from pipeline.core.enrich import Enricher
from pipeline.kafka.auth import faust_credentials
from pipeline.kafka.topics import (
    Replication,
    canonical_topic,
    nodes_changelog_topic,
    replication_from,
)
from pipeline.runtime.config import Config
from pipeline.runtime.errors import ConfigError
from pipeline.runtime.logrepeat import RepeatFilter

__all__ = ["STORE_OPTIONS", "Runner", "create_app", "internal_topics"]

#: Each partition of the jobs table has a RocksDB of its own, each with these buffers:
#: Faust's defaults (2 GiB block cache, 3 x 64 MiB memtables) let a worker grow by ~1.5 KiB
#: per job it tracks, to gigabytes. A job state is ~1 KiB: small buffers do. A table's
#: store takes them as its ``options`` (an app's ``store_options`` is no Faust setting).
#: Memtables of 4 MiB and a block cache of 1 MiB: for a million jobs in four partitions
#: the stores grew the process by 79 MiB with 8 and 8, 44 with 4 and 4, 29 with 4 and 1
#: and 24 with 2 and 2, which took 2.5 times as long to write
#: (benchmarks/2026-12-04/memory_breakdown.py). The cache holds data blocks only (the
#: index and filters are the table readers'), and a state is read from the store only
#: when the fold cache (agents.states) does not hold it: a job's events come in bursts.
STORE_OPTIONS = {"block_cache_size": 1 * 1024 * 1024, "write_buffer_size": 4 * 1024 * 1024,
                 "max_write_buffer_number": 2}


class Runner(faust_patches.Worker):
    """Faust's worker, with a log a person can read while the broker is away: aiokafka
    logs every reconnect attempt, thousands a second (:mod:`pipeline.runtime.logrepeat`)."""

    def on_setup_root_logger(self, logger: logging.Logger, level: int) -> None:
        super().on_setup_root_logger(logger, level)
        repeats = RepeatFilter()
        for handler in logger.handlers:
            handler.addFilter(repeats)


def _broker_urls(bootstrap: str) -> list[str]:
    return [f"kafka://{host.strip()}" for host in bootstrap.split(",") if host.strip()]


def create_app(cfg: Config, *, name: str | None = None,
               replication: Replication | None = None) -> WorkerContext:
    """Build the worker's Faust app from ``cfg`` and register its agents, table and timers.

    ``replication`` is what :func:`pipeline.kafka.topics.resolve_replication` found: Faust
    creates its internal topics with a number of replicas, not the broker's default, so
    without a configured ``kafka.replication_factor`` the cluster's must be read first.
    """
    from agents import jobs, watchdog  # they register themselves
    from agents.web import JobQuery, WebAccess, faust_web_settings

    if replication is None:
        if cfg.kafka.replication_factor <= 0:
            raise ConfigError("kafka.replication_factor is 0 (the cluster's default): the "
                              "worker needs the cluster's number, from "
                              "pipeline.kafka.topics.resolve_replication")
        replication = replication_from(cfg, {})
    access = WebAccess.from_config(cfg)  # before anything: a missing token stops here

    store_dir = cfg.worker.store_dir or str(Path(cfg.stack.cache_dir) / "worker-store")
    # Faust creates only the last component; a fresh worker.store_dir may be deeper
    Path(store_dir).expanduser().parent.mkdir(parents=True, exist_ok=True)
    worker_name = name or f"{socket.gethostname()}:{cfg.worker.web_port}"
    app = faust.App(
        cfg.worker.app_id,
        broker=_broker_urls(cfg.kafka.bootstrap),
        # SASL / TLS from the librdkafka properties file, as the confluent clients have it
        broker_credentials=faust_credentials(cfg),
        store="rocksdb://",
        datadir=store_dir,
        autodiscover=False,
        origin="agents",
        topic_partitions=cfg.kafka.partitions,
        # the canonical topic, the table's changelog and the assignor's leader topic
        topic_replication_factor=replication.require_factor(),
        processing_guarantee="at_least_once",
        consumer_auto_offset_reset="earliest",
        # where it listens and what it serves: agents.web
        **faust_web_settings(cfg, access),
        table_standby_replicas=0,
        stream_wait_empty=True,
        # Faust's producer writes nothing of the stream: the outputs and the table's
        # changelog go through agents.outputs (confluent-kafka, idempotent). Should Faust
        # send anything of its own, all replicas confirm it.
        producer_acks=-1,
        consumer_group_instance_id=cfg.worker.instance_id or None,
        broker_session_timeout=cfg.worker.session_timeout_s,
        # heartbeats well inside the session timeout (faust's default is 3 s)
        broker_heartbeat_interval=min(3.0, cfg.worker.session_timeout_s / 4),
    )
    faust_patches.install(app, fetch_min_bytes=cfg.worker.fetch_min_bytes,
                          fetch_max_wait_ms=cfg.worker.fetch_max_wait_ms)
    raw_topic = app.topic(cfg.topics.raw, key_serializer="raw", value_serializer="raw")
    # min.insync.replicas, when configured, on every internal topic Faust may create
    topic_config = replication.topic_config()
    canonical = app.topic(canonical_topic(cfg.worker.app_id), key_serializer="raw",
                          value_serializer="raw", partitions=cfg.kafka.partitions,
                          internal=True, config=topic_config)

    outputs = Outputs(cfg, f"{cfg.worker.app_id}-{worker_name}")
    # keys and values stored raw: values are the JSON of JobFold.to_dict(), encoded once
    # by agents.states (Faust's json serializer would encode them twice); the changelog
    # goes through the outputs (agents.table)
    table = app.tables.add(JobsTable(
        app, outputs=outputs, name="jobs", default=None, partitions=cfg.kafka.partitions,
        key_type=bytes, value_type=bytes, extra_topic_configs=topic_config,
        options=dict(STORE_OPTIONS)))
    # the node states, kept alike (a head and segments per node: agents.states.NodeStates);
    # few beside the jobs, in the same store options
    nodes = app.tables.add(JobsTable(
        app, outputs=outputs, name="nodes", default=None, partitions=cfg.kafka.partitions,
        key_type=bytes, value_type=bytes, extra_topic_configs=topic_config,
        options=dict(STORE_OPTIONS)))
    if nodes.changelog_topic.get_topic_name() != nodes_changelog_topic(cfg.worker.app_id):
        raise ConfigError(f"the nodes table's changelog is "
                          f"{nodes.changelog_topic.get_topic_name()}, not "
                          f"{nodes_changelog_topic(cfg.worker.app_id)}: Faust names it "
                          "otherwise than pipeline.kafka.topics says")
    worker = WorkerContext(
        cfg=cfg, app=app, name=worker_name, raw=raw_topic, canonical=canonical, jobs=table,
        nodes=nodes, outputs=outputs,
        anonymizer=Anonymizer.from_config(cfg.anonymize.fields, cfg.anonymize.key_file),
        enricher=Enricher.from_config(cfg.enrich.passwd_file, cfg.enrich.users_file,
                                      cfg.enrich.topology_file),
        wire=Wire(cfg),
    )
    jobs.register(worker)
    JobQuery(worker, access).register()
    watchdog.register(app, {raw_topic.get_topic_name(), canonical.get_topic_name()},
                      cfg.worker.stall_check_s)
    return worker


def internal_topics(worker: WorkerContext) -> tuple[dict[str, dict[str, str]], dict[str, int]]:
    """Faust's internal topics of ``worker`` for :func:`pipeline.kafka.topics.ensure_topics`:
    name -> topic configs (as Faust would create them), and the partitions of those whose
    count is not ``kafka.partitions``.

    Created before Faust starts: a join right after Faust created the canonical topic may
    not see it yet and assign the jobs stage nothing, and the rebalance that mends that
    waits for a metadata refresh (5 min) when the broker restarts meanwhile. Faust gives
    the assignor's leader topic no topic configs, so only this way does it carry
    ``min.insync.replicas``; and the existing ones are checked with the others.
    """
    changelog = worker.jobs.changelog_topic.get_topic_name()
    nodes = worker.nodes.changelog_topic.get_topic_name()
    leader = f"{worker.app.conf.id}-__assignor-__leader"  # as faust.assignor.LeaderAssignor
    return ({worker.canonical.get_topic_name(): {},
             changelog: {"cleanup.policy": "compact"},
             nodes: {"cleanup.policy": "compact"},
             leader: {}},
            {leader: 1})
