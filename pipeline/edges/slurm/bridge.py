"""Bridge from Slurm's own jobcomp/kafka topics to ``hpc.jobs.raw``.

jobcomp/kafka (Slurm >= 23.02) produces one JSON record per finished job with no key, so
the default partitioner scatters a job's records (docs/slurm.md, "jobcomp/kafka
transport"); releases up to 23.11.6 also append a NUL byte to every value. Since 25.05,
``JobCompParams=enable_job_start``
adds a start record per job on a second topic, ``topic_job_start`` (default
``<ClusterName>-job-start``; finish records go to ``topic``, default ``<ClusterName>``).
The bridge consumes both topics, strips the NUL, keys each record by job, spools it, and
commits the consumer offsets only after the batch is durably spooled (a crash re-reads
the batch: duplicates, never a loss).
"""

from __future__ import annotations

import logging
import re
import threading
import time
from typing import Any

from pipeline.core.model import RawRecord
from pipeline.edges.base import EdgeRuntime, record_key
from pipeline.runtime.config import Config
from pipeline.runtime.errors import ConfigError, JobstreamError

__all__ = ["JOB_START_SUFFIX", "JobcompKafkaBridge", "bridge_topics", "strip_nul"]

logger = logging.getLogger(__name__)

FORMAT = "slurm-jobcomp"

#: jobcomp/kafka's default ``topic_job_start`` is the ClusterName with this suffix
JOB_START_SUFFIX = "-job-start"

#: Kafka's legal topic names (1 to 249 of these characters, not "." or "..")
_TOPIC_NAME = re.compile(r"[A-Za-z0-9._-]{1,249}")

#: How often the consumer asks the broker for its topics' metadata. A subscribed topic
#: that does not exist yet is noticed only then, and Slurm creates its topics lazily (the
#: start topic with the first job start; never, where auto-create is off and nobody made
#: it): librdkafka's own default, 5 minutes, would leave the first starts that long behind.
#: A ``topic.metadata.refresh.interval.ms`` in kafka.properties_file takes precedence.
METADATA_REFRESH_MS = 10_000


def bridge_topics(cfg: Config) -> list[str]:
    """The topics the bridge reads: ``edge.slurm.bridge_topics``, else Slurm's defaults
    ``<cluster>`` (finish records; the deprecated ``bridge_topic`` replaces it) and
    ``<cluster>-job-start`` (start records)."""
    s = cfg.edge.slurm
    if s.bridge_topics and s.bridge_topic:
        raise ConfigError("edge.slurm.bridge_topic is deprecated and cannot be combined "
                          "with edge.slurm.bridge_topics: list every topic in bridge_topics")
    topics = list(s.bridge_topics) or [s.bridge_topic or cfg.cluster,
                                       cfg.cluster + JOB_START_SUFFIX]
    where = ("edge.slurm.bridge_topics" if s.bridge_topics else
             "the bridge's default topic (from cluster; set edge.slurm.bridge_topics)")
    for topic in topics:
        if not _TOPIC_NAME.fullmatch(topic) or topic in (".", ".."):
            raise ConfigError(f"{where}: {topic!r} is not a valid Kafka topic name "
                              "(1 to 249 of A-Z a-z 0-9 . _ -)")
    # JobCompParams may name one topic for both kinds of record
    return list(dict.fromkeys(topics))


def strip_nul(value: bytes) -> bytes:
    """Drop the one trailing NUL of jobcomp/kafka up to 23.11.6."""
    return value[:-1] if value.endswith(b"\x00") else value


class JobcompKafkaBridge:
    def __init__(self, runtime: EdgeRuntime, *, batch: int = 500) -> None:
        self.runtime = runtime
        cfg = runtime.cfg
        s = cfg.edge.slurm
        self.topics = bridge_topics(cfg)
        if s.bridge_topic:
            logger.warning("edge.slurm.bridge_topic is deprecated: set edge.slurm."
                           "bridge_topics = %s", self.topics)
        props: dict[str, Any] = cfg.librdkafka()
        if s.bridge_bootstrap:
            props["bootstrap.servers"] = s.bridge_bootstrap
        props.setdefault("topic.metadata.refresh.interval.ms", METADATA_REFRESH_MS)
        # earliest: a topic that appears after the bridge started is read from its start
        props.update({"group.id": s.bridge_group, "enable.auto.commit": False,
                      "auto.offset.reset": "earliest", "client.id": "jobstream-edge-bridge"})
        self._props = props
        self.batch = batch
        self.bridged = 0
        self._missing: set[str] = set()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="jobcomp-bridge", daemon=True)
        self._thread.start()
        logger.info("jobcomp/kafka bridge from topics %s", ", ".join(self.topics))

    def _run(self) -> None:
        from confluent_kafka import Consumer, KafkaError, KafkaException

        consumer = Consumer(self._props)
        consumer.subscribe(self.topics)
        cluster = self.runtime.cfg.cluster
        try:
            while not self._stop.is_set():
                msgs = consumer.consume(self.batch, timeout=0.5)
                records = []
                for msg in msgs:
                    err = msg.error()
                    if err is not None:
                        if err.code() in (KafkaError.UNKNOWN_TOPIC_OR_PART,
                                          KafkaError._UNKNOWN_TOPIC):
                            self._topic_missing(err.str())
                        elif err.code() != KafkaError._PARTITION_EOF:
                            logger.warning("jobcomp/kafka bridge: %s", err.str())
                        continue
                    value = strip_nul(msg.value() or b"")
                    now = time.time()
                    records.append(RawRecord(
                        cluster=cluster, scheduler="slurm", format=FORMAT, received_at=now,
                        payload=value, key=record_key(FORMAT, value, cluster, now)))
                if not records:
                    continue  # nothing read, or errors only: no offset to commit
                while not self._stop.is_set():
                    try:
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

    def _topic_missing(self, message: str) -> None:
        """A subscribed topic does not exist (yet): normal until Slurm's first record of
        that kind, or for good where start records are off; said once per topic."""
        # the longest name the message holds: "c" is part of "c-job-start" too
        topic = max((t for t in self.topics if t in message), key=len, default=message)
        if topic not in self._missing:
            logger.info("jobcomp/kafka bridge: %s; reading it once it exists "
                        "(JobCompParams enable_job_start for start records)", message)
            self._missing.add(topic)

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(10.0)
