"""Topics are created with the configured replication, on the shared one-broker stack.

One broker cannot hold two replicas, which is what makes the refusal and the warning
testable here: a factor of 2 for topics still to create is refused, naming both numbers;
for topics that exist with one replica it is a warning per topic, and the flow goes on.
"""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient, ConfigResource, ConfigSource, ResourceType

from agents.app import create_app, internal_topics
from pipeline.kafka.topics import ensure_topics, resolve_replication, topic_specs
from pipeline.runtime.config import Config
from pipeline.runtime.errors import ServiceError


def replicas(admin: AdminClient, topic: str) -> set[int]:
    meta = admin.list_topics(topic, timeout=10).topics[topic]
    return {len(p.replicas) for p in meta.partitions.values()}


def topic_min_insync(admin: AdminClient, topic: str) -> str | None:
    """The topic's own min.insync.replicas; None when it has the broker's."""
    resource = ConfigResource(ResourceType.TOPIC, topic)
    entry = admin.describe_configs([resource])[resource].result(10)["min.insync.replicas"]
    topic_own = ConfigSource(entry.source) == ConfigSource.DYNAMIC_TOPIC_CONFIG
    return entry.value if topic_own else None


def broker_default(admin: AdminClient) -> int:
    broker = str(min(admin.list_topics(timeout=10).brokers))
    resource = ConfigResource(ResourceType.BROKER, broker)
    return int(admin.describe_configs([resource])[resource].result(10)[
        "default.replication.factor"].value)


def test_zero_is_the_brokers_default(stack_cfg: Config, kafka_admin: AdminClient) -> None:
    created = ensure_topics(stack_cfg)
    assert sorted(created) == sorted(topic_specs(stack_cfg))
    wanted = broker_default(kafka_admin)
    for topic in created:
        assert replicas(kafka_admin, topic) == {wanted}
        assert topic_min_insync(kafka_admin, topic) is None
    rep = resolve_replication(stack_cfg)
    assert rep.factor == wanted
    assert rep.describe().startswith(f"topics: replication factor {wanted} (cluster default)")


def test_configured_values_are_on_every_topic_and_less_is_warned_about(
        stack_cfg: Config, kafka_admin: AdminClient, tmp_path: Path,
        caplog: pytest.LogCaptureFixture) -> None:
    cfg = stack_cfg.replace(kafka={"replication_factor": 1, "min_insync_replicas": 1},
                            worker={"store_dir": str(tmp_path / "store")})
    w = create_app(cfg, replication=resolve_replication(cfg))
    configs, partitions = internal_topics(w)
    created = ensure_topics(cfg, extra=configs, partitions=partitions)
    assert sorted(created) == sorted([*topic_specs(cfg), *configs])
    for topic in created:
        assert replicas(kafka_admin, topic) == {1}, topic
        assert topic_min_insync(kafka_admin, topic) == "1", topic
    leader = next(t for t in partitions)
    assert len(kafka_admin.list_topics(leader, timeout=10).topics[leader].partitions) == 1

    # more than the one broker: refused while there is something to create ...
    more = cfg.replace(kafka={"replication_factor": 2, "min_insync_replicas": 2})
    with pytest.raises(ServiceError, match=r"replication factor 2 \(configured\) but the "
                                           r"cluster at .* has 1 broker\(s\) up"):
        ensure_topics(more, extra={f"{cfg.topics.raw}.missing": {}})
    # ... and for the topics that exist, a warning naming each, what it has and wants
    with caplog.at_level(logging.WARNING, logger="pipeline.kafka.topics"):
        assert ensure_topics(more, extra=configs, partitions=partitions) == []
    said = [r.getMessage() for r in caplog.records]
    for topic in created:
        assert (f"topic {topic} has 1 replica(s), wanted 2 (configured): add replicas with "
                "kafka-reassign-partitions") in "\n".join(said), topic
        assert (f"topic {topic} has min.insync.replicas 1, wanted 2 (configured): "
                f"kafka-configs --alter --entity-type topics --entity-name {topic} "
                "--add-config min.insync.replicas=2") in said, topic
    assert replicas(kafka_admin, cfg.topics.raw) == {1}  # reported, not changed
