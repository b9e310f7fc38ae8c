"""Fuzzing the Flux parsers: whatever the input, a ParseError or well-formed events."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest
from datafiles import vector
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from surrogates import holds_surrogate, text_holds_surrogate

from pipeline.core.fluid import decode_jobid, dothex_decode, dothex_encode, f58_decode, f58_encode
from pipeline.core.model import FACT_FIELDS, JobEvent, make_event_id
from pipeline.parsers.flux import parse_eventlog_record, parse_journal_response
from pipeline.runtime.errors import ParseError

REAL_RECORDS = [json.loads(line) for name in ("real-0.88-journal-backlog.jsonl",
                                              "real-0.88-journal-live.jsonl")
                for line in vector("flux", name).read_text().splitlines()]
PARSERS = [parse_journal_response, parse_eventlog_record]
FUZZ = settings(max_examples=300, deadline=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

scalars = (st.none() | st.booleans() | st.integers(min_value=-2**70, max_value=2**70)
           | st.floats(allow_nan=False, allow_infinity=False)
           | st.text(max_size=20))
json_values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner,
                                                                max_size=4),
    max_leaves=20)
def mostly(good: st.SearchStrategy[Any], bad: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """``good`` three times in four, so the fuzzer gets past the first check often."""
    return st.integers(0, 3).flatmap(lambda pick: good if pick else bad)


#: names and fields a parser looks at, so the fuzzer reaches the code behind them
event_names = st.sampled_from(["submit", "validate", "alloc", "finish", "exception",
                               "jobspec-update", "resource-update", "annotations", "memo",
                               "clean", "start", "x.y"]) | st.text(min_size=1, max_size=8)
good_contexts = st.fixed_dictionaries(
    {"userid": st.integers(0, 2**32 - 1), "status": st.integers(0, 2**16 - 1),
     "type": st.text(max_size=5), "severity": st.integers(0, 7)},
    optional={"expiration": st.floats(min_value=0, max_value=2e9),
              "attributes.system.duration": st.floats(min_value=0, max_value=1e6),
              "attributes.system.queue": st.text(max_size=5),
              "attributes.system": st.dictionaries(st.sampled_from(
                  ["queue", "bank", "files", "environment", "job"]), json_values),
              "resources": json_values, "annotations": json_values})
contexts = mostly(good_contexts, st.dictionaries(st.text(max_size=10), json_values,
                                                 max_size=3) | json_values)
timestamps = mostly(st.floats(min_value=1e-3, max_value=2e9),
                    st.floats() | st.integers(-1, 2**70) | json_values)
entries = mostly(
    st.fixed_dictionaries({"timestamp": timestamps, "name": event_names},
                          optional={"context": contexts}),
    st.fixed_dictionaries({}, optional={"timestamp": timestamps, "name": json_values,
                                        "context": contexts}) | json_values)
vertices = st.recursive(
    st.fixed_dictionaries({"type": st.sampled_from(["node", "slot", "core", "gpu", "x"]),
                           "count": mostly(st.integers(1, 5), st.integers(-1, 0) | json_values)}),
    lambda inner: st.fixed_dictionaries(
        {"type": st.sampled_from(["node", "slot"]), "count": st.integers(1, 5)},
        optional={"with": mostly(st.lists(inner, max_size=3), json_values)}),
    max_leaves=6)
systems = st.fixed_dictionaries({}, optional={
    "duration": mostly(st.floats(min_value=0, max_value=1e6), json_values),
    "queue": mostly(st.text(max_size=5), json_values),
    "bank": mostly(st.text(max_size=5), json_values),
    "cwd": mostly(st.text(max_size=5), json_values),
    "job": mostly(st.fixed_dictionaries({"name": st.text(max_size=5)}), json_values),
    "files": json_values, "environment": json_values, "batch": json_values})
jobspecs = mostly(st.fixed_dictionaries({}, optional={
    "resources": mostly(st.lists(vertices, max_size=2), json_values),
    "tasks": mostly(st.lists(st.fixed_dictionaries({"command": st.lists(st.text(max_size=8))}),
                             max_size=1), json_values),
    "attributes": mostly(st.fixed_dictionaries({"system": systems}), json_values),
}), json_values)
idsets = mostly(st.sampled_from(["0", "0-3", "[1,4-5]", "", "7,2-3"]),
                st.sampled_from(["3-1", "x", "0-99999999999", "1,,2"]) | json_values)
hostlists = mostly(st.sampled_from(["node[0-3]", "n[00-2],m1", "c[1-3]x[1-2]", "solo"]),
                   st.sampled_from(["a[", "b[0-9][0-9][0-9][0-9][0-9]9]", "c[1-99999]x[1-999]",
                                    "d[3-1]"]) | json_values)
Rs = mostly(st.fixed_dictionaries({"version": mostly(st.just(1), json_values), "execution": mostly(
    st.fixed_dictionaries({"R_lite": mostly(st.lists(st.fixed_dictionaries({
        "rank": idsets, "children": mostly(st.fixed_dictionaries(
            {}, optional={"core": idsets, "gpu": idsets}), json_values)}), max_size=3),
        json_values)}, optional={
        "nodelist": mostly(st.lists(hostlists, max_size=3), hostlists),
        "expiration": mostly(st.floats(min_value=0, max_value=2e9), json_values)}),
    json_values)}), json_values)
job_ids = mostly(st.integers(0, 2**64 - 1),
                 st.integers(-2, 2**64 + 1) | st.sampled_from(["ƒ7vo8MjM", "0000.003d.6700.0000",
                                                               "ƒ0", ""]) | json_values)
responses = st.fixed_dictionaries({"id": job_ids, "events": mostly(
    st.lists(entries, max_size=4), json_values)}, optional={"jobspec": jobspecs, "R": Rs})
records = st.fixed_dictionaries({"id": job_ids, "eventlog": mostly(
    st.lists(entries, max_size=4), st.text(max_size=50) | json_values)},
    optional={"jobspec": jobspecs, "R": Rs})


def check(events: list[JobEvent], cluster: str) -> None:
    """What every successful parse promises downstream."""
    for e in events:
        assert (e.cluster, e.scheduler) == (cluster, "flux")
        assert e.job_id == str(decode_jobid(e.job_id)) and e.job_id_f58 == f58_encode(
            int(e.job_id))
        assert isinstance(e.timestamp, float) and math.isfinite(e.timestamp) and e.timestamp > 0
        assert e.event_id == make_event_id(cluster, "flux", e.job_id, e.event, e.timestamp)
        assert set(e.facts) <= set(FACT_FIELDS)
        for key, value in e.facts.items():
            assert value is not None and not isinstance(value, bool)
            assert isinstance(value, FACT_FIELDS[key])
        json.dumps(e.to_dict(), allow_nan=False)  # JSON-clean, ready for Avro and ES
        if e.jobspec is not None:
            attributes = e.jobspec.get("attributes")
            system = attributes.get("system") if isinstance(attributes, dict) else None
            assert not isinstance(system, dict) or not {"environment", "files", "batch"} & set(
                system)


def run(parser: Any, payload: bytes | str) -> None:
    try:
        events = parser(payload, cluster="fz")
    except ParseError as exc:
        assert exc.reason and exc.message
        return
    check(events, "fz")


@pytest.mark.parametrize("parser", PARSERS)
@FUZZ
@given(payload=st.binary(max_size=300))
def test_arbitrary_bytes(parser: Any, payload: bytes) -> None:
    run(parser, payload)


@pytest.mark.parametrize("parser", PARSERS)
@FUZZ
@given(value=json_values)
def test_arbitrary_json(parser: Any, value: Any) -> None:
    run(parser, json.dumps(value).encode())


@FUZZ
@given(response=responses)
def test_journal_shaped_responses(response: dict[str, Any]) -> None:
    run(parse_journal_response, json.dumps(response).encode())


@FUZZ
@given(record=records)
def test_eventlog_shaped_records(record: dict[str, Any]) -> None:
    run(parse_eventlog_record, json.dumps(record).encode())


def _mutate(data: st.DataObject, value: Any, depth: int = 0) -> Any:
    """``value`` with one random change somewhere inside: replaced, dropped or retyped."""
    children = (list(value) if isinstance(value, dict)
                else list(range(len(value))) if isinstance(value, list) else [])
    if children and depth < 8 and data.draw(st.integers(0, 3), label="descend") > 0:
        key = data.draw(st.sampled_from(children), label="key")
        copy = dict(value) if isinstance(value, dict) else list(value)
        if data.draw(st.integers(0, 5), label="drop") == 0:
            del copy[key]
        else:
            copy[key] = _mutate(data, copy[key], depth + 1)
        return copy
    return data.draw(json_values | st.sampled_from([-1, 0, -0.5, 2**64, "", [], {}]),
                     label="replacement")


@FUZZ
@given(data=st.data())
def test_mutated_real_journal_records(data: st.DataObject) -> None:
    record = data.draw(st.sampled_from(REAL_RECORDS), label="record")
    run(parse_journal_response, json.dumps(_mutate(data, record)).encode())


@FUZZ
@given(data=st.data())
def test_mutated_real_records_as_eventlogs(data: st.DataObject) -> None:
    response = data.draw(st.sampled_from(REAL_RECORDS[:-1]), label="record")
    record = {"id": response["id"], "eventlog": response["events"],
              "jobspec": response.get("jobspec"), "R": response.get("R")}
    run(parse_eventlog_record, json.dumps(_mutate(data, record)).encode())


@FUZZ
@given(data=st.data())
def test_truncated_real_records(data: st.DataObject) -> None:
    line = json.dumps(data.draw(st.sampled_from(REAL_RECORDS), label="record")).encode()
    cut = data.draw(st.integers(0, len(line)), label="cut")
    run(parse_journal_response, line[:cut])


@settings(max_examples=500, deadline=None)
@given(n=st.integers(0, 2**64 - 1))
def test_fluid_round_trips(n: int) -> None:
    assert f58_decode(f58_encode(n)) == n
    assert dothex_decode(dothex_encode(n)) == n
    assert decode_jobid(str(n)) == decode_jobid(f58_encode(n)) == decode_jobid(hex(n)) == n


@FUZZ
@given(text=st.text(max_size=30))
def test_decode_jobid_only_raises_value_error(text: str) -> None:
    try:
        assert 0 <= decode_jobid(text) < 2**64
    except ValueError:
        pass


# --- duplicate keys and surrogates, however the text is written ----------------------------

#: strings with what the text checks look at: colons, quotes, backslashes, surrogate escapes
tricky_text = st.lists(st.sampled_from(
    ['":', " :", "\n:", ":", '"', "\\", "u", "ud800", "udc00", "\ud83d", "\ude00", "\udbff",
     "\U0001f600", "é", "a"]), max_size=6).map("".join)
plain_keys = st.text(max_size=4) | st.sampled_from(["id", "events", "a", '":', " :"])
#: a JSON value as a tree whose objects are lists of (key, value) pairs, so a key may repeat
pair_trees = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=3).map(lambda items: ("list", items))
    | st.dictionaries(plain_keys, inner, max_size=3).map(lambda d: ("obj", list(d.items()))),
    max_leaves=12)
spaces = st.text(alphabet=" \t\n\r", max_size=3)


def _write(data: st.DataObject, tree: Any) -> str:
    """JSON text of ``tree``, with random JSON whitespace around every token."""
    def ws() -> str:
        return data.draw(spaces, label="ws")
    if isinstance(tree, tuple) and tree[0] == "obj":
        return "{" + ws() + ",".join(ws() + json.dumps(k) + ws() + ":" + ws() + _write(data, v)
                                     + ws() for k, v in tree[1]) + "}"
    if isinstance(tree, tuple) and tree[0] == "list":
        return "[" + ws() + ",".join(ws() + _write(data, v) + ws() for v in tree[1]) + "]"
    return json.dumps(tree)


def _with_repeat(data: st.DataObject, tree: Any) -> Any:
    """``tree`` with one object somewhere repeating one of its keys (one added if needed)."""
    if isinstance(tree, tuple) and tree[1] and data.draw(st.booleans(), label="descend"):
        items = list(tree[1])
        i = data.draw(st.integers(0, len(items) - 1), label="child")
        if tree[0] == "obj":
            items[i] = (items[i][0], _with_repeat(data, items[i][1]))
        else:
            items[i] = _with_repeat(data, items[i])
        return (tree[0], items)
    pairs = list(tree[1]) if isinstance(tree, tuple) and tree[0] == "obj" else []
    if not pairs:
        pairs = [(data.draw(plain_keys, label="key"), data.draw(scalars, label="value"))]
    key = data.draw(st.sampled_from([k for k, _ in pairs]), label="repeated")
    at = data.draw(st.integers(0, len(pairs)), label="at")
    pairs.insert(at, (key, data.draw(pair_trees, label="value")))
    return ("obj", pairs)


@FUZZ
@given(data=st.data(), tree=pair_trees)
def test_a_repeated_key_anywhere_is_refused(data: st.DataObject, tree: Any) -> None:
    for parser in PARSERS:
        with pytest.raises(ParseError) as err:
            parser(_write(data, _with_repeat(data, tree)).encode(), cluster="fz")
        assert err.value.reason == "duplicate-key"
        try:
            parser(_write(data, tree).encode(), cluster="fz")
        except ParseError as exc:
            assert exc.reason != "duplicate-key"


@FUZZ
@given(value=st.recursive(
    scalars | tricky_text,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(tricky_text, inner, max_size=3),
    max_leaves=10))
def test_a_lone_surrogate_is_refused_as_invalid_utf8(value: Any) -> None:
    """Refused as invalid-utf8 exactly when the decoded text holds a surrogate (a pair of
    escapes decodes to one character), whether escaped, in bytes or in a str."""
    escaped = json.dumps(value)  # surrogates as escapes: a high one then a low one, a pair
    raw = json.dumps(value, ensure_ascii=False)  # surrogates as they are
    lone, held = text_holds_surrogate(escaped), holds_surrogate(value)
    for parser in PARSERS:
        for payload, refused in ((escaped.encode(), lone), (escaped, lone), (raw, held),
                                 (raw.encode("utf-8", "surrogatepass"), held)):
            try:
                parser(payload, cluster="fz")
            except ParseError as exc:
                assert (exc.reason == "invalid-utf8") == refused, (payload, exc)
            else:
                assert not refused, payload
