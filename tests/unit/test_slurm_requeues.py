"""A squeue/sacct job's ``restart_cnt``: requeue events for its latest restarts only
(issue 31, class 1).

One record stating restart_cnt 65,533 gave 65,533 requeue events, each growing the job's
state. Now at most the last 16 restart indices get an event, each with the id it always
had and its index as ``restart_count``; the job's ``requeue_count`` stays exact (the fold
takes the largest ``restart_count`` stated).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from pipeline.core.model import JobEvent, make_event_id
from pipeline.fold import fold
from pipeline.parsers import parse_record

DATA = Path(__file__).resolve().parents[1] / "data" / "slurm"
T = 1795312702.0
K = 16  # pipeline.parsers.slurm_json.REQUEUE_EVENTS
DOC = json.loads((DATA / "squeue_v0.0.41_24.05.json").read_text())


def squeue(restarts: int) -> list[JobEvent]:
    """The 24.05 fixture's job 70 (pending again after 2 restarts) with ``restarts``."""
    job = next(j for j in DOC["jobs"] if j["job_id"] == 70)
    doc = {**DOC, "jobs": [{**job, "restart_cnt": restarts}]}
    return parse_record("slurm-squeue", json.dumps(doc).encode(), cluster="c",
                        received_at=T + 1000)


def requeues(events: list[JobEvent]) -> list[JobEvent]:
    return [e for e in events if e.event == "requeue"]


def old_id(ev: JobEvent, index: int) -> str:
    """The id the requeue event of restart ``index`` always had."""
    return make_event_id(ev.cluster, "slurm", ev.job_id, "requeue", ev.timestamp, "squeue",
                         index)


@pytest.mark.parametrize("restarts", [65_533, 5_000, K + 1])
def test_a_huge_restart_count_gives_events_for_its_last_restarts_only(restarts: int) -> None:
    events = squeue(restarts)
    got = requeues(events)
    assert [e.facts["restart_count"] for e in got] == list(range(restarts - K + 1,
                                                                 restarts + 1))
    assert [e.event_id for e in got] == [old_id(e, e.facts["restart_count"]) for e in got]
    [doc] = fold(events)
    assert doc["requeue_count"] == restarts


@pytest.mark.parametrize("restarts", [1, 2, K])
def test_a_few_restarts_each_keep_their_event(restarts: int) -> None:
    got = requeues(squeue(restarts))
    assert [e.facts["restart_count"] for e in got] == list(range(1, restarts + 1))


def test_polls_of_a_job_restarting_by_ones_state_every_restart() -> None:
    """Each poll states the latest restarts: with at most 16 between polls, every restart
    index is stated by one poll, with the same id whichever poll stated it."""
    seen: dict[int, str] = {}
    for restarts in (3, 10, 25, 40):
        for ev in requeues(squeue(restarts)):
            index = ev.facts["restart_count"]
            assert seen.setdefault(index, ev.event_id) == ev.event_id
    assert set(seen) == set(range(1, 41))


def test_sacct_restart_counts_are_bounded_the_same_way() -> None:
    doc: dict[str, Any] = json.loads((DATA / "sacct_v0.0.42_24.11.json").read_text())
    job = {**doc["jobs"][0], "restart_cnt": 60_000}
    events = parse_record("slurm-sacct", json.dumps({**doc, "jobs": [job]}).encode(),
                          cluster="c")
    assert len(requeues(events)) == K
