"""In-memory stand-ins for the sink's Kafka consumer, DLQ producer and Elasticsearch, to run
:class:`~pipeline.sink.runner.SinkRunner`'s real loop (flush, dead letters, commits, the
crash guard) in a unit test, and to restart it on the same records as a crashed process
would be."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

from confluent_kafka import KafkaError, KafkaException

from pipeline.codecs.codec import AvroCodec, codecs_from_config
from pipeline.runtime.config import Config
from pipeline.runtime.crashguard import CrashGuard
from pipeline.sink.runner import SinkRunner
from pipeline.sink.stats import SinkStats

NOV_2026 = 1_794_000_000_000


class Died(BaseException):
    """Stands for the process dying at this point (an OOM kill, a segfault in C code): no
    handler of the sink may catch it."""


class Message:
    def __init__(self, topic: str, partition: int, offset: int, key: bytes | None,
                 value: bytes | None) -> None:
        self._t, self._p, self._o, self._k, self._v = topic, partition, offset, key, value

    def topic(self) -> str:
        return self._t

    def partition(self) -> int:
        return self._p

    def offset(self) -> int:
        return self._o

    def key(self) -> bytes | None:
        return self._k

    def value(self) -> bytes | None:
        return self._v

    def error(self) -> None:
        return None

    def headers(self) -> None:
        return None


class Log:
    """The topics' records and the group's committed offsets: what outlives a process."""

    def __init__(self) -> None:
        self.messages: list[Message] = []
        self.committed: dict[tuple[str, int], int] = {}

    def append(self, topic: str, key: bytes | None, value: bytes | None,
               partition: int = 0) -> Message:
        offset = sum(1 for m in self.messages if (m.topic(), m.partition()) == (topic, partition))
        msg = Message(topic, partition, offset, key, value)
        self.messages.append(msg)
        return msg

    def consumer(self) -> Consumer:
        """A consumer of a new process: from the committed offsets."""
        return Consumer(self, [m for m in self.messages
                               if m.offset() >= self.committed.get((m.topic(), m.partition()), 0)])


class Consumer:
    def __init__(self, log: Log, pending: Sequence[Message]) -> None:
        self.log = log
        self.pending = list(pending)

    def consume(self, num_messages: int = 1, timeout: float = -1) -> list[Message]:
        out, self.pending = self.pending[:num_messages], self.pending[num_messages:]
        return out

    def poll(self, timeout: float = -1) -> None:
        return None

    def commit(self, offsets: Iterable[Any], asynchronous: bool = True) -> None:
        for tp in offsets:
            self.log.committed[(tp.topic, tp.partition)] = tp.offset

    def assignment(self) -> list[Any]:
        return []

    def pause(self, partitions: Any) -> None:
        pass

    def resume(self, partitions: Any) -> None:
        pass

    def close(self) -> None:
        pass

    @property
    def drained(self) -> bool:
        return not self.pending


class Producer:
    """The DLQ producer: ``refuse(value)`` may raise at produce (librdkafka's own checks) or
    return a KafkaError for the delivery report (the broker's answer)."""

    def __init__(self, refuse: Callable[[bytes | None], KafkaError | None] | None = None,
                 raise_at_produce: Callable[[bytes | None], bool] | None = None) -> None:
        self.refuse = refuse or (lambda _: None)
        self.raise_at_produce = raise_at_produce or (lambda _: False)
        self.sent: list[dict[str, Any]] = []
        self._queue: list[tuple[dict[str, Any], Callable[..., None] | None]] = []

    def produce(self, topic: str, key: Any = None, value: Any = None, headers: Any = None,
                on_delivery: Callable[..., None] | None = None) -> None:
        if self.raise_at_produce(value):
            raise KafkaException(KafkaError(KafkaError.MSG_SIZE_TOO_LARGE,
                                            "Message size too large"))
        for _, v in headers or []:
            assert isinstance(v, bytes)
        self._queue.append(({"topic": topic, "key": key, "value": value,
                             "headers": dict((k, v.decode()) for k, v in headers or [])},
                            on_delivery))

    def poll(self, timeout: float = 0) -> int:
        return self.flush(timeout)

    def flush(self, timeout: float = -1) -> int:
        queue, self._queue = self._queue, []
        for record, callback in queue:
            err = self.refuse(record["value"])
            if err is None:
                self.sent.append(record)
            if callback is not None:
                callback(err, None)
        return len(self._queue)


class Elasticsearch:
    """_bulk and _mget as Elasticsearch answers them; ``hook(ids)`` runs before each bulk
    (to die, or to raise)."""

    def __init__(self, hook: Callable[[list[str]], None] | None = None,
                 item: Callable[[str], dict[str, Any]] | None = None) -> None:
        self.hook = hook or (lambda _: None)
        self.item = item or (lambda _: {"status": 201})
        self.docs: dict[str, dict[str, Any]] = {}
        #: (op, its metadata line) of every bulk item, in order
        self.ops: list[tuple[str, dict[str, Any]]] = []
        self.requests = 0

    def bulk(self, *, operations: list[bytes], **_: Any) -> dict[str, Any]:
        lines = [json.loads(line) for op in operations for line in op.splitlines()]
        items: list[dict[str, Any]] = []
        pairs: list[tuple[str, str, dict[str, Any] | None]] = []
        metas: list[tuple[str, dict[str, Any]]] = []
        i = 0
        while i < len(lines):
            (op, meta), = lines[i].items()
            source = lines[i + 1] if op != "delete" else None
            i += 1 if op == "delete" else 2
            pairs.append((op, meta["_id"], source))
            metas.append((op, meta))
        self.hook([doc_id for _, doc_id, _ in pairs])
        self.requests += 1
        self.ops += metas
        for op, doc_id, source in pairs:
            answer = self.item(doc_id)
            if 200 <= answer["status"] < 300 and source is not None:
                self.docs[doc_id] = source
            elif 200 <= answer["status"] < 300 and op == "delete":
                self.docs.pop(doc_id, None)
            items.append({op: answer})
        return {"items": items}

    def mget(self, *, ids: list[str], **_: Any) -> dict[str, Any]:
        return {"docs": [{"_id": i, "found": False} for i in ids]}


def job_doc(n: int, revision: int = 1, **extra: Any) -> dict[str, Any]:
    doc: dict[str, Any] = {"cluster": "c1", "scheduler": "slurm", "job_id": str(n),
                           "state": "pending", "t_submit": NOV_2026 + n, "revision": revision,
                           "updated_at": NOV_2026 + n}
    doc.update(extra)
    return doc


class Stack:
    """Kafka (a Log), Elasticsearch and the sink's state directory, across sink runs."""

    def __init__(self, tmp: Path, es: Elasticsearch | None = None,
                 producer: Producer | None = None) -> None:
        self.cfg = Config().replace(sink={"max_batch": 100, "flush_interval_s": 0.0,
                                          "quiet_s": 0.0, "state_dir": str(tmp / "state")})
        self.codecs: dict[str, AvroCodec] = codecs_from_config(self.cfg)
        self.log = Log()
        self.es = es or Elasticsearch()
        self.producer = producer or Producer()
        self.runs: list[SinkStats | BaseException] = []

    def state(self, doc: dict[str, Any], partition: int = 0) -> Message:
        return self.log.append(self.cfg.topics.state, f"c1:{doc['job_id']}".encode(),
                               self.codecs["state"].encode(doc), partition)

    def node(self, doc: dict[str, Any], partition: int = 0) -> Message:
        return self.log.append(self.cfg.topics.nodes, f"{doc['cluster']}:{doc['node']}".encode(),
                               self.codecs["nodes"].encode(doc), partition)

    def runner(self, convert_hook: Callable[[dict[str, Any]], None] | None = None
               ) -> SinkRunner:
        runner = SinkRunner(self.cfg, generation="v1", live=True, es=self.es,  # type: ignore[arg-type]
                            producer=self.producer, codecs=self.codecs)  # type: ignore[arg-type]
        if convert_hook is not None:
            original = runner._converter.convert

            def convert(family: Any, record: Any, origin: Any = None) -> Any:
                convert_hook(record)
                return original(family, record, origin)

            runner._converter = _Wrapped(runner._converter, convert)  # type: ignore[assignment]
        return runner

    def run(self, convert_hook: Callable[[dict[str, Any]], None] | None = None
            ) -> SinkStats | BaseException:
        """One process's life: start, consume everything, stop; or die on the way."""
        runner = self.runner(convert_hook)
        consumer = self.log.consumer()
        runner._intake.consumer = consumer  # type: ignore[assignment]
        try:
            outcome: SinkStats | BaseException = runner.run(until=lambda _: consumer.drained)
        except BaseException as exc:  # noqa: B036 - a death is what is looked for
            outcome = exc
        self.runs.append(outcome)
        return outcome

    def guard(self) -> CrashGuard:
        """What the next process's guard reads (opened and released again)."""
        paths = sorted((Path(self.cfg.sink.state_dir)).glob("*.crashguard"))
        assert len(paths) == 1, paths
        return CrashGuard(paths[0])

    def dlq(self) -> list[dict[str, Any]]:
        return self.producer.sent


class _Wrapped:
    """A converter whose convert() runs a hook first (everything else delegated)."""

    def __init__(self, inner: Any, convert: Callable[..., Any]) -> None:
        self._inner = inner
        self.convert = convert

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)
