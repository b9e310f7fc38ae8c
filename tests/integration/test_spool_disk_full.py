"""The edge's spool on a disk that fills up, against the real broker: appends are refused
with a clear error and nothing half-written; the drainer keeps delivering while even its
deletes are refused (a full disk refuses a delete in WAL mode), and once there is room again
it empties the spool. Before, the first refused delete killed the drainer thread and the
edge never drained again.

Needs a filesystem it can fill: a small tmpfs, mounted when the test runs as root (the
fault suite covers ``edge.spool_max_bytes`` everywhere); it skips elsewhere, and fails under
``CI=true``, which runs as root."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer
from datafiles import unavailable

from pipeline.edges.drainer import Drainer
from pipeline.edges.spool import Spool
from pipeline.kafka.producer import producer_config
from pipeline.kafka.topics import ensure_topics
from pipeline.runtime.config import Config
from pipeline.runtime.errors import SpoolError

SIZE = 256 * 1024


@pytest.fixture
def tmpfs(tmp_path: Path) -> Iterator[Path]:
    mnt = tmp_path / "disk"
    mnt.mkdir()
    if os.geteuid() != 0 or subprocess.run(
            ["mount", "-t", "tmpfs", "-o", f"size={SIZE}", "tmpfs", str(mnt)],
            capture_output=True, check=False).returncode != 0:
        # CI runs as root: there a tmpfs that cannot be mounted is a broken run, not a skip
        unavailable("cannot mount a small tmpfs here (needs root)",
                    "cannot mount a small tmpfs under CI (it runs as root)")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


def wait(what: str, cond: object, guard_s: float = 120.0) -> None:
    deadline = time.monotonic() + guard_s
    while not cond():  # type: ignore[operator]
        assert time.monotonic() < deadline, f"hang guard: {what}"
        time.sleep(0.1)


def test_the_drainer_survives_a_full_disk_and_drains_once_there_is_room(
        stack_cfg: Config, tmpfs: Path) -> None:
    ensure_topics(stack_cfg)
    topic = stack_cfg.topics.raw
    spool = Spool(tmpfs / "edge.db", topic=topic)
    values: list[bytes] = []
    with pytest.raises(SpoolError, match="disk .* is full"):
        for i in range(100_000):
            value = b"record %06d " % i + b"x" * 200
            spool.append(b"k%d" % (i % 7), value)
            values.append(value)
    with sqlite3.connect(f"file:{spool.path}?mode=ro", uri=True) as db:
        assert db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    assert spool.depth() == len(values)

    drainer = Drainer(spool, producer_config(stack_cfg, "test-full-disk"),
                      backoff_max_s=1.0).start()
    try:
        # Kafka takes every record; the spool cannot delete them for want of room
        wait("a refused delete", lambda: "cannot delete" in (drainer.last_error or ""))
        assert drainer._thread is not None and drainer._thread.is_alive()
        assert spool.depth() == len(values)
        subprocess.run(["mount", "-o", f"remount,size={8 * SIZE}", str(tmpfs)], check=True)
        wait("the spool to drain once there is room", lambda: spool.depth() == 0)
    finally:
        drainer.stop(5.0)
        spool.close()

    consumer = Consumer(stack_cfg.librdkafka(**{"group.id": f"full-{time.time_ns()}",
                                                "auto.offset.reset": "earliest"}))
    consumer.subscribe([topic])
    got: list[bytes] = []
    deadline = time.monotonic() + 60
    try:
        while set(got) != set(values) and time.monotonic() < deadline:
            got += [m.value() for m in consumer.consume(1000, 1.0) if not m.error()]
    finally:
        consumer.close()
    assert set(got) == set(values)
