"""One raw record through the worker's and the sink's path, offline, and what it left.

The path is the one ``agents/jobs.py`` and ``pipeline/sink/runner.py`` run, with their own
code: the raw record, Avro-encoded as an edge publishes it, is taken by a real
:class:`agents.jobs.JobsStage` (normalize: decode, parse, admission, ``fit_event``; the
fold; enrichment and anonymization; the events' and states' Avro encoding; the table
value, ``JobFold.to_json``), events re-keyed through the canonical topic are read back by
the same stage, the batch is flushed, and the queue snapshots of its jobs are built as the
``queue_snapshots`` timer builds them. Every state, event and snapshot record is then
decoded with the topic's codec and converted by :class:`pipeline.sink.converter.Converter`
into a bulk action, and the action's NDJSON lines are encoded as the bulk client encodes
them. Only Kafka and Elasticsearch are left out: the outputs are kept in a list, the DLQ
records read by their headers (:func:`_judge_worker`), and the actions checked against
Elasticsearch's limits (:func:`check_action`).

:func:`run_isolated` runs it in a forked child under a memory cap and an alarm, so that a
record that would take gigabytes or minutes ends as a reported failure, not as a dead test
run, and so that no cache a record fills (host lists, f58 ids) leaks into the next one. The
child measures the path's CPU time and its peak memory: tracemalloc's peak, or the growth
of the resident high-water mark (tracemalloc's cost per allocation makes big records take
minutes).
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import os
import pickle
import resource
import signal
import time
import traceback
import tracemalloc
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agents_factory import Message, RecordedOutputs, canonical, jobs_stage

from agents.jobs import JobsStage
from agents.routing import job_partition
from pipeline.codecs.codec import AvroCodec, raw_to_avro
from pipeline.codecs.wire import Wire
from pipeline.core.jsontext import dumps
from pipeline.core.model import RawRecord
from pipeline.core.snapshots import build_snapshots
from pipeline.runtime.config import Config
from pipeline.runtime.errors import ParseError
from pipeline.sink.converter import Action, Converter, DocumentError
from pipeline.sink.names import Family

try:  # the bulk client's own encoding of an action
    from pipeline.sink.client import _encode as _bulk_encode
except ImportError:  # pragma: no cover - the same thing, should it move
    _bulk_encode = None

__all__ = ["ID_LIMIT", "STATE_BUDGET", "TERM_LIMIT", "Outcome", "check_action", "raw_value",
           "run_isolated", "run_path"]

REPO = Path(__file__).resolve().parents[1]
CFG = Config()
PARTITIONS = CFG.kafka.partitions
RAW_TOPIC, CANONICAL = CFG.topics.raw, canonical(CFG)
TOPICS = CFG.topics
WIRE = Wire(CFG)
RAW_CODEC = AvroCodec("RawRecord")
CONVERTER = Converter(CFG.elasticsearch.index_prefix, "v1")

#: Elasticsearch refuses an ``_id`` longer than this many UTF-8 bytes (the whole bulk)
ID_LIMIT = 512
#: Lucene refuses a term (a keyword value, a flattened key + value) longer than this
TERM_LIMIT = 32766
#: an index name: at most 255 bytes, lowercase, none of these, not starting with -_+
INDEX_LIMIT = 255
_INDEX_FORBIDDEN = set('\\/*?"<>| ,#:')
#: the encoded job state (its table value, ``JobFold.to_json``) must stay under this
STATE_BUDGET = 512 * 1024
#: the job document fields an Outcome keeps the values of
SUMMARY_FIELDS = ("job_id", "uid", "gid", "ncores", "nnodes", "state", "result")
#: Elasticsearch's flattened fields accept this many levels (``depth_limit``'s default)
FLATTENED_DEPTH = 20


def _mappings() -> dict[Family, dict[str, Any]]:
    base = REPO / "schemas" / "elasticsearch"
    return {f: json.loads((base / f"{f.value}.json").read_text())["mappings"] for f in Family}


MAPPINGS = _mappings()


# --------------------------------------------------------------------------- the outcome

@dataclass
class Outcome:
    """What one record did on the path."""

    size: int  # bytes of the raw-topic value
    #: the DLQ reason the worker gave the record (normalize stage), None if it was taken
    refused: str | None = None
    refused_error: str = ""
    #: (job index, reason) of each job of a multi-job record dead-lettered on its own
    refused_parts: list[tuple[str, str]] = field(default_factory=list)
    #: reasons of the job states the worker dead-lettered by design (a state that cannot
    #: be kept within its budget): the job stays as last written, the stream goes on
    state_refused: list[str] = field(default_factory=list)
    #: (family, reason) of every record the sink's converter refused (DocumentError)
    sink_refused: list[tuple[str, str]] = field(default_factory=list)
    #: every limit or rule broken, one line each, naming the module at fault
    violations: list[str] = field(default_factory=list)
    #: job key -> ids of its events written to the events topic
    events: dict[str, list[str]] = field(default_factory=dict)
    states: int = 0
    #: document field -> the values the sink read for it (of :data:`SUMMARY_FIELDS`)
    fields: dict[str, set[Any]] = field(default_factory=dict)
    actions: int = 0
    largest_state: int = 0
    peak: int = 0  # peak memory of the path, bytes (see _measured)
    seconds: float = 0.0  # CPU time of the path

    def violate(self, text: str) -> None:
        if text not in self.violations:
            self.violations.append(text[:600])


def raw_value(raw: RawRecord) -> bytes:
    """The raw-topic value an edge publishes for ``raw``."""
    return RAW_CODEC.encode(raw_to_avro(raw))


# --------------------------------------------------------------------------- the worker

def _where(exc: BaseException) -> str:
    """The innermost frame of the project's own code in ``exc``'s traceback."""
    frames = traceback.extract_tb(exc.__traceback__)
    own = [f for f in frames if f.filename.startswith(str(REPO))
           and "/tests/" not in f.filename]
    if not own:
        return "?"
    f = own[-1]
    return f"{Path(f.filename).relative_to(REPO)}:{f.lineno} ({f.name})"


def _describe(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {str(exc)[:200]} at {_where(exc)}"


async def _drive(stage: JobsStage, outputs: RecordedOutputs, message: Message) -> None:
    wait = stage.take(message)
    if wait is not None:
        await wait
    # re-keyed events come back through the canonical topic, in their job's partition
    read = 0
    offsets: dict[int, int] = {}
    while True:
        await stage.flush()
        pending = [s for s in outputs.sent[read:] if s[0] == CANONICAL]
        read = len(outputs.sent)
        if not pending:
            break
        for _, key, value, _ in pending:
            assert key is not None and value is not None
            partition = job_partition(key, PARTITIONS)
            offset = offsets[partition] = offsets.get(partition, -1) + 1
            wait = stage.take(Message(CANONICAL, partition, offset, key, value))
            if wait is not None:
                await wait


def run_path(raw: RawRecord | bytes, *, key: bytes | None = None) -> Outcome:
    """``raw`` (a record, or a raw-topic value as it is) through the whole path."""
    value = raw if isinstance(raw, bytes) else raw_value(raw)
    if key is None and isinstance(raw, RawRecord) and raw.key is not None:
        key = raw.key.encode("utf-8", "surrogatepass")
    out = Outcome(size=len(value))
    outputs = RecordedOutputs()
    table: dict[bytes, bytes] = {}
    # the job-state table as agents.jobs.register builds it (the worker's state budget)
    stage = jobs_stage(CFG, wire=WIRE, outputs=outputs, table=table)
    partition = job_partition(key, PARTITIONS) if key else 0
    try:
        asyncio.run(_drive(stage, outputs, Message(RAW_TOPIC, partition, 0, key, value)))
    except Exception as exc:  # noqa: BLE001 - the finding itself
        out.violate(f"exception out of the jobs stage: {_describe(exc)}")
        return out
    for size in map(len, table.values()):
        out.largest_state = max(out.largest_state, size)
        if size > STATE_BUDGET:
            out.violate(f"job state (JobFold.to_json, the table value) is {size} bytes, over "
                        f"the {STATE_BUDGET} budget [pipeline/fold.py]")
    snapshots: list[bytes] = []
    try:
        stage.active.partitions = set(range(PARTITIONS))
        snaps = build_snapshots(stage.active.summaries(stage.active.partitions), time.time(),
                                "adversarial", stage.active.partitions,
                                CFG.worker.snapshot_interval_s)
        snapshots = [WIRE.encode_snapshot(s) for s in snaps]
    except Exception as exc:  # noqa: BLE001 - the finding itself
        out.violate(f"exception out of the queue snapshots timer: {_describe(exc)}")
    _judge_worker(outputs, out)
    records = [(Family.JOBS, v) for t, _, v, _ in outputs.sent if t == TOPICS.state]
    records += [(Family.EVENTS, v) for t, _, v, _ in outputs.sent if t == TOPICS.events]
    records += [(Family.SNAPSHOTS, v) for v in snapshots]
    _sink(records, out)
    return out


#: DLQ reasons of the state stage that are findings, not designed refusals: a value beyond
#: the JobState schema (the parser admitted it) and an exception of the stage itself
_STATE_FAULTS = frozenset({"invalid-record", "internal-error"})


def _judge_worker(outputs: RecordedOutputs, out: Outcome) -> None:
    for topic, _, _, sent_headers in outputs.sent:
        headers = {k: v.decode(errors="replace") for k, v in sent_headers or ()}
        if topic != TOPICS.dlq:
            if topic == TOPICS.state:
                out.states += 1
            continue
        stage, reason = headers.get("stage"), headers.get("reason", "")
        error = headers.get("error", "")
        if stage == "normalize" and reason == "internal-error":
            out.violate(f"the parser raised, not a ParseError (DLQ internal-error): "
                        f"{error[:300]}")
        elif stage == "normalize" and "part" in headers:
            out.refused_parts.append((headers["part"], reason))
        elif stage == "normalize":
            out.refused, out.refused_error = reason, error
        elif reason in _STATE_FAULTS:
            out.violate(f"a job state of an accepted record cannot be written (DLQ "
                        f"stage={stage} reason={reason}): {error[:300]} "
                        + ("[bounds checked too late: the parser admitted it]"
                           if reason == "invalid-record" else "[agents/jobs.py]"))
        else:
            out.state_refused.append(reason)


# --------------------------------------------------------------------------- the sink

def _sink(records: Iterable[tuple[Family, bytes | None]], out: Outcome) -> None:
    codecs = {Family.JOBS: WIRE.codecs["state"], Family.EVENTS: WIRE.codecs["events"],
              Family.SNAPSHOTS: WIRE.codecs["snapshots"]}
    for family, value in records:
        if value is None:
            continue
        try:
            decoded = codecs[family].decode(value)
        except ParseError as exc:
            out.violate(f"the sink cannot decode a {family.value} record the worker wrote: "
                        f"{exc.reason}: {exc.message[:200]}")
            continue
        except Exception as exc:  # noqa: BLE001 - the finding itself
            out.violate(f"exception out of the sink's decoding: {_describe(exc)}")
            continue
        if family is Family.JOBS:
            for name in SUMMARY_FIELDS:
                out.fields.setdefault(name, set()).add(decoded.get(name))
        if family is Family.EVENTS:
            out.events.setdefault(f"{decoded['cluster']}:{decoded['job_id']}", []).append(
                decoded["event_id"])
        try:
            action = CONVERTER.convert(family, decoded)
        except DocumentError as exc:
            out.sink_refused.append((family.value, exc.reason))
            continue
        except Exception as exc:  # noqa: BLE001 - the finding itself
            out.violate(f"exception out of the sink's converter: {_describe(exc)}")
            continue
        out.actions += 1
        for problem in check_action(action):
            out.violate(problem)


def bulk_lines(action: Action) -> bytes:
    """An action's NDJSON lines as the bulk client writes them."""
    if _bulk_encode is not None:
        return _bulk_encode(action)
    return b"".join(dumps(line) + b"\n" for line in action.operations())


def check_action(action: Action) -> list[str]:
    """What Elasticsearch would refuse in ``action`` (or refuse the whole bulk for)."""
    problems: list[str] = []
    fam = action.family.value
    id_bytes = len(action.doc_id.encode("utf-8", "surrogatepass"))
    if id_bytes > ID_LIMIT or not action.doc_id:
        problems.append(f"{fam} _id is {id_bytes} bytes, over Elasticsearch's {ID_LIMIT} "
                        "(the whole bulk request is refused) [pipeline/sink/converter.py]")
    problems += _check_index(action.index, fam)
    try:
        body = bulk_lines(action)
    except Exception as exc:  # noqa: BLE001 - the finding itself
        return [*problems, f"{fam} action cannot be encoded for _bulk: {_describe(exc)}"]
    # orjson writes no NaN or Infinity; the standard library's fallback would
    if b"NaN" in body or b"Infinity" in body:
        for line in body.split(b"\n")[:-1]:
            try:
                json.loads(line, parse_constant=_not_json)
            except ValueError as exc:
                problems.append(f"{fam} bulk line is not JSON Elasticsearch reads: {exc} "
                                "[pipeline/core/jsontext.py]")
    if action.source is not None:
        problems += _check_source(action.family, action.source)
    return problems


def _not_json(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _check_index(index: str, fam: str) -> list[str]:
    bad = []
    if (len(index.encode()) > INDEX_LIMIT or index != index.lower()
            or index[:1] in ("-", "_", "+") or index in (".", "..")
            or _INDEX_FORBIDDEN & set(index)):
        bad.append(f"{fam} index name {index[:80]!r} is not a valid Elasticsearch index "
                   "name [pipeline/sink/names.py]")
    return bad


def _check_source(family: Family, source: Mapping[str, Any]) -> list[str]:
    props = MAPPINGS[family]["properties"]
    problems = []
    for name, value in source.items():
        spec = props.get(name)
        if spec is None:
            problems.append(f"{family.value} field {name!r} is not in the strict mapping "
                            f"schemas/elasticsearch/{family.value}.json "
                            "(strict_dynamic_mapping_exception)")
            continue
        problems += _check_field(family, name, spec, value)
    return problems


def _values(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]


def _check_field(family: Family, name: str, spec: Mapping[str, Any], value: Any) -> list[str]:
    kind = spec.get("type", "object")
    problems = []
    where = f"{family.value}.{name}"
    if kind == "keyword":
        problems += _check_keyword(where, spec, value)
    elif kind in ("long", "date"):
        for v in _values(value):
            if v is not None and (isinstance(v, bool) or not isinstance(v, int)
                                  or not -(2**63) <= v < 2**63):
                problems.append(f"{where} {str(v)[:40]} is not a 64-bit integer")
    elif kind == "double":
        for v in _values(value):
            if isinstance(v, float) and not math.isfinite(v):
                problems.append(f"{where} is {v}: not a number JSON (and Elasticsearch) can "
                                "hold [pipeline/fold.py]")
    elif kind == "flattened":
        problems += _check_flattened(where, spec, value)
    elif kind == "object" and "properties" in spec:
        for item in _values(value):
            if not isinstance(item, Mapping):
                continue
            for sub, v in item.items():
                subspec = spec["properties"].get(sub)
                if subspec is None:
                    problems.append(f"{where}.{sub} is not in the strict mapping")
                else:
                    problems += _check_field(family, f"{name}.{sub}", subspec, v)
    return problems


def _check_keyword(where: str, spec: Mapping[str, Any], value: Any) -> list[str]:
    limit = spec.get("ignore_above")
    for v in _values(value):
        if not isinstance(v, str):
            continue
        size = len(v.encode("utf-8", "surrogatepass"))
        if limit is None and size > TERM_LIMIT:
            return [f"{where} keyword value of {size} UTF-8 bytes, over Lucene's {TERM_LIMIT} "
                    "with no ignore_above in the mapping (document_parsing_exception) "
                    "[schemas/elasticsearch + the parser that admits it]"]
        if limit is not None and len(v) <= limit and size > TERM_LIMIT:
            return [f"{where} keyword value under ignore_above {limit} but {size} bytes"]
    return []


def _check_flattened(where: str, spec: Mapping[str, Any], value: Any) -> list[str]:
    limit = spec.get("ignore_above")
    problems: list[str] = []

    def walk(v: Any, path: str, depth: int) -> None:
        if problems:
            return
        if isinstance(v, Mapping):
            if depth >= FLATTENED_DEPTH:
                problems.append(f"{where} nests deeper than flattened's {FLATTENED_DEPTH} "
                                "levels")
                return
            for k, sub in v.items():
                if "\0" in k:
                    problems.append(f"{where} key {k[:40]!r} holds NUL, which flattened "
                                    "fields refuse [pipeline/parsers: context keys]")
                    return
                walk(sub, f"{path}.{k}" if path else k, depth + 1)
        elif isinstance(v, list):
            for sub in v:
                walk(sub, path, depth)
        elif v is not None:
            text = v if isinstance(v, str) else json.dumps(v)
            if limit is not None and len(text) > limit:
                return
            size = len(path.encode("utf-8", "surrogatepass")) + 1 + len(
                text.encode("utf-8", "surrogatepass"))
            if size > TERM_LIMIT:
                problems.append(f"{where} key {path[:40]!r}... makes a keyed term of {size} "
                                f"bytes, over Lucene's {TERM_LIMIT}")

    walk(value, "", 0)
    return problems


# --------------------------------------------------------------------------- isolation

def _vm_bytes() -> int:
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")


class _Alarm(BaseException):
    """The path ran out of its time (a BaseException: no ``except Exception`` keeps it)."""


def _on_alarm(signum: int, frame: Any) -> None:
    raise _Alarm


def _rss_peak() -> int:
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    return 0


def _measured(fn: Callable[[], Outcome], measure: str) -> Outcome:
    """``fn()`` with its peak memory: tracemalloc's peak, or (``rss``, for records big
    enough that tracemalloc's cost per allocation would take minutes) the growth of the
    process's resident high-water mark, reset first."""
    if measure == "tracemalloc":
        tracemalloc.start()
    else:
        with open("/proc/self/clear_refs", "w") as fh:
            fh.write("5")  # resets VmHWM to the current resident size
    start = _rss_peak()
    # CPU time of this process, not wall time: the ratios it is judged by must not move
    # with what else the machine runs
    t0 = time.process_time()
    try:
        out = fn()
    finally:
        seconds = time.process_time() - t0
        if measure == "tracemalloc":
            _, peak = tracemalloc.get_traced_memory()
            tracemalloc.stop()
        else:
            peak = _rss_peak() - start
    out.peak, out.seconds = peak, seconds
    return out


def run_isolated(raw: RawRecord | bytes, *, key: bytes | None = None,
                 memory: int = 1 << 30, seconds: int = 60,
                 measure: str = "tracemalloc") -> Outcome:
    """:func:`run_path` in a forked child with at most ``memory`` bytes more address space
    and ``seconds`` of wall time (a guard, so that a run ends); a child that runs out of
    either gives an Outcome whose violation says so. ``measure``: ``tracemalloc`` or
    ``rss`` (see :func:`_measured`)."""
    value = raw if isinstance(raw, bytes) else raw_value(raw)
    if key is None and isinstance(raw, RawRecord) and raw.key is not None:
        key = raw.key.encode("utf-8", "surrogatepass")
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never returns into the test
        status = 0
        try:
            os.close(read_end)
            logging.disable(logging.CRITICAL)  # the stage's own warnings: not under test
            limit = _vm_bytes() + memory
            resource.setrlimit(resource.RLIMIT_AS, (limit, resource.RLIM_INFINITY))
            signal.signal(signal.SIGALRM, _on_alarm)
            signal.alarm(seconds)
            try:
                result: Any = _measured(lambda: run_path(value, key=key), measure)
            except MemoryError:
                result = ("memory", len(value))
            except _Alarm:
                result = ("time", len(value))
            signal.alarm(0)
            data = pickle.dumps(result)
            with os.fdopen(write_end, "wb") as fh:
                fh.write(data)
        except BaseException:  # noqa: BLE001 - report anything, then leave
            status = 1
            traceback.print_exc()
        finally:
            os._exit(status)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as fh:
        data = fh.read()
    _, status = os.waitpid(pid, 0)
    if not data:
        out = Outcome(size=len(value))
        out.violate(f"the path's process died (wait status {status}) [memory or a crash]")
        return out
    result = pickle.loads(data)  # noqa: S301 - our own child's
    if isinstance(result, tuple):
        what, size = result
        out = Outcome(size=size)
        if what == "memory":
            out.violate(f"the path took more than {memory >> 20} MiB for a record of {size} "
                        "bytes (MemoryError) [memory not linear in the record's size]")
        else:
            out.violate(f"the path took more than {seconds} s for a record of {size} bytes "
                        "[time not linear in the record's size]")
        return out
    return result
