"""Grafana's server-side math expressions over the frames of other queries.

A mirror of the ``math`` expression of Grafana's server-side expressions (grafana/grafana
``pkg/expr``: ``mathexp/exp.go``, ``mathexp/types.go``, ``mathexp/type_series.go``,
``converter.go``) for what the dashboards write (``$A / $N``, ``$B / $A * 100``):

* each referenced query's frames become values as ``converter.go`` reads them: no frames
  (or one without fields) is *no data*; a single table with one number column is a set of
  numbers labelled by its string columns; otherwise every time series frame gives one
  series per number field, labelled by that field's labels;
* a binary operation pairs the values of its two sides by labels (``union``): equal
  labels, or one side without labels, or one side's labels containing the other's (the
  result takes the larger set); other pairs are dropped, except that one value on each
  side always pairs (labels stripped); no data on a side of one value gives no data;
* series with series: the points of the left series whose time the right one has too, in
  the left's order; series with a number or a literal: every point;
* a null operand gives null, and so (here) does a result that is not a finite number:
  Grafana gives NaN for 0/0 and ±Inf for x/0, which the preview draws as a gap.

The result frames carry the expression's refId; a computed series is a ``Time`` field and
a number field named after the refId with the pair's labels, as Grafana makes them. The
name a panel shows for it (the refId and the single label's value, or all labels:
``fieldState.ts``) is put in ``displayNameFromDS``, so that
:attr:`~pipeline.dashboards.preview.frames.Field.display_name` shows what Grafana shows.

The parser is a small recursive descent one (no ``eval``): numbers, ``$REF``, ``${REF}``,
``+ - * /``, unary minus and parentheses. Grafana's other operators, functions and strings
raise :class:`ExpressionError` naming them.
"""

from __future__ import annotations

import math
import operator
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pipeline.dashboards.preview.frames import (
    TIME_FIELD_NAME,
    Field,
    FieldType,
    Frame,
    panel_display_name,
)

__all__ = ["ExpressionError", "evaluate", "parse"]


class ExpressionError(ValueError):
    """An expression the preview does not evaluate: its type, syntax or input."""


# --------------------------------------------------------------------------- parsing


@dataclass(frozen=True)
class Literal:
    value: float


@dataclass(frozen=True)
class Ref:
    name: str


@dataclass(frozen=True)
class Negate:
    arg: Node


@dataclass(frozen=True)
class Binary:
    op: str
    left: Node
    right: Node


Node = Literal | Ref | Negate | Binary

_TOKEN = re.compile(r"""
    (?P<space>\s+)
  | (?P<number>(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?)
  | \$\{(?P<braced>[^}]+)\}
  | \$(?P<var>[A-Za-z_][A-Za-z0-9_]*)
  | (?P<symbol>\*\*|&&|\|\||[<>=!]=|[-+*/()%<>!=&|,])
  | (?P<word>[A-Za-z_]\w*)
  | (?P<string>")
""", re.VERBOSE)

_SUPPORTED = frozenset("+-*/()")


def parse(expression: str) -> Node:
    """The syntax tree of ``expression``; :class:`ExpressionError` for what it cannot
    parse or the preview does not evaluate."""
    tokens = _tokens(expression)
    parser = _Parser(tokens, expression)
    node = parser.expr()
    if parser.pos != len(tokens):
        raise ExpressionError(f"math expression {expression!r}: unexpected "
                              f"{tokens[parser.pos][1]!r}")
    return node


def _tokens(expression: str) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    pos = 0
    while pos < len(expression):
        m = _TOKEN.match(expression, pos)
        if m is None:
            raise ExpressionError(f"math expression {expression!r}: invalid character "
                                  f"{expression[pos]!r}")
        pos = m.end()
        kind = m.lastgroup or ""
        if kind == "space":
            continue
        if kind == "number":
            out.append(("number", m.group(kind)))
        elif kind in ("braced", "var"):
            out.append(("ref", m.group(kind)))
        elif kind == "symbol":
            symbol = m.group(kind)
            if symbol not in _SUPPORTED:
                raise ExpressionError(f"math expression {expression!r}: operator "
                                      f"{symbol!r} is not supported by the preview")
            out.append(("symbol", symbol))
        elif kind == "word":
            raise ExpressionError(f"math expression {expression!r}: function "
                                  f"{m.group(kind)}() is not supported by the preview")
        else:
            raise ExpressionError(f"math expression {expression!r}: strings are not "
                                  "supported by the preview")
    return out


class _Parser:
    def __init__(self, tokens: list[tuple[str, str]], text: str) -> None:
        self.tokens = tokens
        self.text = text
        self.pos = 0

    def _peek(self) -> tuple[str, str] | None:
        return self.tokens[self.pos] if self.pos < len(self.tokens) else None

    def _take_symbol(self, symbols: str) -> str | None:
        token = self._peek()
        if token is not None and token[0] == "symbol" and token[1] in symbols:
            self.pos += 1
            return token[1]
        return None

    def expr(self) -> Node:
        node = self.term()
        while (op := self._take_symbol("+-")) is not None:
            node = Binary(op, node, self.term())
        return node

    def term(self) -> Node:
        node = self.unary()
        while (op := self._take_symbol("*/")) is not None:
            node = Binary(op, node, self.unary())
        return node

    def unary(self) -> Node:
        if self._take_symbol("-") is not None:
            return Negate(self.unary())
        return self.primary()

    def primary(self) -> Node:
        token = self._peek()
        if token is None:
            raise ExpressionError(f"math expression {self.text!r}: unexpected end")
        self.pos += 1
        kind, text = token
        if kind == "number":
            return Literal(float(text))
        if kind == "ref":
            return Ref(text)
        if text == "(":
            node = self.expr()
            if self._take_symbol(")") is None:
                raise ExpressionError(f"math expression {self.text!r}: missing ')'")
            return node
        raise ExpressionError(f"math expression {self.text!r}: unexpected {text!r}")


# --------------------------------------------------------------------------- values


@dataclass
class Scalar:
    value: float | None


@dataclass
class Number:
    value: float | None
    labels: dict[str, str] = field(default_factory=dict)
    #: the field it came from (a query's), kept when passed through unchanged
    source: Field | None = None


@dataclass
class Series:
    times: list[int]
    values: list[float | None]
    labels: dict[str, str] = field(default_factory=dict)
    source: Field | None = None
    time_source: Field | None = None


@dataclass
class NoData:
    pass


Value = Scalar | Number | Series | NoData


def evaluate(target: Mapping[str, Any], frames_by_ref: Mapping[str, Sequence[Frame]]
             ) -> list[Frame]:
    """The frames of the expression ``target`` (``type`` math) over the frames of the
    queries (and earlier expressions) it references, by refId."""
    kind = target.get("type")
    ref_id = str(target.get("refId") or "")
    if kind != "math":
        raise ExpressionError(f"expression {ref_id}: type {kind!r} is not supported by the "
                              "preview (only math)")
    tree = parse(str(target.get("expression") or ""))
    values = _Evaluator(ref_id, frames_by_ref).walk(tree)
    return _frames(ref_id, values)


class _Evaluator:
    def __init__(self, ref_id: str, frames_by_ref: Mapping[str, Sequence[Frame]]) -> None:
        self.ref_id = ref_id
        self.frames_by_ref = frames_by_ref

    def walk(self, node: Node) -> list[Value]:
        if isinstance(node, Literal):
            return [Scalar(node.value)]
        if isinstance(node, Ref):
            if node.name not in self.frames_by_ref:
                raise ExpressionError(f"expression {self.ref_id}: no query {node.name}")
            return _values(node.name, self.frames_by_ref[node.name])
        if isinstance(node, Negate):
            return [_negate(v) for v in self.walk(node.arg)]
        return self._binary(node)

    def _binary(self, node: Binary) -> list[Value]:
        op = _OPS[node.op]
        out: list[Value] = []
        for labels, a, b in _union(self.walk(node.left), self.walk(node.right)):
            out.append(_combine(op, labels, a, b))
        return out


def _negate(value: Value) -> Value:
    if isinstance(value, Scalar):
        return Scalar(None if value.value is None else -value.value)
    if isinstance(value, Number):
        return Number(None if value.value is None else -value.value, dict(value.labels))
    if isinstance(value, Series):
        return Series(list(value.times), [None if v is None else -v for v in value.values],
                      dict(value.labels))
    return NoData()


def _labels(value: Value) -> dict[str, str]:
    return value.labels if isinstance(value, Number | Series) else {}


def _contains(big: Mapping[str, str], small: Mapping[str, str]) -> bool:
    return all(big.get(k) == v for k, v in small.items())


def _union(left: list[Value], right: list[Value]
           ) -> list[tuple[dict[str, str], Value, Value]]:
    """mathexp's union: which values of the two sides are combined, under which labels."""
    if not left or not right:
        return []
    if (len(left) == 1 or len(right) == 1) and (isinstance(left[0], NoData)
                                                or isinstance(right[0], NoData)):
        return [({}, left[0], right[0])]
    pairs: list[tuple[dict[str, str], Value, Value]] = []
    for a in left:
        for b in right:
            la, lb = _labels(a), _labels(b)
            if la == lb or not la or not lb:
                labels = la or lb
            elif len(la) == len(lb):
                continue
            elif _contains(la, lb):
                labels = la
            elif _contains(lb, la):
                labels = lb
            else:
                continue
            pairs.append((dict(labels), a, b))
    if not pairs and len(left) == 1 and len(right) == 1:
        # one value on each side: combined, their labels dropped (exp.go says why)
        pairs.append(({}, left[0], right[0]))
    return pairs


def _divide(a: float, b: float) -> float:
    if b == 0:
        # Go's float division: NaN for 0/0, a signed infinity otherwise
        if a == 0 or math.isnan(a):
            return math.nan
        return math.copysign(math.inf, a) * math.copysign(1.0, b)
    return a / b


_OPS: dict[str, Callable[[float, float], float]] = {
    "+": operator.add, "-": operator.sub, "*": operator.mul, "/": _divide}


def _apply(op: Callable[[float, float], float], a: float | None, b: float | None
           ) -> float | None:
    if a is None or b is None:
        return None
    if math.isnan(a) or math.isnan(b):
        return math.nan
    return op(a, b)


def _combine(op: Callable[[float, float], float], labels: dict[str, str], a: Value,
             b: Value) -> Value:
    if isinstance(a, NoData):
        return a
    if isinstance(b, NoData):
        return b
    if isinstance(a, Scalar) and isinstance(b, Scalar):
        return Scalar(_apply(op, a.value, b.value))
    if isinstance(a, Series) and isinstance(b, Series):
        right = dict(zip(b.times, b.values, strict=True))
        times = [t for t in a.times if t in right]
        values = [_apply(op, v, right[t]) for t, v in zip(a.times, a.values, strict=True)
                  if t in right]
        return Series(times, values, labels)
    if isinstance(a, Series):
        number = b.value if isinstance(b, Scalar | Number) else None
        return Series(list(a.times), [_apply(op, v, number) for v in a.values], labels)
    if isinstance(b, Series):
        number = a.value if isinstance(a, Scalar | Number) else None
        return Series(list(b.times), [_apply(op, number, v) for v in b.values], labels)
    left = a.value if isinstance(a, Scalar | Number) else None
    right_value = b.value if isinstance(b, Scalar | Number) else None
    return Number(_apply(op, left, right_value), labels)


# --------------------------------------------------------------------------- frames


def _values(ref: str, frames: Sequence[Frame]) -> list[Value]:
    """converter.go's Convert: a query's frames as no data, numbers or series."""
    if not frames or (len(frames) == 1 and not frames[0].fields):
        return [NoData()]
    if len(frames) == 1 and frames[0].time_field() is None:
        numbers = _number_set(frames[0])
        if numbers is not None:
            return numbers
    out: list[Value] = []
    for frame in frames:
        time = frame.time_field()
        numbers = frame.number_fields()
        if time is None or not numbers or any(f.type is FieldType.STRING
                                              for f in frame.fields):
            shape = "long" if time is not None and numbers else "not a time series"
            raise ExpressionError(f"query {ref}: input data must be a wide series but got "
                                  f"type {shape}")
        if any(t is None for t in time.values):
            raise ExpressionError(f"query {ref}: time series with null time stamps are not "
                                  "supported")
        for f in numbers:
            out.append(Series(list(time.values), [_number(v) for v in f.values],
                              dict(f.labels), f, time))
    return out


def _number_set(frame: Frame) -> list[Value] | None:
    numbers = [f for f in frame.fields if f.type is FieldType.NUMBER]
    strings = [f for f in frame.fields if f.type is FieldType.STRING]
    if len(numbers) != 1 or len(numbers) + len(strings) != len(frame.fields):
        return None
    value = numbers[0]
    return [Number(_number(value.values[i]),
                   {s.name: "" if s.values[i] is None else str(s.values[i]) for s in strings},
                   value)
            for i in range(frame.length)]


def _number(value: Any) -> float | None:
    if value is None or isinstance(value, bool):
        return None
    return float(value)


def _finite(value: float | None) -> float | None:
    return value if value is not None and math.isfinite(value) else None


def _frames(ref_id: str, values: list[Value]) -> list[Frame]:
    frames: list[Frame] = []
    computed: list[Field] = []
    for value in values:
        if isinstance(value, NoData):
            frames.append(Frame(ref_id, [], name="no data"))
            continue
        source = value.source if isinstance(value, Number | Series) else None
        if isinstance(value, Series):
            numbers = [_finite(v) for v in value.values]
        else:
            numbers = [_finite(value.value)]
        if source is None:
            result = Field(ref_id, FieldType.NUMBER, numbers, dict(_labels(value)))
            computed.append(result)
        else:
            # a query's value passed through unchanged keeps its field
            result = Field(source.name, FieldType.NUMBER, numbers, dict(_labels(value)),
                           dict(source.config))
        if isinstance(value, Series):
            time = value.time_source.name if value.time_source else TIME_FIELD_NAME
            frames.append(Frame(ref_id, [Field(time, FieldType.TIME, list(value.times)),
                                         result], meta={"type": "timeseries-multi"}))
        else:
            frames.append(Frame(ref_id, [result], meta={"type": "numeric-multi"}))
    for frame in frames:
        for f in frame.fields:
            if any(f is c for c in computed):
                f.config["displayNameFromDS"] = panel_display_name(f, frame, frames)
    return frames
