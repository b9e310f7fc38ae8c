"""pipeline.core.jsontext: orjson's compact JSON reads back as the standard library's did, and
what orjson refuses is still written."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pipeline.core.jsontext import canonical, dumps, dumps_text

_stdlib = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False).encode

scalars = (st.none() | st.booleans() | st.integers() | st.text()
           | st.floats(allow_nan=False, allow_infinity=False))
values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=5)
    | st.dictionaries(st.text() | st.integers() | st.booleans() | st.none(), inner, max_size=5),
    max_leaves=30)


@given(values)
def test_the_text_reads_back_as_the_standard_librarys(value: Any) -> None:
    assert json.loads(dumps(value)) == json.loads(_stdlib(value))
    assert dumps_text(value) == dumps(value).decode()


@given(st.recursive(st.none() | st.booleans() | st.integers(-(2**63), 2**64 - 1) | st.text(),
                    lambda inner: st.lists(inner, max_size=5)
                    | st.dictionaries(st.text(), inner, max_size=5), max_leaves=30))
def test_without_floats_the_bytes_are_the_standard_librarys(value: Any) -> None:
    assert dumps(value) == _stdlib(value).encode()


def test_what_orjson_refuses_the_standard_library_writes() -> None:
    big = {"id": 2**70, "neg": -(2**65)}
    assert json.loads(dumps(big)) == big
    deep: Any = 1
    for _ in range(300):  # orjson nests at most 255 deep
        deep = [deep]
    assert json.loads(dumps(deep)) == deep


def test_a_value_that_is_not_json_is_refused() -> None:
    with pytest.raises(TypeError):
        dumps({"a": {1, 2}})


def test_non_finite_floats_are_null() -> None:
    assert dumps([math.nan, math.inf]) == b"[null,null]"
    assert dumps(1e-7) == b"1e-7"  # Python writes 1e-07; both read back as 1e-07


_stdlib_canonical = json.JSONEncoder(sort_keys=True, separators=(",", ":"), default=str).encode

floats = st.floats(allow_nan=False, allow_infinity=False) | st.sampled_from(
    [1e-5, 1e-7, 1.5e-300, 1e16, 1.5e16, 1e22, 0.0001, 123456789.123, 5e-324, -0.0,
     1764273600.123456])
any_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text() | floats,
    lambda inner: st.lists(inner, max_size=5) | st.tuples(inner, inner)
    | st.dictionaries(st.text(), inner, max_size=5)
    | st.dictionaries(st.integers() | st.booleans() | st.none(), inner, max_size=3),
    max_leaves=30)


@given(any_values)
def test_canonical_text_is_the_standard_librarys_byte_for_byte(value: Any) -> None:
    try:
        expected = _stdlib_canonical(value)
    except (TypeError, ValueError):  # keys of kinds sort_keys cannot order
        return
    assert canonical(value) == expected


def test_canonical_text_of_what_json_cannot_hold_is_its_str() -> None:
    import datetime
    from dataclasses import dataclass

    @dataclass
    class Point:
        x: int

    value = {"at": datetime.datetime(2026, 11, 27, 12, 0), "p": Point(1), "s": {1}}
    assert canonical(value) == _stdlib_canonical(value)
