"""The preview's panels (pipeline.dashboards.preview.draw): each supported type drawn from
hand-made frames holds exactly the frames' values in its artists; units, thresholds and
reductions follow Grafana's; what cannot be drawn is a placeholder naming it; every image
carries the watermark and the title."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from matplotlib import colors as mcolors
from matplotlib.axes import Axes
from matplotlib.image import imread
from matplotlib.lines import Line2D
from matplotlib.text import Text

from pipeline.dashboards import render
from pipeline.dashboards.check import panels_of
from pipeline.dashboards.preview.canvas import panel_size_px
from pipeline.dashboards.preview.draw import WATERMARK, Drawing, draw_panel
from pipeline.dashboards.preview.fieldconfig import color_of
from pipeline.dashboards.preview.frames import Field, FieldType, Frame
from pipeline.dashboards.preview.units import format_value

T0 = 1_700_000_000_000
STEP = 600_000
TIMES = [T0 + i * STEP for i in range(5)]
#: the light theme's colours of Grafana's named colours
GREEN, ORANGE, RED = "#56a64b", "#ff780a", "#e02f44"


def panel(type_: str, *, w: int = 12, h: int = 8, defaults: dict[str, Any] | None = None,
          overrides: list[dict[str, Any]] | None = None, **options: Any) -> dict[str, Any]:
    return {"type": type_, "title": f"A {type_} panel", "gridPos": {"x": 0, "y": 0, "w": w,
                                                                      "h": h},
            "fieldConfig": {"defaults": defaults or {}, "overrides": overrides or []},
            "options": options}


def series(ref: str, values: list[float | None], labels: dict[str, str] | None = None,
           name: str = "") -> Frame:
    config = {"displayNameFromDS": name} if name else {}
    return Frame(ref, [Field("Time", FieldType.TIME, list(TIMES)),
                       Field("Value", FieldType.NUMBER, values, labels or {}, config)])


def table(**columns: list[Any]) -> Frame:
    fields = []
    for name, values in columns.items():
        kind = FieldType.STRING if all(isinstance(v, str) or v is None for v in values) \
            else FieldType.NUMBER
        fields.append(Field(name, kind, values))
    return Frame("A", fields)


def points(values: list[float | None]) -> list[tuple[int, float]]:
    return [(t, float(v)) for t, v in zip(TIMES, values, strict=True) if v is not None]


def text_artist(drawing: Drawing, text: str) -> Text:
    found = [t for t in drawing.figure.findobj(Text) if t.get_text() == text]
    assert found, f"{text!r} not among {drawing.texts()}"
    return found[0]


def hex_of(color: Any) -> str:
    return mcolors.to_hex(color)


# -- time series ------------------------------------------------------------------------

def test_timeseries_lines_hold_each_series_values_named_by_the_panels_display_name() -> None:
    p = panel("timeseries", defaults={"unit": "short", "displayName": "${__field.labels.queue}"})
    a, b = [1, 2, None, 4, 5], [10, 20, 30, 40, 50]
    drawing = draw_panel(p, [series("A", a, {"queue": "pbatch"}),
                             series("A", b, {"queue": "pdebug"})])
    assert drawing.kind == "timeseries" and drawing.placeholder == ""
    assert drawing.empty_reason is None
    assert drawing.data == {"pbatch": points(a), "pdebug": points(b)}
    assert {"pbatch", "pdebug"} <= set(drawing.texts())    # the legend


def test_a_point_between_nulls_is_a_dot_and_the_axis_spans_the_time_range() -> None:
    p = panel("timeseries")
    span = (TIMES[0] - STEP, TIMES[-1] + STEP)
    drawing = draw_panel(p, [series("A", [None, 3, None, 4, 5])], time_range=span)
    ax = drawing.figure.axes[0]
    dots = [line for line in ax.get_lines() if line.get_marker() == "o"]
    assert [tuple(xy) for d in dots for xy in d.get_xydata()] == [(TIMES[1] / 86_400_000, 3.0)]
    assert ax.get_xlim() == pytest.approx((span[0] / 86_400_000, span[1] / 86_400_000))
    assert drawing.data == {"Value": points([None, 3, None, 4, 5])}
    # a bucket starting before the range (an interval wider than it) widens the axis
    late = (TIMES[2], TIMES[-1])
    ax = draw_panel(p, [series("A", [None, 3, None, 4, 5])], time_range=late).figure.axes[0]
    assert ax.get_xlim() == pytest.approx((TIMES[1] / 86_400_000, TIMES[-1] / 86_400_000))


def test_stacked_series_are_drawn_on_each_other_and_read_back_unstacked() -> None:
    p = panel("timeseries", defaults={"custom": {"stacking": {"mode": "normal", "group": "A"},
                                                 "fillOpacity": 40}})
    a, b = [1, 2, None, 4, 5], [10, 20, 30, 40, 50]
    drawing = draw_panel(p, [series("A", a, name="first"), series("B", b, name="second")])
    assert drawing.data == {"first": points(a), "second": points(b)}
    tops = {line.get_label(): [y for _, y in line.get_xydata()]
            for line in drawing.figure.findobj(Line2D) if line.get_label() == "second"}
    assert tops["second"] == [11, 22, 30, 44, 55]        # a null counts as 0 below


def test_bars_draw_style_holds_the_values_in_the_bars() -> None:
    p = panel("timeseries", defaults={"custom": {"drawStyle": "bars",
                                                 "stacking": {"mode": "normal"}}})
    a, b = [3, 0, 2, None, 1], [1, 1, 1, 1, 1]
    drawing = draw_panel(p, [series("A", a, name="submits"), series("B", b, name="ends")])
    assert drawing.data == {"submits": points(a), "ends": points(b)}


def test_a_series_name_follows_grafanas_rules_without_a_display_name() -> None:
    drawing = draw_panel(panel("timeseries"), [series("A", [1, 2, 3, 4, 5], {"queue": "q1"}),
                                               series("A", [5, 4, 3, 2, 1], {"queue": "q2"})])
    assert set(drawing.data) == {"q1", "q2"}   # one label name in all frames: its value
    two = [Frame("A", [Field("Time", FieldType.TIME, TIMES),
                       Field("Value", FieldType.NUMBER, [1, 2, 3, 4, 5],
                             {"queue": "q1", "user": "u"})])]
    assert set(draw_panel(panel("timeseries"), two).data) == {'{queue="q1", user="u"}'}


def test_overrides_by_frame_ref_id_rename_series() -> None:
    overrides = [{"matcher": {"id": "byFrameRefID", "options": ref},
                  "properties": [{"id": "displayName",
                                  "value": f"{word} ${{__field.labels.queue}}"}]}
                 for ref, word in (("Am", "cores"), ("Bm", "GPUs"))]
    drawing = draw_panel(panel("timeseries", overrides=overrides),
                         [series("Am", [1, 2, 3, 4, 5], {"queue": "pbatch"}),
                          series("Bm", [0, 1, 0, 1, 0], {"queue": "pbatch"})])
    assert set(drawing.data) == {"cores pbatch", "GPUs pbatch"}


def axes_with_lines(drawing: Drawing) -> Axes:
    return next(ax for ax in drawing.figure.axes if ax.get_lines())


@pytest.mark.parametrize(("unit", "ticks", "shown"), [
    ("percent", [0, 10, 20], ["0%", "10%", "20%"]),
    ("percentunit", [0, 0.25, 0.5], ["0%", "25%", "50%"]),
    ("s", [0, 30, 60], ["0 s", "30 s", "1 min"]),
    ("bytes", [0, 1024, 2048], ["0 B", "1 KiB", "2 KiB"]),
    ("short", [0, 5000, 10000], ["0", "5 K", "10 K"]),
    ("widgets", [0, 5, 10], ["0 widgets", "5 widgets", "10 widgets"]),
])
def test_the_y_axis_is_formatted_in_the_unit(unit: str, ticks: list[float],
                                             shown: list[str]) -> None:
    drawing = draw_panel(panel("timeseries", defaults={"unit": unit}),
                         [series("A", [1, 2, 3, 4, 5])])
    formatter = axes_with_lines(drawing).yaxis.get_major_formatter()
    assert formatter.format_ticks(ticks) == shown


def test_thresholds_are_drawn_when_the_style_is_not_off() -> None:
    defaults = {"unit": "percent", "min": 0, "custom": {"thresholdsStyle": {"mode": "line"}},
                "thresholds": {"mode": "absolute", "steps": [{"color": "green", "value": None},
                                                             {"color": "red", "value": 20}]}}
    drawing = draw_panel(panel("timeseries", defaults=defaults),
                         [series("C", [2, 5, 30, 8, 1], name="failed %")])
    ax = axes_with_lines(drawing)
    lines = [ln for ln in ax.get_lines() if hex_of(ln.get_color()) == RED]
    assert [list(ln.get_ydata()) for ln in lines] == [[20, 20]]
    assert ax.get_ylim()[0] == 0                                  # min: 0
    off = draw_panel(panel("timeseries", defaults={**defaults, "custom": {}}),
                     [series("C", [2, 5, 30, 8, 1], name="failed %")])
    assert not [ln for ln in axes_with_lines(off).get_lines() if hex_of(ln.get_color()) == RED]


def test_a_timeseries_without_a_time_field_is_a_placeholder_saying_so() -> None:
    drawing = draw_panel(panel("timeseries"), [table(bank=["a"], n=[1])])
    assert drawing.kind == "placeholder"
    assert "no time field" in drawing.placeholder


# -- bar chart --------------------------------------------------------------------------

def test_barchart_groups_bars_per_number_field_over_the_string_field() -> None:
    frame = table(bank=["alpha", "beta", "gamma"], cores=[120, 40, 7], gpus=[8, 0, None])
    drawing = draw_panel(panel("barchart", orientation="horizontal", xField="bank"), [frame])
    assert drawing.data == {"alpha": {"cores": 120, "gpus": 8},
                            "beta": {"cores": 40, "gpus": 0},
                            "gamma": {"cores": 7, "gpus": None}}
    bars = next(ax for ax in drawing.figure.axes if ax.patches)
    assert bars.yaxis_inverted()                       # the first category on top
    assert [t.get_text() for t in bars.get_yticklabels()] == ["alpha", "beta", "gamma"]
    vertical = draw_panel(panel("barchart", orientation="vertical"), [frame])
    assert vertical.data == drawing.data


def test_barchart_x_field_may_be_a_number_field() -> None:
    frame = table(timelimit_used_pct=[0, 10, 20], Count=[5, 7, 1])
    drawing = draw_panel(panel("barchart", xField="timelimit_used_pct"), [frame])
    assert drawing.data == {"0": {"Count": 5}, "10": {"Count": 7}, "20": {"Count": 1}}


def test_barchart_with_a_missing_x_field_is_a_placeholder_naming_it() -> None:
    drawing = draw_panel(panel("barchart", xField="bank"), [table(user=["u"], n=[1])])
    assert drawing.kind == "placeholder"
    assert "'bank'" in drawing.placeholder and "xField" in drawing.placeholder


# -- stat and bar gauge -----------------------------------------------------------------

STEPS = {"mode": "absolute", "steps": [{"color": "green", "value": None},
                                       {"color": "orange", "value": 50},
                                       {"color": "red", "value": 80}]}


@pytest.mark.parametrize(("last", "colour"), [(10, GREEN), (50, ORANGE), (90, RED)])
def test_a_stat_value_is_coloured_by_the_thresholds(last: float, colour: str) -> None:
    p = panel("stat", defaults={"thresholds": STEPS, "unit": "short"},
              reduceOptions={"calcs": ["lastNotNull"], "values": False})
    drawing = draw_panel(p, [series("A", [1, 2, 3, last, None], name="jobs")])
    assert drawing.data == {"jobs": last}
    assert hex_of(text_artist(drawing, str(last)).get_color()) == colour


def test_a_stat_in_background_colour_mode_fills_its_box() -> None:
    p = panel("stat", defaults={"thresholds": STEPS}, colorMode="background",
              reduceOptions={"calcs": ["lastNotNull"]})
    drawing = draw_panel(p, [series("A", [1, 2, 3, 90, None], name="jobs")])
    boxes = [patch for ax in drawing.figure.axes for patch in ax.patches
             if hex_of(patch.get_facecolor()) == RED]
    assert boxes
    assert hex_of(text_artist(drawing, "90").get_color()) == "#ffffff"


def test_percentage_thresholds_count_from_the_fields_min_and_max() -> None:
    th = {"mode": "percentage", "steps": [{"color": "green", "value": None},
                                          {"color": "orange", "value": 10}]}
    p = panel("stat", defaults={"thresholds": th, "min": 0, "max": 200},
              reduceOptions={"calcs": ["last"]})
    drawing = draw_panel(p, [series("A", [1, 2, 3, 4, 30], name="x")])
    assert hex_of(text_artist(drawing, "30").get_color()) == ORANGE    # 15 %


def test_without_thresholds_a_stat_uses_grafanas_default_steps() -> None:
    p = panel("stat", reduceOptions={"calcs": ["lastNotNull"]})
    drawing = draw_panel(p, [series("A", [1, 2, 3, 4, 104], name="jobs")])
    assert hex_of(text_artist(drawing, "104").get_color()) == RED     # red from 80


@pytest.mark.parametrize(("calc", "value"), [
    ("lastNotNull", 4), ("last", None), ("firstNotNull", 2), ("first", None), ("max", 9),
    ("min", 2), ("mean", 5), ("sum", 15), ("count", 3), ("range", 7), ("diff", 2),
])
def test_stat_reductions_ignore_nulls(calc: str, value: float | None) -> None:
    p = panel("stat", reduceOptions={"calcs": [calc]})
    drawing = draw_panel(p, [series("A", [None, 2, 9, 4, None], name="x")])
    assert drawing.data == {"x": value}


def test_a_stat_without_matching_fields_says_no_data_and_why() -> None:
    p = panel("stat", reduceOptions={"calcs": ["lastNotNull"], "fields": "/^wait_s$/"})
    drawing = draw_panel(p, [series("A", [1, 2, 3, 4, 5], name="run_s")])
    assert drawing.kind == "empty"
    assert drawing.empty_reason == "no field of the data matches reduceOptions.fields " \
        "'/^wait_s$/'"


def test_an_unknown_reducer_is_a_placeholder_naming_it() -> None:
    p = panel("stat", reduceOptions={"calcs": ["p95"]})
    drawing = draw_panel(p, [series("A", [1, 2, 3, 4, 5], name="x")])
    assert drawing.kind == "placeholder" and "'p95'" in drawing.placeholder


def test_a_stat_shows_the_value_in_the_unit_with_its_name() -> None:
    frame = Frame("A", [Field("job_id", FieldType.STRING, ["7"]),
                        Field("wait", FieldType.NUMBER, [90], config={"displayName": "wait_s"}),
                        Field("run", FieldType.NUMBER, [7265], config={"displayName": "run_s"}),
                        Field("other", FieldType.NUMBER, [1], config={"displayName": "x"})])
    p = panel("stat", defaults={"unit": "s"}, textMode="value_and_name",
              reduceOptions={"calcs": ["lastNotNull"], "fields": "/^(wait_s|run_s)$/"})
    drawing = draw_panel(p, [frame])
    assert drawing.data == {"wait_s": 90, "run_s": 7265}
    assert {"wait_s", "1.50 min", "run_s", "2.02 hour"} <= set(drawing.texts())


def test_a_stat_of_all_values_names_each_by_its_rows_strings() -> None:
    frame = Frame("A", [Field("cluster", FieldType.STRING, ["lassen", "quartz"]),
                        Field("Max @timestamp", FieldType.NUMBER, [T0 - 300_000,
                                                                   T0 - 7_200_000])])
    p = panel("stat", defaults={"unit": "dateTimeFromNow"},
              reduceOptions={"calcs": ["lastNotNull"], "values": True})
    drawing = draw_panel(p, [frame], now_ms=T0)
    assert drawing.data == {"lassen": T0 - 300_000, "quartz": T0 - 7_200_000}
    assert {"5 minutes ago", "2 hours ago"} <= set(drawing.texts())


def test_bargauge_bars_end_at_the_reduced_values_coloured_by_thresholds() -> None:
    th = {"mode": "absolute", "steps": [{"color": "green", "value": None},
                                        {"color": "orange", "value": 3600},
                                        {"color": "red", "value": 14400}]}
    p = panel("bargauge", defaults={"unit": "s", "thresholds": th,
                                    "displayName": "${__field.labels.queue}"},
              orientation="horizontal", reduceOptions={"calcs": ["lastNotNull"]})
    frames = [series("A", [60, 100, 120, None, None], {"queue": "pdebug"}),
              series("A", [1000, 5000, None, 7200, None], {"queue": "pbatch"}),
              series("A", [20000, 20000, 20000, 20000, 20000], {"queue": "pgpu"})]
    drawing = draw_panel(p, frames)
    assert drawing.data == {"pdebug": 120, "pbatch": 7200, "pgpu": 20000}
    colours = {hex_of(text_artist(drawing, text).get_color())
               for text in ("2 min", "2 hour", "5.56 hour")}
    assert colours == {GREEN, ORANGE, RED}


# -- table and logs ---------------------------------------------------------------------

def test_table_cells_are_the_rows_with_display_names_and_units() -> None:
    frame = Frame("A", [Field("user", FieldType.STRING, ["ann", "bob"]),
                        Field("Sum cores", FieldType.NUMBER, [1500, 42]),
                        Field("t_submit", FieldType.NUMBER, [0, 86_400_000])])
    overrides = [{"matcher": {"id": "byName", "options": "Sum cores"},
                  "properties": [{"id": "displayName", "value": "pending cores"}]},
                 {"matcher": {"id": "byName", "options": "t_submit"},
                  "properties": [{"id": "unit", "value": "dateTimeAsIso"}]}]
    drawing = draw_panel(panel("table", defaults={"unit": "short"}, overrides=overrides),
                         [frame])
    assert drawing.data == {"header": ["user", "pending cores", "t_submit"],
                            "rows": [["ann", "1.50 K", "1970-01-01 00:00:00"],
                                     ["bob", "42", "1970-01-02 00:00:00"]],
                            "more": 0}


def test_a_long_table_is_cut_and_says_how_many_rows_more() -> None:
    frame = table(n=list(range(100)))
    drawing = draw_panel(panel("table", h=6), [frame])
    shown = drawing.data["rows"]
    assert shown == [[str(i)] for i in range(len(shown))]
    assert 0 < len(shown) < 100 and drawing.data["more"] == 100 - len(shown)
    assert f"{100 - len(shown)} more rows" in drawing.texts()


def test_logs_show_the_newest_lines_time_and_first_string_field() -> None:
    times = [T0 + i * 60_000 + 5 for i in range(20)]      # 2023-11-14 22:13:20.005, ...
    frame = Frame("A", [Field("@timestamp", FieldType.TIME, times[::-1]),
                        Field("event", FieldType.STRING, [f"job.event {i}"
                                                          for i in range(20)][::-1]),
                        Field("_id", FieldType.STRING, [f"id{i}" for i in range(20)])])
    expected = [f"2023-11-14 {22 + (13 + i) // 60:02d}:{(13 + i) % 60:02d}:20.005  "
                f"job.event {i}" for i in range(20)]
    drawing = draw_panel(panel("logs", h=4, sortOrder="Ascending"), [frame])
    lines = drawing.data["lines"]
    assert 0 < len(lines) < 20
    assert lines == expected[-len(lines):]          # the newest, oldest first
    assert f"the newest {len(lines)} of 20 lines" in drawing.texts()
    newest_first = draw_panel(panel("logs", h=4, sortOrder="Descending"), [frame])
    assert newest_first.data["lines"] == expected[::-1][:len(lines)]


# -- placeholders, empty panels, the image ---------------------------------------------

def test_an_unsupported_panel_type_is_a_placeholder_naming_it() -> None:
    drawing = draw_panel(panel("heatmap"), [series("A", [1, 2, 3, 4, 5])])
    assert drawing.kind == "placeholder"
    assert drawing.placeholder == "panel type 'heatmap' is not drawn by the preview"
    assert "panel type 'heatmap' is not drawn by the preview" in drawing.texts()


def test_what_the_caller_could_not_do_is_a_placeholder_saying_it() -> None:
    reason = "transformation 'partitionByValues' is not applied by the preview"
    drawing = draw_panel(panel("timeseries"), [series("A", [1, 2, 3, 4, 5])],
                         placeholder=reason)
    assert drawing.placeholder == reason and drawing.data == {}
    assert "Not drawn by the preview" in drawing.texts()


def test_value_mappings_are_a_placeholder() -> None:
    p = panel("stat", defaults={"mappings": [{"type": "value", "options": {}}]})
    drawing = draw_panel(p, [series("A", [1, 2, 3, 4, 5])])
    assert drawing.kind == "placeholder" and "value mappings" in drawing.placeholder


def test_no_rows_is_a_no_data_image_with_the_reason() -> None:
    p = panel("stat", defaults={"noValue": "No job: pick one"})
    drawing = draw_panel(p, [Frame("A", [Field("x", FieldType.NUMBER, [])])],
                         empty_reason="no documents")
    assert drawing.kind == "empty" and drawing.empty_reason == "no documents"
    assert {"No data", "no documents", "Grafana shows: No job: pick one"} <= set(drawing.texts())
    assert draw_panel(p, []).empty_reason == ""


def test_a_row_is_not_drawn() -> None:
    with pytest.raises(ValueError, match="row"):
        draw_panel({"type": "row", "title": "Queues"}, [])


def drawings() -> list[Drawing]:
    return [
        draw_panel(panel("timeseries"), [series("A", [1, 2, 3, 4, 5])]),
        draw_panel(panel("barchart"), [table(bank=["a", "b"], n=[1, 2])]),
        draw_panel(panel("bargauge"), [series("A", [1, 2, 3, 4, 5])]),
        draw_panel(panel("stat"), [series("A", [1, 2, 3, 4, 5])]),
        draw_panel(panel("table"), [table(bank=["a", "b"], n=[1, 2])]),
        draw_panel(panel("logs"), [Frame("A", [Field("t", FieldType.TIME, [T0]),
                                              Field("line", FieldType.STRING, ["hello"])])]),
        draw_panel(panel("piechart"), []),
        draw_panel(panel("stat"), []),
    ]


def test_every_image_carries_the_watermark_and_the_title() -> None:
    for drawing in drawings():
        assert WATERMARK in drawing.texts(), drawing.kind
        assert drawing.title in drawing.texts(), drawing.kind
    assert WATERMARK == "Preview by jobstream \N{EM DASH} not Grafana's rendering"


def test_the_png_is_written_at_the_panels_grid_size(tmp_path: Path) -> None:
    p = panel("timeseries", w=12, h=8)
    path = draw_panel(p, [series("A", [1, 2, 3, 4, 5])]).save(tmp_path / "sub" / "a.png")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert imread(path).shape[:2] == (296, 600)       # 8 x 30 px + 7 x 8 px; 12 of 24 columns
    assert panel_size_px({"gridPos": {"w": 24, "h": 4}}) == (1200, 144)


def test_every_shipped_panel_draws_as_no_data_without_frames() -> None:
    boards = render.dashboards() + render.metrics_dashboards()
    seen = set()
    for board in boards:
        for p in panels_of(board):
            if p["type"] == "row":
                continue
            drawing = draw_panel(p, [], empty_reason="no documents")
            assert drawing.kind == "empty", p["title"]
            assert drawing.title == p["title"]
            assert [t for t in drawing.texts() if t == p["title"] or (
                t.endswith("\N{HORIZONTAL ELLIPSIS}") and p["title"].startswith(t[:-1]))]
            assert {"No data", "no documents", WATERMARK} <= set(drawing.texts())
            seen.add(p["type"])
    assert seen == {"timeseries", "barchart", "bargauge", "stat", "table", "logs"}


# -- units ------------------------------------------------------------------------------

@pytest.mark.parametrize(("value", "unit", "decimals", "text"), [
    (12.345, "percent", None, "12.3%"),
    (50, "percent", 1, "50.0%"),
    (0.256, "percentunit", None, "25.6%"),
    (90, "s", None, "1.50 min"),
    (0.25, "s", None, "250 ms"),
    (7265, "s", None, "2.02 hour"),
    (3725, "dtdurations", None, "1 hour"),
    (3725, "dtdurations", 1, "1 hour, 2 minutes"),
    (3725, "dthms", None, "01:02:05"),
    (1500, "short", None, "1.50 K"),
    (2_500_000, "short", None, "2.50 Mil"),
    (42, "short", None, "42"),
    (3.14159, "none", None, "3.14"),
    (3.14159, None, 3, "3.142"),
    (1536, "bytes", None, "1.50 KiB"),
    (0, "bytes", None, "0 B"),
    (36, "h", None, "1.50 day"),
    (1500, "ms", None, "1.50 s"),
    (1500, "reqps", None, "1.50K reqps"),
    (5, "widgets", None, "5 widgets"),
    (12, "suffix: node-h", None, "12  node-h"),
    (3, "prefix:$", None, "$3"),
    (0, "dateTimeAsIso", None, "1970-01-01 00:00:00"),
    (None, "s", None, ""),
])
def test_values_are_formatted_as_grafanas_units(value: float | None, unit: str | None,
                                                decimals: int | None, text: str) -> None:
    assert format_value(value, unit, decimals) == text


def test_date_time_from_now_counts_from_now() -> None:
    assert format_value(T0 - 300_000, "dateTimeFromNow", now_ms=T0) == "5 minutes ago"
    assert format_value(T0 + 7_200_000, "dateTimeFromNow", now_ms=T0) == "in 2 hours"
    assert format_value(T0 - 10_000, "dateTimeFromNow", now_ms=T0) == "a few seconds ago"


def test_grafana_colour_names_are_the_light_themes() -> None:
    assert color_of("green") == GREEN and color_of("dark-red") == "#ad0317"
    assert color_of("#123456") == "#123456" and color_of("rgb(255, 0, 0)") == "#ff0000"
    assert color_of("") == "#808080" and color_of("teal") == "#008080"
