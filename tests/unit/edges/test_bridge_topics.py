"""Which topics the jobcomp/kafka bridge reads, and how its consumer is set up.

Slurm's jobcomp/kafka writes finish records to JobCompParams ``topic=`` (default the
ClusterName) and, since 25.05 with ``enable_job_start``, start records to
``topic_job_start=`` (default ``<ClusterName>-job-start``). The bridge on the real broker:
tests/integration/test_edges.py.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from pipeline.edges.base import EdgeRuntime
from pipeline.edges.slurm import SlurmEdge
from pipeline.edges.slurm.bridge import METADATA_REFRESH_MS, JobcompKafkaBridge, bridge_topics
from pipeline.runtime.children import config_env
from pipeline.runtime.config import Config, load_config
from pipeline.runtime.errors import ConfigError


def slurm(cfg: Config, **keys: object) -> Config:
    return cfg.replace(edge={"slurm": keys})


def test_defaults_are_slurms_own_finish_and_start_topics() -> None:
    assert bridge_topics(Config(cluster="tioga")) == ["tioga", "tioga-job-start"]


def test_a_list_from_toml_and_from_the_environment(tmp_path: Path) -> None:
    path = tmp_path / "jobstream.toml"
    path.write_text('cluster = "tioga"\n[edge.slurm]\n'
                    'bridge_topics = ["s25.jobcomp", "s25.starts"]\n')
    assert bridge_topics(load_config(str(path), environ={})) == ["s25.jobcomp", "s25.starts"]
    env = {"JOBSTREAM_EDGE__SLURM__BRIDGE_TOPICS": " a.done , b.start ,"}
    assert load_config(str(path), environ=env).edge.slurm.bridge_topics == ("a.done", "b.start")


def test_the_list_survives_the_environment_of_a_child_process() -> None:
    cfg = slurm(Config(cluster="tioga"), bridge=True, bridge_topics=("x", "y-job-start"))
    assert load_config("", environ=config_env(cfg)) == cfg


def test_a_list_of_other_than_strings_is_a_config_error(tmp_path: Path) -> None:
    path = tmp_path / "jobstream.toml"
    path.write_text("[edge.slurm]\nbridge_topics = [1, 2]\n")
    with pytest.raises(ConfigError, match="edge.slurm.bridge_topics"):
        load_config(str(path), environ={})


def test_deprecated_single_topic_replaces_the_finish_topic_only() -> None:
    cfg = slurm(Config(cluster="tioga"), bridge_topic="tioga-jobcomp")
    assert bridge_topics(cfg) == ["tioga-jobcomp", "tioga-job-start"]


def test_both_keys_at_once_is_a_config_error() -> None:
    cfg = slurm(Config(), bridge_topic="a", bridge_topics=("b",))
    with pytest.raises(ConfigError, match="bridge_topic is deprecated"):
        bridge_topics(cfg)


def test_one_topic_for_both_kinds_is_read_once() -> None:
    # the 25.11 recording ran with topic=s25.jobcomp,topic_job_start=s25.jobcomp
    cfg = slurm(Config(), bridge_topics=("s25.jobcomp", "s25.jobcomp"))
    assert bridge_topics(cfg) == ["s25.jobcomp"]


@pytest.mark.parametrize("bad", ["has space", "slash/topic", "..", "x" * 250])
def test_an_invalid_topic_name_is_a_config_error(bad: str) -> None:
    with pytest.raises(ConfigError, match="^edge.slurm.bridge_topics: .* not a valid Kafka"):
        bridge_topics(slurm(Config(), bridge_topics=(bad,)))


def test_a_cluster_name_kafka_cannot_take_is_a_config_error_too() -> None:
    with pytest.raises(ConfigError, match=re.escape(
            "(from cluster; set edge.slurm.bridge_topics): 'my cluster'")):
        bridge_topics(Config(cluster="my cluster"))


@pytest.fixture
def bridge_rt(edge_cfg: Config) -> Iterator[Callable[..., EdgeRuntime]]:
    """A factory of runtimes for bridges with the given ``edge.slurm`` keys."""
    made: list[EdgeRuntime] = []

    def make(cfg: Config = edge_cfg, **keys: object) -> EdgeRuntime:
        made.append(EdgeRuntime(slurm(cfg, bridge=True, **keys), "bridge"))
        return made[-1]

    yield make
    for rt in made:
        rt.spool.close()


def test_the_consumer_looks_for_new_topics_often(bridge_rt: Callable[..., EdgeRuntime]
                                                 ) -> None:
    bridge = JobcompKafkaBridge(bridge_rt())
    assert bridge.topics == ["testcluster", "testcluster-job-start"]
    assert bridge._props["topic.metadata.refresh.interval.ms"] == METADATA_REFRESH_MS
    assert METADATA_REFRESH_MS <= 30_000  # librdkafka's default, 300 s, is far too late


def test_the_properties_file_sets_the_metadata_interval(
        bridge_rt: Callable[..., EdgeRuntime], edge_cfg: Config, tmp_path: Path) -> None:
    props = tmp_path / "librdkafka.properties"
    props.write_text("topic.metadata.refresh.interval.ms=2500\n")
    rt = bridge_rt(edge_cfg.replace(kafka={"properties_file": str(props)}))
    assert JobcompKafkaBridge(rt)._props["topic.metadata.refresh.interval.ms"] == "2500"


def test_the_deprecated_key_is_announced(bridge_rt: Callable[..., EdgeRuntime],
                                         caplog: pytest.LogCaptureFixture) -> None:
    rt = bridge_rt(bridge_topic="old")
    with caplog.at_level(logging.WARNING, logger="pipeline.edges.slurm.bridge"):
        assert JobcompKafkaBridge(rt).topics == ["old", "testcluster-job-start"]
    assert "bridge_topic is deprecated" in caplog.text


def test_a_missing_topic_is_reported_once_under_its_own_name(
        bridge_rt: Callable[..., EdgeRuntime], caplog: pytest.LogCaptureFixture) -> None:
    bridge = JobcompKafkaBridge(bridge_rt())
    msg = "Subscribed topic not available: testcluster-job-start: Broker: Unknown topic"
    with caplog.at_level(logging.INFO, logger="pipeline.edges.slurm.bridge"):
        bridge._topic_missing(msg)
        bridge._topic_missing(msg)
    assert caplog.text.count("testcluster-job-start") == 1
    assert bridge._missing == {"testcluster-job-start"}


def test_the_edge_refuses_to_start_on_a_bad_topic(edge_cfg: Config) -> None:
    with pytest.raises(ConfigError):
        SlurmEdge(slurm(edge_cfg, bridge=True, bridge_topics=("no way",)))
