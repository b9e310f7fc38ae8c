"""The worker's jobs stage alone: what its own work costs, with no Kafka and no Faust.

:func:`stage_cost` runs :class:`agents.jobs.JobsStage` over the workload's raw records in
one process, as the worker would get them (each record in its job's partition, in order),
with batches ending by their count and no Kafka behind the outputs: decode, parse,
duplicate filter, fold, event and state documents, Avro, the table's JSON. The CPU it
takes per event is a floor for the worker's in the e2e run; the difference is what Faust,
the Kafka clients and RocksDB add. CPU time of this process, not wall time, so that it
means something on a loaded machine. The job states are kept and checked against the
offline fold afterwards: a stage that folds wrong is not measured as a fast one.
"""

from __future__ import annotations

import asyncio
import gc
import time
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

from pipeline.codecs.codec import raw_to_avro
from pipeline.codecs.wire import Wire
from pipeline.core.anonymize import Anonymizer
from pipeline.core.enrich import Enricher
from pipeline.fold import doc_id
from pipeline.runtime.config import Config
from pipeline.tooling.bench.feed import Feed, raw_record

__all__ = ["StageCost", "StateOutputs", "stage_cost"]


@dataclass(frozen=True)
class StageCost:
    events: int
    records: int
    #: job states the stage emitted (one per job per batch that touched it)
    states: int
    cpu_s: float
    #: job documents whose last state is not at the offline fold's revision (0: the
    #: stage measured folded everything right)
    wrong: int

    @property
    def cpu_ms_per_event(self) -> float:
        return 1000 * self.cpu_s / self.events if self.events else 0.0


class StateOutputs:
    """Keeps the job states the stage sends, drops the rest; Kafka is not part of the
    measure."""

    def __init__(self, state_topic: str) -> None:
        self.state_topic = state_topic
        self.states: list[bytes] = []

    def send(self, topic: str, key: bytes | None, value: bytes | None, *args: Any,
             **kwargs: Any) -> None:
        if topic == self.state_topic and value is not None:
            self.states.append(value)

    def cut(self) -> None:
        return None

    async def confirm(self, tally: None) -> None:
        pass

    async def flush(self) -> None:
        pass


def stage_cost(cfg: Config, feed: Feed) -> StageCost:
    """The jobs stage's CPU over ``feed`` (module docstring)."""
    from agents.active_jobs import ActiveJobs
    from agents.cli import GC_THRESHOLDS
    from agents.jobs import JobsStage
    from agents.routing import OfflineKafka, job_partition
    from agents.states import JobStates, NodeStates

    wire = Wire(cfg)
    partitions = cfg.kafka.partitions
    raw_topic = cfg.topics.raw
    records = []
    for offset, rec in enumerate(feed.records):
        key = rec.key.encode()
        records.append(SimpleNamespace(
            topic=raw_topic, partition=job_partition(key, partitions), offset=offset, key=key,
            value=wire.codecs["raw"].encode(raw_to_avro(raw_record(rec)))))
    outputs = StateOutputs(cfg.topics.state)
    stage = JobsStage(
        cfg, wire=wire, outputs=outputs, kafka=OfflineKafka(partitions),
        anonymizer=Anonymizer.from_config(cfg.anonymize.fields, cfg.anonymize.key_file),
        enricher=Enricher.from_config(cfg.enrich.passwd_file, cfg.enrich.users_file,
                                      cfg.enrich.topology_file),
        states=JobStates({}), nodes=NodeStates({}), active=ActiveJobs(),
        acknowledge=lambda message: None)

    async def run() -> None:
        for message in records:
            wait = stage.take(message)
            if wait is not None:
                await wait
        await stage.flush()

    # the worker's collector settings (agents.cli), for this measure only
    thresholds = gc.get_threshold()
    gc.collect()
    gc.freeze()
    gc.set_threshold(*GC_THRESHOLDS)
    try:
        started = time.process_time()
        asyncio.run(run())
        cpu_s = time.process_time() - started
    finally:
        gc.set_threshold(*thresholds)
        gc.unfreeze()
    last = {}
    for value in outputs.states:
        doc = wire.codecs["state"].decode(value)
        last[doc_id(doc)] = doc["revision"]
    wrong = sum(1 for i, doc in feed.documents.items() if last.get(i) != doc["revision"])
    return StageCost(feed.total_events, len(records), len(outputs.states), cpu_s, wrong)
