"""Replication from configuration: the numbers every created topic gets, what is said about
topics that exist with less, and the worker's Faust settings (no broker needed)."""

from __future__ import annotations

from concurrent.futures import Future
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from confluent_kafka import KafkaException

from agents.app import create_app, internal_topics
from pipeline.kafka.topics import _resolve, nodes_changelog_topic, replication_from, topic_warnings
from pipeline.runtime.config import Config
from pipeline.runtime.errors import ConfigError

CLUSTER = {"default.replication.factor": "3", "min.insync.replicas": "1"}


def kafka(**values: int) -> Config:
    return Config().replace(kafka=values)


def test_zero_takes_the_cluster_default_and_creates_with_the_brokers_own() -> None:
    rep = replication_from(kafka(), CLUSTER)
    assert (rep.factor, rep.min_insync) == (3, 1)
    assert rep.new_topic_factor == -1  # never a number of ours when the site set none
    assert rep.topic_config() == {}
    assert rep.describe() == ("topics: replication factor 3 (cluster default), "
                              "min.insync.replicas 1 (cluster default)")


def test_configured_values_win_and_go_on_every_topic() -> None:
    rep = replication_from(kafka(replication_factor=3, min_insync_replicas=2),
                           {"default.replication.factor": "1"})
    assert rep.new_topic_factor == 3
    assert rep.topic_config() == {"min.insync.replicas": "2"}
    assert rep.describe() == ("topics: replication factor 3 (configured), "
                              "min.insync.replicas 2 (configured)")


def test_an_unreadable_cluster_default_is_unknown_not_one() -> None:
    rep = replication_from(kafka(), {})
    assert rep.factor == 0 and rep.new_topic_factor == -1
    assert "replication factor ? (cluster default)" in rep.describe()
    with pytest.raises(Exception, match="set kafka.replication_factor"):
        rep.require_factor()


def test_more_in_sync_replicas_than_replicas_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match=r"min.insync.replicas 3 .* replication factor 2"):
        replication_from(kafka(replication_factor=2, min_insync_replicas=3), CLUSTER)
    with pytest.raises(ConfigError, match=r"min.insync.replicas 4 \(configured\).*3 \(cluster"):
        replication_from(kafka(min_insync_replicas=4), CLUSTER)
    with pytest.raises(ConfigError, match="0 .* or more"):
        replication_from(kafka(replication_factor=-1), CLUSTER)


def test_existing_topics_with_less_are_named_with_actual_wanted_and_the_tool() -> None:
    rep = replication_from(kafka(replication_factor=3, min_insync_replicas=2), CLUSTER)
    out = topic_warnings(rep, {"raw": 1, "state": 3}, {"raw": 1, "state": 2})
    assert len(out) == 2
    assert out[0].startswith("topic raw has 1 replica(s), wanted 3 (configured)")
    assert "kafka-reassign-partitions" in out[0]
    assert out[1].startswith("topic raw has min.insync.replicas 1, wanted 2 (configured)")
    assert "kafka-configs --alter --entity-type topics --entity-name raw" in out[1]


def test_the_cluster_default_is_the_wanted_count_when_nothing_is_configured() -> None:
    rep = replication_from(kafka(), CLUSTER)
    # min.insync.replicas is the site's business unless configured: never warned about
    assert topic_warnings(rep, {"raw": 1, "events": 3}, {"raw": 1}) == [
        "topic raw has 1 replica(s), wanted 3 (cluster default): add replicas with "
        "kafka-reassign-partitions (a reassignment listing 3 brokers for each partition)"]


def _worker_cfg(tmp_path: Path, **kafka_values: int) -> Config:
    return Config().replace(kafka=kafka_values, worker={
        "store_dir": str(tmp_path / "store"), "app_id": "replication-test"})


def test_the_worker_gives_faust_the_resolved_factor_and_min_insync(tmp_path: Path) -> None:
    cfg = _worker_cfg(tmp_path, min_insync_replicas=2)
    w = create_app(cfg, replication=replication_from(cfg, CLUSTER))
    assert w.app.conf.topic_replication_factor == 3
    changelog = w.jobs.changelog_topic
    assert changelog.config.get("min.insync.replicas") == "2"
    assert w.canonical.config.get("min.insync.replicas") == "2"
    leader = w.app._leader_assignor._leader_topic  # noqa: SLF001
    assert leader.replicas == 3
    configs, partitions = internal_topics(w)
    assert configs == {"replication-test-canonical": {},
                       "replication-test-jobs-changelog": {"cleanup.policy": "compact"},
                       "replication-test-nodes-changelog": {"cleanup.policy": "compact"},
                       leader.get_topic_name(): {}}
    assert partitions == {leader.get_topic_name(): 1}
    assert changelog.get_topic_name() == "replication-test-jobs-changelog"
    # the node table's changelog: created, compacted and replicated as the jobs'
    assert w.nodes.changelog_topic.get_topic_name() == nodes_changelog_topic(cfg.worker.app_id)
    assert w.nodes.changelog_topic.config.get("min.insync.replicas") == "2"


def test_the_worker_takes_a_configured_factor_without_asking_kafka(tmp_path: Path) -> None:
    w = create_app(_worker_cfg(tmp_path, replication_factor=2))
    assert w.app.conf.topic_replication_factor == 2
    assert w.jobs.changelog_topic.config == {}


def test_the_worker_never_guesses_the_cluster_default(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="resolve_replication"):
        create_app(_worker_cfg(tmp_path))


class _Cluster:
    """Answers DescribeConfigs like a cluster whose lowest broker is dead but not yet
    fenced (still in the metadata): its request fails, the others answer."""

    def __init__(self, dead: set[str]) -> None:
        self.dead = dead
        self.asked: list[str] = []

    def describe_configs(self, resources: list[Any], request_timeout: float
                         ) -> dict[Any, Future[Any]]:
        out: dict[Any, Future[Any]] = {}
        for resource in resources:
            self.asked.append(resource.name)
            future: Future[Any] = Future()
            if resource.name in self.dead:
                future.set_exception(KafkaException(f"broker {resource.name} timed out"))
            else:
                future.set_result({k: SimpleNamespace(value=v) for k, v in CLUSTER.items()})
            out[resource] = future
        return out


def test_the_cluster_default_comes_from_a_broker_that_answers() -> None:
    admin = _Cluster(dead={"1"})
    rep = _resolve(kafka(), admin, SimpleNamespace(brokers={1: None, 2: None, 3: None}),  # type: ignore[arg-type]
                   timeout=1.0)
    assert (rep.factor, rep.min_insync) == (3, 1)
    assert admin.asked == ["1", "2"]  # in turn, and no further once one answered
