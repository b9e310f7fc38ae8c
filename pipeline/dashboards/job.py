"""The per-job drill-down: one job's document and the timeline of its events.

Opened from the overview's tables with ``var-cluster`` and ``var-job_id`` and the time
range of the overview; the document is found by its submit time, the events by theirs, so
the range must cover the job's life (the default is the last 7 days).
"""

from __future__ import annotations

from typing import Any

from pipeline.dashboards.builder import (
    Grid,
    dashboard,
    es_target,
    metric,
    panel,
    query_var,
    terms,
    textbox_var,
)
from pipeline.dashboards.datasources import EVENTS, JOBS_BY_SUBMIT
from pipeline.dashboards.overview import ALL, JOB_UID
from pipeline.dashboards.overview import UID as OVERVIEW_UID

__all__ = ["UID", "build"]

UID = JOB_UID

#: Flux users know a job by its f58 id (ƒ...) as often as by the decimal one.
JOB = "(job_id:$job_id OR job_id_f58:$job_id) AND (cluster:$cluster)"

_DURATIONS = ("wait_s", "eligible_wait_s", "run_s", "prolog_s", "epilog_s")


def build() -> dict[str, Any]:
    grid = Grid()
    grid.add(
        panel("stat", "Durations", [
            # One job, the latest submitted of those matching, chosen by terms ordered on
            # t_submit: raw data would not be (Grafana sorts documents on _doc before
            # t_submit, see grafana_query._sort), so with job id * or an id reused across
            # clusters it showed whichever document was indexed last.
            es_target(JOBS_BY_SUBMIT, "A", query=JOB,
                      metrics=[metric("max", "t_submit"),
                               *(metric("max", name) for name in _DURATIONS)],
                      buckets=[terms("cluster", size=1, order_by=0),
                               terms("job_id", size=1, order_by=0)]),
        ], w=24, h=4, unit="s",
            transformations=[{"id": "organize", "options": {
                "renameByName": {f"Max {name}": name for name in _DURATIONS}}}],
            options={"reduceOptions": {"calcs": ["lastNotNull"], "values": False,
                                       "fields": "/^(" + "|".join(_DURATIONS) + ")$/"},
                     "colorMode": "none", "graphMode": "none", "textMode": "value_and_name"},
            description="Wait since submit and since eligible, run, prolog and epilog time "
                        "(with several jobs matching: of the latest submitted)."),
    )
    grid.add(
        panel("logs", "Event timeline", [
            es_target(EVENTS, "A", query=JOB, metrics=[metric("logs", limit="500")]),
        ], w=12, h=14,
            options={"showTime": True, "sortOrder": "Ascending", "wrapLogMessage": True,
                     "enableLogDetails": True, "dedupStrategy": "none"},
            description="Every canonical event of the job, oldest first; open one for its "
                        "source, context and facts."),
        panel("table", "Job document", [
            es_target(JOBS_BY_SUBMIT, "A", query=JOB, metrics=[metric("raw_data", size="5")]),
        ], w=12, h=14,
            transformations=[{"id": "transpose", "options": {}}],
            description="The job's document in hpc-jobs, one row per field."),
    )
    grid.add(
        panel("table", "Events", [
            es_target(EVENTS, "A", query=JOB, metrics=[metric("raw_data", size="500")]),
        ], w=24, h=10,
            transformations=[
                {"id": "organize", "options": {
                    "indexByName": {"@timestamp": 0, "event": 1, "source": 2, "seq": 3,
                                    "context": 4, "facts": 5, "event_id": 6},
                    "includeByName": {name: True for name in (
                        "@timestamp", "event", "source", "seq", "context", "facts",
                        "event_id")}}},
                {"id": "sortBy", "options": {"sort": [{"field": "@timestamp",
                                                        "desc": False}]}}]),
    )
    variables = [
        query_var("cluster", "Cluster", JOBS_BY_SUBMIT, "cluster", all_value=ALL),
        textbox_var("job_id", "Job id", "*",
                    description="The job id as the scheduler prints it (Flux: decimal or "
                                "f58); * lists every job in the range."),
    ]
    return dashboard(
        UID, "jobstream: job details",
        description="One job: its document (state, result, times, sizes) and every event "
                    "the pipeline recorded for it.",
        panels=grid.panels, variables=variables, time_from="now-7d", refresh="",
        links=[{"title": "Operations overview", "type": "link", "icon": "dashboard",
                "url": f"/d/{OVERVIEW_UID}/jobstream-overview", "keepTime": True,
                "includeVars": True, "tooltip": ""}],
    )
