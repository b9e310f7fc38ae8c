"""Flux parsers: job-manager journal responses and job eventlogs -> canonical events.

Two formats (docs/flux.md, "What the Flux parser relies on"):

* ``flux-journal`` -- one ``job-manager.events-journal`` response per record:
  ``{"id": <int>, "events": [<RFC 18 entry>...], "jobspec"?: {...}, "R"?: {...}}``. A
  backlog response carries a job's whole eventlog plus its current jobspec and R; a live
  response carries one event, with the jobspec on ``submit`` and R on ``alloc``; the
  sentinel ``{"id": -1, "events": []}`` ("backlog done") yields no events.
* ``flux-eventlog`` -- ``{"id": <int or encoded id>, "eventlog": [<entries>] or
  "<JSON lines>", "jobspec": {...}|null, "R": {...}|null}``, built by
  :func:`build_eventlog_record` from ``flux job eventlog`` / ``flux job info`` output.

Every RFC 18 entry becomes one :class:`JobEvent` named as Flux names it: RFC 21 events,
journal-only ones (``annotations``, ``invalidate``, volatile ``memo``) and names unknown
to us alike. ``event_id`` hashes (cluster, "flux", job id, name, timestamp) and *not* the
format, so the same eventlog entry seen in a backlog, live, or in an eventlog file is one
event downstream. ``seq`` is the entry's position in the response's or file's event list,
which is its eventlog position for unfiltered backlogs and eventlog files; live responses
leave it None.

The jobspec rides on ``submit`` (on ``validate`` when a response has no ``submit``: journals
before flux-core 0.63 attached it there) and R on ``alloc``; both are keyed off the event
name, never off which response carried them. Facts (``pipeline.core.model.FACT_FIELDS``):

========================  ==================================================================
``submit``                ``uid`` (``userid``), plus the jobspec's facts (parsers.jobspec)
``jobspec-update``        the facts of the paths it sets (duration, queue, bank, name, ...)
``alloc``                 R's facts: nnodes, ncores, ngpus, nodelist, expiration
``resource-update``       ``expiration``
``finish``                ``exit_code`` and ``signal`` from the wait status, see below
``exception``             none: type/severity/note stay in ``context``; results
                          (completed/failed/cancelled/timeout) are the fold's to derive
========================  ==================================================================

Exit codes. ``finish.status`` is the largest job-shell wait(2) status. The shell exits with
a task's exit code, or 128 + N when a task was killed by signal N (flux-shell(1)). So an
exited status gives ``exit_code`` = WEXITSTATUS, which equals Flux's ``returncode`` (137 for
a task killed by SIGKILL), and when that code is 129..192 also ``signal`` = code - 128;
a task that itself exits 137 is indistinguishable, for Flux too. A signaled status (the
shell itself killed) gives ``signal`` = WTERMSIG and ``exit_code`` = 128 + WTERMSIG, where
Flux's ``returncode`` would be negative: one convention for both ways a signal shows up.

Privacy: the jobspec on events has ``attributes.system.environment``, ``.files`` and
``.batch`` removed, and jobspec-update contexts lose those paths, so scripts and
environments never go downstream; R loses the scheduler-private ``scheduling`` key.

Strictness: a field we interpret that RFC 21 requires (``submit.userid``,
``finish.status``, ``exception.type``/``severity``) must be present and of its type; other
keys and unknown events pass through untouched. Legacy eventlogs (no ``validate``, no
``submit.version``) are accepted. Bad input raises ``ParseError`` with one of the reasons
``invalid-utf8``, ``invalid-json``, ``not-an-object``, ``missing-field``, ``bad-type``,
``bad-value``, ``bad-jobid``, ``bad-timestamp``, ``bad-jobspec``, ``bad-R``,
``bad-hostlist``; the message names the field. ``received_at`` is accepted for the
parser protocol; Flux events carry their own timestamps.

The module is long partly for this docstring (the table of the facts each event carries
is the formats' contract); the code is the two formats' readers over one shared reader of
RFC 18 entries, which a split would only scatter.
"""

from __future__ import annotations

import functools
import json
import math
import sys
import threading
from collections.abc import Mapping
from typing import Any

from pipeline.core.fluid import FLUID_MAX, decode_jobid, f58_encode
from pipeline.core.model import FACT_FIELDS, JobEvent, make_event_id
from pipeline.parsers.duplicates import check_duplicate_keys
from pipeline.parsers.jobspec import (
    jobspec_facts,
    jobspec_update_facts,
    redact_jobspec,
    redact_update_context,
)
from pipeline.parsers.resources import R_facts, redact_R
from pipeline.parsers.surrogates import check_surrogates
from pipeline.runtime.errors import ParseError

__all__ = ["build_eventlog_record", "eventlog_entry", "parse_eventlog_record",
           "parse_journal_response", "timestamp_of"]

JOURNAL = "flux-journal"
EVENTLOG = "flux-eventlog"
#: FLUX_JOBID_ANY, which the journal packs as a signed JSON integer: -1.
_SENTINEL_IDS = (-1, FLUID_MAX)


# --- JSON ------------------------------------------------------------------------------

class _Numbers(threading.local):
    """Whether the document being decoded in this thread held a non-finite number."""

    nonfinite = False


_NUMBERS = _Numbers()


def _number(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        _NUMBERS.nonfinite = True
    return value


#: One decoder for every document: ``json.loads`` with hooks builds a decoder and its
#: scanner on each call, which cost more than decoding a journal response. The hook is
#: per thread (:class:`_Numbers`), so the decoder may be shared.
_DECODER = json.JSONDecoder(parse_float=_number, parse_constant=_number)


def _json_error(exc: Exception) -> str:
    """A JSON reader's error in words: Python refuses an integer of more digits than
    ``sys.get_int_max_str_digits()`` with advice about its own settings."""
    if isinstance(exc, ValueError) and "integer string conversion" in str(exc):
        return f"a number of more than {sys.get_int_max_str_digits()} digits"
    return str(exc)


class _Doc:
    """A decoded JSON document, remembering whether it held NaN or +-Infinity.

    Python's json accepts those (and turns 1e400 into inf) though JSON has no such
    numbers; they must not travel downstream. Timestamps are checked first so that a
    non-finite timestamp is reported as ``bad-timestamp``; anything else is refused as
    ``invalid-json`` by :meth:`check_finite`.
    """

    def __init__(self, data: bytes | bytearray | memoryview | str, what: str) -> None:
        self.nonfinite = False
        self.value = self._load(data, what)
        self.what = what

    def _load(self, data: bytes | bytearray | memoryview | str, what: str) -> Any:
        if isinstance(data, bytes | bytearray | memoryview):
            try:
                text = bytes(data).decode("utf-8")
            except UnicodeDecodeError as exc:
                raise ParseError("invalid-utf8", f"{what} is not UTF-8 text (byte {exc.start})"
                                 ) from None
        elif isinstance(data, str):
            text = data
        else:
            raise ParseError("bad-type", f"{what} must be bytes or text, "
                             f"not {type(data).__name__}")
        source = text  # with its BOM, for positions in error messages
        text = text.removeprefix("\ufeff")
        _NUMBERS.nonfinite = False
        try:
            if text.startswith("\ufeff"):  # json.loads refuses it with its own message
                value = json.loads(text, parse_float=_number, parse_constant=_number)
            else:
                value = _DECODER.decode(text)
        except (ValueError, RecursionError) as exc:
            raise ParseError("invalid-json", f"{what}: {_json_error(exc)}") from None
        self.nonfinite = _NUMBERS.nonfinite
        check_surrogates(source, isinstance(data, str), what)
        check_duplicate_keys(text, value, what)
        return value

    def check_finite(self) -> None:
        if self.nonfinite:
            raise ParseError("invalid-json", f"{self.what} holds NaN or an infinite number, "
                             "which JSON does not allow")


# --- fields ----------------------------------------------------------------------------

def _jobid(value: Any, where: str) -> int:
    try:
        return decode_jobid(value)
    except ValueError as exc:
        raise ParseError("bad-jobid", f"{where}: {exc}") from None


def eventlog_entry(entry: Any, where: str) -> tuple[str, float, dict[str, Any]]:
    """An RFC 18 eventlog entry's name, timestamp and context (``{}`` when absent), checked;
    ParseError naming ``where`` otherwise. Job and resource eventlogs share the format."""
    if not isinstance(entry, dict):
        raise ParseError("bad-type", f"{where} must be an object, not {type(entry).__name__}")
    for key in ("name", "timestamp"):
        if key not in entry:
            raise ParseError("missing-field", f"{where}.{key} is missing")
    name = entry["name"]
    if not isinstance(name, str) or not name:
        raise ParseError("bad-type", f"{where}.name must be a non-empty string")
    timestamp = timestamp_of(entry["timestamp"], f"{where}.timestamp")
    context = entry.get("context")
    if context is None:
        context = {}
    elif not isinstance(context, dict):
        raise ParseError("bad-type", f"{where}.context must be an object, "
                         f"not {type(context).__name__}")
    return name, timestamp, context


def timestamp_of(value: Any, where: str) -> float:
    """An eventlog timestamp: seconds since the epoch, finite and over 0."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ParseError("bad-timestamp", f"{where} must be a number, not "
                         f"{type(value).__name__}")
    try:
        ts = float(value)
    except OverflowError:
        ts = math.inf
    if not math.isfinite(ts) or ts <= 0:
        raise ParseError("bad-timestamp", f"{where} must be a finite number > 0, not {value!r}")
    return ts


def _require(context: Mapping[str, Any], key: str, kind: type, where: str) -> Any:
    if key not in context:
        raise ParseError("missing-field", f"{where}.context.{key} is missing")
    value = context[key]
    if isinstance(value, bool) or not isinstance(value, kind):
        raise ParseError("bad-type", f"{where}.context.{key} must be {kind.__name__}, "
                         f"not {type(value).__name__}")
    return value


def _short(value: int) -> str:
    """An int for a message: ``str()`` of one of thousands of digits raises."""
    return f"a {value.bit_length()}-bit integer" if value.bit_length() > 128 else str(value)


def _unsigned(context: Mapping[str, Any], key: str, bits: int, where: str) -> int:
    value = _require(context, key, int, where)
    if not 0 <= value < 2**bits:
        raise ParseError("bad-value", f"{where}.context.{key} {_short(value)} is out of range")
    return value


# --- facts of one event ----------------------------------------------------------------

def wait_status_facts(status: int) -> dict[str, int]:
    """``exit_code`` / ``signal`` of a job-shell wait status (module docstring)."""
    termsig = status & 0x7F
    if termsig == 0:  # WIFEXITED
        code = (status >> 8) & 0xFF
        facts = {"exit_code": code}
        if 128 < code <= 128 + 64:
            facts["signal"] = code - 128
        return facts
    if termsig != 0x7F:  # WIFSIGNALED (0x7f is WIFSTOPPED: no verdict)
        return {"exit_code": 128 + termsig, "signal": termsig}
    return {}


def _event_facts(name: str, context: Mapping[str, Any], where: str) -> dict[str, Any]:
    if name == "submit":
        return {"uid": _unsigned(context, "userid", 32, where)}
    if name == "finish":
        return wait_status_facts(_unsigned(context, "status", 32, where))
    if name == "exception":
        _require(context, "type", str, where)
        # RFC 21: 0 (fatal) to 7. The job's state keeps it as a long: a larger one would
        # fail the state's encoding after the record was admitted
        if _require(context, "severity", int, where) not in range(8):
            raise ParseError("bad-value", f"{where}.context.severity "
                             f"{_short(context['severity'])} is not 0 to 7")
        return {}
    if name == "jobspec-update":
        return jobspec_update_facts(context)
    if name == "resource-update" and "expiration" in context:
        expiration = context["expiration"]
        if isinstance(expiration, bool) or not isinstance(expiration, int | float):
            raise ParseError("bad-type", f"{where}.context.expiration must be a number, "
                             f"not {type(expiration).__name__}")
        if not 0 <= expiration < math.inf:
            raise ParseError("bad-value", f"{where}.context.expiration {expiration!r} is "
                             "not a time")
        return {"expiration": expiration} if expiration else {}
    return {}


def _checked(facts: dict[str, Any]) -> dict[str, Any]:
    """Guard of the model contract: known keys of the right type, no None."""
    for key, value in facts.items():
        if key not in FACT_FIELDS or value is None or isinstance(value, bool) \
                or not isinstance(value, FACT_FIELDS[key]):
            raise AssertionError(f"flux parser produced fact {key}={value!r}")
    return facts


# --- events ----------------------------------------------------------------------------

#: A job's f58 id, for the records of the jobs seen lately: a job's events come one
#: journal response each, and encoding the id cost as much as the rest of its record.
_f58 = functools.lru_cache(maxsize=4096)(f58_encode)


class _Job:
    """What every event of one record shares."""

    def __init__(self, cluster: str, jobid: int, source: str,
                 jobspec: Any, R: Any) -> None:
        if jobspec is not None and not isinstance(jobspec, dict):
            raise ParseError("bad-jobspec", f"jobspec must be an object, "
                             f"not {type(jobspec).__name__}")
        if R is not None and not isinstance(R, dict):
            raise ParseError("bad-R", f"R must be an object, not {type(R).__name__}")
        self.cluster = cluster
        self.job_id = str(jobid)
        self.job_id_f58 = _f58(jobid)
        self.source = source
        self.jobspec = jobspec
        self.R = R

    def events(self, entries: Any, where: str, *, backlog: bool) -> list[JobEvent]:
        """``backlog``: ``entries`` is the job's eventlog, so positions are ``seq``."""
        if not isinstance(entries, list):
            raise ParseError("bad-type", f"{where} must be a list of events")
        names = [e.get("name") for e in entries if isinstance(e, dict)]
        # Journals before flux-core 0.63 sent the jobspec with validate, not submit.
        jobspec_on = "submit" if "submit" in names or "validate" not in names else "validate"
        return [self._event(entry, f"{where}[{i}]", i if backlog else None, jobspec_on)
                for i, entry in enumerate(entries)]

    def _event(self, entry: Any, where: str, seq: int | None, jobspec_on: str) -> JobEvent:
        name, timestamp, context = eventlog_entry(entry, where)
        where = f"{where} ({name})"
        if seq is None and name == "submit":
            seq = 0  # RFC 21: submit is every eventlog's first entry
        facts = _event_facts(name, context, where)
        if name == "jobspec-update":
            context = redact_update_context(context)
        jobspec = R = None
        if name == jobspec_on and self.jobspec is not None:
            facts.update(jobspec_facts(self.jobspec))
            jobspec = redact_jobspec(self.jobspec)
        if name == "alloc" and self.R is not None:
            facts.update(R_facts(self.R))
            R = redact_R(self.R)
        return JobEvent(
            cluster=self.cluster, scheduler="flux", job_id=self.job_id, event=name,
            timestamp=timestamp, source=self.source,
            event_id=make_event_id(self.cluster, "flux", self.job_id, name, timestamp),
            seq=seq, context=context, facts=_checked(facts), job_id_f58=self.job_id_f58,
            jobspec=jobspec, R=R)


def _object(doc: _Doc) -> dict[str, Any]:
    if not isinstance(doc.value, dict):
        raise ParseError("not-an-object", f"{doc.what} must be a JSON object, "
                         f"not {type(doc.value).__name__}")
    return doc.value


# --- the two formats -------------------------------------------------------------------

def parse_journal_response(payload: bytes, *, cluster: str,
                           received_at: float | None = None) -> list[JobEvent]:
    """Events of one ``job-manager.events-journal`` response (``flux-journal`` format)."""
    doc = _Doc(payload, "journal response")
    response = _object(doc)
    if "id" not in response:
        raise ParseError("missing-field", "journal response has no id")
    if "events" not in response:
        raise ParseError("missing-field", "journal response has no events")
    raw_id, entries = response["id"], response["events"]
    if raw_id in _SENTINEL_IDS and not isinstance(raw_id, bool):
        if entries != []:
            raise ParseError("bad-jobid", f"id {raw_id} (FLUX_JOBID_ANY) is only valid on "
                             "the empty sentinel response")
        return []
    job = _Job(cluster, _jobid(raw_id, "id"), JOURNAL, response.get("jobspec"),
               response.get("R"))
    # A backlog response holds the job's eventlog; a live one holds a single event whose
    # eventlog position the journal does not say (a lone submit is always first).
    backlog = isinstance(entries, list) and len(entries) > 1
    events = job.events(entries, "events", backlog=backlog)
    doc.check_finite()
    return events


def _eventlog_entries(value: Any) -> tuple[list[Any], list[_Doc]]:
    """``eventlog`` as a list of entries -- given as a list, or as RFC 18 JSON-lines text (a
    JSON array text is accepted too) -- and the documents decoded on the way."""
    if isinstance(value, list):
        return value, []
    if not isinstance(value, str):
        raise ParseError("bad-type", f"eventlog must be a list or JSON-lines text, "
                         f"not {type(value).__name__}")
    if value.lstrip().startswith("["):
        doc = _Doc(value, "eventlog")
        return doc.value, [doc]
    # Lines end at "\n" only (RFC 18), not at every break splitlines() knows: a raw U+2028
    # or \x85 may stand inside a JSON string. A "\r" before it is JSON whitespace.
    docs = [_Doc(line, f"eventlog line {n}")
            for n, line in enumerate(value.split("\n"), 1) if line.strip()]
    return [doc.value for doc in docs], docs


def _bare_eventlog() -> ParseError:
    return ParseError("missing-field", "this is a bare eventlog, which does not name its job: "
                      "pass the job id with --id (and its jobspec and R with --jobspec and --R)")


def _is_entry(value: Any) -> bool:
    return isinstance(value, dict) and "timestamp" in value and "name" in value


def _is_bare_eventlog(payload: bytes | str) -> bool:
    """Whether ``payload`` is RFC 18 JSON lines (``flux job eventlog --format=json``)
    rather than a record: its first line is an eventlog entry."""
    text = payload if isinstance(payload, str) else bytes(payload).decode("utf-8", "replace")
    # "\n" only, as _eventlog_entries splits
    first = next((line for line in text.split("\n") if line.strip()), "")
    try:
        return _is_entry(json.loads(first))
    except (ValueError, RecursionError):
        return False


def parse_eventlog_record(payload: bytes, *, cluster: str,
                          received_at: float | None = None) -> list[JobEvent]:
    """Events of one job's eventlog record (``flux-eventlog`` format)."""
    try:
        doc = _Doc(payload, "eventlog record")
    except ParseError as exc:
        if exc.reason == "invalid-json" and _is_bare_eventlog(payload):
            raise _bare_eventlog() from None
        raise
    if _is_entry(doc.value) or (isinstance(doc.value, list) and doc.value
                                and _is_entry(doc.value[0])):
        raise _bare_eventlog()
    record = _object(doc)
    for key in ("id", "eventlog"):
        if record.get(key) is None:
            hint = "; pass the job id with --id" if key == "id" else ""
            raise ParseError("missing-field", f"eventlog record has no {key}{hint}")
    entries, docs = _eventlog_entries(record["eventlog"])
    job = _Job(cluster, _jobid(record["id"], "id"), EVENTLOG, record.get("jobspec"),
               record.get("R"))
    events = job.events(entries, "eventlog", backlog=True)
    for d in (*docs, doc):
        d.check_finite()
    return events


def build_eventlog_record(eventlog_text: str | bytes, jobspec_text: str | bytes | None,
                          R_text: str | bytes | None, job_id: int | str | None) -> bytes:
    """One ``flux-eventlog`` record from the texts of ``flux job eventlog --format=json``,
    ``flux job info ID jobspec`` and ``flux job info ID R`` (jobspec and R optional).

    ``job_id`` may be decimal, f58 or dothex; the eventlog does not carry it, so without
    it this raises ``ParseError("missing-field", ...)`` asking for ``--id``. The eventlog
    text is kept as it is (replayable); jobspec and R must be JSON objects.
    """
    if job_id is None or (isinstance(job_id, str) and not job_id.strip()):
        raise ParseError("missing-field", "the job id is in none of the eventlog, jobspec "
                         "and R; pass it with --id (decimal, f58 or dothex)")
    record: dict[str, Any] = {"id": _jobid(job_id, "--id")}
    text_given = isinstance(eventlog_text, str)
    if isinstance(eventlog_text, bytes | bytearray):
        try:
            eventlog_text = bytes(eventlog_text).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise ParseError("invalid-utf8", f"eventlog is not UTF-8 text (byte {exc.start})"
                             ) from None
    # A lone surrogate is not text, like undecodable bytes: a str holding one cannot even
    # be encoded into the record, and an escaped one would only be refused when parsed.
    check_surrogates(eventlog_text, text_given, "eventlog")
    record["eventlog"] = eventlog_text
    for key, text in (("jobspec", jobspec_text), ("R", R_text)):
        if text is None:
            record[key] = None
            continue
        doc = _Doc(text, key)
        doc.check_finite()
        if not isinstance(doc.value, dict):
            raise ParseError("not-an-object", f"{key} must be a JSON object, "
                             f"not {type(doc.value).__name__}")
        record[key] = doc.value
    return json.dumps(record, ensure_ascii=False, separators=(",", ":")).encode()
