"""Fuzzing the Slurm parsers: whatever the input, a list of valid events or a ParseError.

Three kinds of input: arbitrary bytes; JSON-ish structures whose keys come mostly from
the real Slurm field names (so the parsers go past their first checks); and real records
(the 22.05 vectors and the derived fixtures) with values replaced, keys deleted, or bytes
flipped.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from datafiles import vector
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from surrogates import holds_surrogate, text_holds_surrogate

from pipeline.core.model import CANONICAL_EVENTS, FACT_FIELDS, JobEvent
from pipeline.parsers.slurm import (
    parse_hook,
    parse_jobcomp,
    parse_sacct,
    parse_squeue,
    parse_submit_plugin,
)
from pipeline.runtime.errors import ParseError

DATA = Path(__file__).resolve().parents[1] / "data" / "slurm"

Parser = Callable[..., list[JobEvent]]
PARSERS: list[Parser] = [parse_jobcomp, parse_squeue, parse_sacct, parse_hook]

FUZZ = settings(max_examples=300, deadline=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


def _jobcomp_records() -> list[Any]:
    lines = vector("slurm", "jobcomp_22.05_sample.jsonl").read_text().splitlines()
    for path in sorted(DATA.glob("jobcomp_*")):
        lines += path.read_text().splitlines()
    return [json.loads(line) for line in lines if line.strip()]


JOBCOMP = _jobcomp_records()
SQUEUE = [json.loads(vector("slurm", "squeue_running_22.05.json").read_text()),
          *[json.loads(p.read_text()) for p in sorted(DATA.glob("squeue_*"))]]
SACCT = [json.loads(p.read_text()) for p in sorted(DATA.glob("sacct_*"))]
HOOK_JSON = [json.loads(p.read_text()) for p in sorted(DATA.glob("hook_*.json"))]
HOOK_ENV = [p.read_bytes() for p in [*sorted(vector("slurm", "hooks").glob("*.env")),
                                     *sorted(DATA.glob("hook_*.env"))]]


def _keys(value: Any, out: set[str]) -> set[str]:
    if isinstance(value, dict):
        for k, v in value.items():
            out.add(k)
            _keys(v, out)
    elif isinstance(value, list):
        for v in value:
            _keys(v, out)
    return out


KNOWN_KEYS = sorted(_keys([JOBCOMP, SQUEUE, SACCT, HOOK_JSON], set()))

scalars = (st.none() | st.booleans() | st.integers(min_value=-(2**70), max_value=2**70)
           | st.floats(allow_nan=True, allow_infinity=True)
           | st.text(max_size=30)
           | st.sampled_from(["2026-11-22T01:58:22", "Unknown", "3:0", "0:9", "vm", "node[01-04]",
                              "node[1-", "FAILED", "COMPLETED", "CANCELLED by 0", "PENDING",
                              "REQUEUED", "RESIZING", "None assigned", "cpu=4,node=1,gres/gpu=2",
                              "prolog_slurmctld", "epilog_slurmctld", "2(x3),1", "1795312702"])
           | st.builds(lambda n: {"set": True, "infinite": False, "number": n},
                       st.integers(min_value=-5, max_value=2**33)))
json_values = st.recursive(
    scalars,
    lambda children: (st.lists(children, max_size=4)
                      | st.dictionaries(st.sampled_from(KNOWN_KEYS) | st.text(max_size=8),
                                        children, max_size=6)),
    max_leaves=25,
)


def _encode(value: Any) -> bytes:
    return json.dumps(value).encode()  # NaN/Infinity become non-JSON literals: also fuzz


def _check(parser: Parser, payload: bytes, received_at: float | None = 1.8e9) -> None:
    try:
        events = parser(payload, cluster="fuzz", received_at=received_at)
    except ParseError as exc:
        assert exc.reason and exc.message
        return
    assert isinstance(events, list)
    for e in events:
        assert e.event in CANONICAL_EVENTS
        assert isinstance(e.timestamp, float)
        for key, value in e.facts.items():
            assert key in FACT_FIELDS
            assert value is not None and isinstance(value, FACT_FIELDS[key])
        json.dumps(e.to_dict())


# --------------------------------------------------------------------------- mutation

@st.composite
def mutated(draw: st.DrawFn, originals: list[Any]) -> Any:
    """A deep copy of one original with up to four values replaced or keys deleted."""
    doc = json.loads(json.dumps(draw(st.sampled_from(originals))))
    for _ in range(draw(st.integers(min_value=1, max_value=4))):
        containers = _containers(doc)
        if not containers:
            break
        parent, key = draw(st.sampled_from(containers))
        if isinstance(parent, dict) and draw(st.booleans()):
            del parent[key]
        else:
            parent[key] = draw(json_values)
    return doc


def _containers(value: Any, out: list[tuple[Any, Any]] | None = None) -> list[tuple[Any, Any]]:
    out = [] if out is None else out
    if isinstance(value, dict):
        for k, v in value.items():
            out.append((value, k))
            _containers(v, out)
    elif isinstance(value, list):
        for i, v in enumerate(value):
            out.append((value, i))
            _containers(v, out)
    return out


# --------------------------------------------------------------------------- properties

@FUZZ
@given(st.binary(max_size=400), st.sampled_from(PARSERS))
def test_arbitrary_bytes(payload: bytes, parser: Parser) -> None:
    _check(parser, payload)


@FUZZ
@given(json_values, st.sampled_from(PARSERS))
def test_json_ish_structures(value: Any, parser: Parser) -> None:
    _check(parser, _encode(value))


@FUZZ
@given(st.dictionaries(st.sampled_from(KNOWN_KEYS), json_values, max_size=12),
       st.sampled_from(PARSERS))
def test_objects_with_slurm_keys(value: dict[str, Any], parser: Parser) -> None:
    _check(parser, _encode(value))
    _check(parser, _encode({"meta": value.get("meta"), "jobs": [value]}))


@FUZZ
@given(mutated(JOBCOMP), st.booleans())
def test_mutated_jobcomp_records(record: Any, nul: bool) -> None:
    _check(parse_jobcomp, _encode(record) + (b"\x00" if nul else b""))


@FUZZ
@given(mutated(SQUEUE))
def test_mutated_squeue_documents(doc: Any) -> None:
    _check(parse_squeue, _encode(doc))


@FUZZ
@given(mutated(SACCT))
def test_mutated_sacct_documents(doc: Any) -> None:
    _check(parse_sacct, _encode(doc))


@FUZZ
@given(mutated(HOOK_JSON), st.none() | st.floats())
def test_mutated_hook_json(env: Any, received_at: float | None) -> None:
    _check(parse_hook, _encode(env), received_at)


@FUZZ
@given(st.sampled_from(HOOK_ENV), st.data())
def test_mutated_hook_env_files(original: bytes, data: st.DataObject) -> None:
    lines = original.split(b"\n")
    for _ in range(data.draw(st.integers(min_value=1, max_value=4))):
        i = data.draw(st.integers(min_value=0, max_value=len(lines) - 1))
        key = lines[i].partition(b"=")[0]
        lines[i] = key + b"=" + data.draw(st.binary(max_size=20) | st.text(max_size=20).map(
            str.encode))
    _check(parse_hook, b"\n".join(lines), data.draw(st.none() | st.floats()))


@FUZZ
@given(st.sampled_from([(parse_jobcomp, _encode(r)) for r in JOBCOMP]
                       + [(parse_squeue, _encode(d)) for d in SQUEUE]
                       + [(parse_sacct, _encode(d)) for d in SACCT]
                       + [(parse_hook, e) for e in HOOK_ENV]), st.data())
def test_flipped_bytes_of_real_records(case: tuple[Parser, bytes], data: st.DataObject) -> None:
    parser, payload = case
    raw = bytearray(payload)
    for _ in range(data.draw(st.integers(min_value=1, max_value=3))):
        i = data.draw(st.integers(min_value=0, max_value=len(raw) - 1))
        raw[i] = data.draw(st.integers(min_value=0, max_value=255))
    _check(parser, bytes(raw))


# --------------------------------------------------------------------------- surrogates

#: strings with what the surrogate check looks at: backslashes, surrogates alone and paired
tricky_text = st.lists(st.sampled_from(
    ["\\", "u", "ud800", "udc00", "\ud83d", "\ude00", "\udbff", "\U0001f600", "é", "a"]),
    max_size=6).map("".join)
#: JSON values without NaN, which would be refused as invalid-json first
tricky_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**64) | tricky_text,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(tricky_text, inner, max_size=3),
    max_leaves=10)


@FUZZ
@given(st.dictionaries(tricky_text, tricky_values, min_size=1, max_size=4),
       st.sampled_from([*PARSERS, parse_submit_plugin]))
def test_a_lone_surrogate_is_refused_as_invalid_utf8(value: dict[str, Any],
                                                     parser: Parser) -> None:
    """Refused as invalid-utf8 exactly when the decoded text holds a surrogate (a pair of
    escapes decodes to one character), whether escaped or encoded as if a character."""
    escaped = json.dumps(value)  # surrogates as escapes: a high one then a low one, a pair
    raw = json.dumps(value, ensure_ascii=False).encode("utf-8", "surrogatepass")
    for payload, refused in ((escaped.encode(), text_holds_surrogate(escaped)),
                             (raw, holds_surrogate(value))):
        try:
            parser(payload, cluster="fz", received_at=1.8e9)
        except ParseError as exc:
            assert (exc.reason == "invalid-utf8") == refused, (payload, exc)
        else:
            assert not refused, payload
