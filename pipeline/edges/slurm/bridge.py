"""Bridge from Slurm's own jobcomp/kafka topic to ``hpc.jobs.raw``.

jobcomp/kafka (Slurm >= 23.02) produces one JSON record per finished job with no key, so
the default partitioner scatters a job's records (slurm.md 1.3); releases up to 23.11.6
also append a NUL byte to every value. The bridge consumes that topic, strips the NUL,
keys each record by job, spools it, and commits the consumer offsets only after the batch
is durably spooled (a crash re-reads the batch: duplicates, never a loss).
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

from pipeline.edges.base import EdgeRuntime, record_key
from pipeline.errors import JobstreamError
from pipeline.model import RawRecord

__all__ = ["JobcompKafkaBridge", "strip_nul"]

logger = logging.getLogger(__name__)

FORMAT = "slurm-jobcomp"


def strip_nul(value: bytes) -> bytes:
    """Drop the one trailing NUL of jobcomp/kafka up to 23.11.6."""
    return value[:-1] if value.endswith(b"\x00") else value


class JobcompKafkaBridge:
    def __init__(self, runtime: EdgeRuntime, *, batch: int = 500) -> None:
        self.runtime = runtime
        cfg = runtime.cfg
        s = cfg.edge.slurm
        self.topic = s.bridge_topic or cfg.cluster
        props: dict[str, Any] = cfg.librdkafka()
        if s.bridge_bootstrap:
            props["bootstrap.servers"] = s.bridge_bootstrap
        props.update({"group.id": s.bridge_group, "enable.auto.commit": False,
                      "auto.offset.reset": "earliest", "client.id": "jobstream-edge-bridge"})
        self._props = props
        self.batch = batch
        self.bridged = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="jobcomp-bridge", daemon=True)
        self._thread.start()
        logger.info("jobcomp/kafka bridge from topic %s", self.topic)

    def _run(self) -> None:
        from confluent_kafka import Consumer, KafkaError, KafkaException

        consumer = Consumer(self._props)
        consumer.subscribe([self.topic])
        cluster = self.runtime.cfg.cluster
        try:
            while not self._stop.is_set():
                msgs = consumer.consume(self.batch, timeout=0.5)
                records = []
                for msg in msgs:
                    err = msg.error()
                    if err is not None:
                        if err.code() != KafkaError._PARTITION_EOF:
                            logger.warning("jobcomp/kafka bridge: %s", err.str())
                        continue
                    value = strip_nul(msg.value() or b"")
                    now = time.time()
                    records.append(RawRecord(
                        cluster=cluster, scheduler="slurm", format=FORMAT, received_at=now,
                        payload=value, key=record_key(FORMAT, value, cluster, now)))
                if not msgs:
                    continue
                while not self._stop.is_set():
                    try:
                        if records:
                            self.runtime.publish_many(records)
                        break
                    except JobstreamError as exc:
                        logger.error("jobcomp/kafka bridge cannot spool (%s); retrying", exc)
                        self._stop.wait(5.0)
                else:
                    return  # stopping without spooling: offsets stay uncommitted
                self.bridged += len(records)
                try:
                    consumer.commit(asynchronous=False)
                except KafkaException as exc:
                    # the records are spooled; an uncommitted batch is only read again
                    logger.warning("jobcomp/kafka bridge: offset commit failed: %s", exc)
        finally:
            consumer.close()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(10.0)
