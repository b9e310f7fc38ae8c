"""Building blocks shared by the Slurm parsers (jobcomp, squeue/sacct JSON, hooks).

Slurm writes the same facts in many shapes: UTC strings without a zone or epoch integers,
``{set, infinite, number}`` objects, NO_VAL sentinels, ``"3:0"`` exit pairs or raw wait
statuses, TRES strings or TRES lists. Each helper here turns one such shape into a plain
Python value or raises :class:`ParseError` naming the field; nothing else escapes.

Sentinels are read by the width Slurm gives the field (``slurm/slurm.h.in``): NO_VAL16 and
INFINITE16 (0xfffe, 0xffff) mean "unset" only in a ``uint16_t`` field, such as
``restart_cnt``; in the ``uint32_t`` fields (job ids, uids, gids, CPU and node counts, time
limits) 65534 is a value (``nobody``'s uid), and only NO_VAL and INFINITE (0xfffffffe,
0xffffffff) are unset; ``uint64_t`` fields (TRES counts, memory) have NO_VAL64 and
INFINITE64, which are no value of a narrower field either. :func:`slurm_int` takes the
field's set (:data:`UINT16`, :data:`UINT32`, :data:`UINT64`); a number in a ``{set,
infinite, number}`` object is never a sentinel, since the object's flags say unset and
unlimited (data_parser v0.0.40+ writes NO_VAL as ``set: false`` and INFINITE as
``infinite: true``).

Every helper is pure. The shapes it reads are stated in ``docs/slurm.md`` ("What the Slurm
parsers rely on"); comments cite the section where a rule comes from.

The module is long because it is the one vocabulary of Slurm's field shapes that the four
Slurm parsers share; its sections lean on one another's private checks (a state list or
a TRES list is refused through the same type errors and sentinels as a scalar).
"""

from __future__ import annotations

import json
import math
import re
import sys
import threading
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from typing import Any

import cachetools

from pipeline.core.admission import MAX_EPOCH_S
from pipeline.core.hostlist import expand_hostlist
from pipeline.core.model import FACT_FIELDS, JobEvent, make_event_id
from pipeline.parsers.duplicates import check_duplicate_keys
from pipeline.parsers.surrogates import check_surrogates
from pipeline.runtime.errors import ParseError

__all__ = [
    "INFINITE",
    "INFINITE16",
    "INFINITE64",
    "NO_VAL",
    "NO_VAL16",
    "NO_VAL64",
    "PRIVATE_KEYS",
    "TIME_SENTINELS",
    "UINT16",
    "UINT32",
    "UINT64",
    "EventBuilder",
    "StateInfo",
    "classify_state",
    "decode_json",
    "epoch",
    "exit_from_object",
    "exit_from_pair",
    "exit_from_wait_status",
    "expand_nodes",
    "gpu_count",
    "has_nodes",
    "opt_int",
    "opt_str",
    "payload_bytes",
    "put",
    "queue_name",
    "require_object",
    "scrub_record",
    "slurm_int",
    "tres_counts",
    "tres_list_counts",
]

#: Slurm's "no value" and "unlimited" sentinels, by field width (slurm.h.in), as a plain
#: integer field of the JSON (and the jobcomp record, and the environment) carries them.
NO_VAL16 = 0xFFFE
INFINITE16 = 0xFFFF
NO_VAL = 0xFFFFFFFE
INFINITE = 0xFFFFFFFF
NO_VAL64 = 0xFFFFFFFFFFFFFFFE
INFINITE64 = 0xFFFFFFFFFFFFFFFF
#: The sentinels of a ``uint64_t``, ``uint32_t`` and ``uint16_t`` field: its width's, and
#: a wider width's, which no value of the field can be (Slurm's JSON parser reads NO_VAL64
#: into a 32-bit field as NO_VAL); never a narrower width's, which are values of it.
UINT64 = frozenset({NO_VAL64, INFINITE64})
UINT32 = UINT64 | {NO_VAL, INFINITE}
UINT16 = UINT32 | {NO_VAL16, INFINITE16}
#: Times are ``time_t`` (64 bits), yet Slurm sets them to its 32-bit NO_VAL and INFINITE
#: as well; no time is either (both are past the year 2106).
TIME_SENTINELS = UINT32
_NO_SENTINELS: frozenset[int] = frozenset()
#: Integers are 64-bit signed downstream (Avro ``long``): a larger one is refused at parse
#: time, not folded into a job state the worker cannot write.
_INT64 = 2**63

#: Record keys that never go downstream (docs/design.md, "Guarantees": privacy): batch
#: scripts, environments,
#: and the submit command line (it carries the same kind of secrets as the environment).
PRIVATE_KEYS: frozenset[str] = frozenset(
    {"script", "environment", "env", "batch_script", "spank_job_env", "submit_line"}
)

#: Words Slurm prints where a time or node list is unknown (docs/slurm.md, "sacct, squeue
#: and scontrol").
_NONE_WORDS = frozenset({"", "unknown", "none", "none assigned", "(null)", "n/a"})

# The shapes of numbers in text, compiled once (they are matched on every record).
_INT_TEXT = re.compile(r"-?\d{1,20}")
_EPOCH_TEXT = re.compile(r"\d{1,12}(\.\d{1,9})?")
_EXIT_PAIR = re.compile(r"\s*(\d{1,10}):(\d{1,10})\s*")
_COUNT_TEXT = re.compile(r"\d{1,18}")


# --------------------------------------------------------------------------- JSON input

def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


#: Built once: ``json.loads`` with a hook builds a decoder and its scanner on every call.
_DECODER = json.JSONDecoder(parse_constant=_reject_constant)


def decode_json(payload: bytes | bytearray | memoryview | str, *, what: str) -> Any:
    """Bytes of one JSON document -> Python value.

    Trailing NUL bytes are dropped: jobcomp/kafka up to 23.11.6 sent ``strlen + 1`` bytes
    (docs/slurm.md, "Releases"). NaN/Infinity literals and nesting deep enough to exhaust the
    stack are
    rejected as invalid JSON rather than crashing; a lone UTF-16 surrogate (``"\\ud800"``)
    as ``invalid-utf8``, like bytes that are not UTF-8 (parsers.surrogates).
    """
    if isinstance(payload, str):
        text = payload
    elif isinstance(payload, bytes | bytearray | memoryview):
        raw = bytes(payload).rstrip(b"\x00")
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise ParseError("invalid-utf8",
                             f"{what} is not UTF-8 (byte {exc.start})") from None
    else:
        raise ParseError("bad-type", f"{what} payload must be bytes, not {type(payload).__name__}")
    text = text.rstrip("\x00")
    if not text.strip():
        raise ParseError("invalid-json", f"{what} is empty")
    try:
        if text.startswith("\ufeff"):  # json.loads refuses it with its own message
            value = json.loads(text, parse_constant=_reject_constant)
        else:
            value = _DECODER.decode(text)
    except RecursionError:
        raise ParseError("invalid-json", f"{what} is not valid JSON: nested too deeply") from None
    except json.JSONDecodeError as exc:
        raise ParseError("invalid-json", f"{what} is not valid JSON: {exc}") from None
    except ValueError as exc:  # NaN, or an integer of more digits than int() reads
        raise ParseError("invalid-json", f"{what} is not JSON jobstream reads: "
                         f"{_number_error(exc)}") from None
    check_surrogates(text, isinstance(payload, str), what)
    check_duplicate_keys(text, value, what)
    return value


def _number_error(exc: ValueError) -> str:
    """What a ValueError of the JSON reader says, in words: Python refuses to read an
    integer of more than ``sys.get_int_max_str_digits()`` digits (its own guard against
    quadratic time), which no Slurm field comes near."""
    if "integer string conversion" in str(exc):
        return f"a number of more than {sys.get_int_max_str_digits()} digits"
    return str(exc)


def payload_bytes(payload: bytes | bytearray | memoryview | str, *, what: str) -> bytes:
    """A payload as bytes. A str (a caller in Python; the hook's environment) may carry
    undecodable bytes as surrogate escapes, which go back to those bytes; any other lone
    surrogate is no text (``invalid-utf8``)."""
    if isinstance(payload, str):
        try:
            return payload.encode("utf-8", "surrogateescape")
        except UnicodeEncodeError as exc:
            raise ParseError("invalid-utf8", f"{what}: a lone surrogate at character "
                             f"{exc.start}") from None
    if not isinstance(payload, bytes | bytearray | memoryview):
        raise ParseError("bad-type", f"{what} must be bytes")
    return bytes(payload)


def require_object(value: Any, *, what: str) -> Mapping[str, Any]:
    if not isinstance(value, dict):
        raise ParseError("not-an-object",
                         f"{what} must be a JSON object, not {_json_type(value)}")
    return value


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "an array"
    if isinstance(value, dict):
        return "an object"
    return type(value).__name__


def _bad_type(field: str, expected: str, value: Any) -> ParseError:
    return ParseError("bad-type", f"{field} must be {expected}, not {_json_type(value)}")


# --------------------------------------------------------------------------- scalars

def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def slurm_int(value: Any, field: str, *, sentinels: frozenset[int] = UINT32) -> int | None:
    """An integer as any Slurm JSON version writes it; None when unset or unlimited.

    Accepts a plain int, ``null``, the ``{set, infinite, number}`` object of data_parser
    v0.0.39+ (docs/slurm.md, "Shape changes"), decimal strings (TRES counts, environment
    values), and
    the field's own sentinels (``sentinels``: :data:`UINT32` unless the field is a
    ``uint16_t`` or ``uint64_t`` one) as unset.
    """
    if type(value) is int:  # the common case, first: what the end of this function does
        if value in sentinels:
            return None
        if -_INT64 <= value < _INT64:
            return value
        raise _out_of_range(field, value)
    if value is None:
        return None
    if isinstance(value, dict):
        if "set" not in value and "number" not in value:
            raise _bad_type(field, "an integer or a {set, infinite, number} object", value)
        if value.get("infinite") is True or value.get("set") is False:
            return None
        number = value.get("number")
        if isinstance(number, dict):  # no nesting: keeps deep garbage from recursing
            raise _bad_type(f"{field}.number", "an integer", number)
        # set and finite: the number is what it says, whatever its width's sentinels
        return slurm_int(number, field, sentinels=_NO_SENTINELS)
    if isinstance(value, str):
        text = value.strip()
        if not _INT_TEXT.fullmatch(text):
            raise _bad_type(field, "an integer", value)
        value = int(text)
    elif isinstance(value, float) and not isinstance(value, bool):
        if not math.isfinite(value) or value != int(value):
            raise _bad_type(field, "an integer", value)
        value = int(value)
    if not _is_int(value):
        raise _bad_type(field, "an integer", value)
    if value in sentinels:
        return None
    if not -_INT64 <= value < _INT64:
        raise _out_of_range(field, value)
    return value


def _out_of_range(field: str, value: int) -> ParseError:
    return ParseError("bad-value", f"{field}: {_show(value)} is beyond a 64-bit integer")


def _show(value: float) -> str:
    """A number for a message, cut: ``str()`` of an int of thousands of digits raises."""
    if _is_int(value) and value.bit_length() > 128:
        return f"a {value.bit_length()}-bit integer"
    return str(value)[:40]


def opt_int(obj: Mapping[str, Any], key: str, *, what: str = "",
            sentinels: frozenset[int] = UINT32) -> int | None:
    return slurm_int(obj.get(key), f"{what}{key}", sentinels=sentinels)


def opt_str(obj: Mapping[str, Any], key: str, *, what: str = "") -> str | None:
    """A string field; None when absent, null or empty."""
    value = obj.get(key)
    if value is None:
        return None
    if not isinstance(value, str):
        raise _bad_type(f"{what}{key}", "a string", value)
    return value or None


def epoch(value: Any, field: str) -> float | None:
    """A point in time as epoch seconds (UTC); None when Slurm says it is unset.

    jobcomp writes ``YYYY-MM-DDTHH:MM:SS`` in UTC without a zone (docs/slurm.md, "jobcomp
    records") and
    "Unknown"/"None" for invalid times before 23.11.9; the CLIs write epoch integers or
    ``{set, infinite, number}`` objects (2.5). Zero means unset everywhere.
    """
    kind = type(value)
    if kind is int or kind is float:  # the CLIs' epoch numbers: the checks at the end, first
        return _epoch_number(value, field)
    if value is None:
        return None
    if isinstance(value, dict):
        number = slurm_int(value, field, sentinels=TIME_SENTINELS)
        return None if number is None else _epoch_number(number, field)
    if isinstance(value, str):
        text = value.strip()
        if text.lower() in _NONE_WORDS:
            return None
        if _EPOCH_TEXT.fullmatch(text):
            return epoch(float(text), field)
        try:
            parsed = datetime.fromisoformat(text)
        except ValueError:
            raise ParseError("bad-time", f"{field}: {value[:40]!r} is not a time") from None
        if parsed.tzinfo is None:
            parsed = parsed.replace(tzinfo=UTC)
        try:
            seconds = parsed.timestamp()
        except (OverflowError, ValueError, OSError):
            raise ParseError("bad-time", f"{field}: {value[:40]!r} is out of range") from None
        return epoch(seconds, field) if seconds != 0 else None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise _bad_type(field, "a time (string or epoch number)", value)
    return _epoch_number(value, field)


def _epoch_number(value: float, field: str) -> float | None:
    """Epoch seconds of an int or float; compared, not ``math.isfinite``, which raises on
    an int past a float's range (NaN fails every comparison)."""
    if _is_int(value) and value in TIME_SENTINELS:
        return None
    if not 0 <= value <= MAX_EPOCH_S:
        raise ParseError("bad-time", f"{field}: {_show(value)} is not an epoch time")
    return float(value) if value else None


# --------------------------------------------------------------------------- exit codes

def exit_from_pair(value: Any, field: str) -> tuple[int, int] | None:
    """``"3:0"`` (exit status : signal, jobcomp and SLURM_JOB_EXIT_CODE2) -> (3, 0)."""
    if value is None:
        return None
    if not isinstance(value, str):
        raise _bad_type(field, 'an "exit:signal" string', value)
    m = _EXIT_PAIR.fullmatch(value)
    if m is None:
        raise ParseError("bad-exit-code", f"{field}: {value[:40]!r} is not exit:signal")
    return int(m.group(1)), int(m.group(2))


def exit_from_wait_status(value: Any, field: str) -> tuple[int, int] | None:
    """A raw wait status (squeue v0.0.38/39, SLURM_JOB_EXIT_CODE): 768 -> (3, 0).

    Decoded as POSIX ``WIFEXITED``/``WTERMSIG`` do, so that a signalled job reads
    ``(0, sig)`` exactly as jobcomp's ``"0:sig"``.
    """
    status = slurm_int(value, field)
    if status is None:
        return None
    if status < 0 or status > 0xFFFF:
        raise ParseError("bad-exit-code", f"{field}: {status} is not a wait status")
    sig = status & 0x7F
    if sig == 0:
        return (status >> 8) & 0xFF, 0
    if sig == 0x7F:  # stopped, not ended: tells nothing about the exit
        return None
    return 0, sig


def exit_from_object(value: Any, field: str) -> tuple[int, int] | None:
    """The verbose exit object of sacct and of squeue v0.0.40+ -> (exit, signal).

    ``{"status": ["ERROR"], "return_code": {set,infinite,number}, "signal": {"id": {...},
    "name": ""}}`` (v0.0.40+), ``{"status", "return_code", "signal": {"signal_id", "name"}}``
    (v0.0.39), ``{"status", "return_code"}`` (v0.0.38). A bare integer or NO_VAL object is a
    raw wait status (squeue up to v0.0.39).
    """
    if value is None:
        return None
    if not isinstance(value, dict) or "set" in value or "number" in value:
        return exit_from_wait_status(value, field)
    status = value.get("status")
    words = status if isinstance(status, list) else [status]
    if not all(w is None or isinstance(w, str) for w in words):
        raise _bad_type(f"{field}.status", "a string or a list of strings", status)
    if {"PENDING", "INVALID"} & {w for w in words if w}:
        return None
    code = slurm_int(value.get("return_code"), f"{field}.return_code")  # uint32_t
    sig_obj = value.get("signal")
    sig: int | None = None
    if sig_obj is not None:
        if not isinstance(sig_obj, dict):
            raise _bad_type(f"{field}.signal", "an object", sig_obj)
        raw = sig_obj.get("id", sig_obj.get("signal_id"))
        sig = slurm_int(raw, f"{field}.signal.id", sentinels=UINT16)  # uint16_t
    if code is None and not sig:
        return None
    if (code is not None and code < 0) or (sig is not None and sig < 0):
        raise ParseError("bad-exit-code", f"{field}: negative exit code or signal")
    return code or 0, sig or 0


# --------------------------------------------------------------------------- states

#: Slurm base states (``enum job_states``) and what a finished one means for ``result``.
RESULT_OF_STATE: Mapping[str, str | None] = {
    "PENDING": None, "RUNNING": None, "SUSPENDED": None,
    "COMPLETED": "completed", "CANCELLED": "cancelled", "FAILED": "failed",
    "TIMEOUT": "timeout", "NODE_FAIL": "node_fail", "PREEMPTED": "preempted",
    "BOOT_FAIL": "failed", "DEADLINE": "failed", "OUT_OF_MEMORY": "oom",
}
#: State flags (docs/slurm.md, "Shape changes"). Before v0.0.40 a flag can replace the base
#: state in the
#: single state string (``job_state_string()`` prints the flag first).
_REQUEUE_FLAGS = frozenset({"REQUEUED", "REQUEUE_FED", "REQUEUE_HOLD", "SPECIAL_EXIT"})
_ACTIVE_FLAGS = frozenset({
    "COMPLETING", "CONFIGURING", "RESIZING", "SIGNALING", "STAGE_OUT", "STOPPED",
    "POWER_UP_NODE", "LAUNCH_FAILED", "UPDATE_DB", "EXPEDITING",
})
_WAITING_FLAGS = frozenset({"REVOKED", "RESV_DEL_HOLD"})
_KNOWN_FLAGS = _REQUEUE_FLAGS | _ACTIVE_FLAGS | _WAITING_FLAGS


class StateInfo:
    """A Slurm job state, split into the base state and its flags."""

    __slots__ = ("base", "flags", "raw")

    def __init__(self, base: str | None, flags: frozenset[str], raw: str | list[str]) -> None:
        self.base = base
        self.flags = flags
        self.raw = raw

    @property
    def result(self) -> str | None:
        """The job's result when the state is final, else None."""
        if self.base is None or self.requeued:
            return None
        return RESULT_OF_STATE[self.base]

    @property
    def requeued(self) -> bool:
        return bool(self.flags & _REQUEUE_FLAGS)

    @property
    def pending(self) -> bool:
        # A lone "REQUEUED" string (before v0.0.40) is the interrupted run still completing:
        # its start time and nodes are that run's. Once pending again the base says so.
        return self.base == "PENDING" or bool(self.flags & _WAITING_FLAGS)


def classify_state(value: Any, field: str) -> StateInfo:
    """``"FAILED"``, ``"CANCELLED by 0"``, ``"COMPLETING"`` or ``["RUNNING", "COMPLETING"]``.

    A list carries the base state first, then flags (v0.0.40+); unknown flags there are
    ignored because Slurm adds new ones, but the base must be known. A single string is
    either a base state or, before v0.0.40, a flag that hides the base.
    """
    if isinstance(value, list):
        if not value or not all(isinstance(v, str) for v in value):
            raise _bad_type(field, "a non-empty list of state names", value)
        base = value[0].split(" ", 1)[0].upper()
        if base not in RESULT_OF_STATE:
            raise ParseError("bad-state", f"{field}: unknown job state {value[0][:40]!r}")
        flags = frozenset(v.upper() for v in value[1:])
        return StateInfo(base, flags, list(value))
    if not isinstance(value, str):
        raise _bad_type(field, "a state name or a list of them", value)
    word = value.strip().split(" ", 1)[0].upper()  # sacct text: "CANCELLED by 0"
    if word in RESULT_OF_STATE:
        return StateInfo(word, frozenset(), value)
    if word in _KNOWN_FLAGS:
        return StateInfo(None, frozenset({word}), value)
    raise ParseError("bad-state", f"{field}: unknown job state {value[:40]!r}")


# --------------------------------------------------------------------------- resources

def has_nodes(value: str | None) -> bool:
    return value is not None and value.strip().lower() not in _NONE_WORDS


def expand_nodes(value: str | None, field: str) -> list[str]:
    """A Slurm hostlist expression -> host names; [] for none ("None assigned", null)."""
    if not has_nodes(value):
        return []
    assert value is not None
    try:
        return list(_expand_hostlist(value))
    except ValueError as exc:
        raise ParseError("bad-hostlist", f"{field}: {exc}") from None


def _names_cost(hosts: tuple[str, ...]) -> int:
    """About the bytes a cached expansion holds: its characters and, for each name, a str
    object's overhead. Counted in characters, not names: one name can be thousands of
    characters long, and counted as one, long names could fill the cache with gigabytes."""
    return sum(map(len, hosts)) + 56 * len(hosts) + 1


# Bounded by what the names take, not by lists: a short text names many long hosts.
# An expansion larger than the whole cache is returned without being kept.
@cachetools.cached(cachetools.LRUCache(maxsize=8_000_000, getsizeof=_names_cost),
                   lock=threading.Lock())
def _expand_hostlist(value: str) -> tuple[str, ...]:
    """:func:`expand_hostlist` of the node lists seen lately: every source of a job
    (squeue, both hooks, jobcomp, sacct) states its node list again. A tuple, so that no
    caller can change what the next one gets."""
    return tuple(expand_hostlist(value))


def tres_counts(value: Any, field: str) -> dict[str, int]:
    """``"cpu=4,mem=500M,node=1,billing=4,gres/gpu=2"`` -> ``{"cpu": 4, "node": 1, ...}``.

    Only integer counts are kept (``mem=500M`` is a size, not a count). Entries that are
    not ``name=value`` or negative are skipped: TRES strings are informative, and
    cc-slurm-adapter also clamps odd counts rather than rejecting the job (docs/slurm.md,
    "Shape changes").
    """
    if value is None:
        return {}
    if not isinstance(value, str):
        raise _bad_type(field, "a TRES string", value)
    out: dict[str, int] = {}
    for item in value.split(","):
        name, sep, count = item.strip().partition("=")
        if sep and _COUNT_TEXT.fullmatch(count.strip()):
            out[name.strip()] = int(count)
    return out


def tres_list_counts(value: Any, field: str) -> dict[str, int]:
    """sacct's TRES list ``[{"type": "gres", "name": "gpu", "id": 1001, "count": 2}]`` ->
    the same keys as :func:`tres_counts` (``gres/gpu``)."""
    if value is None:
        return {}
    if not isinstance(value, list):
        raise _bad_type(field, "a list of TRES objects", value)
    out: dict[str, int] = {}
    for i, item in enumerate(value):
        if not isinstance(item, dict):
            raise _bad_type(f"{field}[{i}]", "a TRES object", item)
        kind = opt_str(item, "type", what=f"{field}[{i}].")
        if kind is None:
            continue
        name = opt_str(item, "name", what=f"{field}[{i}].")
        try:
            count = slurm_int(item.get("count"), f"{field}[{i}].count",
                              sentinels=UINT64)  # slurmdb_tres_rec_t: uint64_t
        except ParseError:
            continue
        if count is None or count < 0:
            continue
        out[f"{kind}/{name}" if name else kind] = count
    return out


def gpu_count(tres: Mapping[str, int]) -> int | None:
    """GPUs of a TRES map: ``gres/gpu`` when present, else the sum of typed ``gres/gpu:x``."""
    if "gres/gpu" in tres:
        return tres["gres/gpu"]
    typed = [n for key, n in tres.items() if key.startswith("gres/gpu:")]
    return sum(typed) if typed else None


def queue_name(partition: str | None) -> str | None:
    """The partition as ``queue``, unless it is a comma list of requested partitions
    (jobcomp before 25.05, pending jobs in squeue): then the job's queue is not known."""
    if partition is None or "," in partition:
        return None
    return partition


def scrub_record(record: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of a record without the private keys (scripts, environments)."""
    return {k: v for k, v in record.items() if k not in PRIVATE_KEYS}


# --------------------------------------------------------------------------- events

def put(facts: dict[str, Any], key: str, value: Any) -> None:
    """Set a fact unless the value is unknown (None or empty)."""
    if value is None or value == "" or value == []:
        return
    expected = FACT_FIELDS[key]  # KeyError here is a programming error, not bad input
    assert isinstance(value, expected) and not isinstance(value, bool), (key, value)
    facts[key] = value


class EventBuilder:
    """Makes the canonical events of one job from one Slurm record.

    ``family`` (jobcomp, squeue, sacct, hook) is part of every ``event_id``: the sources
    report the same moment with different detail, so each keeps its own id (model
    ``make_event_id``).
    """

    def __init__(self, *, cluster: str, job_id: str, source: str, family: str) -> None:
        self.cluster = cluster
        self.job_id = job_id
        self.source = source
        self.family = family
        self.events: list[JobEvent] = []

    def add(self, event: str, timestamp: float, *, facts: Mapping[str, Any],
            context: Mapping[str, Any] | None = None,
            record: Mapping[str, Any] | None = None,
            id_extra: Iterable[Any] = ()) -> None:
        event_id = make_event_id(self.cluster, "slurm", self.job_id, event, timestamp,
                                 self.family, *id_extra)
        self.events.append(JobEvent(
            cluster=self.cluster, scheduler="slurm", job_id=self.job_id, event=event,
            timestamp=timestamp, source=self.source, event_id=event_id,
            context=dict(context or {}), facts=dict(facts), record=record,
        ))
