"""Adversarial records, per source format, through the worker's and the sink's whole path.

No record, however odd, stops the stream. Every strategy here *mutates a real recorded
record* (``tests/data``: the Flux 0.88 journals, the Slurm 22.05 and 25.11 records, the
derived Slurm fixtures, the submit-plugin lines of ``tests/data/bad`` made good): huge and
tiny numbers (2**63, 2**64, -1, 0, 1e300, NaN and infinities where the JSON reader takes
them, integers of 4,300 and 5,000 digits), long and odd strings in every string field
(10**5 characters, escaped lone surrogates, NUL, RTL marks, 4-byte UTF-8), events repeated
by the tens of thousands (one Flux job with 50,000 urgency changes or exceptions, an squeue
``restart_cnt`` of 65,535), nested and wide JSON and odd keys, widths and ranges in host
lists and idsets (10,000-digit zero padding, ``n[0-999][0-999]``), Slurm's sentinels in id,
uid and CPU fields, and the raw record's own ``cluster`` and ``received_at``.

Each record goes through ``tests/offline_path.py`` (the real jobs stage, then the sink's
decoding and converter: no Kafka, no Elasticsearch), in a forked child with a memory cap
and a wall-time guard. Asserted:

* either the record is refused with a DLQ reason (a ``ParseError`` of normalize, for the
  record or, in a multi-job record, one job; a job state the worker dead-letters by design
  because it cannot be kept within its budget; the sink's ``DocumentError`` for one
  document), or every output is valid: each job state encodes with the JobState schema (a
  state dead-lettered as ``invalid-record`` means the parser admitted a value beyond it),
  each job document, event and queue snapshot converts to a bulk action whose ``_id`` is at
  most 512 UTF-8 bytes, whose index name is valid, whose keyword values fit Lucene's term
  limit unless the mapping (``schemas/elasticsearch``) sets ``ignore_above``, whose
  flattened keys hold no NUL, whose fields are all in the strict mapping; and the job's
  table value (``JobFold.to_json``) stays under 512 KiB;
* never any other exception out of a stage (a parser's internal error included);
* memory and CPU time per input byte within generous ratios (:data:`MEMORY_RATIO`,
  :data:`TIME_RATIO`) of the same format's baseline record, measured in the same test:
  memory as tracemalloc's peak (by the resident high-water mark for records over
  :data:`TRACEMALLOC_BYTES`, where tracemalloc would take minutes), CPU time
  without tracemalloc. :func:`test_cost_per_byte_does_not_grow_with_the_record` checks linearity
  itself: one record grown 4 times in one dimension.

Three properties say more than "valid or refused", each from the issue: a bad job of a
multi-job record (squeue, sacct) dead-letters that job and not its neighbours; Slurm's
16-bit sentinels are values in 32-bit fields (job id 65534, uid 65534 are real); and a raw
record's ``received_at`` is validated like every other time.

Deterministic: ``derandomize=True``, no example database, no shrinking (a failing example
is reported as generated, in one line; the minimal input of each failure found is kept in
:data:`REPROS`), a bounded number of examples (about two minutes on two cores).
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import pytest
from datafiles import VECTORS
from hypothesis import HealthCheck, Phase, assume, given, settings
from hypothesis import strategies as st
from offline_path import Outcome, run_isolated, run_path

from pipeline.core.model import RawRecord
from pipeline.parsers import parse_record

DATA = Path(__file__).resolve().parents[1] / "data"
SLURM = DATA / "slurm"

#: a mutant may take this many times the baseline's tracemalloc peak per input byte ...
MEMORY_RATIO = 32
#: ... and this many times its CPU time per input byte
TIME_RATIO = 64


def adversarial(examples: int) -> settings:
    return settings(max_examples=examples, derandomize=True, database=None, deadline=None,
                    phases=[Phase.explicit, Phase.generate], print_blob=False,
                    suppress_health_check=list(HealthCheck))


# --------------------------------------------------------------------------- JSON text

class Raw(str):
    """JSON text written as it is: ``NaN``, integers of thousands of digits (Python will
    not turn them into text), escapes of lone surrogates."""


@dataclass(frozen=True)
class Deep:
    """An object nested ``depth`` levels."""

    depth: int


@dataclass(frozen=True)
class Wide:
    """An object of ``keys`` keys."""

    keys: int


class Lines(list):  # type: ignore[type-arg]
    """An eventlog written as RFC 18 JSON-lines text (a string of the record)."""


def to_json(value: Any) -> str:
    if isinstance(value, Raw):
        return str(value)
    if isinstance(value, Lines):
        return json.dumps("".join(to_json(e) + "\n" for e in value))
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, bool) or value is None:
        return json.dumps(value)
    if isinstance(value, int):
        return int.__repr__(value)
    if isinstance(value, float):
        return repr(value) if math.isfinite(value) else ("NaN" if value != value else (
            "Infinity" if value > 0 else "-Infinity"))
    if isinstance(value, Deep):
        return '{"a":' * value.depth + "1" + "}" * value.depth
    if isinstance(value, Wide):
        return "{" + ",".join(f'"k{i}":{i}' for i in range(value.keys)) + "}"
    if isinstance(value, Mapping):
        return "{" + ",".join(f"{to_json(str(k))}:{to_json(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list | tuple):
        return "[" + ",".join(to_json(v) for v in value) + "]"
    raise TypeError(type(value).__name__)


Path_ = tuple[Any, ...]


def leaf_paths(value: Any, path: Path_ = ()) -> Iterator[tuple[Path_, Any]]:
    """Every scalar of a JSON value, with its path (an eventlog's lines included)."""
    if isinstance(value, Mapping):
        for k, v in value.items():
            yield from leaf_paths(v, (*path, k))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from leaf_paths(v, (*path, i))
    else:
        yield path, value


def object_paths(value: Any, path: Path_ = ()) -> Iterator[Path_]:
    if isinstance(value, Mapping):
        yield path
        for k, v in value.items():
            yield from object_paths(v, (*path, k))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from object_paths(v, (*path, i))


def put_at(value: Any, path: Path_, new: Any) -> Any:
    """``value`` with ``new`` at ``path`` (containers on the path copied, nothing else)."""
    if not path:
        return new
    head, rest = path[0], path[1:]
    if isinstance(value, Mapping):
        out = dict(value)
        out[head] = put_at(value.get(head), rest, new)
        return out
    out_list = type(value)(value) if isinstance(value, Lines) else list(value)
    out_list[head] = put_at(value[head], rest, new)
    return out_list


def rename_at(value: Any, path: Path_, new_key: str, new_value: Any) -> Any:
    """``value`` with the object at ``path`` given ``new_key`` (replacing its value)."""
    def change(obj: Mapping[str, Any]) -> dict[str, Any]:
        return {**obj, new_key: new_value}
    target = value
    for p in path:
        target = target[p]
    return put_at(value, path, change(target))


# --------------------------------------------------------------------------- odd values

#: lone surrogates as JSON escapes (a str cannot be UTF-8 encoded with one)
SURROGATES = [Raw('"\\ud800"'), Raw('"x\\udfffy"'), Raw('"\\udc00\\ud800"'),
              Raw('"' + "\\ud83d" * 1000 + '"')]
_UNITS = ["x", "é", "\U0001f600", "\u202e", "\u05d0", "\x00", "\u2028", " ", "\ufeff",
          "\U0010ffff", "\u0301", "A:*?", "\\"]
odd_strings = st.one_of(
    st.sampled_from(["", " ", "\x00", "a\x00b", "\u202eevil\u202c", "..", "-lead", "_lead",
                     "+lead", "UPPER:case*?", "a/b\\c", "x" * 513, "x" * 40_000,
                     "\U0001f600" * 9_000, "\u00e9" * 20_000, "node[0-2]", "\n",
                     *SURROGATES]),
    st.builds(lambda unit, n: unit * n, st.sampled_from(_UNITS),
              st.sampled_from([2, 300, 513, 10_000, 100_000])),
)
#: what a JSON reader may hand over for a number
odd_numbers = st.sampled_from([
    2**63, 2**63 - 1, 2**64, 2**64 - 1, -1, 0, -(2**63), -(2**63) - 1, 1e300, -1e300, 1e-300,
    0.5, -0.0, 2**53 + 1, 1.8446744073709552e19, Raw("NaN"), Raw("Infinity"),
    Raw("-Infinity"), Raw("1e400"), Raw("9" * 5000), Raw("1" + "0" * 4299),
    Raw("-" + "1" * 4301), 0xFFFE, 0xFFFF, 0xFFFFFFFE, 0xFFFFFFFF, 0xFFFFFFFFFFFFFFFE,
    0xFFFFFFFFFFFFFFFF, 2**31, 2**32,
])
#: Slurm's sentinels (NO_VAL16, INFINITE16, NO_VAL, INFINITE, NO_VAL64, INFINITE64) and
#: their neighbours, as numbers and as the {set, infinite, number} objects
slurm_sentinels = st.sampled_from([
    0xFFFE, 0xFFFF, 0xFFFFFFFE, 0xFFFFFFFF, 0xFFFFFFFFFFFFFFFE, 0xFFFFFFFFFFFFFFFF,
    0xFFFD, 0x10000, 0xFFFFFFFD, 2**32, 0, -1, -2, 2**63,
    {"set": True, "infinite": False, "number": 0xFFFE},
    {"set": True, "infinite": False, "number": 2**64},
    {"set": True, "infinite": True, "number": 0}, {"set": False, "infinite": False,
                                                   "number": 5},
])
_pads = st.sampled_from([10, 1_000, 10_000, 40_000])
hostlists = st.one_of(
    _pads.map(lambda w: f"node[{'0' * w}1-2]"),
    _pads.map(lambda w: f"node[{'0' * w}1-{'0' * w}3],login{'0' * w}"),
    st.sampled_from(["n[0-999][0-999]", "n[0-999999]", "n[0-9999999]", "n[0-99][0-99][0-99]",
                     "n[0-99][0-99][0-9]", "n[" + "1" * 5000 + "]",
                     "n[0-" + "9" * 5000 + "]", "n[0-" + "9" * 4300 + "]",
                     "n[\u0660-\u0669]", "n[1-2]" + ",m[1-2]" * 5000, "n[", "n]",
                     "n[2-1]", "n[0-3]x[0-3]y[0-3]z[0-3]"]),
    st.sampled_from([1_000, 40_000, 100_000]).map(lambda k: "x" * k + "[0-3]"),
    st.sampled_from([1_000, 100_000]).map(lambda k: ",".join(f"n{i}" for i in range(k))),
)
idsets = st.sampled_from([
    "0-18446744073709551615", "0-" + "9" * 5000, "0-" + "9" * 4300, "0-999999999999",
    ",".join(map(str, range(0, 200_000, 2))), "[0-3]", "\u0660-\u0669", "3-0", "0-1,0-1",
    "0-9223372036854775807", "0-4294967295",
])
#: nested and wide JSON values to put into a record
shapes = st.sampled_from([Deep(15), Deep(16), Deep(17), Deep(19), Deep(25), Deep(900),
                          Deep(100_000), Wide(1_000), Wide(100_000), [[[[[[[[[]]]]]]]]],
                          {"\x00": 1}, {"x" * 40_000: "v"}, {"": {"": ""}}, {"a.b": {"a": 1}}])
#: keys to give an object
odd_keys = st.sampled_from(["\x00", "k\x00", "x" * 40_000, "", ".", "a.b", "\U0001f600" * 9000,
                            "\u202e", "x" * 100_000])


# --------------------------------------------------------------------------- base records

@dataclass(frozen=True, repr=False)
class Base:
    """A real record: its format, its payload as a JSON value (or env lines), and what the
    edge gives it (cluster, received_at, key)."""

    name: str
    fmt: str
    scheduler: str
    value: Any
    received_at: float
    key: str | None

    def __repr__(self) -> str:
        return f"<{self.fmt} {self.name}>"

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:  # hypothesis's printer
        printer.text(repr(self))

    def raw(self, value: Any = None, *, cluster: str = "adv", received_at: float | None = None,
            keep_key: bool = True) -> RawRecord:
        payload = encode_payload(self.fmt, self.value if value is None else value)
        key = self.key if keep_key and self.key and cluster == "adv" else None
        return RawRecord(cluster, self.scheduler, self.fmt,  # type: ignore[arg-type]
                         self.received_at if received_at is None else received_at,
                         payload, key)


def encode_payload(fmt: str, value: Any) -> bytes:
    if fmt == "slurm-hook" and isinstance(value, list):  # env lines
        return b"\n".join((b"" if k is None else k.encode() + b"=") + (
            v if isinstance(v, bytes) else v.encode("utf-8", "surrogatepass"))
            for k, v in value)
    return to_json(value).encode("utf-8", "surrogatepass")


def _base(name: str, fmt: str, value: Any) -> Base:
    scheduler = "flux" if fmt.startswith("flux") else "slurm"
    events = parse_record(fmt, encode_payload(fmt, value), cluster="adv", received_at=2e9)
    assert events, name
    when = max(ev.timestamp for ev in events if ev.event != "eligible") + 60.0
    return Base(name, fmt, scheduler, value, when, events[0].key)


def _jsonl(path: Path) -> list[Any]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _env(path: Path) -> list[tuple[str | None, bytes]]:
    """``KEY=VALUE`` lines (a line without ``=``, a multi-line value's rest: key None), the
    values as bytes (a private variable may be in any encoding)."""
    out: list[tuple[str | None, bytes]] = []
    for line in path.read_bytes().split(b"\n"):
        key, sep, value = line.partition(b"=")
        out.append((key.decode("ascii", "replace"), value) if sep else (None, line))
    return out


def _few_jobs(doc: dict[str, Any], n: int = 3) -> dict[str, Any]:
    return {**doc, "jobs": doc["jobs"][:n]}


@cache
def bases(fmt: str) -> tuple[Base, ...]:
    flux = VECTORS / "flux"
    backlog = _jsonl(flux / "real-0.88-journal-backlog.jsonl")[:19]
    live = [r for r in _jsonl(flux / "real-0.88-journal-live.jsonl") if r["id"] != -1]
    if fmt == "flux-journal":
        picks = [("backlog gpu-train", backlog[0]), ("backlog mpi", backlog[3]),
                 ("backlog raised", backlog[10]),
                 *[(f"live {r['events'][0]['name']}", r) for r in live
                   if r["events"][0]["name"] in ("submit", "alloc", "exception", "finish")][:4]]
    elif fmt == "flux-eventlog":
        picks = [(f"eventlog {i}" + (" text" if i % 2 else ""),
                  {"id": r["id"], "eventlog": Lines(r["events"]) if i % 2 else r["events"],
                   "jobspec": r.get("jobspec"), "R": r.get("R")})
                 for i, r in enumerate(backlog[:6])]
    elif fmt == "slurm-jobcomp":
        picks = [(f"{p.name}:{i}", r) for p in (VECTORS / "slurm" / "jobcomp_kafka_25.11.jsonl",
                                                VECTORS / "slurm" / "jobcomp_22.05_sample.jsonl",
                                                SLURM / "jobcomp_requeued.jsonl")
                 for i, r in enumerate(_jsonl(p)[:3])]
        picks += [(p.name, json.loads(p.read_text()))
                  for p in (SLURM / "jobcomp_26.05_sluid.json", SLURM / "jobcomp_resizing.json")]
    elif fmt == "slurm-squeue":
        picks = [(p.name, _few_jobs(json.loads(p.read_text())))
                 for p in (VECTORS / "slurm" / "squeue_25.11.json",
                           VECTORS / "slurm" / "squeue_running_22.05.json",
                           SLURM / "squeue_v0.0.41_24.05.json",
                           SLURM / "squeue_v0.0.39_23.02.json")]
    elif fmt == "slurm-sacct":
        picks = [(p.name, _few_jobs(json.loads(p.read_text())))
                 for p in (VECTORS / "slurm" / "sacct_25.11.json",
                           SLURM / "real-22.05" / "sacct.json",
                           SLURM / "sacct_v0.0.42_24.11.json",
                           SLURM / "sacct_v0.0.38_22.05.json")]
    elif fmt == "slurm-hook":
        picks = [(p.name, _env(p)) for p in (*sorted((VECTORS / "slurm" / "hooks").glob("*.env")),
                                             SLURM / "hook_epilog_23.02.env")]
        picks += [("hook_prolog_25.11.json", json.loads((SLURM / "hook_prolog_25.11.json")
                                                         .read_text()))]
    elif fmt == "slurm-submit-plugin":
        # the lines of tests/data/bad without what makes them bad (a time_str of "soon", no
        # job id): the shapes job_submit.lua and cli_filter.lua write
        bad = DATA / "bad"
        submit = json.loads((bad / "slurm-submit-plugin-bad-time.json").read_text())
        modify = json.loads((bad / "slurm-submit-plugin-no-jobid.json").read_text())
        refused = json.loads((bad / "slurm-submit-plugin-refused.json").read_text())
        submit.pop("time_str")
        modify["job_id"] = submit["job_id"]
        held = {**modify, "hold": True, "partition": refused["partition"],
                "job_name": "held", "account": "physics", "qos": "normal"}
        picks = [("cli_filter submit", submit), ("job_submit modify", modify),
                 ("job_submit hold", held),
                 ("cli_filter submit full", {**submit, "user": refused["user"],
                                             "partition": refused["partition"],
                                             "time_str": "1-2:03"})]
    else:
        raise KeyError(fmt)
    return tuple(_base(name, fmt, value) for name, value in picks)


@dataclass(frozen=True, repr=False)
class Mutant:
    """A base record changed in one place; its repr says how, in one line."""

    base: Base
    value: Any
    what: str

    def __repr__(self) -> str:
        return self.what

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:  # hypothesis's printer
        printer.text(self.what)


FORMATS = ("flux-journal", "flux-eventlog", "slurm-jobcomp", "slurm-squeue", "slurm-sacct",
           "slurm-hook", "slurm-submit-plugin")


# --------------------------------------------------------------------------- the checks

#: Memory is tracemalloc's peak for records up to this size. Bigger ones (50,000 events),
#: and any record whose resident high-water mark already shows it over the ratio, are
#: judged by the growth of that mark: tracemalloc's cost per allocation would take minutes.
TRACEMALLOC_BYTES = 128 * 1024
#: the child's wall-time guard, so that CI ends: 15 s and 5 s more per MiB of the record,
#: at most a minute (a run that reaches it is a time failure)
GUARD_S = 15


@dataclass(frozen=True)
class Baseline:
    """A format's first real record, measured three times each way (the least of each):
    ``rss`` runs give the CPU time (tracemalloc slows allocation-heavy code unevenly, up
    to 75 times for a big host list) and the resident high-water mark, ``tracemalloc`` runs
    the traced peak."""

    size: int
    peak: dict[str, int]
    seconds: float


@cache
def baseline(fmt: str) -> Baseline:
    # every base record once in this process first: a code path's first run imports and
    # compiles what it needs (strptime, regexes), and each child would pay for it again
    for base in bases(fmt):
        run_path(base.raw())
    peak: dict[str, int] = {}
    seconds = math.inf
    for measure in ("rss", "tracemalloc"):
        runs = [run_isolated(bases(fmt)[0].raw(), measure=measure) for _ in range(3)]
        for out in runs:
            assert not out.violations and out.refused is None, (fmt, out.violations,
                                                                out.refused)
        # at least 1 MiB resident (the mark grows by pages, and the child reuses what the
        # parent freed) and 256 KiB traced: below that a record's fixed costs decide
        peak[measure] = max(min(o.peak for o in runs),
                            1 << 20 if measure == "rss" else 1 << 18)
        if measure == "rss":  # at least 20 ms: below that a scheduler's pause decides
            seconds = max(min(o.seconds for o in runs), 0.02)
    return Baseline(runs[0].size, peak, seconds)


def problems_of(raw: RawRecord, base: Baseline | None = None) -> tuple[Outcome, list[str]]:
    """Run ``raw`` through the path: its outcome, and every rule it broke."""
    guard = min(60, GUARD_S + 5 * len(raw.payload) // (1 << 20))
    out = run_isolated(raw, measure="rss", seconds=guard)
    problems = list(out.violations)
    if base is None or not out.seconds:  # no figures: the guard stopped it
        return out, problems
    scale = max(1.0, out.size / base.size)
    if out.seconds > TIME_RATIO * base.seconds * scale:
        problems.append(
            f"time not linear: {out.seconds * 1e6 / out.size:.1f} us per input byte "
            f"({out.seconds:.2f} s for {out.size} bytes), over {TIME_RATIO}x the "
            f"baseline's {base.seconds * 1e6 / base.size:.1f}")
    measure, peak = "rss", out.peak
    if out.peak <= MEMORY_RATIO * base.peak["rss"] * scale and len(
            raw.payload) <= TRACEMALLOC_BYTES:
        # tracemalloc slows allocation-heavy code many times over: a longer guard, and
        # the resident figure when even that is not enough
        traced = run_isolated(raw, measure="tracemalloc", seconds=4 * guard)
        if traced.peak:
            measure, peak = "tracemalloc", traced.peak
    if peak > MEMORY_RATIO * base.peak[measure] * scale:
        problems.append(
            f"memory not linear: {measure} peak {peak / out.size:.0f} bytes per input "
            f"byte ({peak >> 20} MiB for {out.size} bytes), over {MEMORY_RATIO}x the "
            f"baseline's {base.peak[measure] / base.size:.0f}")
    return out, problems


def judge(raw: RawRecord, what: str, base: Baseline | None = None) -> Outcome:
    """Run ``raw`` through the path and fail with every rule it broke."""
    out, problems = problems_of(raw, base)
    if problems:
        pytest.fail(f"{what}:\n  " + "\n  ".join(problems), pytrace=False)
    return out


def _short(value: Any) -> str:
    """A value in a line of ASCII: JSON-escaped, long runs shown by their start and size."""
    if isinstance(value, bytes):
        text = repr(value)
    elif isinstance(value, Raw):
        text = str(value)
    elif isinstance(value, str):
        text = json.dumps(value)
    else:
        text = to_json(value)
    text = text.encode("ascii", "backslashreplace").decode()
    if len(text) > 60:
        return f"{text[:32]}...({len(text)} chars)"
    return text


def _at(path: Path_) -> str:
    return "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in path) or "."


# --------------------------------------------------------------------------- strategies

def paths_of(fmt: str, base: Base, kind: str) -> list[Path_]:
    """The mutable places of a base record: ``string`` and ``number`` leaves, ``object``s,
    or the format's ``id``/``host``/``idset``/``text`` fields."""
    return _paths(fmt, base.name, kind)


@cache
def _paths(fmt: str, name: str, kind: str) -> list[Path_]:
    base = next(b for b in bases(fmt) if b.name == name)
    value = base.value
    if kind == "object":
        return list(object_paths(value))
    leaves = list(leaf_paths(value))
    if kind == "string":
        return [p for p, v in leaves if isinstance(v, str)]
    if kind == "number":
        return [p for p, v in leaves if isinstance(v, int | float) and not isinstance(v, bool)]
    names = FIELDS[fmt].get(kind, frozenset())
    return [p for p, _ in leaves if any(isinstance(k, str) and k in names for k in p[-3:])]


#: the fields of each format that the parsers read as ids and counts, host lists and
#: idsets, and free text of job documents
FIELDS: dict[str, dict[str, frozenset[str]]] = {
    "flux-journal": {
        "id": frozenset({"id", "userid", "urgency", "priority", "status", "severity", "count",
                         "duration", "expiration", "starttime", "nslots", "timestamp"}),
        "host": frozenset({"nodelist"}), "idset": frozenset({"rank", "core", "gpu"}),
        "text": frozenset({"queue", "bank", "cwd", "name", "type", "note", "command"}),
    },
    "slurm-jobcomp": {
        "id": frozenset({"jobid", "user_id", "group_id", "total_cpus", "total_nodes",
                         "time_limit", "array_job_id", "array_task_id", "het_job_id",
                         "het_job_offset", "pack_job_id", "elapsed", "priority"}),
        "host": frozenset({"nodes"}),
        "text": frozenset({"partition", "account", "cluster", "job_name", "username",
                           "groupname", "qos", "work_dir", "tres_req", "tres_alloc",
                           "failed_node", "sluid"}),
    },
    "slurm-squeue": {
        "id": frozenset({"job_id", "user_id", "group_id", "cpus", "node_count",
                         "restart_cnt", "array_job_id", "array_task_id", "het_job_id",
                         "het_job_offset", "time_limit", "submit_time", "start_time",
                         "end_time", "eligible_time"}),
        "host": frozenset({"nodes", "list", "name", "nodename"}),
        "text": frozenset({"partition", "account", "name", "user_name", "group_name", "qos",
                           "cluster", "state_reason", "current_working_directory",
                           "tres_req_str", "tres_alloc_str", "array_task_string"}),
    },
    "slurm-sacct": {
        "id": frozenset({"job_id", "allocation_nodes", "restart_cnt", "limit", "elapsed",
                         "submission", "start", "end", "eligible", "task_id", "count",
                         "seconds", "microseconds", "memory_per_node", "memory_per_cpu",
                         "return_code"}),
        "host": frozenset({"nodes"}),
        "text": frozenset({"partition", "account", "name", "user", "group", "qos", "cluster",
                           "working_directory", "reason"}),
    },
    "slurm-submit-plugin": {
        "id": frozenset({"job_id", "uid", "by_uid", "time", "time_limit", "priority",
                         "nice", "step_id"}),
        "host": frozenset(),
        "text": frozenset({"partition", "account", "qos", "job_name", "user", "cluster",
                           "time_str"}),
    },
}
FIELDS["flux-eventlog"] = FIELDS["flux-journal"]

#: what each kind of place gets
VALUES: dict[str, st.SearchStrategy[Any]] = {
    "string": odd_strings, "number": odd_numbers, "text": odd_strings,
    "id": st.one_of(slurm_sentinels, odd_numbers), "host": hostlists, "idset": idsets,
}


@st.composite
def json_mutants(draw: st.DrawFn, fmt: str, kinds: tuple[str, ...]) -> Mutant:
    """A base record of ``fmt`` with one place of one of ``kinds`` changed; its description."""
    base = draw(st.sampled_from(bases(fmt)))
    usable = [k for k in kinds if paths_of(fmt, base, k)]
    assume(usable)
    kind = draw(st.sampled_from(usable))
    path = draw(st.sampled_from(paths_of(fmt, base, kind)))
    if kind == "object":
        if draw(st.booleans()):
            key = draw(odd_keys)
            new = draw(st.one_of(odd_strings, odd_numbers, shapes))
            return Mutant(base, rename_at(base.value, path, key, new),
                          f"{base.name}: key {_short(key)} = {_short(new)} added at {_at(path)}")
        new = draw(shapes)
        key = draw(st.sampled_from(["x_adv", "context", "annotations", "exit_code",
                                    "failed_node", "derived_ec", "elapsed"]))
        return Mutant(base, rename_at(base.value, path, key, new),
                      f"{base.name}: {key} = {_short(new)} added at {_at(path)}")
    new = draw(VALUES[kind])
    return Mutant(base, put_at(base.value, path, new), f"{base.name}: {_at(path)} = {_short(new)}")


HOOK_KEYS = ("SLURM_JOB_ID", "SLURM_JOBID", "SLURM_JOB_UID", "SLURM_JOB_GID",
             "SLURM_JOB_NODELIST", "SLURM_JOB_CPUS_PER_NODE", "SLURM_JOB_NUM_NODES",
             "SLURM_JOB_PARTITION", "SLURM_JOB_ACCOUNT", "SLURM_CLUSTER_NAME",
             "SLURM_JOB_NAME", "SLURM_JOB_USER", "SLURM_JOB_WORK_DIR", "SLURM_JOB_QOS",
             "SLURM_JOB_RESTART_COUNT", "SLURM_ARRAY_JOB_ID", "SLURM_ARRAY_TASK_ID",
             "SLURM_HET_JOB_ID", "SLURM_HET_JOB_OFFSET", "SLURM_JOB_START_TIME",
             "SLURM_JOB_END_TIME", "SLURM_JOB_EXIT_CODE", "SLURM_JOB_EXIT_CODE2",
             "JOBSTREAM_HOOK_TIME", "SLURM_JOB_SLUID")
_hook_text = st.one_of(
    odd_strings.filter(lambda s: not isinstance(s, Raw) and "\n" not in s),
    slurm_sentinels.filter(lambda v: isinstance(v, int)).map(str),
    odd_numbers.map(str).filter(lambda s: "\n" not in s),
    hostlists, st.sampled_from([b"\xed\xa0\x80", b"\xff\xfe", "999999999(x999999999)," * 12,
                                "1(x4294967295)", "65535(x65535)", "2(x3),1"]),
)


@st.composite
def hook_mutants(draw: st.DrawFn) -> Mutant:
    """A hook environment with one of the keys the parser reads set to an odd value."""
    base = draw(st.sampled_from(bases("slurm-hook")))
    key = draw(st.sampled_from(HOOK_KEYS))
    new = draw(_hook_text)
    if isinstance(base.value, list):
        lines = [(k, v) for k, v in base.value if k != key] + [(key, new)]
        return Mutant(base, lines, f"{base.name}: {key}={_short(new)}")
    assume(not isinstance(new, bytes))  # JSON text holds no undecodable bytes
    value = draw(st.sampled_from([new, Raw(new) if new.lstrip("-").isdigit() else new]))
    return Mutant(base, {**base.value, key: value}, f"{base.name}: {key}: {_short(value)}")


def mutants(fmt: str, kinds: tuple[str, ...]) -> st.SearchStrategy[Mutant]:
    return hook_mutants() if fmt == "slurm-hook" else json_mutants(fmt, kinds)


def check_mutant(fmt: str, mutant: Mutant) -> None:
    judge(mutant.base.raw(mutant.value), f"{fmt} {mutant.what}", baseline(fmt))


# --------------------------------------------------------------------------- every format

JSON_FORMATS = [f for f in FORMATS if f != "slurm-hook"]


@pytest.mark.parametrize("fmt", JSON_FORMATS)
@adversarial(14)
@given(data=st.data())
def test_odd_strings_in_every_string_field(fmt: str, data: st.DataObject) -> None:
    check_mutant(fmt, data.draw(mutants(fmt, ("string",)), label="mutant"))


@pytest.mark.parametrize("fmt", JSON_FORMATS)
@adversarial(14)
@given(data=st.data())
def test_huge_and_tiny_numbers_in_every_number_field(fmt: str, data: st.DataObject) -> None:
    check_mutant(fmt, data.draw(mutants(fmt, ("number",)), label="mutant"))


@pytest.mark.parametrize("fmt", JSON_FORMATS)
@adversarial(16)
@given(data=st.data())
def test_ids_counts_and_sentinels(fmt: str, data: st.DataObject) -> None:
    check_mutant(fmt, data.draw(mutants(fmt, ("id",)), label="mutant"))


@pytest.mark.parametrize("fmt", ["flux-journal", "flux-eventlog", "slurm-jobcomp",
                                 "slurm-squeue", "slurm-sacct"])
@adversarial(14)
@given(data=st.data())
def test_hostlist_widths_and_ranges(fmt: str, data: st.DataObject) -> None:
    check_mutant(fmt, data.draw(mutants(fmt, ("host", "idset")), label="mutant"))


@pytest.mark.parametrize("fmt", JSON_FORMATS)
@adversarial(12)
@given(data=st.data())
def test_long_text_in_document_fields(fmt: str, data: st.DataObject) -> None:
    check_mutant(fmt, data.draw(mutants(fmt, ("text",)), label="mutant"))


@pytest.mark.parametrize("fmt", JSON_FORMATS)
@adversarial(10)
@given(data=st.data())
def test_nested_and_wide_json_and_odd_keys(fmt: str, data: st.DataObject) -> None:
    check_mutant(fmt, data.draw(mutants(fmt, ("object",)), label="mutant"))


@adversarial(40)
@given(data=st.data())
def test_hook_environment_values(data: st.DataObject) -> None:
    check_mutant("slurm-hook", data.draw(hook_mutants(), label="mutant"))


@pytest.mark.parametrize("fmt", FORMATS)
@adversarial(6)
@given(data=st.data())
def test_odd_cluster_names(fmt: str, data: st.DataObject) -> None:
    """The raw record's ``cluster`` (the edge's configuration; also any Slurm record's own
    ``cluster``, which wins) is in every id, key and index of the job."""
    base = data.draw(st.sampled_from(bases(fmt)), label="base")
    cluster = data.draw(odd_strings.filter(lambda s: not isinstance(s, Raw)
                                           and s.encode("utf-8", "surrogatepass")
                                           .decode("utf-8", "replace") == s), label="cluster")
    judge(base.raw(cluster=cluster), f"{fmt} {base.name}: RawRecord.cluster = {_short(cluster)}",
          baseline(fmt))


# --------------------------------------------------------------------------- repetition

REPEATED = {
    "urgency": lambda i: {"urgency": i % 32},
    "exception": lambda i: {"type": "adv", "severity": i % 8, "note": f"n{i}"},
    "priority": lambda i: {"priority": i % 100},
    "dependency-add": lambda i: {"description": f"afterok:{i}"},
    "memo": lambda i: {"k": i},
    "annotations": lambda i: {"annotations": {"sched": {"reason_pending": f"r{i}"}}},
    "x.unknown": lambda i: {"i": i},
}


def _flux_job_with(base: Base, fmt: str, name: str, count: int) -> RawRecord:
    events_key = "events" if fmt == "flux-journal" else "eventlog"
    events = base.value[events_key]
    t0 = max(e["timestamp"] for e in events)
    more = [{"timestamp": t0 + (i + 1) * 1e-3, "name": name, "context": REPEATED[name](i)}
            for i in range(count)]
    value = {**base.value, events_key: type(events)([*events, *more])}
    return base.raw(value, received_at=base.received_at + count * 1e-3)


@pytest.mark.parametrize("name", ["urgency", "exception"])
@pytest.mark.parametrize(("fmt", "index"), [("flux-journal", 0), ("flux-eventlog", 1)])
def test_one_flux_job_with_50000_events(fmt: str, index: int, name: str) -> None:
    """A job's owner changes its urgency or raises exceptions in a loop (``flux job
    urgency``, ``flux job raise``): one backlog response, or one eventlog's JSON lines,
    holds 50,000 of them."""
    base = bases(fmt)[index]
    judge(_flux_job_with(base, fmt, name, 50_000), f"{fmt} {base.name}: 50000 {name} events",
          baseline(fmt))


@pytest.mark.parametrize("fmt", ["flux-journal", "flux-eventlog"])
@adversarial(4)
@given(data=st.data())
def test_one_flux_job_with_thousands_of_other_events(fmt: str, data: st.DataObject) -> None:
    """Priority changes, dependency edits, memos, annotations and event names unknown to
    us, by the thousand on one job."""
    base = data.draw(st.sampled_from(bases(fmt)[:2]), label="base")
    name = data.draw(st.sampled_from(sorted(set(REPEATED) - {"urgency", "exception"})),
                     label="event")
    count = data.draw(st.sampled_from([3_000, 10_000]), label="count")
    judge(_flux_job_with(base, fmt, name, count), f"{fmt} {base.name}: {count} {name} events",
          baseline(fmt))


@adversarial(5)
@given(data=st.data())
def test_squeue_restart_counts_and_wide_documents(data: st.DataObject) -> None:
    """One squeue record stating a huge ``restart_cnt`` (one requeue event per restart),
    or listing thousands of jobs."""
    base = data.draw(st.sampled_from(bases("slurm-squeue")[:2]), label="base")
    if data.draw(st.booleans(), label="restarts"):
        count = data.draw(st.sampled_from([5_000, 65_533, 65_534, 65_535, 65_536]),
                          label="restart_cnt")
        job = {**base.value["jobs"][0], "restart_cnt": count}
        value = {**base.value, "jobs": [job, *base.value["jobs"][1:]]}
        what = f"restart_cnt {count}"
    else:
        copies = data.draw(st.sampled_from([500, 3_000]), label="jobs")
        job = base.value["jobs"][0]
        value = {**base.value, "jobs": [{**job, "job_id": 100_000 + i} for i in range(copies)]}
        what = f"{copies} jobs"
    judge(base.raw(value, keep_key=False), f"slurm-squeue {base.name}: {what}",
          baseline("slurm-squeue"))


@adversarial(3)
@given(data=st.data())
def test_sacct_steps_by_the_thousand(data: st.DataObject) -> None:
    base = data.draw(st.sampled_from(bases("slurm-sacct")[:1]), label="base")
    count = data.draw(st.sampled_from([1_000, 5_000]), label="steps")
    job = next((j for j in base.value["jobs"] if j.get("steps")), base.value["jobs"][0])
    steps = [{**job["steps"][0], "step": {**job["steps"][0].get("step", {}),
                                         "name": f"s{i}"}} for i in range(count)]
    value = {**base.value, "jobs": [{**job, "steps": steps}]}
    judge(base.raw(value, keep_key=False), f"slurm-sacct {base.name}: {count} steps",
          baseline("slurm-sacct"))


# --------------------------------------------------------------------------- growth

def _grown(fmt: str, grow: Callable[[Any, int], Any]) -> Callable[[int], RawRecord]:
    def make(n: int) -> RawRecord:
        base = bases(fmt)[0]
        return base.raw(grow(base.value, n), keep_key=False,
                        received_at=base.received_at + n * 1e-3)
    return make


def _more_events(value: Any, n: int, key: str = "events") -> Any:
    events = value[key]
    t0 = max(e["timestamp"] for e in events)
    more = [{"timestamp": t0 + (i + 1) * 1e-3, "name": "urgency", "context": {"urgency": i}}
            for i in range(n)]
    return {**value, key: type(events)([*events, *more])}


def _hosts(n: int) -> str:
    return ",".join(f"n{i}" for i in range(n))


#: records that grow with n in one dimension: (how, n of the smaller one)
GROWTH: dict[str, tuple[Callable[[int], RawRecord], int]] = {
    "flux-journal events": (_grown("flux-journal", _more_events), 1_000),
    "flux-eventlog lines": (_grown("flux-eventlog", lambda v, n: _more_events(
        v, n, "eventlog")), 1_000),
    "flux-journal R nodelist hosts": (_grown("flux-journal", lambda v, n: put_at(
        v, ("R", "execution", "nodelist"), [_hosts(n)])), 4_000),
    "flux-journal R_lite ranks": (_grown("flux-journal", lambda v, n: put_at(
        v, ("R", "execution", "R_lite"), [{"rank": str(i), "children": {"core": "0-3"}}
                                          for i in range(n)])), 1_000),
    "flux-journal context width": (_grown("flux-journal", lambda v, n: put_at(
        v, ("events", 0, "context", "wide"), Wide(n))), 2_000),
    "slurm-jobcomp nodes": (_grown("slurm-jobcomp", lambda v, n: {**v, "nodes": _hosts(n)}),
                            2_000),
    "slurm-jobcomp job name": (_grown("slurm-jobcomp", lambda v, n: {
        **v, "job_name": "x" * (10 * n)}), 1_000),
    "slurm-squeue jobs": (_grown("slurm-squeue", lambda v, n: {**v, "jobs": [
        {**v["jobs"][0], "job_id": 100_000 + i} for i in range(n)]}), 40),
    "slurm-squeue nodes": (_grown("slurm-squeue", lambda v, n: put_at(
        v, ("jobs", 0, "nodes"), _hosts(n))), 2_000),
    "slurm-sacct steps": (_grown("slurm-sacct", lambda v, n: put_at(
        v, ("jobs", 0, "steps"), [v["jobs"][0]["steps"][0]] * n)), 200),
    "slurm-hook nodelist": (_grown("slurm-hook", lambda v, n: [
        (k, x) for k, x in v if k != "SLURM_JOB_NODELIST"] + [
        ("SLURM_JOB_NODELIST", _hosts(n).encode())]), 2_000),
    "slurm-hook env lines": (_grown("slurm-hook", lambda v, n: [
        *v, *((f"X_{i}", b"v") for i in range(n))]), 5_000),
}
#: a record 4 times bigger may cost this many times more per byte, no more (a linear path
#: costs about the same per byte or less; a quadratic one up to 4 times as much)
GROWTH_RATIO = 2.0
GROWTH_FACTOR = 4


@pytest.mark.parametrize("name", sorted(GROWTH))
def test_cost_per_byte_does_not_grow_with_the_record(name: str) -> None:
    """Memory and time linear in the record's size: the same record grown 4 times in one
    dimension costs at most :data:`GROWTH_RATIO` times more per input byte."""
    make, n = GROWTH[name]
    small = run_isolated(make(n), measure="rss", seconds=GUARD_S)
    big = run_isolated(make(n * GROWTH_FACTOR), measure="rss", seconds=GUARD_S)
    guard = [v for v in small.violations + big.violations
             if "more than" in v or "died" in v]
    assert not guard, f"{name}: {guard}"

    def per_byte(out: Outcome, what: str) -> float:
        # below these, fixed costs (and, resident, the heap the parent left free) decide
        floor = {"peak": 16 << 20, "seconds": 0.1}[what]
        return max(getattr(out, what), floor) / out.size

    problems = []
    for what, unit in (("peak", "bytes"), ("seconds", "s")):
        ratio = per_byte(big, what) / per_byte(small, what)
        if ratio > GROWTH_RATIO:
            problems.append(f"{what} per input byte grew {ratio:.1f} times for a record "
                            f"{big.size / small.size:.1f} times bigger ({getattr(small, what):.3g}"
                            f" {unit} for {small.size} bytes, {getattr(big, what):.3g} {unit} "
                            f"for {big.size})")
    if problems:
        pytest.fail(f"{name} (n={n} and {n * GROWTH_FACTOR}): " + "; ".join(problems),
                    pytrace=False)


# --------------------------------------------------------------------------- properties

#: a job of a multi-job record made bad in one way each: the ways the parsers refuse
BAD_JOB = {
    "slurm-squeue": [("job_state", "NOT_A_STATE"), ("nodes", "n["), ("job_id", 2**64),
                     ("submit_time", -5), ("user_id", "alice"), ("partition", 7),
                     ("nodes", "n[0-999][0-999]"), ("job_id", 0)],
    "slurm-sacct": [("state", {"current": ["NOT_A_STATE"]}), ("nodes", "n["),
                    ("job_id", 2**64), ("time", {"submission": -5}), ("partition", 7),
                    ("state", None), ("nodes", "n[0-999][0-999]"), ("job_id", 0)],
}


@pytest.mark.parametrize("fmt", sorted(BAD_JOB))
@adversarial(6)
@given(data=st.data())
def test_one_bad_job_does_not_lose_its_neighbours(fmt: str, data: st.DataObject) -> None:
    """One job's bad field dead-letters that job, not the rest of its poll (issue 31,
    class 7): every other job's events are the same as without it."""
    base = data.draw(st.sampled_from(bases(fmt)[:2]), label="base")
    jobs = base.value["jobs"]
    victim = data.draw(st.integers(0, len(jobs) - 1), label="victim")
    key, bad = data.draw(st.sampled_from(BAD_JOB[fmt]), label="bad field")
    value = {**base.value, "jobs": [{**j, key: bad} if i == victim else j
                                    for i, j in enumerate(jobs)]}
    what = f"{fmt} {base.name}: jobs[{victim}].{key} = {_short(bad)}"
    before = run_isolated(base.raw(keep_key=False))
    after = judge(base.raw(value, keep_key=False), what)
    victim_id = f":{jobs[victim]['job_id']}"
    lost = {k: sorted(set(ids) - set(after.events.get(k, ())))
            for k, ids in before.events.items() if not k.endswith(victim_id)}
    lost = {k: ids for k, ids in lost.items() if ids}
    if lost:
        fate = f"refused ({after.refused})" if after.refused else "taken"
        pytest.fail(f"{what}: the record was {fate} and {len(lost)} neighbour job(s) lost "
                    f"their events: {sorted(lost)} [pipeline/parsers/slurm_json.py: one bad "
                    "job dead-letters its whole poll]", pytrace=False)


#: per format: (base, where, document field) of 32-bit Slurm fields, which 16-bit
#: sentinels must not blank: Slurm's job ids, uids, gids and CPU counts are uint32_t, and
#: 65534 is the uid of nobody
WIDE_FIELDS: dict[str, list[tuple[int, Any, str]]] = {
    "slurm-jobcomp": [(0, ("jobid",), "job_id"), (0, ("user_id",), "uid"),
                      (0, ("group_id",), "gid"), (0, ("total_cpus",), "ncores")],
    "slurm-squeue": [(0, ("jobs", 0, "job_id"), "job_id"), (0, ("jobs", 0, "user_id"), "uid"),
                     (0, ("jobs", 0, "group_id"), "gid")],
    "slurm-sacct": [(0, ("jobs", 0, "job_id"), "job_id")],
    "slurm-submit-plugin": [(0, ("job_id",), "job_id"), (0, ("uid",), "uid")],
    "slurm-hook": [(0, "SLURM_JOB_ID", "job_id"), (0, "SLURM_JOB_UID", "uid"),
                   (0, "SLURM_JOB_GID", "gid"), (2, "SLURM_JOB_NUM_NODES", "nnodes")],
}


@pytest.mark.parametrize("fmt", sorted(WIDE_FIELDS))
def test_16bit_sentinels_are_values_of_32bit_fields(fmt: str) -> None:
    """Issue 31, class 5: Slurm's NO_VAL16 and INFINITE16 (65534, 65535) only mean "unset"
    in its 16-bit fields; in a 32-bit one they are a job id, a uid, a count."""
    wrong = []
    for index, path, field in WIDE_FIELDS[fmt]:
        base = bases(fmt)[index]
        for value in (65534, 65535):
            if fmt == "slurm-hook":
                keys = {path, "SLURM_JOBID"} if path == "SLURM_JOB_ID" else {path}
                changed: Any = [(k, str(value).encode() if k in keys else v)
                                for k, v in base.value]
            else:
                changed = put_at(base.value, path, value)
            raw = base.raw(changed, keep_key=False)
            what = f"{base.name}: {path if isinstance(path, str) else _at(path)} = {value}"
            out = judge(raw, f"{fmt} {what}")
            if out.refused is not None or out.refused_parts:
                wrong.append(f"{what}: refused ({out.refused or out.refused_parts}: "
                             f"{out.refused_error[:80]})")
                continue
            got = out.fields.get(field, set())
            if (str(value) if field == "job_id" else value) not in got:
                wrong.append(f"{what}: no job document has {field} {value} "
                             f"(got {sorted(map(str, got))})")
    if wrong:
        pytest.fail(f"{fmt}: a 16-bit sentinel taken for unset in a 32-bit field "
                    "[pipeline/parsers/slurm_common.py _SENTINELS]:\n  " + "\n  ".join(wrong),
                    pytrace=False)


#: what is no time: received_at 0 is "unset" (not checked), these are not
NOT_TIMES = [math.nan, math.inf, -math.inf, 1e300, -1.0, -1e300, 2.0**63]


@pytest.mark.parametrize("fmt", FORMATS)
def test_received_at_is_validated_like_every_other_time(fmt: str) -> None:
    """Issue 31, class 6: a raw record whose ``received_at`` is no time must not switch the
    future-time admission check off: it is refused with a reason."""
    base = bases(fmt)[0]
    accepted = []
    for received_at in NOT_TIMES:
        out = judge(base.raw(received_at=received_at),
                    f"{fmt} {base.name}: received_at {received_at!r}")
        if out.refused is None:
            accepted.append(f"{received_at!r} ({out.states} state(s))")
    if accepted:
        pytest.fail(f"{fmt} {base.name}: RawRecord.received_at accepted as "
                    f"{', '.join(accepted)} [pipeline/core/admission.py]", pytrace=False)


# --------------------------------------------------------------------------- repros

@dataclass(frozen=True)
class Repro:
    """The minimal input of one failure the strategies found: a base record of ``fmt``
    (``bases(fmt)[index]``) with ``path`` set to ``value`` (a raw record's ``cluster`` when
    ``path`` is ``("@cluster",)``), or ``make`` for a record built otherwise. ``linear``:
    judged against the format's baseline (a memory or time failure)."""

    fmt: str
    index: int = 0
    path: Path_ = ()
    value: Any = None
    make: Callable[[], RawRecord] | None = None
    linear: bool = False

    def raw(self) -> RawRecord:
        if self.make is not None:
            return self.make()
        base = bases(self.fmt)[self.index]
        if self.path == ("@cluster",):
            return base.raw(cluster=self.value)
        if self.fmt == "slurm-hook":
            key = self.path[0]
            return base.raw([(k, v) for k, v in base.value if k != key] + [(key, self.value)],
                            keep_key=False)
        return base.raw(put_at(base.value, self.path, self.value), keep_key=False)


def _events(name: str, count: int) -> Callable[[], RawRecord]:
    """The first Flux backlog response with ``count`` more ``name`` events of its job."""
    return lambda: _flux_job_with(bases("flux-journal")[0], "flux-journal", name, count)


_X40K = "x" * 40_000
_EXC = ("events", 6, "context")  # the exception of bases("flux-journal")[2] ("raised")
_DIGITS_4300 = Raw("1" + "0" * 4299)

#: The minimal input of each distinct failure the strategies found on the code of this
#: suite's writing, by the module at fault; ``test_repro`` runs each through the path.
REPROS: dict[str, Repro] = {
    # pipeline/sink/converter.py: an _id over 512 bytes refuses the whole bulk request
    "id: cluster of 505 chars (job and queue-snapshot _id)":
        Repro("flux-journal", 0, ("@cluster",), "c" * 505),
    "id: Slurm partition of 500 chars (queue-snapshot _id)":
        Repro("slurm-jobcomp", 0, ("partition",), "q" * 500),
    # schemas/elasticsearch (keyword without ignore_above) and the parser that admits it
    "keyword: Flux event name of 40,000 chars (events.event)":
        Repro("flux-journal", 3, ("events", 0, "name"), _X40K),
    "keyword: Flux exception type of 40,000 chars (jobs.exceptions.type)":
        Repro("flux-journal", 2, (*_EXC, "type"), _X40K),
    "keyword: Flux queue of 40,000 chars (jobs.queue, snapshots.queue, snapshot _id)":
        Repro("flux-journal", 0, ("jobspec", "attributes", "system", "queue"), _X40K),
    "keyword: Flux bank of 40,000 chars (jobs.bank)":
        Repro("flux-journal", 0, ("jobspec", "attributes", "system", "bank"), _X40K),
    "keyword: Flux R host name of 40,000 chars (jobs.nodelist, jobs.first_node)":
        Repro("flux-journal", 0, ("R", "execution", "nodelist", 0), _X40K),
    "keyword: Slurm cluster of 40,000 chars (cluster of every index, every _id)":
        Repro("slurm-jobcomp", 0, ("cluster",), _X40K),
    "keyword: Slurm qos of 40,000 chars (jobs.qos)":
        Repro("slurm-jobcomp", 0, ("qos",), _X40K),
    "keyword: Slurm user of 40,000 chars (jobs.user)":
        Repro("slurm-sacct", 0, ("jobs", 0, "user"), _X40K),
    "keyword: Slurm group of 40,000 chars (jobs.group)":
        Repro("slurm-squeue", 0, ("jobs", 0, "group_name"), _X40K),
    "keyword: Slurm state_reason of 40,000 chars (jobs.pending_reason, snapshots.reason)":
        Repro("slurm-squeue", 0, ("jobs", 2, "state_reason"), _X40K),
    # pipeline/parsers/resources.py, slurm_submit.py: an exception not a ParseError
    "internal-error: Flux R nodelist zero-padded to 10,000 digits (ValueError)":
        Repro("flux-journal", 0, ("R", "execution", "nodelist", 0),
              "node[" + "0" * 10_000 + "1-2]"),
    "internal-error: Flux R_lite core idset of 5,000 digits (ValueError)":
        Repro("flux-journal", 0, ("R", "execution", "R_lite", 0, "children", "core"),
              "0-" + "9" * 5000),
    "internal-error: Flux R starttime of 4,300 digits (OverflowError)":
        Repro("flux-journal", 0, ("R", "execution", "starttime"), _DIGITS_4300),
    "internal-error: Slurm time as an integer of 4,300 digits (OverflowError)":
        Repro("slurm-jobcomp", 0, ("@submit",), _DIGITS_4300),
    "internal-error: submit plugin by_uid of 4,300 digits (OverflowError)":
        Repro("slurm-submit-plugin", 1, ("by_uid",), _DIGITS_4300),
    # the parsers: counts admitted beyond 64 bits, refused only by the state's encoding
    "state DLQ: Flux R_lite rank 0-9223372036854775807 (nnodes, ncores beyond long)":
        Repro("flux-journal", 0, ("R", "execution", "R_lite", 0, "rank"),
              "0-9223372036854775807"),
    "state DLQ: Flux exception severity 2**63":
        Repro("flux-journal", 2, (*_EXC, "severity"), 2**63),
    "state DLQ: hook CPUs per node summing past 2**63":
        Repro("slurm-hook", 0, ("SLURM_JOB_CPUS_PER_NODE",),
              b"999999999(x999999999)," * 11 + b"1"),
    # the parsers: context keys Elasticsearch's flattened fields refuse
    "flattened: Flux context key NUL (events.context)":
        Repro("flux-journal", 2, (*_EXC, "\x00"), 1),
    "flattened: Flux context key of 40,000 chars (keyed term over 32766 bytes)":
        Repro("flux-journal", 2, (*_EXC, _X40K), 1),
    "flattened: jobcomp failed_node object with a NUL key":
        Repro("slurm-jobcomp", 2, ("failed_node",), {"\x00": 1}),
    "flattened: sacct v0.0.38 exit_code object with a NUL key":
        Repro("slurm-sacct", 3, ("jobs", 0, "exit_code"),
              {"status": "COMPLETED", "return_code": 0, "\x00": 1}),
    "flattened: submit plugin time_limit object with a NUL key":
        Repro("slurm-submit-plugin", 1, ("time_limit",), {"set": True, "number": 5,
                                                          "\x00": 1}),
    # pipeline/fold.py (and the parsers that make the events): the state budget
    "state budget: one Flux job with 3,000 urgency events":
        Repro("flux-journal", make=_events("urgency", 3_000)),
    "state budget: one Flux job with 3,000 exceptions":
        Repro("flux-journal", make=_events("exception", 3_000)),
    "state budget: squeue restart_cnt 5,000 (one requeue event per restart)":
        Repro("slurm-squeue", 0, ("jobs", 0, "restart_cnt"), 5_000, linear=True),
    # a host list is compressed: 18 characters name 100,000 hosts (pipeline.core.hostlist's cap),
    # so its cost is bounded by the cap, not linear in the record
    # (test_a_host_list_at_the_cap_costs_a_bounded_amount)
    "state budget: Flux R nodelist of 100,000 hosts from 18 chars":
        Repro("flux-journal", 0, ("R", "execution", "nodelist", 0), "n[0-99][0-99][0-9]"),
    "state budget: jobcomp qos of 100,000 2-byte chars (in every event of the record)":
        Repro("slurm-jobcomp", 6, ("qos",), "\u00e9" * 100_000),
    # pipeline/core/hostlist.py (MAX_HOSTS counts hosts): memory and time not linear
    "linear: jobcomp nodes n[0-999][0-999] (a million names from 15 chars)":
        Repro("slurm-jobcomp", 2, ("nodes",), "n[0-999][0-999]", linear=True),
}


#: what a record expanding to the host list cap may cost at most (traced), whatever its size
HOST_CAP_BYTES = 128 << 20


@pytest.mark.parametrize("hosts", ["n[0-99][0-99][0-9]", "frontier[000001-100000]"])
def test_a_host_list_at_the_cap_costs_a_bounded_amount(hosts: str) -> None:
    """The one exception to "linear in the record": a host list names up to
    ``MAX_HOSTS`` hosts in a few characters. Its state stays within the budget (the
    names kept as runs) and the whole path within a fixed amount of memory."""
    raw = Repro("flux-journal", 0, ("R", "execution", "nodelist", 0), hosts).raw()
    out = run_isolated(raw, measure="tracemalloc", seconds=120)
    assert not out.violations, out.violations
    assert out.peak < HOST_CAP_BYTES, f"{out.peak >> 20} MiB for {hosts}"


@pytest.mark.parametrize("name", sorted(REPROS))
def test_repro(name: str) -> None:
    repro = REPROS[name]
    judge(repro.raw(), f"repro {name}", baseline(repro.fmt) if repro.linear else None)
