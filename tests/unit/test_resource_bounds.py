"""Flux R and jobspec counts bounded to 64 bits at parse time (issue 31, class 6).

An R naming 2**64 ranks x 2**64 cores was accepted by the parser and refused only when its
job state could not be encoded (Avro ``long``): the job never appeared. Ids, counts and
their products are refused here, before anything is expanded, with ``bad-R`` or
``bad-jobspec``; numbers that ``math.isfinite`` cannot take (an int past a float's range)
are refused with a reason, not an OverflowError.
"""

from __future__ import annotations

import json
import tracemalloc
from typing import Any

import pytest

from pipeline.core.model import RawRecord
from pipeline.parsers.jobspec import jobspec_facts
from pipeline.parsers.normalize import normalize
from pipeline.parsers.resources import R_facts
from pipeline.runtime.errors import ParseError

T = 1_780_000_000.0
BIG = 2**64 - 1


def R(*entries: dict[str, Any], **execution: Any) -> dict[str, Any]:
    return {"version": 1, "execution": {"R_lite": list(entries), **execution}}


def reason_of(fn: Any, *args: Any) -> str:
    with pytest.raises(ParseError) as err:
        fn(*args)
    return err.value.reason


@pytest.mark.parametrize("r", [
    R({"rank": f"0-{BIG}", "children": {"core": f"0-{BIG}"}}),  # 2**64 x 2**64 cores
    R({"rank": f"0-{2**63 - 1}", "children": {"core": "0"}}),  # 2**63 ranks
    R({"rank": "0", "children": {"core": str(2**63)}}),  # a core id past 2**63 - 1
    R({"rank": "0", "children": {"gpu": f"0-{2**63}"}}),
    R({"rank": "1" * 5000, "children": {"core": "0"}}),  # past what int() reads
    R({"rank": "0", "children": {"core": "0-" + "9" * 4301}}),
    R({"rank": f"0-{2**32 - 1}", "children": {"core": f"0-{2**31}"}}),  # 2**63 cores
    R(*[{"rank": f"{i}", "children": {"core": f"0-{2**62 - 1}"}} for i in range(2)]),
])
def test_ids_and_counts_past_2_63_are_refused_as_bad_R(r: dict[str, Any]) -> None:
    assert reason_of(R_facts, r) == "bad-R"


def test_counts_up_to_2_63_minus_1_are_taken() -> None:
    facts = R_facts(R({"rank": "0", "children": {"core": f"0-{2**63 - 2}"}}))
    assert facts["ncores"] == 2**63 - 1


def test_a_zero_padded_nodelist_is_refused_before_it_is_expanded() -> None:
    r = R(nodelist=["n[" + "0" * 3000 + "-99999]"])  # 100,000 names of 3,002 characters
    tracemalloc.start()
    try:
        assert reason_of(R_facts, r) == "bad-hostlist"
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 1 << 20


def journal(**response: Any) -> RawRecord:
    alloc = {"name": "alloc", "timestamp": T - 10, "context": {}}
    payload = {"id": 5, "events": [alloc], **response}
    return RawRecord(cluster="c", scheduler="flux", format="flux-journal", received_at=T,
                     payload=json.dumps(payload).encode())


def test_through_normalize_a_huge_R_is_a_reason_not_an_exception() -> None:
    with pytest.raises(ParseError) as err:
        normalize(journal(R=R({"rank": f"0-{BIG}", "children": {"core": f"0-{BIG}"}})))
    assert err.value.reason == "bad-R"
    # an int past a float's range: math.isfinite raised OverflowError on it
    with pytest.raises(ParseError) as err:
        normalize(journal(R=R({"rank": "0", "children": {"core": "0"}},
                              starttime=T, expiration=10**400)))
    assert err.value.reason == "future-timestamp"
    # not a fact: R keeps it as it came
    [ev] = normalize(journal(R=R({"rank": "0", "children": {"core": "0"}}, starttime=10**400)))
    assert ev.facts["ncores"] == 1


@pytest.mark.parametrize("duration", [10**400, 1e300, 2**63, float("inf"), float("nan")],
                         ids=["10**400", "1e300", "2**63", "inf", "nan"])
def test_a_duration_past_any_time_is_refused_as_bad_jobspec(duration: float) -> None:
    assert reason_of(jobspec_facts, {"attributes": {"system": {"duration": duration}}}) \
        == "bad-jobspec"


def test_a_long_duration_is_still_a_time_limit() -> None:
    facts = jobspec_facts({"attributes": {"system": {"duration": 10 * 365 * 86400.0}}})
    assert facts["timelimit_s"] == 10 * 365 * 86400.0


@pytest.mark.parametrize("count", [2**63, 2**64, 10**400])
def test_a_jobspec_count_past_2_63_minus_1_is_refused(count: int) -> None:
    spec = {"resources": [{"type": "node", "count": count}]}
    with pytest.raises(ParseError) as err:
        jobspec_facts(spec)
    assert err.value.reason == "bad-jobspec" and "2**63 - 1" in err.value.message


# --------------------------------------------------------------------------- other numbers

def test_a_flux_exception_severity_outside_rfc_21s_0_to_7_is_refused() -> None:
    """The job's state keeps the severity as a long: 2**63 failed its encoding after the
    record was admitted."""
    for severity in (2**63, 8, -1, 10**400):
        exc = {"name": "exception", "timestamp": T - 5,
               "context": {"type": "x", "severity": severity, "userid": 0}}
        raw = RawRecord(cluster="c", scheduler="flux", format="flux-journal", received_at=T,
                        payload=json.dumps({"id": 5, "events": [exc]}).encode())
        with pytest.raises(ParseError) as err:
            normalize(raw)
        assert err.value.reason == "bad-value" and "severity" in err.value.message


@pytest.mark.parametrize("key", ["by_uid", "priority", "nice", "step_id"])
def test_a_submit_plugin_integer_past_64_bits_is_a_reason(key: str) -> None:
    line = {"kind": "modify", "time": 1_795_312_702, "job_id": 17, "uid": 1001,
            key: 10**4299}
    raw = RawRecord(cluster="c", scheduler="slurm", format="slurm-submit-plugin",
                    received_at=1_795_312_800.0, payload=json.dumps(line).encode())
    with pytest.raises(ParseError) as err:  # math.isfinite raised OverflowError on it
        normalize(raw)
    assert err.value.reason == "bad-value"
