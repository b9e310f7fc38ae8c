"""The shipped Grafana files: generated from the code, consistent, and fitting the mappings.

Checks what a Grafana server would complain about (ids, grid, data source uids, variables)
and, against the index mappings of schemas/elasticsearch, every field every target uses.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
import yaml

from pipeline.dashboards import render
from pipeline.dashboards.check import _check_expression
from pipeline.dashboards.datasources import DATASOURCES
from pipeline.dashboards.fields import FieldUse, check_use, field_uses, query_fields
from pipeline.dashboards.grafana_query import substitute, variable_values
from pipeline.sink.names import Family
from pipeline.sink.templates import family_body

ROOT = Path(__file__).resolve().parents[2]
BOARDS = render.dashboards()


def _provisioned() -> dict[str, Any]:
    return yaml.safe_load((render.GRAFANA_DIR / "provisioning/datasources/jobstream.yaml")
                          .read_text())


def _panels(board: Mapping[str, Any]) -> Iterator[dict[str, Any]]:
    for p in board["panels"]:
        yield p
        yield from p.get("panels", [])


def _es_targets(board: Mapping[str, Any]) -> Iterator[tuple[dict[str, Any], dict[str, Any]]]:
    for p in _panels(board):
        for t in p.get("targets", []):
            if t["datasource"]["type"] == "elasticsearch":
                yield p, t


def _mapping_types(family: Family) -> dict[str, frozenset[str]]:
    """Field name -> type from the index template (objects and multi-fields flattened)."""
    out: dict[str, frozenset[str]] = {}

    def walk(props: Mapping[str, Any], prefix: str) -> None:
        for name, spec in props.items():
            full = prefix + name
            out[full] = frozenset({spec.get("type", "object")})
            walk(spec.get("properties", {}), full + ".")
            walk(spec.get("fields", {}), full + ".")

    walk(family_body(family)["mappings"]["properties"], "")
    return out


def test_committed_files_are_the_generators_output() -> None:
    assert render.stale() == [], "run `jobstream dashboards build` and commit grafana/"


def test_render_writes_what_stale_compares(tmp_path: Path) -> None:
    assert sorted(render.write(tmp_path)) == sorted(render.files())
    assert render.stale(tmp_path) == []
    (tmp_path / "dashboards/jobstream-job.json").write_text("{}")
    assert render.stale(tmp_path) == ["dashboards/jobstream-job.json"]


def test_datasource_provisioning() -> None:
    prov = _provisioned()
    assert prov["apiVersion"] == 1
    sources = prov["datasources"]
    assert [s["uid"] for s in sources] == [d.uid for d in DATASOURCES]
    assert len({s["name"] for s in sources}) == len(sources)
    for src, ds in zip(sources, DATASOURCES, strict=True):
        assert src["type"] == "elasticsearch" and src["access"] == "proxy"
        assert src["url"] == "${ES_URL}"
        data = src["jsonData"]
        assert data["index"] == "${JOBSTREAM_ELASTICSEARCH__INDEX_PREFIX}" + ds.family.value
        assert data["interval"] == ""  # an alias, not a dated index pattern
        assert data["maxConcurrentShardRequests"] == 5
        assert re.fullmatch(r"\d+\.\d+\.\d+", data["esVersion"])
        # the time field is a date of that index
        assert _mapping_types(ds.family)[data["timeField"]] == {"date"}, src["name"]
    by_time = {(d.family, d.time_field) for d in DATASOURCES}
    assert {(Family.JOBS, "t_submit"), (Family.JOBS, "t_start"), (Family.JOBS, "t_end"),
            (Family.EVENTS, "@timestamp"), (Family.SNAPSHOTS, "timestamp"),
            (Family.NODES, "since"), (Family.NODE_EVENTS, "timestamp")} == by_time


def test_dashboard_provider_points_where_compose_mounts_the_dashboards() -> None:
    prov = yaml.safe_load((render.GRAFANA_DIR / "provisioning/dashboards/jobstream.yaml")
                          .read_text())
    (provider,) = prov["providers"]
    assert provider["type"] == "file"
    path = provider["options"]["path"]
    compose = (ROOT / "compose/docker-compose.yml").read_text()
    assert f"../grafana/dashboards:{path}" in compose
    assert "../grafana/provisioning:/etc/grafana/provisioning" in compose


def test_dashboard_uids_and_titles_are_unique() -> None:
    assert len({b["uid"] for b in BOARDS}) == len(BOARDS)
    assert len({b["title"] for b in BOARDS}) == len(BOARDS)


@pytest.mark.parametrize("board", BOARDS, ids=lambda b: b["uid"])
def test_panel_ids_and_grid(board: dict[str, Any]) -> None:
    panels = list(_panels(board))
    ids = [p["id"] for p in panels]
    assert len(set(ids)) == len(ids)
    cells: set[tuple[int, int]] = set()
    for p in panels:
        pos = p["gridPos"]
        assert pos["w"] > 0 and pos["h"] > 0 and pos["x"] >= 0 and pos["y"] >= 0
        assert pos["x"] + pos["w"] <= 24, p["title"]
        mine = {(x, y) for x in range(pos["x"], pos["x"] + pos["w"])
                for y in range(pos["y"], pos["y"] + pos["h"])}
        assert not mine & cells, f"{p['title']} overlaps another panel"
        cells |= mine


@pytest.mark.parametrize("board", BOARDS, ids=lambda b: b["uid"])
def test_targets(board: dict[str, Any]) -> None:
    uids = {s["uid"] for s in _provisioned()["datasources"]}
    for p in _panels(board):
        targets = p.get("targets", [])
        if p["type"] == "row":
            assert not targets
            continue
        assert targets, p["title"]
        refs = [t["refId"] for t in targets]
        assert len(set(refs)) == len(refs), p["title"]
        for t in targets:
            if t["datasource"]["type"] == "__expr__":
                assert _check_expression(t, set(refs)).status == "ok", p["title"]
                continue
            assert t["datasource"]["uid"] in uids, p["title"]
            assert t["metrics"], p["title"]
            assert isinstance(t["bucketAggs"], list)
            if p["type"] == "timeseries":
                assert t["bucketAggs"][-1]["type"] == "date_histogram", p["title"]
            ids = [m["id"] for m in t["metrics"]] + [b["id"] for b in t["bucketAggs"]]
            assert len(set(ids)) == len(ids), p["title"]
        if p["datasource"]["uid"] != "-- Mixed --":
            assert {t["datasource"]["uid"] for t in targets
                    if t["datasource"]["type"] != "__expr__"} == {p["datasource"]["uid"]}


@pytest.mark.parametrize("board", BOARDS, ids=lambda b: b["uid"])
def test_no_elasticsearch_scripts(board: dict[str, Any]) -> None:
    # The design's rule: the test Elasticsearch has no painless and no aggregations module.
    text = json.dumps(board)
    for banned in ("bucket_script", "derivative", "moving_fn", "moving_avg", '"script"',
                   "serial_diff"):
        assert banned not in text


@pytest.mark.parametrize("board", BOARDS, ids=lambda b: b["uid"])
def test_every_variable_is_used_and_every_used_variable_exists(board: dict[str, Any]) -> None:
    variables = board["templating"]["list"]
    names = {v["name"] for v in variables}
    for var in variables:
        others = json.dumps([board["panels"], [v for v in variables if v is not var],
                             board["links"]])
        assert re.search(r"\$\{?" + var["name"] + r"\b", others), f"${var['name']} unused"
    used = set(re.findall(r"\$\{?([a-z][a-z_]*)", json.dumps(board)))
    builtins = {"__field", "__value", "__data", "__url_time_range", "__all"}
    assert used - names - builtins == set()


@pytest.mark.parametrize("board", BOARDS, ids=lambda b: b["uid"])
def test_every_field_fits_the_mapping(board: dict[str, Any]) -> None:
    types = {f: _mapping_types(f) for f in Family}
    for where, family, use in _uses(board):
        assert check_use(use, types[family]) is None, (where, use)


def _mapping_params(family: Family) -> dict[str, Mapping[str, Any]]:
    """Field name -> its mapping (objects and multi-fields flattened), flattened fields'
    leaves answered by their field."""
    out: dict[str, Mapping[str, Any]] = {}

    def walk(props: Mapping[str, Any], prefix: str) -> None:
        for name, spec in props.items():
            out[prefix + name] = spec
            walk(spec.get("properties", {}), f"{prefix}{name}.")
            walk(spec.get("fields", {}), f"{prefix}{name}.")

    walk(family_body(family)["mappings"]["properties"], "")
    return out


def _spec_of(params: Mapping[str, Mapping[str, Any]], field: str) -> Mapping[str, Any]:
    parts = field.split(".")
    for i in range(len(parts), 0, -1):
        spec = params.get(".".join(parts[:i]))
        if spec is not None and (i == len(parts) or spec.get("type") == "flattened"):
            return spec
    raise AssertionError(f"{field} is not in the mapping")


def _cannot(spec: Mapping[str, Any], use: str) -> str | None:
    """Why a field of this mapping cannot serve ``use`` (None: it can). The mappings take
    the index or the doc values off fields nobody filters or groups by (one event
    document per event makes each indexed value a cost): what a panel uses must keep them.
    A query on a keyword, number or date is answered from either; a flattened or text
    field's only from its index; every aggregation, and the time field's sort, from doc
    values; the time field's range from the index too."""
    indexed = spec.get("index", True) is not False
    doc_values = spec.get("doc_values", True) is not False
    if use == "query":
        own_index_only = spec.get("type") in ("flattened", "text")
        if not (indexed or (doc_values and not own_index_only)):
            return "not searchable: neither indexed nor with doc values"
        return None
    if not doc_values:
        return f"no doc values for {use}"
    if use == "time field" and not indexed:
        return "the time field is not indexed"
    return None


def _uses(board: Mapping[str, Any]) -> Iterator[tuple[str, Family, FieldUse]]:
    values = variable_values(board)
    by_uid = {d.uid: d for d in DATASOURCES}
    for p, raw in _es_targets(board):
        t = substitute(raw, values)
        ds = by_uid[t["datasource"]["uid"]]
        for use in field_uses(t, ds.time_field):
            yield p["title"], ds.family, use
    for var in board["templating"]["list"]:
        if var["type"] == "query":
            find = json.loads(var["query"])
            ds = by_uid[var["datasource"]["uid"]]
            yield var["name"], ds.family, FieldUse(find["field"], "terms")
            for name in query_fields(substitute(find.get("query", ""), values)):
                yield var["name"], ds.family, FieldUse(name, "query")


def test_every_field_a_panel_uses_is_indexed_or_has_doc_values_as_its_use_needs() -> None:
    from pipeline.dashboards import alerts
    params = {f: _mapping_params(f) for f in Family}
    uses = [u for board in BOARDS for u in _uses(board)]
    by_uid = {d.uid: d for d in DATASOURCES}
    for group in alerts.provisioning()["groups"]:
        for rule in group["rules"]:
            for query in rule["data"]:
                ds = by_uid.get(query["datasourceUid"])
                if ds is not None:
                    uses += [(rule["title"], ds.family, u)
                             for u in field_uses(query["model"], ds.time_field)]
    assert uses
    bad = [(where, family.value, use, why) for where, family, use in uses
           if use.field not in ("*", "_id", "_index")
           and (why := _cannot(_spec_of(params[family], use.field), use.use))]
    assert bad == []


def test_the_events_mapping_indexes_only_what_is_used() -> None:
    """The cost side of the test above: of an event document, only what a panel, a query
    of jobstream's or a reader filters or groups by is indexed (the template's
    description says why each of the rest is in _source only)."""
    props = family_body(Family.EVENTS)["mappings"]["properties"]
    unindexed = {name for name, spec in props.items()
                 if spec.get("index") is False or spec.get("enabled") is False}
    assert unindexed == {"timestamp", "event_id", "seq", "facts", "jobspec", "R", "record"}
    assert props["job_id_f58"]["doc_values"] is False  # searched, never grouped
    assert {name for name, spec in props["usage"]["properties"].items()
            if spec.get("index") is False} == {
        "cpu_now_pct", "cpu_s", "mem_mb", "mem_pct", "gpu_now_pct"}  # averaged, maxed


def test_the_overview_covers_the_operations_questions() -> None:
    overview = next(b for b in BOARDS if b["uid"] == "jobstream-overview")
    titles = " | ".join(p["title"].lower() for p in _panels(overview))
    for words in ("queue depth", "pending demand", "running cores", "by bank", "job flow",
                  "ends by result", "failure rate", "exceptions", "wait since submit",
                  "wait since eligible", "oldest pending", "prolog and epilog",
                  "node-hours by bank", "top users", "job sizes", "fast failures",
                  "freshness", "cpu efficiency by user", "memory efficiency by bank",
                  "idle gpus"):
        assert words in titles
    assert {v["name"] for v in overview["templating"]["list"]} >= {
        "cluster", "queue", "bank", "user"}


def test_the_drill_down_reads_one_job() -> None:
    job = next(b for b in BOARDS if b["uid"] == "jobstream-job")
    assert {v["name"]: v["type"] for v in job["templating"]["list"]} == {
        "cluster": "query", "job_id": "textbox", "job_nodes": "query"}
    sources = {t["datasource"]["uid"] for _, t in _es_targets(job)}
    assert sources == {"jobstream-jobs-submit", "jobstream-events", "jobstream-nodes"}
    (job_id,) = (v for v in job["templating"]["list"] if v["name"] == "job_id")
    # no job by default: the id is matched as a phrase, never as a wildcard
    assert job_id["current"]["value"] == ""
    for p, t in _es_targets(job):
        if p["title"] == "Its nodes now":  # through $job_nodes (test_dashboards_nodes.py)
            continue
        assert '(job_id:"$job_id" OR job_id_f58:"$job_id")' in t["query"]
        assert p["fieldConfig"]["defaults"]["noValue"].startswith("No job")
        if p["title"] == "Job document":
            # every match (one per cluster with Cluster All), whatever _doc order shows
            assert t["metrics"] == [{"id": "1", "type": "raw_data",
                                     "settings": {"size": "1000"}}]
        if p["title"] == "Durations":
            # one job, the latest submitted: terms of size 1 ordered by max(t_submit), as
            # Grafana's raw data sorts on _doc before t_submit (grafana_query._sort)
            assert t["metrics"][0] == {"id": "1", "type": "max", "field": "t_submit"}
            assert [(b["field"], b["settings"]["size"], b["settings"]["orderBy"])
                    for b in t["bucketAggs"]] == [("cluster", "1", "1"), ("job_id", "1", "1")]
        elif p["title"].endswith(" over time"):
            # the job's node samples: one figure per node and time bucket
            assert t["query"].startswith("event:usage AND ")
            assert [m["type"] for m in t["metrics"]] in (["avg"], ["max"])
            assert [(b["type"], b["field"]) for b in t["bucketAggs"]] == [
                ("terms", "usage.node"), ("date_histogram", "@timestamp")]
        else:
            assert t["metrics"][0]["type"] in ("raw_data", "logs")
