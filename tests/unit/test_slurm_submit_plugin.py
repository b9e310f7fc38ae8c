"""``slurm-submit-plugin``: the lines of job_submit.lua and cli_filter.lua -> events, and
what the fold makes of them beside squeue's view of the same job."""

from __future__ import annotations

import json
from typing import Any

import pytest

from pipeline.fold import fold
from pipeline.parsers import FORMATS, parse_record, split_records
from pipeline.runtime.errors import ParseError

T0 = 1780000000


def line(**fields: Any) -> bytes:
    return json.dumps(fields).encode()


def parse(data: bytes) -> list[Any]:
    return parse_record("slurm-submit-plugin", data, cluster="c1", received_at=T0 + 99)


def test_registered_as_a_line_format() -> None:
    assert FORMATS["slurm-submit-plugin"][0] == "slurm"
    data = line(kind="submit", time=T0, job_id=5) + b"\n\n" + line(kind="submit", time=T0,
                                                                  job_id=6) + b"\n"
    assert [n for n, _ in split_records("slurm-submit-plugin", data)] == [1, 3]


def test_cli_filter_submit_gives_the_job_id_and_request() -> None:
    (ev,) = parse(line(kind="submit", time=T0, job_id="42", uid=1001, user="alice",
                       partition="debug", account="physics", qos="normal", job_name="x",
                       time_limit=30, hold=False, step_id=4294967294))
    assert (ev.key, ev.event, ev.timestamp, ev.source) == (
        "c1:42", "validate", float(T0), "slurm-submit-plugin")
    assert ev.facts == {"uid": 1001}
    assert {k: ev.context[k] for k in ("partition", "account", "qos", "job_name",
                                       "timelimit_s")} == {
        "partition": "debug", "account": "physics", "qos": "normal", "job_name": "x",
        "timelimit_s": 1800}
    assert ev.context["hold"] is False and ev.context["step_id"] == 4294967294


def test_unset_and_unlimited_time_limits_state_nothing() -> None:
    for minutes in (4294967294, 4294967295, None):
        (ev,) = parse(line(kind="submit", time=T0, job_id=1, time_limit=minutes))
        assert "timelimit_s" not in ev.context


@pytest.mark.parametrize(("text", "seconds"), [
    ("30", 1800), ("1:30", 120), ("2:00:00", 7200), ("1-0", 86400), ("1-2:03", 93780),
    ("0-0:0:1", 60), ("UNLIMITED", None), (None, None),
    # what Slurm 22.05's cli_filter shows for a job submitted without --time (NO_VAL)
    ("2982616-04:14:00", None), ("00:10:00", 600),
])
def test_time_option_as_typed(text: str | None, seconds: int | None) -> None:
    (ev,) = parse(line(kind="submit", time=T0, job_id=1, time_str=text))
    assert ev.context.get("timelimit_s") == seconds


def test_modify_is_a_jobspec_update_with_what_changed() -> None:
    (ev,) = parse(line(kind="modify", time=T0 + 5, job_id=42, uid=1001, by_uid=0,
                       time_limit=7, priority=100))
    assert ev.event == "jobspec-update"
    assert ev.facts == {"uid": 1001, "timelimit_s": 420}
    assert ev.context == {"time_limit": 7, "priority": 100, "by_uid": 0}


def test_two_changes_in_one_second_are_two_events() -> None:
    a = parse(line(kind="modify", time=T0, job_id=42, time_limit=7))
    b = parse(line(kind="modify", time=T0, job_id=42, time_limit=8))
    assert a[0].event_id != b[0].event_id


@pytest.mark.parametrize(("by_uid", "reason"), [(1001, "JobHeldUser"), (0, "JobHeldAdmin")])
def test_hold_adds_the_held_reason(by_uid: int, reason: str) -> None:
    upd, held = parse(line(kind="modify", time=T0, job_id=42, uid=1001, by_uid=by_uid,
                           priority=0, hold=True))
    assert (upd.event, held.event) == ("jobspec-update", "reason")
    assert held.context == {"state_reason": reason}


def test_fold_time_limit_changed_while_pending_and_held() -> None:
    """squeue saw the job pending with 60 minutes; the change to 7 minutes, while held,
    shows in the document, and so does the hold; cli_filter's request, stamped in the
    change's second, undoes nothing and its late second opens no second incarnation."""
    squeue = {"jobs": [{
        "job_id": 42, "user_name": "alice", "user_id": 1001, "account": "physics",
        "partition": "debug", "job_state": "PENDING", "state_reason": "None",
        "submit_time": T0, "time_limit": 60, "name": "x", "eligible_time": 0,
        "start_time": 0, "end_time": 0, "nodes": "", "cluster": "c1",
    }]}
    events = parse_record("slurm-squeue", json.dumps(squeue).encode(), cluster="c1",
                          received_at=T0 + 1)
    events += parse(line(kind="submit", time=T0 + 4, job_id=42, uid=1001, user="alice",
                         partition="debug", time_limit=60))
    events += parse(line(kind="modify", time=T0 + 3, job_id=42, uid=1001, by_uid=1001,
                         priority=0, hold=True))
    events += parse(line(kind="modify", time=T0 + 4, job_id=42, uid=1001, by_uid=0,
                         time_limit=7))
    (doc,) = fold(events)
    assert doc["timelimit_s"] == 420
    assert doc["pending_reason"] == "JobHeldUser"
    assert doc["t_submit"] == T0 * 1000
    assert doc["state"] == "pending"


@pytest.mark.parametrize(("data", "reason"), [
    (b"not json", "invalid-json"),
    (b"[1]", "not-an-object"),
    (line(kind="launch", time=T0, job_id=1), "bad-value"),
    (line(kind="submit", job_id=1), "missing-time"),
    (line(kind="submit", time="yesterday", job_id=1), "bad-time"),
    (line(kind="submit", time=T0), "missing-field"),
    (line(kind="modify", time=T0, job_id=0), "bad-value"),
    (line(kind="modify", time=T0, job_id="x1"), "bad-type"),
    (line(kind="modify", time=T0, job_id=1, time_limit=-5), "bad-value"),
    (line(kind="modify", time=T0, job_id=1, hold="yes"), "bad-type"),
    (line(kind="modify", time=T0, job_id=1, priority=1.5), "bad-type"),
    (line(kind="submit", time=T0, job_id=1, partition=7), "bad-type"),
    (line(kind="submit", time=T0, job_id=1, time_str="soon"), "bad-value"),
    (line(kind="modify", time=T0, job_id=1, release=1), "bad-type"),
])
def test_bad_lines_are_refused_with_a_reason(data: bytes, reason: str) -> None:
    with pytest.raises(ParseError) as info:
        parse(data)
    assert info.value.reason == reason


def test_refused_submission_goes_to_the_dlq_with_who_where_why() -> None:
    with pytest.raises(ParseError) as info:
        parse(line(kind="refused", time=T0, uid=1001, user="alice", partition="short",
                   reason="no jobs named forbidden"))
    assert info.value.reason == "submit-refused"
    assert "alice" in str(info.value) and "short" in str(info.value)
    assert "no jobs named forbidden" in str(info.value)
