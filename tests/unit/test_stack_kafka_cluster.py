"""The local Kafka's shape, decided without a running broker: one node exactly as before,
N nodes with their own ports, run directories, voters and replication."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest
from click.testing import CliRunner

from pipeline.cli import main
from pipeline.runtime.children import free_port_block
from pipeline.runtime.config import Config
from pipeline.runtime.errors import ConfigError, ServiceError
from pipeline.tooling.stack import StackInfo, broker_address, kafka_nodes, status
from pipeline.tooling.stack.java import Jdk
from pipeline.tooling.stack.kafka import KafkaService, render_properties, replication, voter_ids

JDKS = [Jdk(17, Path("/j17"))]

#: server.properties of the one-node stack as it was before clusters (9092/9093, /DATA)
ONE_NODE = """\
# Written by `jobstream stack up` on every start; edits here are overwritten.
# One node that is both broker and controller, on loopback only.
process.roles=broker,controller
node.id=1
# Static voters: formatting needs no --standalone flag and works the same on 3.9 and 4.x.
controller.quorum.voters=1@127.0.0.1:9093
listeners=PLAINTEXT://127.0.0.1:9092,CONTROLLER://127.0.0.1:9093
advertised.listeners=PLAINTEXT://127.0.0.1:9092
listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT
controller.listener.names=CONTROLLER
inter.broker.listener.name=PLAINTEXT
log.dirs=/DATA
num.partitions=1
default.replication.factor=1
min.insync.replicas=1
auto.create.topics.enable=true
offsets.topic.replication.factor=1
# One partition for the offsets and transaction topics: a first group join is much faster.
offsets.topic.num.partitions=1
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
transaction.state.log.num.partitions=1
# Without these a one-node 4.x broker logs INVALID_REPLICATION_FACTOR every few seconds.
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1
# No 3 s wait for more members before the first rebalance of every consumer group.
group.initial.rebalance.delay.ms=0
"""


def cfg_in(tmp_path: Path, **stack: object) -> Config:
    return Config().replace(stack={"cache_dir": str(tmp_path / "cache"), **stack})


def props(text: str) -> dict[str, str]:
    return dict(line.split("=", 1) for line in text.splitlines()
                if line and not line.startswith("#"))


def test_one_node_properties_are_unchanged(tmp_path: Path) -> None:
    cfg = cfg_in(tmp_path, kafka_port=9092, kafka_controller_port=9093)
    assert render_properties(cfg, 1, Path("/DATA")) == ONE_NODE


def test_one_node_keeps_its_run_directory_name_and_address(tmp_path: Path) -> None:
    svc = KafkaService(cfg_in(tmp_path), JDKS)
    assert (svc.name, svc.title) == ("kafka", "Kafka")
    assert svc.run_dir == (tmp_path / "cache" / "run" / "kafka").absolute()
    assert svc.pidfile.name == "kafka.pid"
    assert (svc.address, svc.ports) == ("127.0.0.1:9092", (9092, 9093))


def test_three_nodes_properties(tmp_path: Path) -> None:
    cfg = cfg_in(tmp_path, kafka_brokers=3, kafka_port=19092, kafka_controller_port=19093)
    rendered = {n: props(render_properties(cfg, n, Path(f"/d{n}"))) for n in (1, 2, 3)}
    voters = "1@127.0.0.1:19093,2@127.0.0.1:19095,3@127.0.0.1:19097"
    for n, port in ((1, 19092), (2, 19094), (3, 19096)):
        p = rendered[n]
        assert p["node.id"] == str(n)
        assert p["controller.quorum.voters"] == voters
        assert p["listeners"] == (f"PLAINTEXT://127.0.0.1:{port},"
                                  f"CONTROLLER://127.0.0.1:{port + 1}")
        assert p["advertised.listeners"] == f"PLAINTEXT://127.0.0.1:{port}"
        assert p["log.dirs"] == f"/d{n}"
        for key in ("default.replication.factor", "offsets.topic.replication.factor",
                    "transaction.state.log.replication.factor",
                    "share.coordinator.state.topic.replication.factor"):
            assert p[key] == "3", key
        for key in ("min.insync.replicas", "transaction.state.log.min.isr",
                    "share.coordinator.state.topic.min.isr"):
            assert p[key] == "2", key
        assert p["unclean.leader.election.enable"] == "false"
        assert p["group.initial.rebalance.delay.ms"] == "0"
        assert p["offsets.topic.num.partitions"] == "1"


@pytest.mark.parametrize("nodes, expect", [(1, (1, 1)), (2, (2, 1)), (3, (3, 2)),
                                           (5, (3, 2))])
def test_replication_of_a_cluster(nodes: int, expect: tuple[int, int]) -> None:
    assert replication(nodes) == expect


def test_two_nodes_replicate_twice_with_one_in_sync(tmp_path: Path) -> None:
    p = props(render_properties(cfg_in(tmp_path, kafka_brokers=2), 2, Path("/d")))
    assert (p["default.replication.factor"], p["min.insync.replicas"]) == ("2", "1")
    assert voter_ids(render_properties(cfg_in(tmp_path, kafka_brokers=2), 1, Path("/d"))) \
        == {1, 2}


def test_nodes_of_a_cluster_have_their_own_run_directories(tmp_path: Path) -> None:
    cfg = cfg_in(tmp_path, kafka_brokers=3)
    assert kafka_nodes(cfg) == [1, 2, 3]
    nodes = [KafkaService(cfg, JDKS, n) for n in kafka_nodes(cfg)]
    assert [s.run_dir.name for s in nodes] == ["kafka-1", "kafka-2", "kafka-3"]
    assert [s.pidfile.name for s in nodes] == ["kafka-1.pid", "kafka-2.pid", "kafka-3.pid"]
    assert len({s.home for s in nodes}) == 1  # one fetched distribution
    assert [broker_address(cfg, n) for n in (1, 2, 3)] == [
        "127.0.0.1:9092", "127.0.0.1:9094", "127.0.0.1:9096"]
    assert [s.ports for s in nodes] == [(9092, 9093), (9094, 9095), (9096, 9097)]


def test_no_brokers_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="kafka_brokers must be at least 1"):
        kafka_nodes(cfg_in(tmp_path, kafka_brokers=0))


def test_overlapping_node_ports_are_refused(tmp_path: Path) -> None:
    # node 2's broker port would be node 1's controller port
    with pytest.raises(ConfigError, match="odd number apart"):
        kafka_nodes(cfg_in(tmp_path, kafka_brokers=3, kafka_port=9092,
                           kafka_controller_port=9094))
    assert kafka_nodes(cfg_in(tmp_path, kafka_brokers=1, kafka_port=9092,
                              kafka_controller_port=9094)) == [1]
    with pytest.raises(ConfigError, match="overlapping or invalid"):
        kafka_nodes(cfg_in(tmp_path, kafka_brokers=3, kafka_port=65532,
                           kafka_controller_port=65533))


def test_a_node_formatted_for_another_count_is_refused(tmp_path: Path) -> None:
    three = KafkaService(cfg_in(tmp_path, kafka_brokers=3), JDKS, 2)
    three.data_dir.mkdir(parents=True)
    (three.data_dir / "meta.properties").write_text("cluster.id=x\nnode.id=2\n")
    three.properties.write_text(render_properties(three.cfg, 2, three.data_dir))
    two = KafkaService(cfg_in(tmp_path, kafka_brokers=2), JDKS, 2)
    with pytest.raises(ServiceError, match="holds a 3-broker cluster's data, not 2"):
        two.prepare()
    assert voter_ids(three.properties.read_text()) == {1, 2, 3}  # left as it was


def test_status_shows_one_row_per_broker(tmp_path: Path) -> None:
    states = status(cfg_in(tmp_path, kafka_brokers=3))
    assert [(s.name, s.address, s.running) for s in states] == [
        ("kafka-1", "127.0.0.1:9092", False), ("kafka-2", "127.0.0.1:9094", False),
        ("kafka-3", "127.0.0.1:9096", False), ("elasticsearch", "http://127.0.0.1:9200", False)]


def test_stack_status_brokers_option(tmp_path: Path) -> None:
    env = {"JOBSTREAM_STACK__CACHE_DIR": str(tmp_path / "cache")}
    result = CliRunner().invoke(main, ["stack", "status", "--brokers", "3"], env=env)
    assert result.exit_code == ServiceError.exit_code
    rows = [line.split()[0] for line in result.output.splitlines()[1:] if line.strip()]
    assert rows == ["kafka-1", "kafka-2", "kafka-3", "elasticsearch"]


def test_client_config_takes_every_broker() -> None:
    info = StackInfo(kafka_bootstrap="127.0.0.1:9092,127.0.0.1:9094,127.0.0.1:9096",
                     elasticsearch_url="http://127.0.0.1:9200", kafka_version="4.2.1",
                     elasticsearch_version="9.5.3", started=())
    cfg = info.client_config(Config())
    assert cfg.kafka.bootstrap == "127.0.0.1:9092,127.0.0.1:9094,127.0.0.1:9096"


def test_free_port_block_is_free() -> None:
    base = free_port_block(6)
    for port in range(base, base + 6):
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", port))


def test_free_port_block_is_below_the_ephemeral_range() -> None:
    # outgoing connections take their local port from that range: a node's port there
    # could be taken in the seconds before the node binds it
    low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    for _ in range(20):
        base = free_port_block(7)
        assert base + 7 <= low
