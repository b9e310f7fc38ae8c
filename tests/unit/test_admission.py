"""The stream's admission policy (pipeline.core.admission) through the normalize stage: far-future
timestamps and too-deep contexts are refused with their reason; unknown event names, events
of unknown jobs and old times are admitted."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from pipeline.core.admission import FUTURE_TOLERANCE_S, MAX_CONTEXT_DEPTH, MAX_EPOCH_S
from pipeline.core.model import RawRecord
from pipeline.fold import fold
from pipeline.parsers.normalize import normalize
from pipeline.runtime.errors import ParseError

T = 1_780_000_000.0
SUBMIT = {"name": "submit", "context": {"userid": 1001, "urgency": 16, "flags": 0,
                                        "version": 1}}
JOBCOMP = json.loads((Path(__file__).parents[1] / "data" / "slurm" /
                      "jobcomp_epoch_times.json").read_text())


def flux(events: list[dict[str, Any]], received_at: float = T, job: int = 5) -> RawRecord:
    return RawRecord(cluster="c", scheduler="flux", format="flux-journal",
                     received_at=received_at,
                     payload=json.dumps({"id": job, "events": events}).encode())


def reason(raw: RawRecord) -> str:
    with pytest.raises(ParseError) as info:
        normalize(raw)
    return info.value.reason


def test_an_event_more_than_a_day_ahead_of_its_record_is_refused() -> None:
    assert reason(flux([{**SUBMIT, "timestamp": T + FUTURE_TOLERANCE_S + 1}])) \
        == "future-timestamp"
    # the whole record: a good event beside it does not save it
    assert reason(flux([{**SUBMIT, "timestamp": T - 10},
                        {"name": "memo", "timestamp": 4_102_444_800.0}])) == "future-timestamp"


def test_an_event_within_a_day_of_its_record_is_admitted() -> None:
    [ev] = normalize(flux([{**SUBMIT, "timestamp": T + FUTURE_TOLERANCE_S}]))
    assert ev.timestamp == T + FUTURE_TOLERANCE_S


def test_a_record_without_a_receive_time_is_not_judged_by_it() -> None:
    assert len(normalize(flux([{**SUBMIT, "timestamp": 4_102_444_800.0}], received_at=0.0))) == 1


# the latest receive time admitted: a later one is itself refused (bad-time, below)
@pytest.mark.parametrize("received_at", [0.0, MAX_EPOCH_S])
def test_an_event_past_any_real_time_is_refused_whatever_its_receive_time(
        received_at: float) -> None:
    # as epoch milliseconds it would not fit the job document's 64-bit times
    assert reason(flux([{**SUBMIT, "timestamp": 1e17}], received_at=received_at)) \
        == "future-timestamp"
    [ev] = normalize(flux([{**SUBMIT, "timestamp": MAX_EPOCH_S}], received_at=0.0))
    assert ev.timestamp == MAX_EPOCH_S


def test_an_event_stating_a_time_past_any_real_time_is_refused() -> None:
    alloc = {"name": "alloc", "timestamp": T}
    r = {"version": 1, "execution": {"R_lite": [{"rank": "0", "children": {"core": "0"}}],
                                     "starttime": T, "expiration": 1e17}}
    raw = RawRecord(cluster="c", scheduler="flux", format="flux-journal", received_at=T,
                    payload=json.dumps({"id": 5, "events": [alloc], "R": r}).encode())
    assert reason(raw) == "future-timestamp"
    ok = {**r, "execution": {**r["execution"], "expiration": T + 3600}}
    raw = RawRecord(cluster="c", scheduler="flux", format="flux-journal", received_at=T,
                    payload=json.dumps({"id": 5, "events": [alloc], "R": ok}).encode())
    [ev] = normalize(raw)
    assert ev.facts["expiration"] == T + 3600


def slurm_jobcomp(record: dict[str, Any], received_at: float) -> RawRecord:
    return RawRecord(cluster="c", scheduler="slurm", format="slurm-jobcomp",
                     received_at=received_at, payload=json.dumps(record).encode())


def test_a_far_future_slurm_end_is_refused() -> None:
    events = normalize(slurm_jobcomp(JOBCOMP, received_at=T + 10 * 365 * 86400))
    end = max(ev.timestamp for ev in events)
    assert reason(slurm_jobcomp({**JOBCOMP, "@end": "2999-01-01T00:00:00"},
                                received_at=end + 60)) == "future-timestamp"


def test_a_slurm_eligible_time_to_come_is_admitted() -> None:
    """``sbatch --begin``: a pending job's eligible time is a plan, not a fact."""
    from pipeline.core.admission import admit
    from pipeline.core.model import JobEvent
    ev = JobEvent(cluster="c", scheduler="slurm", job_id="7", event="eligible",
                  timestamp=T + 7 * 86400, source="slurm-squeue", event_id="x")
    admit(RawRecord(cluster="c", scheduler="slurm", format="slurm-squeue", received_at=T,
                    payload=b"{}"), [ev])
    with pytest.raises(ParseError):
        admit(RawRecord(cluster="c", scheduler="slurm", format="slurm-squeue",
                        received_at=T, payload=b"{}"),
              [JobEvent(cluster="c", scheduler="slurm", job_id="7", event="submit",
                        timestamp=T + 7 * 86400, source="slurm-squeue", event_id="y")])


def nested(levels: int) -> dict[str, Any]:
    """A context ``levels`` deep (``{"a": 1}`` is one level)."""
    value: dict[str, Any] = {"a": 1}
    for _ in range(levels - 1):
        value = {"n": value}
    return value


def test_a_context_nested_deeper_than_elasticsearch_indexes_is_refused() -> None:
    deep = [{"name": "memo", "timestamp": T - 1, "context": nested(MAX_CONTEXT_DEPTH + 1)}]
    assert reason(flux(deep)) == "too-deep"
    in_lists = [{"name": "memo", "timestamp": T - 1,
                 "context": {"l": [[[[[[[[[[[[[[[[[1]]]]]]]]]]]]]]]]]}}]
    assert reason(flux(in_lists)) == "too-deep"


def test_a_context_at_the_depth_limit_is_admitted() -> None:
    ok = [{"name": "memo", "timestamp": T - 1, "context": nested(MAX_CONTEXT_DEPTH)}]
    [ev] = normalize(flux(ok))
    assert ev.context == nested(MAX_CONTEXT_DEPTH)


def test_unknown_event_names_are_admitted_and_change_no_derived_field() -> None:
    submit = normalize(flux([{**SUBMIT, "timestamp": T - 100}]))
    odd = normalize(flux([{"name": "frobnicate", "timestamp": T - 50, "context": {"x": 1}}]))
    assert [ev.event for ev in odd] == ["frobnicate"]
    before, after = fold(submit)[0], fold(submit + odd)[0]
    changed = {k for k in before if before[k] != after[k]}
    assert changed == {"revision", "updated_at"}


def test_events_of_a_job_never_seen_make_a_document_of_what_they_tell() -> None:
    events = normalize(flux([{"name": "finish", "timestamp": T - 50,
                              "context": {"status": 0}},
                             {"name": "clean", "timestamp": T - 40}], job=6))
    [doc] = fold(events)
    assert (doc["job_id"], doc["state"], doc["result"], doc["user"], doc["t_submit"]) == \
        ("6", "done", "completed", None, None)


def test_old_times_are_admitted() -> None:
    [ev] = normalize(flux([{**SUBMIT, "timestamp": 86400.0 * 365}]))
    assert ev.timestamp == 86400.0 * 365


# --------------------------------------------------------------------------- received_at
# Issue 31, class 6: the future-time check measures from received_at, and a received_at
# that is no time switched it off (NaN compares false with every time; 1e300 is after all).

NOT_TIMES = [math.nan, math.inf, -math.inf, -1.0, -1e300, 1e300, 2.0**63, MAX_EPOCH_S + 1]


@pytest.mark.parametrize("received_at", NOT_TIMES, ids=repr)
def test_a_record_whose_received_at_is_no_time_is_refused_as_bad_time(
        received_at: float) -> None:
    year_2100 = 4_102_444_800.0
    assert reason(flux([{**SUBMIT, "timestamp": year_2100}], received_at=received_at)) \
        == "bad-time"
    assert reason(flux([{**SUBMIT, "timestamp": T}], received_at=received_at)) == "bad-time"
    assert reason(slurm_jobcomp(JOBCOMP, received_at=received_at)) == "bad-time"


def test_received_at_0_still_means_not_known() -> None:
    [ev] = normalize(flux([{**SUBMIT, "timestamp": T}], received_at=0.0))
    assert ev.timestamp == T
    assert normalize(slurm_jobcomp(JOBCOMP, received_at=0))
