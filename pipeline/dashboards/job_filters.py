"""The queries on job documents that several dashboards share: the overview's job
variables and their "All", the failed results, and the link to the job page.

Apart from the overview so that its node rows (:mod:`pipeline.dashboards.overview_nodes`,
which the overview imports) can table jobs too.
"""

from __future__ import annotations

from typing import Any

from pipeline.dashboards.builder import drilldown_link

__all__ = ["ALL", "CLUSTER", "FAILED", "JOBS", "JOB_UID", "job_link"]

JOB_UID = "jobstream-job"

#: "All" of a variable: the field's values or no value at all. A plain ``*`` would be an
#: exists query and hide every document without the field (a Flux job without a queue or
#: a user name), so "All" matches everything: ``(queue:* OR *:*)``.
ALL = "* OR *:*"

#: The overview's job variables
JOBS = "(cluster:$cluster) AND (queue:$queue) AND (bank:$bank) AND (user:$user)"
CLUSTER = "(cluster:$cluster)"
#: The results of a job that did not end well: failed, out of memory or time, lost a node
#: or hit a fatal exception (cancelled and completed jobs did not fail)
FAILED = "result:(failed OR node_fail OR oom OR timeout OR exception)"


def job_link() -> dict[str, Any]:
    """A data link on a ``job_id`` column to the per-job dashboard (the row's cluster)."""
    return drilldown_link("job_id", "Job details", JOB_UID)
