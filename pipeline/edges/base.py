"""What every producer edge shares: spool + drainer + RawRecord encoding, and a backoff."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING

from pipeline.codecs.raw import raw_to_avro
from pipeline.codecs.single_object import SingleObjectWriter
from pipeline.core.model import RawRecord
from pipeline.edges.drainer import Drainer
from pipeline.edges.spool import Spool, spool_dir
from pipeline.kafka.producer import producer_config
from pipeline.parsers import parse_parts
from pipeline.runtime.config import Config
from pipeline.runtime.errors import ParseError
from pipeline.runtime.metrics import EDGE_RECORDS_PUBLISHED, EDGE_RECORDS_RECEIVED, track_spool
from pipeline.runtime.netguard import ensure_private_dir

if TYPE_CHECKING:
    from pipeline.codecs.codec import AvroCodec

__all__ = ["EdgeRuntime", "raw_codec", "record_key"]

logger = logging.getLogger(__name__)


def raw_codec(cfg: Config) -> AvroCodec:
    """The codec of ``hpc.jobs.raw`` values (registry only if one is configured)."""
    from pipeline.codecs.codec import AvroCodec, registry_client

    if cfg.kafka.schema_registry_url:
        return AvroCodec("RawRecord", registry=registry_client(cfg.kafka.schema_registry_url),
                         subject=f"{cfg.topics.raw}-value")
    return AvroCodec("RawRecord")


def record_key(fmt: str, payload: bytes, cluster: str,
               received_at: float | None = None) -> str | None:
    """The Kafka key of a source record: the parser's ``cluster:job_id``, so that every
    source of one job (hook, jobcomp, sacct) lands in the same partition as the agents key
    it; for a multi-job document, its first good job's. None when the parser rejects the
    record, whatever it raises (it is still published: the agents put it in the DLQ with
    the reason)."""
    try:
        parts = parse_parts(fmt, payload, cluster=cluster, received_at=received_at)
    except ParseError as exc:
        logger.debug("%s record not keyed: %s", fmt, exc)
        return None
    except Exception:  # noqa: BLE001 - a parser bug must not stop an edge
        logger.exception("%s parser failed; record published without a key", fmt)
        return None
    return next((p.events[0].key for p in parts if p.events), None)


class EdgeRuntime:
    """The durable path of one edge: ``publish`` returns once the record is on disk.

    :param name: names the spool file (``<spool_dir>/<name>.db``) and the Kafka client id.
    """

    def __init__(self, cfg: Config, name: str, *, spool_path: str | Path | None = None) -> None:
        self.cfg = cfg
        self.name = name
        path = Path(spool_path) if spool_path else spool_dir(cfg) / f"{name}.db"
        # the records wait here, scripts and environments included: owner only
        ensure_private_dir(path.parent, "spool directory", "edge.spool_dir",
                           ours=not spool_path and not cfg.edge.spool_dir)
        self.spool = Spool(path, topic=cfg.topics.raw, max_bytes=cfg.edge.spool_max_bytes)
        # Without a registry the records are single-object encoded by a writer that needs
        # no fastavro (3.5 MiB of an edge's memory, the node daemon's on every compute
        # node, issue 33); the codec, which also decodes, is made when asked for
        self._codec: AvroCodec | None = raw_codec(cfg) if cfg.kafka.schema_registry_url else None
        self._writer: SingleObjectWriter | AvroCodec = self._codec or SingleObjectWriter(
            "RawRecord")
        self._listeners: list[Callable[[list[int]], None]] = []
        self.drainer = Drainer(self.spool, producer_config(cfg, f"jobstream-edge-{name}"),
                               on_acked=self._acked)
        self.stopping = threading.Event()
        self._received = EDGE_RECORDS_RECEIVED.labels(edge=name, cluster=cfg.cluster)
        self._published = EDGE_RECORDS_PUBLISHED.labels(edge=name, cluster=cfg.cluster,
                                                         topic=cfg.topics.raw)
        self._untrack_spool = track_spool(self.spool)

    def on_acked(self, listener: Callable[[list[int]], None]) -> None:
        """Call ``listener(seqs)`` (drainer thread) when Kafka confirmed spooled records."""
        self._listeners.append(listener)

    def _acked(self, seqs: list[int]) -> None:
        self._published.inc(len(seqs))
        for listener in self._listeners:
            listener(seqs)

    @property
    def codec(self) -> AvroCodec:
        """The codec of the records this edge writes (reads them back, too)."""
        if self._codec is None:
            self._codec = raw_codec(self.cfg)
        return self._codec

    def encode(self, record: RawRecord) -> tuple[bytes | None, bytes]:
        key = record.key.encode() if record.key is not None else None
        return key, self._writer.encode(raw_to_avro(record))

    def publish(self, record: RawRecord) -> int:
        """Spool one record durably; its sequence number."""
        key, value = self.encode(record)
        seq = self.spool.append(key, value)
        self._received.inc()
        return seq

    def publish_many(self, records: Iterable[RawRecord]) -> list[int]:
        """Spool records in one transaction (one fsync)."""
        seqs = self.spool.append_many([(*self.encode(r), None) for r in records])
        self._received.inc(len(seqs))
        return seqs

    def start(self) -> EdgeRuntime:
        self.drainer.start()
        return self

    def stop(self, timeout: float = 10.0) -> None:
        self.stopping.set()
        self.drainer.stop(timeout)
        self._untrack_spool()
        self.spool.close()
