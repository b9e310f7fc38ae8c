"""Fixtures shared by all tests: the real local stack, isolated names per test, clients.

The stack (real Kafka and Elasticsearch, ``pipeline.tooling.stack``) starts once per session, on
first use, and only for tests that ask for it; a stack already up is reused. The session
leaves it running: other test sessions on the machine may be using it, and the next run
starts faster. ``./run test`` (and so CI) stops at its end whatever was not running before
it; ``jobstream stack down`` stops it by hand. Under ``CI=true`` a stack that cannot start
fails the run; elsewhere such tests skip with the reason.

Per test, ``stack_cfg`` is a Config pointing at the stack whose topic names, index prefix,
Faust app id and state directories are the test's own; its topics, indices and index
templates are deleted afterwards.
"""

from __future__ import annotations

import gc
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient
from datafiles import unavailable
from elasticsearch import Elasticsearch
from stack_names import isolated

from pipeline.runtime.config import Config, load_config
from pipeline.runtime.errors import ServiceError
from pipeline.tooling.stack import StackInfo, ensure_up

_INTEGRATION_DIR = Path(__file__).parent / "integration"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    # Everything under tests/integration talks to real services, marked or not.
    for item in items:
        if _INTEGRATION_DIR in Path(str(item.path)).parents:
            item.add_marker(pytest.mark.integration)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    # A Kafka client that only a reference cycle still holds (a traceback's frames, say)
    # is destroyed now, while the interpreter can still run its callbacks, not during the
    # interpreter's teardown.
    gc.collect()


@pytest.fixture(scope="session")
def base_config() -> Config:
    """The session's configuration: ./jobstream.toml or $JOBSTREAM_CONFIG, then JOBSTREAM_*."""
    return load_config()


@pytest.fixture(scope="session")
def stack(base_config: Config) -> StackInfo:
    """The running local stack (started now if needed)."""
    try:
        info = ensure_up(base_config)
    except ServiceError as exc:
        error = exc
    else:
        error = None
    if error is not None:
        # outside the except block: the report shows the reason, not a chained traceback
        unavailable(f"local stack unavailable: {error}",
                    f"the local stack must run under CI, but: {error}")
    return info


@pytest.fixture(scope="session")
def stack_base_cfg(base_config: Config, stack: StackInfo) -> Config:
    """The session config with the stack's Kafka bootstrap and Elasticsearch URL."""
    return stack.client_config(base_config)


@pytest.fixture
def stack_cfg(stack_base_cfg: Config, tmp_path: Path) -> Iterator[Config]:
    """A Config of this test's own on the running stack (:func:`stack_names.isolated`)."""
    with isolated(stack_base_cfg, tmp_path) as cfg:
        yield cfg


def es_client(cfg: Config) -> Elasticsearch:
    """An Elasticsearch client for ``cfg.elasticsearch`` (URL, credentials, CA)."""
    kwargs: dict[str, Any] = {"request_timeout": 30}
    if cfg.elasticsearch.username:
        kwargs["basic_auth"] = (cfg.elasticsearch.username, cfg.elasticsearch.password.reveal())
    if cfg.elasticsearch.ca_certs:
        kwargs["ca_certs"] = cfg.elasticsearch.ca_certs
    return Elasticsearch(cfg.elasticsearch.url, **kwargs)


@pytest.fixture
def es(stack_cfg: Config) -> Iterator[Elasticsearch]:
    """An Elasticsearch client on the stack."""
    with es_client(stack_cfg) as client:
        yield client


@pytest.fixture
def kafka_admin(stack_cfg: Config) -> AdminClient:
    """A confluent-kafka AdminClient on the stack."""
    return AdminClient(stack_cfg.librdkafka())


@pytest.fixture
def make_producer(stack_cfg: Config) -> Iterator[Callable[..., Producer]]:
    """``make_producer(**librdkafka_props)`` -> a Producer on the stack (flushed after)."""
    made: list[Producer] = []

    def make(**extra: Any) -> Producer:
        producer = Producer(stack_cfg.librdkafka(**extra))
        made.append(producer)
        return producer

    yield make
    for producer in made:
        producer.flush(10)


@pytest.fixture
def make_consumer(stack_cfg: Config) -> Iterator[Callable[..., Consumer]]:
    """``make_consumer(*topics, **librdkafka_props)`` -> a Consumer on the stack, subscribed
    to ``topics``, in a group of its own, reading from the earliest offset (closed after)."""
    made: list[Consumer] = []

    def make(*topics: str, **extra: Any) -> Consumer:
        props = {"group.id": f"test-{uuid.uuid4().hex[:10]}", "auto.offset.reset": "earliest",
                 **extra}
        consumer = Consumer(stack_cfg.librdkafka(**props))
        made.append(consumer)
        if topics:
            consumer.subscribe(list(topics))
        return consumer

    yield make
    for consumer in made:
        consumer.close()
