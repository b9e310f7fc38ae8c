"""The shipped panels' transformations applied to the frames of their own queries.

Every panel of ``render.dashboards()`` with transformations is covered: the frames come
from ``es_frames`` and answers shaped as Elasticsearch gives them to the panel's targets;
the expected results follow Grafana's transformers (``organize.ts``, ``sortBy.ts``,
``limit.ts``, ``joinDataFrames.ts``, ``transpose.ts``).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from pipeline.dashboards import render
from pipeline.dashboards.check import panels_of
from pipeline.dashboards.grafana_query import build_search, substitute, variable_values
from pipeline.dashboards.grafana_time import TimeRange
from pipeline.dashboards.preview.es_frames import frames_of
from pipeline.dashboards.preview.expressions import evaluate
from pipeline.dashboards.preview.frames import Field, FieldType, Frame, panel_display_name
from pipeline.dashboards.preview.transforms import TransformError, apply

BOARDS = render.dashboards()
T0 = 1_795_000_000_000


def _panel(title: str) -> dict[str, Any]:
    for board in BOARDS:
        for panel in panels_of(board):
            if panel.get("title") == title:
                values = variable_values(board)
                return {**panel, "targets": [substitute(t, values) for t in panel["targets"]]}
    raise AssertionError(f"no panel {title!r}")


def _shown(frame: Frame, frames: list[Frame] | None = None) -> list[str]:
    return [panel_display_name(f, frame, frames or [frame]) for f in frame.fields]


def _table(frame: Frame) -> list[list[Any]]:
    return [_shown(frame), *frame.rows()]


def test_every_transformation_of_the_shipped_dashboards_is_one_the_preview_applies() -> None:
    handled = {"organize": {"excludeByName", "indexByName", "renameByName", "includeByName"},
               "sortBy": {"sort"}, "limit": {"limitField"},
               "joinByField": {"byField", "mode"}, "transpose": set()}
    used = [(p.get("title"), t) for b in BOARDS for p in panels_of(b)
            for t in p.get("transformations") or []]
    assert len(used) >= 8
    for title, transformation in used:
        kind = transformation["id"]
        assert kind in handled, f"{title}: {kind}"
        assert set(transformation.get("options") or {}) <= handled[kind], title
        assert apply([transformation], []) == []


def test_organize_renames_the_durations_of_the_job_panel() -> None:
    panel = _panel("Durations")
    (target,) = panel["targets"]
    leaf = {str(i): {"value": v} for i, v in
            enumerate([1.795e12, 120.0, 60.0, 3600.0, 2.0, 1.5], start=1)}
    response = {"aggregations": {"7": {"buckets": [
        {"key": "tioga", "doc_count": 1, "1": {"value": 1.795e12}, "8": {"buckets": [
            {"key": "4242", "doc_count": 1, **leaf}]}}]}}}
    (frame,) = apply(panel["transformations"], frames_of(target, response))
    assert _shown(frame) == ["cluster", "job_id", "Max t_submit", "wait_s",
                             "eligible_wait_s", "run_s", "prolog_s", "epilog_s"]
    assert frame.fields[3].name == "Max wait_s"  # a rename sets the shown name only
    assert frame.rows() == [["tioga", "4242", 1.795e12, 120.0, 60.0, 3600.0, 2.0, 1.5]]


def test_organize_renames_the_pending_cores_table() -> None:
    panel = _panel("Pending cores by user and bank")
    response = {"aggregations": {"4": {"buckets": [
        {"key": "physics", "doc_count": 2, "1": {"value": 96.0}, "5": {"buckets": [
            {"key": "alice", "doc_count": 2, "1": {"value": 96.0}, "2": {"value": 4.0}}]}}]}}}
    (frame,) = apply(panel["transformations"], frames_of(panel["targets"][0], response))
    assert _table(frame) == [["bank", "user", "pending cores", "pending GPUs", "pending jobs"],
                             ["physics", "alice", 96.0, 4.0, 2.0]]


def _event_hit(seq: int, minute: int, event: str) -> dict[str, Any]:
    when = f"2026-11-19T07:{minute:02d}:00Z"
    return {"_index": "hpc-job-events-2026.11", "_id": f"tioga-4242-{seq}",
            "_source": {"@timestamp": when, "cluster": "tioga", "event": event,
                        "source": "flux", "seq": seq, "event_id": f"e{seq}",
                        "context": {"type": "cancel"}, "facts": {"exitcode": 0}},
            "fields": {"@timestamp": [when]}, "sort": [seq, 0]}


def test_events_table_keeps_its_columns_in_order_sorted_by_time() -> None:
    panel = _panel("Events")
    hits = [_event_hit(2, 47, "start"), _event_hit(3, 48, "finish"),
            _event_hit(1, 46, "submit")]
    frames = frames_of(panel["targets"][0], {"hits": {"hits": hits}})
    (frame,) = apply(panel["transformations"], frames)
    # Grafana flattens the context and facts objects into context.type and facts.exitcode:
    # includeByName names "context" and "facts", which no field is called any more
    assert _shown(frame) == ["@timestamp", "cluster", "event", "source", "seq", "event_id"]
    minute = 60_000
    at_46 = int(datetime(2026, 11, 19, 7, 46, tzinfo=UTC).timestamp()) * 1000
    assert [row[:3] for row in frame.rows()] == [
        [at_46, "tioga", "submit"], [at_46 + minute, "tioga", "start"],
        [at_46 + 2 * minute, "tioga", "finish"]]


def test_longest_waiting_jobs_are_organized_sorted_and_limited() -> None:
    panel = _panel("Longest-waiting pending jobs")
    jobs = [(f"{4000 + i}", T0 - (i * 7 % 60) * 60_000) for i in range(60)]

    def job(job_id: str, submitted: float) -> dict[str, Any]:
        leaf = {"1": {"value": submitted}, "2": {"value": submitted + 1000.0},
                "3": {"value": 1.0}, "4": {"value": 16.0}, "5": {"value": 0.0},
                "6": {"value": 3600.0}}
        chain: dict[str, Any] = {"12": {"buckets": [{"key": "Priority", "doc_count": 1,
                                                     **leaf}]}}
        for agg_id, key in (("11", "pbatch"), ("10", "physics"), ("9", "alice")):
            chain = {agg_id: {"buckets": [{"key": key, "doc_count": 1, **chain}]}}
        return {"key": job_id, "doc_count": 1, "1": {"value": submitted}, **chain}

    response = {"aggregations": {"7": {"buckets": [
        {"key": "tioga", "doc_count": 60, "8": {"buckets": [job(*j) for j in jobs]}}]}}}
    (frame,) = apply(panel["transformations"], frames_of(panel["targets"][0], response))
    assert _shown(frame) == ["t_submit", "cluster", "job_id", "user", "bank", "queue",
                             "pending_reason", "nodes_req", "cores_req", "gpus_req",
                             "timelimit_s", "t_eligible"]
    assert frame.length == 50
    submitted = frame.fields[0].values
    assert submitted == sorted(s for _, s in jobs)[:50]
    oldest = min(jobs, key=lambda j: j[1])
    assert frame.rows()[0][:3] == [oldest[1], "tioga", oldest[0]]


def test_top_users_join_the_running_and_pending_tables_on_user() -> None:
    panel = _panel("Top users right now")
    running, pending = panel["targets"]
    a = frames_of(running, {"aggregations": {"4": {"buckets": [
        {"key": "alice", "doc_count": 3, "1": {"value": 96.0}, "2": {"value": 4.0}},
        {"key": "bob", "doc_count": 1, "1": {"value": 8.0}, "2": {"value": 0.0}}]}}})
    b = frames_of(pending, {"aggregations": {"2": {"buckets": [
        {"key": "carol", "doc_count": 5}, {"key": "alice", "doc_count": 2}]}}})
    assert panel["transformations"] == [{"id": "joinByField",
                                         "options": {"byField": "user", "mode": "outer"}}]
    (frame,) = apply(panel["transformations"], a + b)
    assert _table(frame) == [
        ["user", "Sum ncores", "Sum ngpus", "Count 1", "Count 2"],
        ["alice", 96.0, 4.0, 3.0, 2.0], ["bob", 8.0, 0.0, 1.0, None],
        ["carol", None, None, None, 5.0]]
    inner = {"id": "joinByField", "options": {"byField": "user", "mode": "inner"}}
    (joined,) = apply([inner], a + b)
    assert joined.rows() == [["alice", 96.0, 4.0, 3.0, 2.0]]
    # one frame: nothing to join, left as it is
    assert apply(panel["transformations"], a) == a


def test_outer_join_on_time_sorts_the_times() -> None:
    first = Frame("A", [Field("Time", FieldType.TIME, [T0 + 2, T0]),
                        Field("Value", FieldType.NUMBER, [2.0, 0.0])], name="submits")
    second = Frame("B", [Field("Time", FieldType.TIME, [T0 + 1]),
                         Field("Value", FieldType.NUMBER, [1.0])], name="starts")
    (frame,) = apply([{"id": "joinByField", "options": {}}], [first, second])
    assert [(f.name, f.labels) for f in frame.fields] == [
        ("Time", {}), ("submits", {"_frameName": "submits"}),
        ("starts", {"_frameName": "starts"})]
    assert frame.rows() == [[T0, 0.0, None], [T0 + 1, None, 1.0], [T0 + 2, 2.0, None]]


def test_job_document_is_transposed_into_a_row_per_field() -> None:
    panel = _panel("Job document")
    hit = {"_index": "hpc-jobs-2026.11", "_id": "tioga-4242",
           "_source": {"job_id": "4242", "ncores": 64, "state": "running",
                       "cancelled_before_start": False, "nodes": ["n1", "n2"]},
           "fields": {"t_submit": ["2026-11-18T11:06:40.000Z"]}}
    frames = frames_of(panel["targets"][0], {"hits": {"hits": [hit]}})
    (frame,) = apply(panel["transformations"], frames)
    assert frame.ref_id == "transpose-A"
    assert [(f.name, f.type, f.labels) for f in frame.fields] == [
        ("Field", FieldType.STRING, {}),
        ("Value", FieldType.STRING, {"t_submit": str(T0)})]
    assert _shown(frame) == ["Field", str(T0)]
    assert frame.rows() == [
        ["_id", "tioga-4242"], ["_index", "hpc-jobs-2026.11"], ["_type", ""],
        ["cancelled_before_start", "false"], ["highlight", ""], ["job_id", "4242"],
        ["ncores", "64"], ["nodes", '["n1","n2"]'], ["sort", ""], ["state", "running"]]


def test_transpose_of_numbers_numbers_the_rows() -> None:
    frame = Frame("A", [Field("a", FieldType.NUMBER, [1.0, 2.5]),
                        Field("b", FieldType.NUMBER, [3.0, None])])
    (out,) = apply([{"id": "transpose", "options": {}}], [frame])
    assert [(f.name, f.type, f.labels) for f in out.fields] == [
        ("Field", FieldType.STRING, {}), ("Value", FieldType.NUMBER, {"row": "1"}),
        ("Value", FieldType.NUMBER, {"row": "2"})]
    assert out.rows() == [["a", 1.0, 2.5], ["b", 3.0, None]]
    assert _shown(out) == ["Field", "1", "2"]


def test_sort_descending_puts_empty_strings_first_and_limit_defaults_to_ten() -> None:
    frame = Frame("A", [Field("user", FieldType.STRING, ["bob", "", "Alice", "carol"]),
                        Field("n", FieldType.NUMBER, [1.0, 2.0, None, 4.0])])
    (desc,) = apply([{"id": "sortBy", "options": {"sort": [{"field": "user",
                                                             "desc": True}]}}], [frame])
    assert desc.fields[0].values == ["", "carol", "bob", "Alice"]
    (by_n,) = apply([{"id": "sortBy", "options": {"sort": [{"field": "n"}]}}], [frame])
    assert by_n.fields[1].values == [None, 1.0, 2.0, 4.0]  # null sorts as 0
    long = Frame("A", [Field("n", FieldType.NUMBER, [float(i) for i in range(15)])])
    (limited,) = apply([{"id": "limit", "options": {}}], [long])
    assert limited.length == 10


def test_organize_exclude_drops_fields_and_empty_frames() -> None:
    frames = [Frame("A", [Field("user", FieldType.STRING, ["a"]),
                          Field("Count", FieldType.NUMBER, [1.0])]),
              Frame("B", [Field("Count", FieldType.NUMBER, [2.0])])]
    out = apply([{"id": "organize", "options": {"excludeByName": {"Count": True,
                                                                  "user": False}}}], frames)
    assert [(f.ref_id, [x.name for x in f.fields]) for f in out] == [("A", ["user"])]


def test_an_unknown_transformation_names_itself_and_disabled_ones_are_skipped() -> None:
    frame = Frame("A", [Field("n", FieldType.NUMBER, [1.0])])
    with pytest.raises(TransformError, match="'calculateField'"):
        apply([{"id": "calculateField", "options": {}}], [frame])
    assert apply([{"id": "calculateField", "disabled": True}], [frame]) == [frame]
    with pytest.raises(TransformError, match="auto"):
        apply([{"id": "organize", "options": {"orderByMode": "auto"}}], [frame])


# --------------------------------------------------------------------------- every panel


def _answer(aggs: dict[str, Any]) -> dict[str, Any]:
    """An answer to the aggregations ``aggs`` of a request: two buckets per level, every
    metric with a value."""
    out: dict[str, Any] = {}
    for agg_id, node in aggs.items():
        kind = next(k for k in node if k != "aggs")
        inner = node.get("aggs") or {}
        if kind == "filters":
            out[agg_id] = {"buckets": {name: {"doc_count": 1, **_answer(inner)}
                                       for name in node[kind]["filters"]}}
        elif kind in ("terms", "date_histogram", "histogram"):
            keys: list[Any] = {"terms": ["x", "y"], "histogram": [0.0, 10.0],
                               "date_histogram": [T0, T0 + 60_000]}[kind]
            out[agg_id] = {"buckets": [{"key": k, "doc_count": 2, **_answer(inner)}
                                       for k in keys]}
        elif kind == "percentiles":
            out[agg_id] = {"values": {str(float(p)): 1.0 for p in node[kind]["percents"]}}
        else:
            out[agg_id] = {"value": 2.0}
    return out


def test_every_shipped_panel_runs_queries_expressions_and_transformations() -> None:
    hit = {"_index": "i", "_id": "1", "_source": {"cluster": "tioga", "event": "submit"},
           "fields": {}}
    drawn = 0
    for board in BOARDS:
        values = variable_values(board)
        for panel in panels_of(board):
            targets = [substitute(t, values) for t in panel.get("targets") or []]
            if not any((t.get("datasource") or {}).get("type") == "elasticsearch"
                       for t in targets):
                continue
            by_ref: dict[str, list[Frame]] = {}
            for t in targets:
                if t.get("type") == "math":
                    by_ref[t["refId"]] = evaluate(t, by_ref)
                    continue
                _, body = build_search(t, index="i", time_field=t["timeField"],
                                       time_range=TimeRange(T0, T0 + 120_000),
                                       interval_ms=60_000)
                response = ({"aggregations": _answer(body["aggs"])} if body["size"] == 0
                            else {"hits": {"hits": [{**hit, "fields": {
                                t["timeField"]: ["2026-11-18T11:06:40Z"]}}]}})
                by_ref[t["refId"]] = frames_of(t, response)
            shown = [f for t in targets if not t.get("hide") for f in by_ref[t["refId"]]]
            frames = apply(panel.get("transformations") or [], shown)
            assert frames and all(f.length for f in frames), panel["title"]
            hidden = {t["refId"] for t in targets if t.get("hide")}
            assert not {f.ref_id for f in frames} & hidden, panel["title"]
            drawn += 1
    assert drawn >= 35


def test_names_are_matched_as_the_panel_shows_them() -> None:
    # fieldState.ts: a "Value" field without labels is shown by its frame's name; frame
    # names are prefixed where frames' names differ
    first = Frame("A", [Field("Time", FieldType.TIME, [T0]),
                        Field("Value", FieldType.NUMBER, [1.0])], name="submits")
    second = Frame("B", [Field("Time", FieldType.TIME, [T0]),
                         Field("rate", FieldType.NUMBER, [2.0], {"queue": "pbatch"})],
                   name="starts")
    assert _shown(first) == ["Time", "submits"]
    assert _shown(second, [first, second]) == ["Time", "starts rate pbatch"]
    out = apply([{"id": "organize", "options": {"renameByName": {"submits": "jobs"}}}],
                [first])
    assert _shown(out[0]) == ["Time", "jobs"]


def test_transposed_numbers_are_written_as_javascript_writes_them() -> None:
    frame = Frame("A", [Field("name", FieldType.STRING, ["x"]),
                        Field("half", FieldType.NUMBER, [2.5]),
                        Field("huge", FieldType.NUMBER, [1e21]),
                        Field("tiny", FieldType.NUMBER, [1.5e-7]),
                        Field("whole", FieldType.NUMBER, [64.0]),
                        Field("flag", FieldType.OTHER, [True])])
    (out,) = apply([{"id": "transpose", "options": {}}], [frame])
    assert out.rows() == [["half", "2.5"], ["huge", "1e+21"], ["tiny", "1.5e-7"],
                          ["whole", "64"], ["flag", "true"]]
    assert _shown(out) == ["Field", "x"]
