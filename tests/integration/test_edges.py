"""Producer edges on a real broker: journal replay with a disconnect, Slurm sources, and
the fault test (Kafka down while records come in, edge SIGKILLed and restarted, Kafka
back: every record arrives).

The fault test stops and starts a Kafka of its own (the stack's API on other ports and
another run directory, sharing the fetched broker), so the shared stack never goes down
under other tests.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, NewTopic
from datafiles import unavailable, vector

from pipeline.codecs.codec import AvroCodec, raw_from_avro
from pipeline.core.model import RawRecord
from pipeline.edges.flux import SINCE_META, FluxEdge, RecordedJournalSource
from pipeline.edges.slurm import SlurmEdge
from pipeline.edges.slurm.hooks import install_hook
from pipeline.edges.spool import Spool
from pipeline.runtime.config import Config
from pipeline.runtime.errors import ServiceError
from pipeline.tooling.stack import ensure_up, service, start_service, stop_service

LIVE = vector("flux", "real-0.88-journal-live.jsonl")
BACKLOG = vector("flux", "real-0.88-journal-backlog.jsonl")
JOBCOMP = [ln for ln in vector("slurm", "jobcomp_22.05_sample.jsonl").read_bytes()
           .split(b"\n") if ln.strip()]


def responses(*paths: Path) -> list[bytes]:
    out = []
    for path in paths:
        out += [ln for ln in path.read_bytes().split(b"\n")
                if ln.strip() and json.loads(ln)["id"] != -1]
    return out


def consume_all(cfg: Config, topic: str, expect: int, timeout: float = 120.0
                ) -> list[tuple[bytes | None, RawRecord, int]]:
    """(key, record, partition) of at least ``expect`` messages of ``topic``."""
    consumer = Consumer(cfg.librdkafka(**{"group.id": f"check-{time.time_ns()}",
                                          "auto.offset.reset": "earliest"}))
    consumer.subscribe([topic])
    codec = AvroCodec("RawRecord")
    out: list[tuple[bytes | None, RawRecord, int]] = []
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None:
                if len(out) >= expect:
                    break
                continue
            if msg.error():
                continue
            out.append((msg.key(), raw_from_avro(codec.decode(msg.value())), msg.partition()))
    finally:
        consumer.close()
    return out


def check_keyed_and_ordered(got: list[tuple[bytes | None, RawRecord, int]],
                            expected: list[bytes], cluster: str) -> None:
    """Every expected response arrived, keyed by job, one partition per job, and in each
    job the first arrivals keep the journal's order."""
    assert {r.payload for _, r, _ in got} == set(expected)
    partitions: dict[bytes | None, set[int]] = defaultdict(set)
    firsts: dict[bytes | None, list[bytes]] = defaultdict(list)
    for key, rec, part in got:
        job = json.loads(rec.payload)["id"]
        assert key == f"{cluster}:{job}".encode()
        partitions[key].add(part)
        if rec.payload not in firsts[key]:
            firsts[key].append(rec.payload)
    assert all(len(p) == 1 for p in partitions.values())
    for key, seen in firsts.items():
        order = [p for p in expected if f"{cluster}:{json.loads(p)['id']}".encode() == key]
        assert seen == order


def test_flux_edge_replays_a_recording_with_a_disconnect(stack_cfg: Config) -> None:
    cfg = stack_cfg.replace(cluster="fluxtest", edge={"flux": {"reconnect_max_s": 0.5}})
    source = RecordedJournalSource([LIVE], disconnect_after=[80])
    edge = FluxEdge(cfg, source)
    edge.run(threading.Event())  # a recording: returns once everything is confirmed
    assert source.connections == 2
    expected = responses(LIVE)
    got = consume_all(cfg, cfg.topics.raw, len(expected))
    check_keyed_and_ordered(got, expected, "fluxtest")
    assert all(r.format == "flux-journal" and r.scheduler == "flux" for _, r, _ in got)
    with Spool(edge.runtime.spool.path) as spool:
        assert spool.depth() == 0
        newest = max(e["timestamp"] for p in expected for e in json.loads(p)["events"])
        assert float(spool.get_meta(SINCE_META) or 0) == newest


def test_flux_edge_resumes_after_the_watermark(stack_cfg: Config) -> None:
    cfg = stack_cfg.replace(cluster="fluxtest")
    FluxEdge(cfg, RecordedJournalSource([BACKLOG])).run(threading.Event())
    first = consume_all(cfg, cfg.topics.raw, len(responses(BACKLOG)))
    assert len(first) == len(responses(BACKLOG))
    # a second connection replays the same backlog: all of it is behind the watermark
    edge = FluxEdge(cfg, RecordedJournalSource([BACKLOG]))
    edge.run(threading.Event())
    assert edge.published == 0 and edge.skipped == len(responses(BACKLOG))


@pytest.fixture
def short_dir() -> Iterator[Path]:
    d = Path(tempfile.mkdtemp(prefix="js-", dir="/tmp"))
    yield d
    shutil.rmtree(d, ignore_errors=True)


def test_slurm_sources_reach_the_raw_topic_keyed(stack_cfg: Config, short_dir: Path) -> None:
    cfg = stack_cfg.replace(edge={"slurm": {
        "receiver_port": 0, "poller": False, "nodes": False,
        "hook_socket": str(short_dir / "hook.sock"), "hook_drop_dir": str(short_dir / "drop")}})
    edge = SlurmEdge(cfg).start()
    try:
        import http.client
        assert edge.receiver is not None
        for line in JOBCOMP:
            conn = http.client.HTTPConnection("127.0.0.1", edge.receiver.port, timeout=10)
            conn.request("POST", "/slurm/_doc", body=line,
                         headers={"Content-Type": "application/json"})
            assert conn.getresponse().status == 201
            conn.close()
        hook = install_hook(cfg, short_dir / "hook")
        env = dict(line.split("=", 1) for line in
                   vector("slurm", "hooks", "epilog_ctld_2.env").read_text().splitlines())
        assert subprocess.run([str(hook)], env=env, timeout=30).returncode == 0
        assert edge.runtime.drainer.drain(60)
    finally:
        edge.stop()
    got = consume_all(cfg, cfg.topics.raw, 4)
    by_format = defaultdict(list)
    for key, rec, _ in got:
        by_format[rec.format].append((key, rec))
    assert [r.payload for _, r in by_format["slurm-jobcomp"]] == JOBCOMP
    [(key, hook_rec)] = by_format["slurm-hook"]
    assert key == b"testcluster:2" and json.loads(hook_rec.payload)["SLURM_JOB_ID"] == "2"


#: jobcomp/kafka of a real Slurm 25.11.7, in produce order: start records have state null
KAFKA_25_11 = [ln for ln in vector("slurm", "jobcomp_kafka_25.11.jsonl").read_bytes()
               .split(b"\n") if ln.strip()]


def _produce_unkeyed(cfg: Config, topic: str, values: list[bytes]) -> None:
    """As jobcomp/kafka does: values only, no key, no headers."""
    producer = Producer(cfg.librdkafka())
    for value in values:
        producer.produce(topic, value=value)
    assert producer.flush(30) == 0


def test_jobcomp_kafka_bridge_reads_slurms_two_topics_the_start_one_created_late(
        stack_cfg: Config) -> None:
    # Slurm's defaults: finish records on <ClusterName>, start records on
    # <ClusterName>-job-start; the names carry the test's suffix so that they are dropped
    cluster = "s25-" + stack_cfg.topics.raw.rsplit(".", 1)[1]
    finish_topic, start_topic = cluster, f"{cluster}-job-start"
    cfg = stack_cfg.replace(cluster=cluster, edge={"slurm": {
        "bridge": True, "bridge_group": f"bridge-{cluster}",
        "receiver": False, "hooks": False, "poller": False, "nodes": False}})
    starts = [v for v in KAFKA_25_11 if json.loads(v)["state"] is None]
    finishes = [v for v in KAFKA_25_11 if json.loads(v)["state"] is not None]
    assert (len(starts), len(finishes)) == (16, 17)  # the vector README's counts

    admin = AdminClient(cfg.librdkafka())
    for future in admin.create_topics([NewTopic(finish_topic, 3, 1)]).values():
        future.result(30)
    _produce_unkeyed(cfg, finish_topic, finishes)
    assert start_topic not in admin.list_topics(timeout=10).topics

    edge = SlurmEdge(cfg).start()
    try:
        bridge = edge.bridge
        assert bridge is not None and bridge.topics == [finish_topic, start_topic]
        _wait(lambda: bridge.bridged >= len(finishes), 60, "the finish records")
        # the start topic appears only now, as with Slurm's first job start
        for future in admin.create_topics([NewTopic(start_topic, 2, 1)]).values():
            future.result(30)
        _produce_unkeyed(cfg, start_topic, starts)
        _wait(lambda: bridge.bridged >= len(KAFKA_25_11), 90, "the start records")
        assert edge.runtime.drainer.drain(60)
    finally:
        edge.stop()

    got = consume_all(cfg, cfg.topics.raw, len(KAFKA_25_11))
    assert sorted(r.payload for _, r, _ in got) == sorted(KAFKA_25_11)
    partitions: dict[bytes | None, set[int]] = defaultdict(set)
    kinds: dict[bytes | None, set[str]] = defaultdict(set)
    for key, rec, part in got:
        record = json.loads(rec.payload)
        assert (rec.format, rec.scheduler) == ("slurm-jobcomp", "slurm")
        # keyed by the record's own cluster and job, every record of a job in one partition
        assert key == f"{record['cluster']}:{record['jobid']}".encode()
        partitions[key].add(part)
        kinds[key].add("start" if record["state"] is None else "finish")
    assert all(len(p) == 1 for p in partitions.values())
    assert len(kinds) == 17
    # every job that ran has both kinds; held job 4 was cancelled before it started
    assert {k for k, v in kinds.items() if v != {"start", "finish"}} == {b"kafkatest:4"}


# -- the fault test ----------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def private_kafka(base_config: Config, tmp_path: Path) -> Iterator[Config]:
    """A Kafka of this test alone: the stack's service on free ports and its own run
    directory, using the broker the shared stack fetched (fetched now if needed)."""
    shared = service(base_config, "kafka")
    if not shared.installed():
        try:
            ensure_up(base_config, services=["kafka"])
        except ServiceError as exc:
            unavailable(f"Kafka unavailable: {exc}", f"Kafka must run under CI, but: {exc}")
    cache = Path(tempfile.mkdtemp(prefix="js-kafka-", dir="/tmp"))
    cfg = base_config.replace(stack={"cache_dir": str(cache), "kafka_port": _free_port(),
                                     "kafka_controller_port": _free_port()})
    own_home = service(cfg, "kafka").home  # type: ignore[attr-defined]
    own_home.parent.mkdir(parents=True, exist_ok=True)
    own_home.symlink_to(shared.home)  # type: ignore[attr-defined]
    start_service(cfg, "kafka")
    try:
        yield cfg.replace(kafka={"bootstrap": f"127.0.0.1:{cfg.stack.kafka_port}"},
                          topics={"raw": f"hpc.jobs.raw.fault{os.getpid()}"},
                          edge={"spool_dir": str(tmp_path / "spool")})
    finally:
        stop_service(cfg, "kafka")
        shutil.rmtree(cache, ignore_errors=True)


def _edge_env(cfg: Config) -> dict[str, str]:
    return {**os.environ, "JOBSTREAM_KAFKA__BOOTSTRAP": cfg.kafka.bootstrap,
            "JOBSTREAM_TOPICS__RAW": cfg.topics.raw, "JOBSTREAM_CLUSTER": cfg.cluster,
            "JOBSTREAM_EDGE__SPOOL_DIR": cfg.edge.spool_dir, "JOBSTREAM_CONFIG": "/dev/null"}


def _wait(cond: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.1)


def _depth(path: Path) -> int:
    """Records in the spool at ``path``; 0 only while the file does not exist. Any other
    failure to read it is raised: a spool that cannot be read has not drained."""
    if not path.exists():
        return 0
    with Spool(path, readonly=True) as spool:
        return spool.depth()


def _depth_reached(path: Path, records: int) -> bool:
    """For a wait for records to spool: a spool the edge is still creating has no table yet
    for a moment, so an error reading it means "not yet" (never "drained": see _depth)."""
    try:
        return _depth(path) >= records
    except sqlite3.OperationalError:
        return False


def test_kafka_down_edge_killed_restarted_then_kafka_back_loses_nothing(
        private_kafka: Config) -> None:
    cfg = private_kafka
    stop_service(cfg, "kafka")
    cmd = [str(Path(sys.executable).parent / "jobstream"), "edge", "flux", "--recorded",
           str(LIVE), "--interval", "0.01"]
    spool_path = Path(cfg.edge.spool_dir) / "flux.db"
    first = subprocess.Popen(cmd, env=_edge_env(cfg))
    _wait(lambda: _depth_reached(spool_path, 100), 120, "100 spooled records")
    first.send_signal(signal.SIGKILL)
    first.wait()
    killed_at = _depth(spool_path)
    assert killed_at >= 100
    second = subprocess.Popen(cmd, env=_edge_env(cfg))
    try:
        _wait(lambda: _depth(spool_path) > killed_at, 120, "the restarted edge to spool")
        start_service(cfg, "kafka")
        assert second.wait(timeout=300) == 0
    finally:
        if second.poll() is None:
            second.kill()
    expected = responses(LIVE)
    got = consume_all(cfg, cfg.topics.raw, len(expected))
    check_keyed_and_ordered(got, expected, cfg.cluster)
    assert _depth(spool_path) == 0



# -- jobstream publish and edge status ----------------------------------------------------


def _jobstream(cfg: Config, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(Path(sys.executable).parent / "jobstream"), *args],
                          env=_edge_env(cfg) | {"JOBSTREAM_TOPICS__DLQ": cfg.topics.dlq},
                          capture_output=True, text=True, timeout=300)


def test_publish_keys_records_by_job_and_sends_bad_ones_to_the_dlq(stack_cfg: Config,
                                                                    tmp_path: Path) -> None:
    cfg = stack_cfg.replace(cluster="testcluster")
    src = tmp_path / "jobcomp.jsonl"
    src.write_bytes(JOBCOMP[0] + b"\n{not json\n" + JOBCOMP[1] + b"\n")
    proc = _jobstream(cfg, "publish", "--format", "slurm-jobcomp", "--no-progress", str(src))
    assert proc.returncode == 1, proc.stderr
    assert f"{src}:2: " in proc.stderr
    got = consume_all(cfg, cfg.topics.raw, 2)
    assert [(k, r.payload, r.format) for k, r, _ in got] == [
        (b"testcluster:2", JOBCOMP[0], "slurm-jobcomp"),
        (b"testcluster:10", JOBCOMP[1], "slurm-jobcomp")]
    consumer = Consumer(cfg.librdkafka(**{"group.id": f"dlq-{time.time_ns()}",
                                          "auto.offset.reset": "earliest"}))
    consumer.subscribe([cfg.topics.dlq])
    try:
        msg = None
        deadline = time.monotonic() + 60
        while msg is None and time.monotonic() < deadline:
            m = consumer.poll(0.5)
            if m is not None and not m.error():
                msg = m
    finally:
        consumer.close()
    assert msg is not None and msg.value() == b"{not json"
    headers = dict(msg.headers() or [])
    assert headers["stage"] == b"publish" and headers["reason"]



def test_slurm_edge_kafka_down_killed_restarted_loses_nothing(private_kafka: Config,
                                                              short_dir: Path) -> None:
    cfg = private_kafka.replace(cluster="testcluster")
    port = _free_port()
    sock, drop = short_dir / "hook.sock", short_dir / "drop"
    env = _edge_env(cfg) | {"JOBSTREAM_EDGE__SLURM__RECEIVER_PORT": str(port),
                            "JOBSTREAM_EDGE__SLURM__POLLER": "false",
                            "JOBSTREAM_EDGE__SLURM__HOOK_SOCKET": str(sock),
                            "JOBSTREAM_EDGE__SLURM__HOOK_DROP_DIR": str(drop),
                            "JOBSTREAM_EDGE__SLURM__HOOK_SCAN_S": "0.5"}
    cmd = [sys.executable, "-m", "pipeline.edges", "slurm"]
    hook = install_hook(cfg.replace(edge={"slurm": {"hook_socket": str(sock),
                                                    "hook_drop_dir": str(drop)}}),
                        short_dir / "hook")
    hook_env = dict(line.split("=", 1) for line in
                    vector("slurm", "hooks", "epilog_ctld_2.env").read_text().splitlines())

    def run_hook(n: int) -> None:
        for i in range(n):
            e = hook_env | {"SLURM_JOB_ID": str(100 + i), "SLURM_JOBID": str(100 + i)}
            assert subprocess.run([str(hook)], env=e, timeout=30).returncode == 0

    def post(jobids: range) -> None:
        import http.client
        for jobid in jobids:
            doc = json.loads(JOBCOMP[0])
            doc["jobid"] = jobid
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
            conn.request("POST", "/slurm/_doc", body=json.dumps(doc).encode())
            assert conn.getresponse().status == 201
            conn.close()

    def wait_ready() -> None:
        _wait(lambda: sock.exists() and _port_open(port), 60, "the edge to listen")

    stop_service(cfg, "kafka")
    first = subprocess.Popen(cmd, env=env)
    wait_ready()
    post(range(1000, 1040))
    run_hook(5)
    first.send_signal(signal.SIGKILL)
    first.wait()
    run_hook(5)  # edge down: drop files
    assert len(list(drop.glob("*.json"))) == 5
    second = subprocess.Popen(cmd, env=env)
    try:
        wait_ready()
        post(range(1040, 1050))
        start_service(cfg, "kafka")
        spool = Path(cfg.edge.spool_dir) / "slurm.db"
        _wait(lambda: _depth(spool) == 0 and not list(drop.glob("*.json")), 180,
              "the spool to drain")
    finally:
        second.send_signal(signal.SIGTERM)
        second.wait(60)
    got = consume_all(cfg, cfg.topics.raw, 60)
    jobcomp = {json.loads(r.payload)["jobid"] for _, r, _ in got if r.format == "slurm-jobcomp"}
    hooks = [json.loads(r.payload)["SLURM_JOB_ID"] for _, r, _ in got
             if r.format == "slurm-hook"]
    assert jobcomp == set(range(1000, 1050))
    assert sorted(set(hooks)) == [str(100 + i) for i in range(5)] and len(hooks) >= 10
    assert all(k == f"testcluster:{json.loads(r.payload).get('jobid') or json.loads(r.payload)['SLURM_JOB_ID']}".encode()  # noqa: E501
               for k, r, _ in got)


def _port_open(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0
