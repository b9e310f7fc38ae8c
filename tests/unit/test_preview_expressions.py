"""Grafana's server-side math over the frames of the dashboards' queries.

The inputs are frames made by ``es_frames`` from answers shaped as Elasticsearch gives
them to the shipped panels' targets; the expected joins follow ``pkg/expr/mathexp``
(``union``, ``biSeriesSeries``) and the names Grafana's frontend shows (``fieldState.ts``).
"""

from __future__ import annotations

import math
import re
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pipeline.dashboards import render
from pipeline.dashboards.check import panels_of
from pipeline.dashboards.grafana_query import substitute, variable_values
from pipeline.dashboards.preview.es_frames import frames_of
from pipeline.dashboards.preview.expressions import ExpressionError, evaluate, parse
from pipeline.dashboards.preview.frames import Field, FieldType, Frame

T0 = 1_795_000_000_000
MINUTE = 60_000
BOARDS = render.dashboards()


def _panel(title: str) -> dict[str, dict[str, Any]]:
    for board in BOARDS:
        for panel in panels_of(board):
            if panel.get("title") == title:
                return {t["refId"]: substitute(t, variable_values(board))
                        for t in panel["targets"]}
    raise AssertionError(f"no panel {title!r}")


def _histogram(values: list[Any], *, start: int = 0) -> dict[str, Any]:
    return {"buckets": [{"key": T0 + (start + i) * MINUTE, "doc_count": 1, "1": {"value": v}}
                        for i, v in enumerate(values)]}


def _by_terms(buckets: dict[str, list[Any]], hist_id: str = "3") -> dict[str, Any]:
    return {"aggregations": {"2": {"buckets": [
        {"key": key, "doc_count": 1, hist_id: _histogram(values)}
        for key, values in buckets.items()]}}}


def _points(frame: Frame) -> tuple[str, dict[str, str], list[int], list[Any]]:
    time, value = frame.fields
    assert time.type is FieldType.TIME and value.type is FieldType.NUMBER
    return value.name, value.labels, time.values, value.values


def _queue_depth(a: dict[str, list[Any]], n: list[Any], *, n_start: int = 0
                 ) -> tuple[dict[str, Any], dict[str, list[Frame]]]:
    targets = _panel("Queue depth by queue")
    frames = {"A": frames_of(targets["A"], _by_terms(a)),
              "N": frames_of(targets["N"], {"aggregations": {"2": _histogram(
                  n, start=n_start)}})}
    return targets["Am"], frames


def test_labelled_series_divided_by_an_unlabelled_one_keep_their_labels() -> None:
    expression, frames = _queue_depth({"pbatch": [30.0, 60.0, 90.0],
                                       "pdebug": [3.0, None, 9.0]}, [3, 3, 3])
    assert expression["expression"] == "$A / $N"
    result = evaluate(expression, frames)
    assert [_points(f) for f in result] == [
        ("Am", {"queue": "pbatch"}, [T0, T0 + MINUTE, T0 + 2 * MINUTE], [10.0, 20.0, 30.0]),
        ("Am", {"queue": "pdebug"}, [T0, T0 + MINUTE, T0 + 2 * MINUTE], [1.0, None, 3.0]),
    ]
    assert {f.ref_id for f in result} == {"Am"}
    # what the panel shows: the refId and the one label's value
    assert [f.fields[1].display_name for f in result] == ["Am pbatch", "Am pdebug"]


def test_points_join_on_time_and_division_by_zero_is_none() -> None:
    # N lacks the first minute and counted no snapshot in the second
    expression, frames = _queue_depth({"pbatch": [30.0, 60.0, 90.0]}, [0, 3], n_start=1)
    (frame,) = evaluate(expression, frames)
    assert _points(frame) == ("Am", {"queue": "pbatch"}, [T0 + MINUTE, T0 + 2 * MINUTE],
                              [None, 30.0])


def test_unlabelled_series_with_series_and_a_literal() -> None:
    targets = _panel("Failure rate")
    counts = {"aggregations": {"2": {"buckets": [
        {"key": T0 + i * MINUTE, "doc_count": n} for i, n in enumerate([10, 0, 4])]}}}
    failed = {"aggregations": {"2": {"buckets": [
        {"key": T0 + i * MINUTE, "doc_count": n} for i, n in enumerate([1, 0, 1])]}}}
    frames = {"A": frames_of(targets["A"], counts), "B": frames_of(targets["B"], failed)}
    assert targets["C"]["expression"] == "$B / $A * 100"
    (frame,) = evaluate(targets["C"], frames)
    assert _points(frame) == ("C", {}, [T0, T0 + MINUTE, T0 + 2 * MINUTE], [10.0, None, 25.0])
    assert frame.fields[1].display_name == "C"


def test_series_pair_by_equal_labels_and_unmatched_ones_are_dropped() -> None:
    targets = _panel("CPU efficiency by user (node-hour weighted)")
    frames = {"A": frames_of(targets["A"], _by_terms({"alice": [450.0], "bob": [80.0]})),
              "B": frames_of(targets["B"], _by_terms({"alice": [5.0], "carol": [2.0]}))}
    assert targets["C"]["expression"] == "$A / $B"
    (frame,) = evaluate(targets["C"], frames)
    assert _points(frame) == ("C", {"user": "alice"}, [T0], [90.0])


def test_one_value_on_each_side_pairs_even_with_other_labels() -> None:
    targets = _panel("CPU efficiency by user (node-hour weighted)")
    frames = {"A": frames_of(targets["A"], _by_terms({"alice": [450.0]})),
              "B": frames_of(targets["B"], _by_terms({"bob": [5.0]}))}
    (frame,) = evaluate(targets["C"], frames)
    assert _points(frame) == ("C", {}, [T0], [90.0])


def test_labels_containing_the_other_sides_pair_under_the_larger_set() -> None:
    wide = Frame("A", [Field("Time", FieldType.TIME, [T0]),
                       Field("Value", FieldType.NUMBER, [8.0],
                             {"queue": "pbatch", "reason": "Priority"})])
    other = Frame("A", [Field("Time", FieldType.TIME, [T0]),
                        Field("Value", FieldType.NUMBER, [1.0],
                              {"queue": "pdebug", "reason": "Priority"})])
    narrow = Frame("B", [Field("Time", FieldType.TIME, [T0]),
                         Field("Value", FieldType.NUMBER, [2.0], {"queue": "pbatch"})])
    result = evaluate({"refId": "C", "type": "math", "expression": "$A / $B"},
                      {"A": [wide, other], "B": [narrow]})
    assert [_points(f) for f in result] == [
        ("C", {"queue": "pbatch", "reason": "Priority"}, [T0], [4.0])]
    assert result[0].fields[1].display_name == 'C {queue="pbatch", reason="Priority"}'


def test_numbers_with_numbers_and_literals() -> None:
    (frame,) = evaluate({"refId": "X", "type": "math", "expression": "2 * (3 + 4) / -7"}, {})
    assert [(f.name, f.values) for f in frame.fields] == [("X", [-2.0])]
    (frame,) = evaluate({"refId": "X", "type": "math", "expression": "1 / 0"}, {})
    assert frame.fields[0].values == [None]  # Grafana: +Inf


def test_a_number_table_is_a_set_of_labelled_numbers() -> None:
    table = Frame("T", [Field("bank", FieldType.STRING, ["physics", "chem"]),
                        Field("Sum", FieldType.NUMBER, [10.0, None])])
    series = Frame("S", [Field("Time", FieldType.TIME, [T0, T0 + MINUTE]),
                         Field("Value", FieldType.NUMBER, [4.0, 6.0], {"bank": "physics"})])
    halves = evaluate({"refId": "H", "type": "math", "expression": "${T} / 2"}, {"T": [table]})
    assert [(f.fields[0].name, f.fields[0].labels, f.fields[0].values) for f in halves] == [
        ("H", {"bank": "physics"}, [5.0]), ("H", {"bank": "chem"}, [None])]
    (scaled,) = evaluate({"refId": "R", "type": "math", "expression": "$S / $T"},
                         {"S": [series], "T": [table]})
    assert _points(scaled) == ("R", {"bank": "physics"}, [T0, T0 + MINUTE], [0.4, 0.6])


def test_a_reference_alone_passes_the_query_frames_through() -> None:
    expression, frames = _queue_depth({"pbatch": [30.0]}, [3])
    (frame,) = evaluate({"refId": "P", "type": "math", "expression": "$A"}, frames)
    assert frame.ref_id == "P"
    assert frame.fields[1].name == "Value"
    assert frame.fields[1].display_name == "pbatch"  # the data source's name


def test_no_data_on_a_side_gives_no_data() -> None:
    expression, frames = _queue_depth({}, [3, 3])
    assert frames["A"] == []
    (frame,) = evaluate(expression, frames)
    assert (frame.ref_id, frame.name, frame.fields) == ("Am", "no data", [])


@pytest.mark.parametrize(("text", "complaint"), [
    ("abs($A)", "function abs()"), ("$A > 1", "operator '>'"), ("$A % 2", "operator '%'"),
    ("$A ** 2", "operator '**'"), ("$A && $B", "operator '&&'"),
    ('$A + "x"', "strings"), ("$A +", "unexpected end"), ("($A", "missing ')'"),
    ("$A $B", "unexpected 'B'"), ("$A # 2", "invalid character '#'"),
])
def test_unsupported_syntax_names_what_it_is(text: str, complaint: str) -> None:
    with pytest.raises(ExpressionError, match=re.escape(complaint)):
        parse(text)


def test_other_expression_types_and_unknown_references_raise() -> None:
    with pytest.raises(ExpressionError, match="type 'reduce'"):
        evaluate({"refId": "R", "type": "reduce", "expression": "$A"}, {"A": []})
    with pytest.raises(ExpressionError, match="no query Q"):
        evaluate({"refId": "R", "type": "math", "expression": "$Q * 2"}, {"A": []})


def test_braced_and_plain_references_parse_alike() -> None:
    assert parse("${A} / $N") == parse("$A/$N")
    assert parse("$B / $A * 100") == parse("($B / $A) * 100")


_values = st.lists(st.one_of(st.none(), st.floats(-1e6, 1e6, allow_nan=False)),
                   min_size=1, max_size=20)


@given(_values)
def test_a_series_with_itself_is_pointwise_arithmetic(values: list[float | None]) -> None:
    series = Frame("A", [Field("Time", FieldType.TIME, [T0 + i * MINUTE
                                                       for i in range(len(values))]),
                         Field("Value", FieldType.NUMBER, values, {"queue": "pbatch"})])

    def run(text: str) -> list[Any]:
        (frame,) = evaluate({"refId": "E", "type": "math", "expression": text},
                            {"A": [series]})
        assert frame.fields[1].labels == {"queue": "pbatch"}
        return frame.fields[1].values

    assert run("$A / $A") == [None if v is None or v == 0 else 1.0 for v in values]
    assert run("$A - $A") == [None if v is None else 0.0 for v in values]
    doubled = run("$A + $A")
    assert doubled == run("2 * $A") == [None if v is None else 2 * v for v in values]
    assert all(v is None or math.isfinite(v) for v in run("$A / ($A - $A)"))
