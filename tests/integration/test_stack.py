"""The local stack is real: bytes go through the broker, documents through Elasticsearch,
and ``stack status`` / ``stop_service`` / ``start_service`` tell and do the truth."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from click.testing import CliRunner
from confluent_kafka import Consumer, Message, Producer
from confluent_kafka.admin import AdminClient, NewTopic
from elasticsearch import Elasticsearch

from pipeline.cli import main
from pipeline.runtime.config import Config
from pipeline.tooling.stack import StackInfo, start_service, status, stop_service
from pipeline.tooling.stack.procs import port_taken

pytestmark = pytest.mark.integration


def _create_topic(admin: AdminClient, name: str, partitions: int = 1) -> None:
    for future in admin.create_topics([NewTopic(name, partitions, 1)]).values():
        future.result(timeout=30)


def _consume(consumer: Consumer, count: int, max_polls: int = 60) -> list[Message]:
    got: list[Message] = []
    for _ in range(max_polls):
        msg = consumer.poll(1.0)
        if msg is None:
            continue
        assert msg.error() is None, msg.error()
        got.append(msg)
        if len(got) == count:
            break
    return got


def test_kafka_round_trip(stack_cfg: Config, kafka_admin: AdminClient,
                          make_producer: Callable[..., Producer],
                          make_consumer: Callable[..., Consumer]) -> None:
    topic = stack_cfg.topics.raw
    _create_topic(kafka_admin, topic)
    records = [(b"local:1", b"\x00\x01binary\xff"), (b"local:2", b'{"event":"submit"}')]
    producer = make_producer()
    for key, value in records:
        producer.produce(topic, key=key, value=value, headers=[("reason", b"none")])
    assert producer.flush(30) == 0

    got = _consume(make_consumer(topic), len(records))

    assert [(m.key(), m.value()) for m in got] == records
    assert got[0].headers() == [("reason", b"none")]
    assert {m.topic() for m in got} == {topic}


def test_elasticsearch_round_trip(stack_cfg: Config, es: Elasticsearch) -> None:
    index = f"{stack_cfg.elasticsearch.index_prefix}smoke"
    es.indices.create(index=index, mappings={"properties": {
        "cluster": {"type": "keyword"}, "job_id": {"type": "keyword"},
        "run_s": {"type": "long"}}})
    es.index(index=index, id="local:1", document={"cluster": "local", "job_id": "1",
                                                   "run_s": 60})
    es.index(index=index, id="local:2", document={"cluster": "local", "job_id": "2",
                                                   "run_s": 120})
    es.indices.refresh(index=index)

    found = es.search(index=index, query={"term": {"job_id": "2"}})
    total = es.search(index=index, size=0, aggs={"run": {"sum": {"field": "run_s"}}})

    assert [h["_id"] for h in found["hits"]["hits"]] == ["local:2"]
    assert found["hits"]["hits"][0]["_source"] == {"cluster": "local", "job_id": "2",
                                                   "run_s": 120}
    assert total["aggregations"]["run"]["value"] == 180


def test_stack_status_command_shows_each_service(stack: StackInfo, base_config: Config) -> None:
    states = {s.name: s for s in status(base_config)}

    result = CliRunner().invoke(main, ["stack", "status"])

    assert result.exit_code == 0, result.output
    lines = {line.split()[0]: line for line in result.output.splitlines()[1:] if line.strip()}
    for name in ("kafka", "elasticsearch"):
        state = states[name]
        assert state.running and state.ready
        assert lines[name].split()[1:] == [state.version, state.address, str(state.pid),
                                           "ready"]
    assert states["kafka"].version == stack.kafka_version
    assert states["elasticsearch"].address == stack.elasticsearch_url


def test_kafka_stop_and_start_keeps_data(stack_cfg: Config, base_config: Config,
                                         kafka_admin: AdminClient,
                                         make_producer: Callable[..., Producer],
                                         make_consumer: Callable[..., Consumer]) -> None:
    topic = stack_cfg.topics.events
    _create_topic(kafka_admin, topic)
    producer = make_producer()
    producer.produce(topic, key=b"k", value=b"before the restart")
    assert producer.flush(30) == 0

    assert stop_service(base_config, "kafka") is True
    stopped = {s.name: s for s in status(base_config)}["kafka"]
    assert (stopped.running, stopped.pid) == (False, None)
    assert not port_taken(base_config.stack.kafka_port)
    assert stop_service(base_config, "kafka") is False

    assert start_service(base_config, "kafka") is True
    assert start_service(base_config, "kafka") is False

    got = _consume(make_consumer(topic), 1)
    assert [(m.key(), m.value()) for m in got] == [(b"k", b"before the restart")]


def test_producers_place_a_job_where_the_worker_keeps_it(
        stack_cfg: Config, kafka_admin: AdminClient,
        make_consumer: Callable[..., Consumer]) -> None:
    """A jobstream producer (producer_config) puts each key in the partition Faust's
    partitioner (aiokafka's murmur2, the Java client's) gives it, on a real broker."""
    from aiokafka.partitioner import DefaultPartitioner

    from pipeline.kafka.producer import producer_config

    topic = f"{stack_cfg.topics.raw}-partitioner"
    partitions = 12
    _create_topic(kafka_admin, topic, partitions)
    keys = [f"cluster{c}:{job}".encode() for c in range(3) for job in range(0, 40_000, 97)]
    producer = Producer(producer_config(stack_cfg, "test-partitioner"))
    for key in keys:
        producer.produce(topic, key=key, value=b"x")
    assert producer.flush(30) == 0

    got = {m.key(): m.partition() for m in _consume(make_consumer(topic), len(keys),
                                                       max_polls=len(keys) + 60)}
    faust_partition = DefaultPartitioner()
    assert got == {k: faust_partition(k, list(range(partitions)), list(range(partitions)))
                   for k in keys}
    assert len(set(got.values())) == partitions
