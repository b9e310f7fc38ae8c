"""Kafka SASL_SSL and Elasticsearch TLS with basic auth, on real secured services.

A Kafka with a SCRAM-SHA-256 ``SASL_SSL`` listener and an Elasticsearch with x-pack
security, TLS and a file-realm user (tests/integration/secure_stack.py), both with
certificates generated for the test. Kafka security is configured the one way jobstream
has: a librdkafka properties file (``kafka.properties_file``), which the confluent clients
take as it is and the Faust worker through :mod:`pipeline.kafka.auth`; Elasticsearch
through ``elasticsearch.url`` / ``username`` / ``password`` / ``ca_certs``.

Covered: a round trip through each service with the right credentials, refusals with wrong
ones, then the whole flow on them (``jobstream edge flux`` -> ``jobstream worker`` ->
``jobstream sink``, debug logging on) ending in the truth in Elasticsearch; no password
in any of their output, nor in ``jobstream config show``.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaException, Producer
from confluent_kafka.admin import AdminClient, NewTopic
from datafiles import unavailable
from elasticsearch import AuthenticationException
from elasticsearch import ConnectionError as ESConnectionError
from secure_stack import Certs, SecureElasticsearch, SecureKafka, make_certs
from stack_names import isolate

from pipeline.kafka.positions import Positions, group_lag
from pipeline.kafka.topics import canonical_topic
from pipeline.replay.readback import client, job_documents, jobs_alias
from pipeline.runtime.children import Child, config_env, free_port, log_tail
from pipeline.runtime.config import Config, Secret
from pipeline.runtime.errors import ServiceError
from pipeline.sink.client import make_client
from pipeline.tooling.stack import ensure_up, service
from pipeline.tooling.stack.java import find_jdks
from pipeline.tooling.stack.ui import Reporter
from pipeline.tooling.verify import compare
from pipeline.tooling.workload import Workload, WorkloadSpec

USER = "jobstream"
GUARD_S = 300.0


@dataclass(frozen=True)
class Secured:
    #: clients' configuration: SASL_SSL bootstrap and properties file, https URL, user
    cfg: Config
    certs: Certs
    kafka_password: str
    es_password: str
    props: dict[str, str]


@pytest.fixture(scope="module")
def secured(base_config: Config) -> Iterator[Secured]:
    if not (service(base_config, "kafka").installed()
            and service(base_config, "elasticsearch").installed()):
        try:
            ensure_up(base_config)  # fetches the distributions once
        except ServiceError as exc:
            unavailable(f"stack unavailable: {exc}", f"the stack must run under CI, but: {exc}")
    cache = Path(tempfile.mkdtemp(prefix="js-secure-", dir="/tmp"))
    cache.chmod(0o755)  # the Elasticsearch system user (as root) must traverse it
    cfg = base_config.replace(stack={"cache_dir": str(cache), "kafka_port": free_port(),
                                     "kafka_controller_port": free_port(),
                                     "elasticsearch_port": free_port()})
    for name in ("kafka", "elasticsearch"):
        own = service(cfg, name).home  # type: ignore[attr-defined]
        own.parent.mkdir(parents=True, exist_ok=True)
        own.symlink_to(service(base_config, name).home)  # type: ignore[attr-defined]
    certs = make_certs(cache / "certs")
    # recognisable, so that a leak shows in a grep of every log
    kafka_password = f"kafkapw-{secrets.token_hex(8)}"
    es_password = f"espw-{secrets.token_hex(8)}"
    jdks = find_jdks()
    kafka = SecureKafka(cfg, jdks, certs=certs, sasl_port=free_port())
    es = SecureElasticsearch(cfg, jdks, certs=certs, username=USER, password=es_password)
    ui = Reporter()
    started = []
    try:
        kafka.start(ui)
        started.append(kafka)
        kafka.add_user(USER, kafka_password)
        es.start(ui)
        started.append(es)
        props = {"security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-256",
                 "sasl.username": USER, "sasl.password": kafka_password,
                 "ssl.ca.location": str(certs.ca)}
        props_file = cache / "client.properties"
        props_file.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
        yield Secured(
            cfg=cfg.replace(kafka={"bootstrap": kafka.secure_address,
                                   "properties_file": str(props_file)},
                            elasticsearch={"url": es.address, "username": USER,
                                           "password": es_password,
                                           "ca_certs": str(certs.ca)}),
            certs=certs, kafka_password=kafka_password, es_password=es_password,
            props=props)
    finally:
        for svc in reversed(started):
            svc.stop(ui)
        shutil.rmtree(cache, ignore_errors=True)


def own_names(cfg: Config, tmp_path: Path) -> Config:
    return isolate(cfg, uuid.uuid4().hex[:8], tmp_path).replace(
        worker={"web_port": free_port()})


# -- round trips ------------------------------------------------------------------------


def test_kafka_round_trip_over_sasl_ssl(secured: Secured) -> None:
    cfg = secured.cfg
    topic = f"secure-{uuid.uuid4().hex[:8]}"
    admin = AdminClient(cfg.librdkafka())
    for future in admin.create_topics([NewTopic(topic, 1, 1)]).values():
        future.result(timeout=30)
    producer = Producer(cfg.librdkafka())
    producer.produce(topic, key=b"k", value=b"over TLS, authenticated")
    assert producer.flush(30) == 0
    consumer = Consumer(cfg.librdkafka(**{"group.id": topic, "auto.offset.reset": "earliest"}))
    consumer.subscribe([topic])
    try:
        msg = None
        deadline = time.monotonic() + 60
        while msg is None and time.monotonic() < deadline:
            m = consumer.poll(1.0)
            if m is not None and not m.error():
                msg = m
    finally:
        consumer.close()
    assert msg is not None and msg.value() == b"over TLS, authenticated"


@pytest.mark.parametrize("change", [
    {"sasl.password": "wrong"},
    {"security.protocol": "SSL"},  # TLS without SASL: the listener wants SCRAM
])
def test_kafka_refuses_other_credentials(secured: Secured, change: dict[str, str]) -> None:
    props = {**secured.props, **change, "bootstrap.servers": secured.cfg.kafka.bootstrap}
    if change.get("security.protocol") == "SSL":
        props = {k: v for k, v in props.items() if not k.startswith("sasl.")}
    with pytest.raises(KafkaException):
        AdminClient(props).list_topics(timeout=10)


def test_elasticsearch_round_trip_over_tls_with_basic_auth(secured: Secured) -> None:
    with make_client(secured.cfg.elasticsearch) as es:
        es.index(index="secure-check", id="1", document={"ok": True}, refresh=True)
        assert es.get(index="secure-check", id="1")["_source"] == {"ok": True}
        es.indices.delete(index="secure-check")


def test_elasticsearch_refuses_a_wrong_password_and_an_unknown_ca(secured: Secured) -> None:
    es_cfg = secured.cfg.elasticsearch
    wrong = make_client(secured.cfg.replace(elasticsearch={"password": "wrong"}).elasticsearch)
    with wrong, pytest.raises(AuthenticationException):
        wrong.info()
    no_ca = make_client(secured.cfg.replace(elasticsearch={"ca_certs": ""}).elasticsearch)
    with no_ca, pytest.raises(ESConnectionError):
        no_ca.cluster.health()
    assert es_cfg.password == Secret(secured.es_password)


# -- the flow ---------------------------------------------------------------------------


def caught_up(cfg: Config, positions: Positions, records: int) -> bool:
    app, t = cfg.worker.app_id, cfg.topics
    for group, topics in ((app, [t.raw, canonical_topic(app)]), (f"{app}-sink",
                                                               [t.state, t.events])):
        tps = positions.partitions(topics)
        if len({name for name, _ in tps}) != len(topics):
            return False
        ends = positions.ends(topics)
        if group_lag(ends, positions.committed(group, tps)):
            return False
    return sum(positions.ends([t.raw]).values()) >= records


def test_the_flow_on_secured_services_leaks_no_secret(secured: Secured, tmp_path: Path) -> None:
    cfg = own_names(secured.cfg, tmp_path).replace(cluster="flux-a")
    workload = Workload(WorkloadSpec(seed=31, jobs=30, rate=5.0, time_scale=0.05,
                                     flux_clusters=("flux-a",), slurm_clusters=(),
                                     start=1_780_000_000.0, usage_interval_s=None))
    # the Flux edge's journal only: node samples are the node edge's
    records = list(workload.records())
    journal = tmp_path / "journal.jsonl"
    journal.write_bytes(b"".join(r.payload + b"\n" for r in records))

    worker = Child("worker", cfg, ["worker", "--name", "secure", "--loglevel", "debug"],
                   tmp_path / "worker.log").start()
    sink = Child("sink", cfg, ["-vv", "sink"], tmp_path / "sink.log").start()
    edge = Child("edge", cfg, ["-vv", "edge", "flux", "--recorded", str(journal)],
                 tmp_path / "edge.log").start()
    positions = Positions(AdminClient(cfg.librdkafka()))
    try:
        assert edge.proc is not None and edge.proc.wait(GUARD_S) == 0, log_tail(edge.log, 40)
        deadline = time.monotonic() + GUARD_S
        while not caught_up(cfg, positions, len(records)):
            for child in (worker, sink):
                child.check()
            assert time.monotonic() < deadline, \
                f"hang guard\n{log_tail(worker.log, 30)}\n{log_tail(sink.log, 30)}"
            time.sleep(0.5)
    finally:
        for child in (edge, sink, worker):
            child.stop()

    with client(cfg) as es:
        es.indices.refresh(index=f"{cfg.elasticsearch.index_prefix}*")
        result = compare(workload.truth, job_documents(es, jobs_alias(cfg)))
    assert result.ok, (result.missing[:5], result.examples[:5])

    # no password anywhere in what the processes wrote (debug logging included)
    for child in (edge, worker, sink):
        text = child.log.read_text(errors="replace")
        assert text, f"{child.name} wrote no log: the check proves nothing"
        for secret in (secured.kafka_password, secured.es_password):
            assert secret not in text, f"{child.name}'s log shows a password"


def test_config_show_masks_the_password(secured: Secured) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("JOBSTREAM_")}
    env.update(config_env(secured.cfg), JOBSTREAM_CONFIG="/dev/null")
    assert env["JOBSTREAM_ELASTICSEARCH__PASSWORD"] == secured.es_password
    out = subprocess.run([str(Path(sys.executable).with_name("jobstream")), "config", "show"],
                         env=env, capture_output=True, text=True, timeout=60, check=False)
    assert out.returncode == 0, out.stderr
    shown = json.loads(out.stdout)
    assert shown["elasticsearch"]["password"] == "****"
    assert shown["kafka"]["properties_file"].endswith("client.properties")
    for secret in (secured.kafka_password, secured.es_password):
        assert secret not in out.stdout + out.stderr
