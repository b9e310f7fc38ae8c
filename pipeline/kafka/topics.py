"""Creating jobstream's topics with the settings each needs (idempotent).

Auto-created topics would get the broker's defaults: one partition and delete-retention,
which is wrong for the state topic (compacted) and the raw topic (the replay source: kept
long). Every process that writes calls :func:`ensure_topics` once on start.

Replication comes from ``kafka.replication_factor`` and ``kafka.min_insync_replicas``, 0
meaning the cluster's own ``default.replication.factor`` / ``min.insync.replicas``: a topic
is never created with one replica on a cluster that keeps three unless a site asks for it.
A topic that already exists is not changed, only reported when it has fewer replicas or a
lower ``min.insync.replicas`` than wanted (Kafka changes those with its own tools).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass

from confluent_kafka import KafkaException
from confluent_kafka.admin import (
    AdminClient,
    ClusterMetadata,
    ConfigResource,
    NewTopic,
    ResourceType,
    TopicMetadata,
)

from pipeline.runtime.config import Config
from pipeline.runtime.errors import ConfigError, ServiceError

__all__ = ["RAW_MAX_MESSAGE_BYTES", "Replication", "canonical_topic", "ensure_topics",
           "jobs_changelog_topic", "nodes_changelog_topic", "replication_from",
           "resolve_replication", "topic_specs", "topic_warnings"]

logger = logging.getLogger(__name__)


#: Largest message of the raw topic and the DLQ (which keeps raw records as they came). A
#: source record can be big (a jobspec with a large user attribute, a sacct dump of many
#: jobs): up to ~10 MB must go through, and the broker's default is 1 MiB. Producers of
#: these topics need ``message.max.bytes`` at least as big. The other topics keep the
#: default: the agents cut events to ``worker.max_event_bytes``.
RAW_MAX_MESSAGE_BYTES = 16 * 1024 * 1024

CONFIGURED = "configured"
CLUSTER_DEFAULT = "cluster default"


@dataclass(frozen=True)
class Replication:
    """The replication every topic jobstream creates gets, and where each number came from.

    ``factor`` / ``min_insync`` are 0 when the cluster's default could not be read (no
    DescribeConfigs permission): topics are still created with the broker's default.
    """

    factor: int
    factor_source: str
    min_insync: int
    min_insync_source: str

    @property
    def new_topic_factor(self) -> int:
        """``NewTopic``'s replication_factor: -1 leaves it to the broker's default."""
        return self.factor if self.factor_source == CONFIGURED else -1

    def topic_config(self) -> dict[str, str]:
        """Topic configs every created topic carries (only what the site configured)."""
        if self.min_insync_source == CONFIGURED:
            return {"min.insync.replicas": str(self.min_insync)}
        return {}

    def require_factor(self) -> int:
        """The factor as a number (Faust needs one); ServiceError when it is not known."""
        if self.factor <= 0:
            raise ServiceError("the cluster's default.replication.factor cannot be read "
                               "(DescribeConfigs on a broker refused or unanswered); set "
                               "kafka.replication_factor")
        return self.factor

    def describe(self) -> str:
        """One line for the startup logs and ``config show``."""
        def part(name: str, value: int, source: str) -> str:
            return f"{name} {value if value > 0 else '?'} ({source})"
        return ("topics: " + part("replication factor", self.factor, self.factor_source)
                + ", " + part("min.insync.replicas", self.min_insync, self.min_insync_source))


def replication_from(cfg: Config, cluster: Mapping[str, str]) -> Replication:
    """The effective replication from ``cfg`` and the broker configs read from the cluster
    (``default.replication.factor``, ``min.insync.replicas``; empty when unknown)."""
    k = cfg.kafka
    if k.replication_factor < 0 or k.min_insync_replicas < 0:
        raise ConfigError("kafka.replication_factor and kafka.min_insync_replicas must be "
                          "0 (the cluster's default) or more")

    def pick(configured: int, key: str) -> tuple[int, str]:
        if configured > 0:
            return configured, CONFIGURED
        try:
            return int(cluster.get(key, "0")), CLUSTER_DEFAULT
        except ValueError:
            return 0, CLUSTER_DEFAULT

    rep = Replication(*pick(k.replication_factor, "default.replication.factor"),
                      *pick(k.min_insync_replicas, "min.insync.replicas"))
    if 0 < rep.factor < rep.min_insync:
        raise ConfigError(
            f"min.insync.replicas {rep.min_insync} ({rep.min_insync_source}) is more than "
            f"the replication factor {rep.factor} ({rep.factor_source}): every acks=all "
            "write would fail; lower kafka.min_insync_replicas or raise "
            "kafka.replication_factor")
    return rep


def topic_warnings(rep: Replication, replicas: Mapping[str, int],
                   min_insync: Mapping[str, int]) -> list[str]:
    """What to tell about existing topics: ``replicas`` the fewest replicas of any of a
    topic's partitions, ``min_insync`` each topic's ``min.insync.replicas``."""
    out = []
    for topic, actual in sorted(replicas.items()):
        if 0 < actual < rep.factor:
            out.append(
                f"topic {topic} has {actual} replica(s), wanted {rep.factor} "
                f"({rep.factor_source}): add replicas with kafka-reassign-partitions "
                f"(a reassignment listing {rep.factor} brokers for each partition)")
    if rep.min_insync_source == CONFIGURED:
        for topic, actual in sorted(min_insync.items()):
            if actual < rep.min_insync:
                out.append(
                    f"topic {topic} has min.insync.replicas {actual}, wanted "
                    f"{rep.min_insync} (configured): kafka-configs --alter --entity-type "
                    f"topics --entity-name {topic} --add-config "
                    f"min.insync.replicas={rep.min_insync}")
    return out


def canonical_topic(app_id: str) -> str:
    """The worker's own topic: the events of raw records read outside their job's partition,
    re-keyed by job, and the worker's control words (``agents.jobs``)."""
    return f"{app_id}-canonical"


def jobs_changelog_topic(app_id: str) -> str:
    """The changelog of the worker's job-state table, which the table is restored from:
    Faust names a table's changelog ``<app id>-<table>-changelog``, and the worker's table
    is ``jobs`` (``agents.app``)."""
    return f"{app_id}-jobs-changelog"


def nodes_changelog_topic(app_id: str) -> str:
    """The changelog of the worker's node-state table (``nodes``), named as Faust names
    a table's changelog, like :func:`jobs_changelog_topic`."""
    return f"{app_id}-nodes-changelog"


def topic_specs(cfg: Config) -> dict[str, dict[str, str]]:
    """Topic name -> its topic configs."""
    t = cfg.topics
    big = {"max.message.bytes": str(RAW_MAX_MESSAGE_BYTES)}
    return {
        t.raw: {"retention.ms": "-1", **big},  # the source of truth for replays
        t.events: {"retention.ms": str(30 * 86400 * 1000)},
        t.state: {"cleanup.policy": "compact"},
        t.nodes: {"cleanup.policy": "compact"},
        t.node_events: {"retention.ms": str(30 * 86400 * 1000)},
        t.snapshots: {"retention.ms": str(7 * 86400 * 1000)},
        t.dlq: {"retention.ms": str(30 * 86400 * 1000), **big},
    }


def _describe(admin: AdminClient, resources: list[ConfigResource],
              timeout: float) -> dict[str, dict[str, str]]:
    """Resource name -> its configs; resources the cluster does not answer for are left out
    (DescribeConfigs may be refused to a client that may still create topics)."""
    out: dict[str, dict[str, str]] = {}
    if not resources:
        return out
    for resource, future in admin.describe_configs(resources,
                                                   request_timeout=timeout).items():
        try:
            entries = future.result(timeout=timeout)
        except KafkaException as exc:
            logger.info("cannot read the configs of %s: %s", resource, exc)
            continue
        out[resource.name] = {name: e.value for name, e in entries.items()
                              if e.value is not None}
    return out


def _metadata(cfg: Config, admin: AdminClient, timeout: float) -> ClusterMetadata:
    try:
        return admin.list_topics(timeout=timeout)
    except KafkaException as exc:
        raise ServiceError(f"Kafka at {cfg.kafka.bootstrap} does not answer: {exc}") from exc


def _resolve(cfg: Config, admin: AdminClient, meta: ClusterMetadata,
             timeout: float) -> Replication:
    cluster: dict[str, str] = {}
    # each broker in turn: one in the metadata may be dead and not yet fenced, and a worker
    # restarted meanwhile must still learn the cluster's defaults from another
    for broker in sorted(meta.brokers):
        cluster = _describe(admin, [ConfigResource(ResourceType.BROKER, str(broker))],
                            min(timeout, 10.0)).get(str(broker), {})
        if cluster:
            break
    return replication_from(cfg, cluster)


def resolve_replication(cfg: Config, timeout: float = 30.0) -> Replication:
    """The replication of ``cfg`` with the cluster's defaults filled in (read from a broker)."""
    admin = AdminClient(cfg.librdkafka())
    return _resolve(cfg, admin, _metadata(cfg, admin, timeout), timeout)


def ensure_topics(cfg: Config, timeout: float = 30.0, *,
                  extra: Mapping[str, Mapping[str, str]] | None = None,
                  partitions: Mapping[str, int] | None = None,
                  replication: Replication | None = None) -> list[str]:
    """Create the missing topics of ``cfg`` (and ``extra``: name -> topic configs, e.g. a
    process's internal topics, with ``partitions`` where one is not
    ``kafka.partitions``), replicated as configured; warn about existing topics with less
    replication than that (``replication``: as :func:`resolve_replication` found it,
    when the caller asked already). Returns the names created."""
    admin = AdminClient(cfg.librdkafka())
    meta = _metadata(cfg, admin, timeout)
    rep = replication if replication is not None else _resolve(cfg, admin, meta, timeout)
    logger.info("%s", rep.describe())
    existing = meta.topics
    specs = {**topic_specs(cfg), **(extra or {})}
    brokers = len(meta.brokers)
    missing = [NewTopic(name, (partitions or {}).get(name, cfg.kafka.partitions),
                        replication_factor=rep.new_topic_factor,
                        config={**conf, **rep.topic_config()})
               for name, conf in specs.items() if name not in existing]
    if rep.factor > brokers:
        # metadata lists the brokers that are up: with one down, topics that exist go on
        # (the warning), while creating one is refused by Kafka anyway
        message = (f"replication factor {rep.factor} ({rep.factor_source}) but the cluster at "
                   f"{cfg.kafka.bootstrap} has {brokers} broker(s) up")
        if missing and rep.factor_source == CONFIGURED:
            raise ServiceError(f"{message}: cannot create {', '.join(t.topic for t in missing)}"
                               "; lower kafka.replication_factor or start the brokers")
        logger.warning("%s", message)
    _check_existing(admin, rep, {name: existing[name] for name in specs if name in existing},
                    timeout)
    if not missing:
        return []
    created = []
    for name, future in admin.create_topics(missing, operation_timeout=timeout).items():
        try:
            future.result(timeout=timeout)
            created.append(name)
        except KafkaException as exc:
            if exc.args[0].name() != "TOPIC_ALREADY_EXISTS":
                raise ServiceError(f"cannot create topic {name}: {exc}") from exc
    logger.info("created topics %s", ", ".join(created))
    return created


def _check_existing(admin: AdminClient, rep: Replication, topics: Mapping[str, TopicMetadata],
                    timeout: float) -> None:
    replicas = {name: min((len(p.replicas) for p in t.partitions.values()), default=0)
                for name, t in topics.items()}
    min_insync: dict[str, int] = {}
    if rep.min_insync_source == CONFIGURED:
        configs = _describe(admin, [ConfigResource(ResourceType.TOPIC, name)
                                    for name in topics], timeout)
        min_insync = {name: int(c["min.insync.replicas"]) for name, c in configs.items()
                      if "min.insync.replicas" in c}
    for warning in topic_warnings(rep, replicas, min_insync):
        logger.warning("%s", warning)
