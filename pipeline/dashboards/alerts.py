"""Grafana alert rules for operators' conditions, provisioned from
``grafana/provisioning/alerting/jobstream.yaml``.

The pipeline's own health is Prometheus's to watch (``pipeline/deploy/prometheus``); what
an operator of the clusters is paged for reads the same documents as the dashboards, so
these are Grafana rules on the provisioned Elasticsearch data sources:

* jobs pending longer than :data:`PENDING_LONG_MIN` minutes, per cluster and
  ``pending_reason``, more than :data:`PENDING_LONG_JOBS` of them;
* drained or draining nodes of a cluster, more than :data:`NODES_DRAINED_MAX`, for
  :data:`NODES_DRAINED_FOR`;
* running jobs whose every GPU has idled :data:`GPU_IDLE_HELD_MIN` minutes or more
  (``usage_gpu_idle_since``), per cluster and user: more than :data:`GPU_IDLE_GPUS` GPUs.

Each rule is Grafana's three steps: ``A`` the Elasticsearch query (the same query model
as a panel target: ``dashboards check`` runs it like one), ``B`` a reduce of each series
to one number, ``C`` a threshold on it, the condition. Grafana's Elasticsearch alerting
wants a date histogram as the last bucket aggregation (time series, one per term); the
histograms here skip empty buckets (``min_doc_count`` 1), so a long look-back stays a
few buckets per series, and ``B`` sums them: the documents matched in all. No data (no
job or node matches) is OK, not an alert.

The YAML is written by hand like the data sources' (no YAML library at run time): every
scalar is a JSON string, number or boolean, which YAML reads as the same value.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pipeline.dashboards import overview
from pipeline.dashboards.builder import EXPR_DS, date_histogram, es_target, metric, terms
from pipeline.dashboards.check import panels_of
from pipeline.dashboards.datasources import JOBS_BY_SUBMIT, NODES, DataSource

__all__ = ["FOLDER", "GPU_IDLE_GPUS", "GPU_IDLE_HELD_MIN", "GROUP", "INTERVAL",
           "NODES_DRAINED_FOR", "NODES_DRAINED_MAX", "PENDING_LONG_JOBS", "PENDING_LONG_MIN",
           "AlertRule", "provisioning", "provisioning_yaml", "rules"]

#: A job pending this many minutes since its submission waits long (4 h: beyond a
#: normal busy day's queue, short of a reservation's or a held job's days)
PENDING_LONG_MIN = 240
#: More than this many long-pending jobs of one reason on one cluster is an alert (a few
#: held or dependent jobs are normal)
PENDING_LONG_JOBS = 10
#: More than this many nodes of one cluster drained or draining is an alert
NODES_DRAINED_MAX = 4
#: ... for this long: a drain for a reboot or a quick fix does not page
NODES_DRAINED_FOR = "15m"
#: A running job whose every GPU has been under 5 % busy (the node edge's line) this many
#: minutes holds them idle
GPU_IDLE_HELD_MIN = 60
#: More than this many GPUs held idle by one user on one cluster is an alert (any)
GPU_IDLE_GPUS = 0
#: How often Grafana evaluates the rules
INTERVAL = "1m"
#: The dashboards' folder (grafana/provisioning/dashboards/jobstream.yaml)
FOLDER = "HPC jobs (jobstream)"
GROUP = "jobstream operators"
#: How far back the job rules look on ``t_submit`` (the overview's "now" panels' 30 days):
#: a job submitted before is not seen
_JOBS_LOOKBACK_S = 30 * 86_400
#: The node rule looks back on ``since`` as far as the overview's nodes now (10 years)
_NODES_LOOKBACK_S = 10 * 365 * 86_400
#: Grafana's defaults for an alert query's interval and data points
_INTERVAL_MS = 1000
_MAX_DATA_POINTS = 43200
#: a mapping key YAML reads as the same string unquoted
_PLAIN_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


@dataclass(frozen=True)
class AlertRule:
    """One rule: its query (``A``), how its series reduce (``B``) and the threshold
    (``C``) above which it fires."""

    uid: str
    title: str
    summary: str
    description: str
    datasource: DataSource
    target: Mapping[str, Any]
    lookback_s: int
    reducer: str
    above: float
    for_: str
    #: the overview panel an alert links to (Grafana shows it beside the alert)
    panel: str


def rules() -> list[AlertRule]:
    long = f"now-{PENDING_LONG_MIN}m"
    idle = f"now-{GPU_IDLE_HELD_MIN}m"
    return [
        AlertRule(
            "jobstream-pending-long", f"Jobs pending over {PENDING_LONG_MIN} min, by reason",
            summary="{{ $values.B.Value }} jobs of {{ $labels.cluster }} pending over "
                    f"{PENDING_LONG_MIN} min for {{{{ $labels.pending_reason }}}}",
            description=f"More than {PENDING_LONG_JOBS} jobs of one cluster have been "
                        f"pending more than {PENDING_LONG_MIN} minutes since submission "
                        "for the same pending_reason (Slurm's state_reason; Flux held, "
                        "dependency, priority or resources; '-': none known).",
            datasource=JOBS_BY_SUBMIT,
            target=es_target(JOBS_BY_SUBMIT, "A", query=f"state:pending AND t_submit:<{long}",
                             metrics=[metric("count")],
                             buckets=[terms("cluster", size=50, order="asc", order_by="_key"),
                                      terms("pending_reason", size=50, order="asc",
                                            order_by="_key", missing="-"),
                                      date_histogram("t_submit", "1h", min_doc_count=1)]),
            lookback_s=_JOBS_LOOKBACK_S, reducer="sum", above=PENDING_LONG_JOBS, for_="5m",
            panel="Longest-waiting pending jobs"),
        AlertRule(
            "jobstream-nodes-drained", f"More than {NODES_DRAINED_MAX} nodes drained",
            summary="{{ $values.B.Value }} nodes of {{ $labels.cluster }} drained or draining",
            description=f"More than {NODES_DRAINED_MAX} nodes of one cluster have been "
                        f"drained or draining for {NODES_DRAINED_FOR} (the node documents' "
                        "state now; down nodes are not counted).",
            datasource=NODES,
            target=es_target(NODES, "A", query="state:(drained OR draining)",
                             metrics=[metric("count")],
                             buckets=[terms("cluster", size=50, order="asc", order_by="_key"),
                                      date_histogram("since", "1d", min_doc_count=1)]),
            lookback_s=_NODES_LOOKBACK_S, reducer="sum", above=NODES_DRAINED_MAX,
            for_=NODES_DRAINED_FOR, panel="Drained, draining and down nodes now"),
        AlertRule(
            "jobstream-gpus-idle", f"GPUs held idle for {GPU_IDLE_HELD_MIN} min",
            summary="{{ $labels.user }} holds {{ $values.B.Value }} GPUs of "
                    f"{{{{ $labels.cluster }}}} idle for {GPU_IDLE_HELD_MIN} min or more",
            description=f"Running jobs every GPU of which has been under 5 % busy for "
                        f"{GPU_IDLE_HELD_MIN} minutes or more (usage_gpu_idle_since, from "
                        "the node edge), the GPUs they hold summed per cluster and user "
                        "('-': no user name).",
            datasource=JOBS_BY_SUBMIT,
            target=es_target(JOBS_BY_SUBMIT, "A",
                             query=f"state:running AND usage_gpu_idle_since:<{idle}",
                             metrics=[metric("sum", "ngpus")],
                             buckets=[terms("cluster", size=50, order="asc", order_by="_key"),
                                      terms("user", size=50, order_by=0, missing="-"),
                                      date_histogram("t_submit", "1h", min_doc_count=1)]),
            lookback_s=_JOBS_LOOKBACK_S, reducer="sum", above=GPU_IDLE_GPUS, for_="5m",
            panel="GPU jobs idle for $gpu_idle_min minutes, by user"),
    ]


def _expression(ref: str, model: Mapping[str, Any]) -> dict[str, Any]:
    return {"refId": ref, "relativeTimeRange": {"from": 0, "to": 0},
            "datasourceUid": EXPR_DS["uid"],
            "model": {"refId": ref, "datasource": dict(EXPR_DS), **model}}


def _rule(rule: AlertRule, panel_ids: Mapping[str, int]) -> dict[str, Any]:
    model = {**rule.target, "intervalMs": _INTERVAL_MS, "maxDataPoints": _MAX_DATA_POINTS}
    return {
        "uid": rule.uid, "title": rule.title, "condition": "C",
        "data": [
            {"refId": "A", "relativeTimeRange": {"from": rule.lookback_s, "to": 0},
             "datasourceUid": rule.datasource.uid, "model": model},
            _expression("B", {"type": "reduce", "expression": "A", "reducer": rule.reducer,
                              "settings": {"mode": "dropNN"}}),
            _expression("C", {"type": "threshold", "expression": "B",
                              "conditions": [{"evaluator": {"type": "gt",
                                                            "params": [rule.above]}}]}),
        ],
        "dashboardUid": overview.UID, "panelId": panel_ids[rule.panel],
        "noDataState": "OK", "execErrState": "Error", "for": rule.for_,
        "annotations": {"summary": rule.summary, "description": rule.description},
        "labels": {"source": "jobstream"}, "isPaused": False,
    }


def provisioning(shipped: Sequence[AlertRule] | None = None) -> dict[str, Any]:
    """Grafana's alert rule provisioning (apiVersion 1) of the rules."""
    board = overview.build()
    panel_ids = {str(p["title"]): int(p["id"]) for p in panels_of(board)}
    return {"apiVersion": 1, "groups": [{
        "orgId": 1, "name": GROUP, "folder": FOLDER, "interval": INTERVAL,
        "rules": [_rule(r, panel_ids) for r in (rules() if shipped is None else shipped)],
    }]}


def _yaml(value: Any, indent: int) -> list[str]:
    """Block-style YAML of dicts and lists, each scalar as JSON (which YAML reads alike);
    an empty dict or list inline."""
    pad = " " * indent
    if isinstance(value, Mapping) and value:
        out = []
        for key, item in value.items():
            if isinstance(item, Mapping | list) and item:
                out += [f"{pad}{_key(key)}:", *_yaml(item, indent + 2)]
            else:
                out.append(f"{pad}{_key(key)}: {_scalar(item)}")
        return out
    if isinstance(value, list) and value:
        out = []
        for item in value:
            lines = _yaml(item, indent + 2) if isinstance(item, Mapping | list) and item \
                else [f"{pad}  {_scalar(item)}"]
            out += [f"{pad}- {lines[0].lstrip()}", *lines[1:]]
        return out
    return [f"{pad}{_scalar(value)}"]


def _key(key: Any) -> str:
    return str(key) if _PLAIN_KEY.fullmatch(str(key)) else json.dumps(str(key))


def _scalar(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False)


def provisioning_yaml() -> str:
    """``grafana/provisioning/alerting/jobstream.yaml``."""
    return "\n".join([
        "# Generated by `jobstream dashboards build` from pipeline/dashboards/alerts.py:",
        "# edit that file, not this one (docs/dashboards.md, \"Alert rules\").",
        "#",
        "# Grafana alert rules on the Elasticsearch data sources of",
        "# provisioning/datasources/jobstream.yaml (by uid): A the query, B its series",
        "# reduced, C the threshold (the condition).",
        *_yaml(provisioning(), 0),
    ]) + "\n"
