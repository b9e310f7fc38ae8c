"""``jobstream stack up --brokers 3``: three KRaft nodes of the stack's Kafka on one machine,
in a cache directory of this module's own (the shared stack's fetched Kafka, symlinked) on
free ports. A topic replicated three times keeps taking acks=all writes with one broker
SIGKILLed, and the broker, restarted, is back in the topic's in-sync replicas."""

from __future__ import annotations

import logging
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner
from confluent_kafka import Consumer, KafkaError, Message, Producer
from confluent_kafka.admin import AdminClient, NewTopic, PartitionMetadata

from pipeline.cli import main
from pipeline.runtime.children import config_env, free_port_block
from pipeline.runtime.config import Config
from pipeline.runtime.errors import ServiceError
from pipeline.tooling.stack import (
    broker_address,
    ensure_up,
    kafka_nodes,
    service,
    start_broker,
    start_service,
    status,
    stop_broker,
    stop_service,
)
from pipeline.tooling.stack.procs import port_taken

pytestmark = pytest.mark.integration

BROKERS = 3

#: librdkafka's lines about the killed broker's refused connections are expected here
QUIET = logging.getLogger("test_stack_cluster.kafka")
QUIET.addHandler(logging.NullHandler())
QUIET.propagate = False


def _env(cfg: Config) -> dict[str, str]:
    return config_env(cfg.replace(stack={"kafka_brokers": 1}))  # --brokers says 3


@pytest.fixture(scope="module")
def cluster(base_config: Config) -> Iterator[Config]:
    """A private three-node Kafka, started with ``jobstream stack up --brokers 3``; the
    Config (kafka_brokers 3) whose clients talk to it."""
    shared = service(base_config, "kafka")
    if not shared.installed():
        ensure_up(base_config, services=["kafka"])  # fetches Kafka once
    cache = Path(tempfile.mkdtemp(prefix="js-cluster-"))
    base = free_port_block(2 * BROKERS)
    cfg = base_config.replace(stack={"cache_dir": str(cache), "kafka_brokers": BROKERS,
                                     "kafka_port": base, "kafka_controller_port": base + 1})
    own = service(cfg, "kafka").home
    own.parent.mkdir(parents=True, exist_ok=True)
    own.symlink_to(shared.home)
    try:
        t0 = time.monotonic()
        result = CliRunner().invoke(main, ["stack", "up", "--brokers", str(BROKERS), "kafka"],
                                    env=_env(cfg))
        print(f"\nthree-node Kafka up in {time.monotonic() - t0:.1f} s")
        assert result.exit_code == 0, result.output
        bootstrap = ",".join(broker_address(cfg, n) for n in kafka_nodes(cfg))
        assert f"stack up (kafka started): Kafka {bootstrap}" in result.output
        yield cfg.replace(kafka={"bootstrap": bootstrap})
    finally:
        stop_service(cfg, "kafka")
        shutil.rmtree(cache, ignore_errors=True)


def _admin(cfg: Config) -> AdminClient:
    return AdminClient(cfg.librdkafka(logger=QUIET))


def _wait(what: str, condition: Callable[[], bool], guard_s: float = 90.0) -> float:
    t0 = time.monotonic()
    while not condition():
        assert time.monotonic() - t0 < guard_s, f"still waiting for {what}"
        time.sleep(0.5)
    return time.monotonic() - t0


def test_three_brokers_each_in_status_and_metadata(cluster: Config) -> None:
    md = _admin(cluster).list_topics(timeout=15)
    assert {b.id: f"{b.host}:{b.port}" for b in md.brokers.values()} == {
        n: broker_address(cluster, n) for n in (1, 2, 3)}
    states = [s for s in status(cluster) if s.name.startswith("kafka")]
    assert [(s.name, s.address, s.running, s.ready) for s in states] == [
        (f"kafka-{n}", broker_address(cluster, n), True, True) for n in (1, 2, 3)]
    assert len({s.pid for s in states}) == 3
    run = Path(cluster.stack.cache_dir) / "run"
    assert sorted(p.name for p in run.iterdir()) == ["kafka-1", "kafka-2", "kafka-3"]

    # without --brokers, status shows the cluster that runs, not a stopped one-node Kafka
    for args in (["--brokers", "3"], []):
        shown = CliRunner().invoke(main, ["stack", "status", *args], env=_env(cluster))
        rows = {line.split()[0]: line for line in shown.output.splitlines()[1:]
                if line.strip()}
        assert not any(name == "kafka" for name in rows), shown.output
        for n in (1, 2, 3):
            assert broker_address(cluster, n) in rows[f"kafka-{n}"]
            assert "ready" in rows[f"kafka-{n}"]


def test_one_node_is_refused_beside_the_cluster(cluster: Config) -> None:
    with pytest.raises(ServiceError, match="runs in another shape"):
        start_service(cluster.replace(stack={"kafka_brokers": 1}), "kafka")
    assert not (Path(cluster.stack.cache_dir) / "run" / "kafka").exists()


def test_writes_go_on_with_a_broker_killed_and_it_rejoins(cluster: Config) -> None:
    admin = _admin(cluster)
    topic = "cluster-acks-all"
    # no replication factor given: the cluster's default, three copies, two in sync
    for future in admin.create_topics([NewTopic(topic, 1)]).values():
        future.result(timeout=30)

    def partition() -> PartitionMetadata:
        return admin.list_topics(topic, timeout=10).topics[topic].partitions[0]

    def led() -> bool:
        try:
            return partition().leader in (1, 2, 3)
        except KeyError:  # the new topic not yet in this broker's metadata
            return False

    _wait("the topic's leader", led)
    assert sorted(partition().replicas) == [1, 2, 3]
    victim = partition().leader

    assert stop_broker(cluster, victim, kill=True)
    assert not [s for s in status(cluster) if s.name == f"kafka-{victim}"][0].running

    delivered: list[Message] = []
    errors: list[KafkaError] = []

    def on_delivery(err: KafkaError | None, msg: Message) -> None:
        if err is not None:
            errors.append(err)
        else:
            delivered.append(msg)

    producer = Producer(cluster.librdkafka(**{"acks": "all", "enable.idempotence": True,
                                              "message.timeout.ms": 60000, "logger": QUIET}))
    t0 = time.monotonic()
    for i in range(100):
        producer.produce(topic, key=str(i).encode(), value=b"x" * 100, on_delivery=on_delivery)
    assert producer.flush(90) == 0
    print(f"\n100 acks=all writes with broker {victim} killed: {time.monotonic() - t0:.1f} s")
    assert errors == []
    assert len(delivered) == 100
    assert partition().leader != victim
    assert victim not in partition().isrs

    t0 = time.monotonic()
    assert start_broker(cluster, victim)
    back = _wait(f"broker {victim} back in the ISR",
                 lambda: sorted(partition().isrs) == [1, 2, 3])
    print(f"broker {victim} restarted in {time.monotonic() - t0 - back:.1f} s, "
          f"in sync {back:.1f} s later")

    consumer = Consumer(cluster.librdkafka(**{"group.id": "cluster-read", "logger": QUIET,
                                              "auto.offset.reset": "earliest"}))
    consumer.subscribe([topic])
    keys: set[bytes] = set()
    deadline = time.monotonic() + 60
    try:
        while len(keys) < 100 and time.monotonic() < deadline:
            msg = consumer.poll(1.0)
            if msg is not None and msg.error() is None:
                keys.add(msg.key())
    finally:
        consumer.close()
    assert keys == {str(i).encode() for i in range(100)}


def test_stack_down_stops_every_node_and_keeps_their_data(cluster: Config) -> None:
    result = CliRunner().invoke(main, ["stack", "down", "kafka"], env=_env(cluster))
    assert result.exit_code == 0, result.output
    assert "stopped: kafka" in result.output
    assert not any(s.running for s in status(cluster))
    for n in kafka_nodes(cluster):
        host_port = broker_address(cluster, n)
        assert not port_taken(int(host_port.rsplit(":", 1)[1]))
        node_dir = Path(cluster.stack.cache_dir) / "run" / f"kafka-{n}"
        assert (node_dir / "data" / "meta.properties").is_file()
        assert not (node_dir / f"kafka-{n}.pid").exists()
