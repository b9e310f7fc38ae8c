"""The durable spool: order, durability across SIGKILL, clear errors, delete only on ack."""

from __future__ import annotations

import os
import signal
import socket
import sqlite3
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from pipeline.edges.drainer import Drainer
from pipeline.edges.spool import Spool, spool_stats
from pipeline.kafka.producer import producer_config
from pipeline.runtime.config import Config
from pipeline.runtime.errors import ConfigError, SpoolError


def test_append_returns_increasing_seqs_and_read_gives_spool_order(tmp_path: Path) -> None:
    with Spool(tmp_path / "s.db", topic="t") as spool:
        seqs = [spool.append(f"c:{i % 3}", f"v{i}".encode(), [("h", b"\x00\xff")])
                for i in range(10)]
        assert seqs == sorted(seqs) and len(set(seqs)) == 10
        recs = spool.read(0, 100)
        assert [r.value for r in recs] == [f"v{i}".encode() for i in range(10)]
        assert recs[0].key == b"c:0" and recs[0].topic == "t"
        assert recs[0].headers == (("h", b"\x00\xff"),)
        assert [r.seq for r in spool.read(seqs[4], 3)] == seqs[5:8]


def test_delete_removes_only_the_given_records(tmp_path: Path) -> None:
    with Spool(tmp_path / "s.db", topic="t") as spool:
        seqs = spool.append_many([(None, b"a", None), (None, b"b", None), (None, b"c", None)])
        spool.delete([seqs[1]])
        assert [r.value for r in spool.read()] == [b"a", b"c"]
        stats = spool.stats()
        assert stats.depth == 2 and stats.bytes == 2 and stats.oldest_age_s is not None


def test_meta_survives_reopen(tmp_path: Path) -> None:
    with Spool(tmp_path / "s.db", topic="t") as spool:
        spool.set_meta("flux.since", "12.5")
    with Spool(tmp_path / "s.db", topic="t") as spool:
        assert spool.get_meta("flux.since") == "12.5"
        assert spool.get_meta("absent", "d") == "d"


_WRITER = textwrap.dedent("""
    import sys
    from pipeline.edges.spool import Spool
    spool = Spool(sys.argv[1], topic="t")
    n = 0
    while True:
        seq = spool.append(b"k", b"record-%d" % n)
        # the parent kills us at a random point after reading this line
        print(seq, flush=True)
        n += 1
""")


def test_records_acknowledged_before_sigkill_are_all_there(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    proc = subprocess.Popen([sys.executable, "-c", _WRITER, str(path)],
                            stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    acknowledged = [int(proc.stdout.readline()) for _ in range(200)]
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    with Spool(path, topic="t") as spool:
        recs = spool.read(0, 100_000)
    seqs = [r.seq for r in recs]
    assert set(acknowledged) <= set(seqs)
    # nothing torn: every record is whole and in order
    assert seqs == sorted(seqs)
    assert all(r.value == b"record-%d" % (r.seq - 1) for r in recs)


def test_full_spool_is_a_clear_error_and_keeps_what_it_had(tmp_path: Path) -> None:
    with Spool(tmp_path / "s.db", topic="t", max_bytes=64 * 1024) as spool:
        stored = 0
        with pytest.raises(SpoolError, match="full"):
            for _ in range(1000):
                spool.append(b"k", os.urandom(4096))
                stored += 1
        assert spool.depth() == stored
    with Spool(tmp_path / "s.db", topic="t") as spool:
        assert spool.depth() == stored
    with sqlite3.connect(tmp_path / "s.db") as db:
        assert db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"


def test_unwritable_spool_location_is_a_clear_error(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(SpoolError, match="cannot create"):
        Spool(blocker / "sub" / "s.db", topic="t")


def test_spool_stats_lists_every_spool(tmp_path: Path) -> None:
    with Spool(tmp_path / "flux.db", topic="t") as a, Spool(tmp_path / "slurm.db", topic="t") as b:
        a.append(None, b"x")
        b.set_meta("m", "1")
    stats = {s.name: s for s in spool_stats(tmp_path)}
    assert stats["flux"].depth == 1 and stats["flux"].oldest_age_s is not None
    assert stats["slurm"].depth == 0 and stats["slurm"].oldest_age_s is None
    assert stats["slurm"].meta == {"m": "1"}


def test_producer_config_passes_the_properties_file_through(tmp_path: Path) -> None:
    props = tmp_path / "rdkafka.properties"
    props.write_text("# site settings\nlinger.ms=50\nsecurity.protocol=PLAINTEXT\n")
    cfg = Config().replace(kafka={"properties_file": str(props)})
    conf = producer_config(cfg, "edge")
    assert conf["linger.ms"] == "50" and conf["security.protocol"] == "PLAINTEXT"
    assert conf["enable.idempotence"] is True and conf["acks"] == "all"


def test_producer_config_refuses_to_weaken_delivery(tmp_path: Path) -> None:
    props = tmp_path / "rdkafka.properties"
    props.write_text("acks=1\n")
    with pytest.raises(ConfigError, match="acks"):
        producer_config(Config().replace(kafka={"properties_file": str(props)}), "edge")


def test_producer_config_keeps_the_workers_partitioner(tmp_path: Path) -> None:
    assert producer_config(Config(), "edge")["partitioner"] == "murmur2_random"
    props = tmp_path / "rdkafka.properties"
    props.write_text("partitioner=consistent_random\n")
    with pytest.raises(ConfigError, match="partitioner"):
        producer_config(Config().replace(kafka={"properties_file": str(props)}), "edge")


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_drainer_deletes_nothing_without_a_kafka_ack(tmp_path: Path) -> None:
    cfg = Config().replace(kafka={"bootstrap": f"127.0.0.1:{_closed_port()}"})
    spool = Spool(tmp_path / "s.db", topic="t")
    for i in range(20):
        spool.append(b"k", b"%d" % i)
    acked: list[int] = []
    drainer = Drainer(spool, producer_config(cfg, "t", **{"message.timeout.ms": 300}),
                      on_acked=acked.extend, backoff_max_s=0.2).start()
    # wait for a few send/fail/recover rounds against a broker that is not there
    deadline = time.monotonic() + 30.0
    while drainer.last_error is None and time.monotonic() < deadline:
        time.sleep(0.1)
    time.sleep(1.0)
    drainer.stop(timeout=1.0)
    assert drainer.last_error is not None
    assert spool.depth() == 20 and acked == []
    spool.close()


@pytest.mark.parametrize(("size", "bound"), [(1024, 500), (8192, 256)])
def test_drainer_hands_librdkafka_500_records_or_2_mib_at_most(tmp_path: Path, size: int,
                                                               bound: int) -> None:
    # Kafka away: whatever the drainer hands librdkafka stays there, copied (an edge has
    # 50 MB in all, and the spool may hold any backlog)
    cfg = Config().replace(kafka={"bootstrap": f"127.0.0.1:{_closed_port()}"})
    spool = Spool(tmp_path / "s.db", topic="t")
    spool.append_many([(b"k", b"x" * size, None)] * 3000)
    drainer = Drainer(spool, producer_config(cfg, "t")).start()
    try:
        deadline = time.monotonic() + 20.0
        while len(drainer._inflight) < bound and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(1.0)  # time for the drainer to hand over more, if it would
        # len(producer) also counts librdkafka's queued log and error events (the refused
        # connections), so the records handed over are counted by the spool's cursor
        assert drainer._cursor == bound and len(drainer._inflight) == bound
        assert len(drainer._producer) >= bound
    finally:
        drainer.stop(timeout=0.1)
        spool.close()


def test_concurrent_appends_all_land_once_and_in_order_per_thread(tmp_path: Path) -> None:
    import threading

    with Spool(tmp_path / "s.db", topic="t") as spool:
        results: dict[int, list[int]] = {}

        def writer(k: int) -> None:
            results[k] = [spool.append(b"k%d" % k, b"%d:%d" % (k, i)) for i in range(50)]

        threads = [threading.Thread(target=writer, args=(k,)) for k in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        recs = {r.seq: r for r in spool.read(0, 10_000)}
        assert len(recs) == 400
        for k, seqs in results.items():
            assert seqs == sorted(seqs)
            assert [recs[s].value for s in seqs] == [b"%d:%d" % (k, i) for i in range(50)]


def test_a_callers_defaults_give_way_to_the_properties_file(tmp_path: Path) -> None:
    assert producer_config(Config(), "worker", defaults={"linger.ms": 1000})["linger.ms"] == 1000
    props = tmp_path / "rdkafka.properties"
    props.write_text("linger.ms=20\n")
    cfg = Config().replace(kafka={"properties_file": str(props)})
    assert producer_config(cfg, "worker", defaults={"linger.ms": 1000})["linger.ms"] == "20"
