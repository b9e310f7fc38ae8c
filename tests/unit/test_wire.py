"""The agents' wire: canonical events cut to a size, round trips."""

from __future__ import annotations

import json

import pytest

from pipeline.codecs.wire import decode_canonical, encode_canonical, fit_event
from pipeline.core.model import JobEvent
from pipeline.runtime.errors import ParseError


def submit(jobspec_bytes: int = 0, R_bytes: int = 0, context_bytes: int = 0) -> JobEvent:
    return JobEvent(
        cluster="c", scheduler="flux", job_id="42", event="submit", timestamp=1.5,
        source="flux-journal", event_id="e1", context={"note": "n" * context_bytes},
        facts={"uid": 7, "queue": "batch"},
        jobspec={"attributes": {"user": {"blob": "j" * jobspec_bytes}}} if jobspec_bytes else None,
        R={"execution": {"blob": "r" * R_bytes}} if R_bytes else None)


def test_an_event_that_fits_is_untouched() -> None:
    ev = submit(jobspec_bytes=1000)
    fitted, data = fit_event(ev, 10_000)
    assert fitted is ev and data == encode_canonical(ev)


def test_a_big_jobspec_is_dropped_and_marked() -> None:
    ev = submit(jobspec_bytes=5_000_000, R_bytes=2000)
    fitted, data = fit_event(ev, 900_000)
    assert len(data) <= 900_000
    assert fitted.jobspec is None and fitted.R == ev.R
    assert fitted.context == {**ev.context, "jobspec_truncated": True}
    assert fitted.facts == ev.facts and fitted.event_id == ev.event_id
    assert decode_canonical(data) == fitted


def test_payloads_go_biggest_first_until_it_fits() -> None:
    ev = submit(jobspec_bytes=600, R_bytes=800)
    size = len(encode_canonical(ev))
    fitted, _ = fit_event(ev, size - 700)  # dropping R (the bigger) is enough
    assert fitted.R is None and fitted.jobspec == ev.jobspec
    assert json.loads(encode_canonical(fitted))["context"]["R_truncated"] is True
    both, data = fit_event(ev, size - 1000)
    assert both.R is None and both.jobspec is None and len(data) <= size - 1000
    assert both.context["jobspec_truncated"] and both.context["R_truncated"]


def test_an_event_too_big_without_payloads_is_a_parse_error() -> None:
    with pytest.raises(ParseError) as info:
        fit_event(submit(jobspec_bytes=100, context_bytes=5000), 2000)
    assert info.value.reason == "too-large"
