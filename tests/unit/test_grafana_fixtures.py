"""``grafana_query.build_search`` against Grafana's own golden request fixtures.

The fixtures are grafana/grafana-elasticsearch-datasource ``pkg/elasticsearch/testdata_request/``
(copied, data only, to ``../shared/reference/grafana-testdata``; they stay out of this
repository). Each ``NAME.queries.json`` holds panel targets as the data source's backend
receives them and ``NAME.request.lineK.json`` the ``_msearch`` body line it sends for the
K-th one. They are driven here with the settings of the plugin's ``snapshot_test.go`` and
``querydata_test.go``: the time range, time field and index below, and each query's own
``interval`` (nanoseconds, as ``backend.DataQuery.Interval``; absent is 0).

How the comparison treats order: the plugin's test compares with ``require.JSONEq``, so
the key order in a fixture file says nothing; the wire form is Go's ``encoding/json``,
which writes every map with its keys sorted. Elasticsearch reads object keys as a set
everywhere in these bodies except ``sort`` given as an object, whose keys it applies in
order; so objects compare as sets, lists in order, and the ``sort`` object must have its
keys in Go's (sorted) order.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from datafiles import SHARED, shared_path

from pipeline.dashboards.grafana_query import build_search
from pipeline.dashboards.grafana_time import TimeRange

FROM_MS, TO_MS = 1668422437218, 1668422625668
TIME_FIELD = "testtime"
INDEX = "testdb-2022.11.14"
HEADER = {"ignore_unavailable": True, "index": INDEX, "search_type": "query_then_fetch"}

FIXTURES = ("reference", "grafana-testdata", "grafana-elasticsearch-datasource")
TESTDATA = SHARED.joinpath(*FIXTURES)


def _names() -> list[str]:
    if not TESTDATA.is_dir():
        return ["(no fixtures)"]  # one test, which the fixture below skips or fails
    return sorted(p.name.removesuffix(".queries.json") for p in TESTDATA.glob("*.queries.json"))


@pytest.fixture
def testdata() -> Path:
    return shared_path(*FIXTURES)


def _request_lines(testdata: Path, name: str) -> list[Path]:
    pattern = re.compile(re.escape(name) + r"\.request\.line(\d+)\.json$")
    found = {int(m.group(1)): p for p in testdata.iterdir() if (m := pattern.match(p.name))}
    return [found[k] for k in sorted(found)]


def _differences(ours: Any, theirs: Any, path: str = "$") -> list[str]:
    """Where two JSON trees differ: objects as key sets, lists in order, numbers by value."""
    if isinstance(ours, dict) and isinstance(theirs, dict):
        out = [f"{path}: {k!r} only in ours" for k in ours if k not in theirs]
        out += [f"{path}: {k!r} missing" for k in theirs if k not in ours]
        for k in ours.keys() & theirs.keys():
            out += _differences(ours[k], theirs[k], f"{path}.{k}")
        return out
    if isinstance(ours, list) and isinstance(theirs, list):
        if len(ours) != len(theirs):
            return [f"{path}: {len(ours)} items, Grafana {len(theirs)}"]
        out = []
        for i, (a, b) in enumerate(zip(ours, theirs, strict=True)):
            out += _differences(a, b, f"{path}[{i}]")
        return out
    numbers = (int, float)
    same_kind = (isinstance(ours, bool) == isinstance(theirs, bool)
                 and (isinstance(ours, numbers) and isinstance(theirs, numbers)
                      or type(ours) is type(theirs)))
    if not same_kind or ours != theirs:
        return [f"{path}: ours {json.dumps(ours)}, Grafana {json.dumps(theirs)}"]
    return []


def _go_key_order(obj: dict[str, Any]) -> list[str]:
    # encoding/json sorts map keys by their bytes; Python sorts str by code point, which
    # for these ASCII names is the same order.
    return sorted(obj)


@pytest.mark.parametrize("name", _names())
def test_request_identical_to_grafanas_fixture(testdata: Path, name: str) -> None:
    queries = json.loads((testdata / f"{name}.queries.json").read_text())
    lines = _request_lines(testdata, name)
    assert lines, f"{name}: no request fixture"
    assert len(lines) == len(queries), f"{name}: {len(queries)} queries, {len(lines)} lines"
    time_range = TimeRange(FROM_MS, TO_MS)
    problems: list[str] = []
    for query, line in zip(queries, lines, strict=True):
        expected = json.loads(line.read_text())
        header, body = build_search(query, index=INDEX, time_field=TIME_FIELD,
                                    time_range=time_range,
                                    interval_ms=int(query.get("interval") or 0) // 1_000_000)
        # the encoder's output is what goes on the wire: compare after a JSON round trip
        header, body = json.loads(json.dumps(header)), json.loads(json.dumps(body))
        problems += [f"{line.name} header {d}" for d in _differences(header, HEADER)]
        problems += [f"{line.name} {d}" for d in _differences(body, expected)]
        if isinstance(expected.get("sort"), dict) and isinstance(body.get("sort"), dict):
            if list(body["sort"]) != _go_key_order(expected["sort"]):
                problems.append(f"{line.name} $.sort: keys in order {list(body['sort'])}, "
                                f"Grafana sends {_go_key_order(expected['sort'])}")
    assert problems == []


def test_every_fixture_request_has_its_queries(testdata: Path) -> None:
    names = set(_names())
    orphans = [p.name for p in testdata.glob("*.request.line*.json")
               if p.name.split(".request.", 1)[0] not in names]
    assert orphans == []
