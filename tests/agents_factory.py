"""The worker's jobs stage as the tests build it: the real :class:`agents.jobs.JobsStage`
with its real collaborators (the codecs, the enricher and anonymizer of the
configuration, job states over a dict as the table, the active jobs, a crash guard in
memory), without Kafka: the outputs keep what is sent (:class:`RecordedOutputs`, or a
test's own), Kafka's answers are :class:`agents.routing.OfflineKafka`'s, and a record is a
:class:`Message`.

A test that needs another collaborator passes it; every other is the worker's own.
"""

from __future__ import annotations

from collections.abc import Callable, MutableMapping
from dataclasses import dataclass
from typing import Any

from agents.active_jobs import ActiveJobs
from agents.context import Sender
from agents.jobs import JobsStage
from agents.routing import KafkaView, OfflineKafka
from agents.states import JobStates, NodeStates
from pipeline.codecs.wire import Wire
from pipeline.core.anonymize import Anonymizer
from pipeline.core.enrich import Enricher
from pipeline.kafka.topics import canonical_topic
from pipeline.runtime.config import Config
from pipeline.runtime.crashguard import CrashGuard

#: one record the stage sent: topic, key, value, headers
Sent = tuple[str, bytes | None, bytes | None, list[tuple[str, bytes]] | None]


@dataclass
class Message:
    """A Kafka record as the stage reads it."""

    topic: str
    partition: int
    offset: int
    key: bytes | None = None
    value: bytes = b""


class RecordedOutputs:
    """Outputs that keep every record sent, in order (in ``sent`` when given); every
    record is confirmed as it is sent."""

    def __init__(self, sent: list[Sent] | None = None) -> None:
        self.sent: list[Sent] = [] if sent is None else sent

    def send(self, topic: str, key: bytes | None, value: bytes | None,
             headers: list[tuple[str, bytes]] | None = None) -> None:
        self.sent.append((topic, key, value, headers))

    def poll(self) -> None:
        pass

    def cut(self) -> None:
        return None

    async def confirm(self, tally: None) -> None:
        pass

    async def flush(self) -> None:
        pass

    def to(self, topic: str) -> list[Sent]:
        """What was sent to ``topic``."""
        return [s for s in self.sent if s[0] == topic]


def enricher(cfg: Config) -> Enricher:
    """The worker's enricher of ``cfg``, as :func:`agents.app.create_app` makes it."""
    return Enricher.from_config(cfg.enrich.passwd_file, cfg.enrich.users_file,
                                cfg.enrich.topology_file)


def anonymizer(cfg: Config) -> Anonymizer:
    """The worker's anonymizer of ``cfg``, as :func:`agents.app.create_app` makes it."""
    return Anonymizer.from_config(cfg.anonymize.fields, cfg.anonymize.key_file)


def canonical(cfg: Config) -> str:
    """The worker's canonical topic of ``cfg``."""
    return canonical_topic(cfg.worker.app_id)


def jobs_stage(cfg: Config | None = None, *, wire: Wire | None = None,
               outputs: Sender | None = None,
               table: MutableMapping[bytes, Any] | None = None,
               states: JobStates | None = None, nodes: NodeStates | None = None,
               kafka: KafkaView | None = None,
               acknowledge: Callable[[Any], None] | None = None,
               guard: CrashGuard | None = None) -> JobsStage:
    """A jobs stage of ``cfg`` (the defaults: :class:`Config`'s), with ``wire`` (a new one:
    50 ms to make, so a test that makes many stages passes its own), over ``outputs`` (a new
    :class:`RecordedOutputs`: ``stage.outputs``), its states in ``states`` or over
    ``table`` (a new dict), its node states in ``nodes`` (over a new dict), every topic of
    ``kafka.partitions`` partitions unless ``kafka`` is given, acknowledging into
    ``acknowledge`` (nowhere)."""
    cfg = cfg or Config()
    if states is None:
        states = JobStates({} if table is None else table,
                           max_bytes=cfg.worker.max_state_bytes)
    if nodes is None:
        nodes = NodeStates({}, max_bytes=cfg.worker.max_state_bytes)
    return JobsStage(
        cfg, wire=wire or Wire(cfg), enricher=enricher(cfg), anonymizer=anonymizer(cfg),
        outputs=outputs if outputs is not None else RecordedOutputs(),
        kafka=kafka if kafka is not None else OfflineKafka(cfg.kafka.partitions),
        states=states, nodes=nodes, active=ActiveJobs(),
        acknowledge=acknowledge if acknowledge is not None else (lambda message: None),
        guard=guard)
