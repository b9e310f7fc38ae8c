"""Index names, generations, months, and the template bodies built from the mapping files."""

from __future__ import annotations

import pytest

from pipeline.sink.names import Family, alias_name, index_name, index_pattern, month_of
from pipeline.sink.templates import family_body, index_template, template_name


def test_month_of_is_utc() -> None:
    assert month_of(1_793_491_199_999) == "2026.10"  # 2026-10-31T23:59:59.999Z
    assert month_of(1_793_491_200_000) == "2026.11"


def test_names() -> None:
    assert index_name("p-", Family.JOBS, "v1", "2026.11") == "p-hpc-jobs-v1-2026.11"
    assert index_pattern("", Family.EVENTS, "v2") == "hpc-job-events-v2-*"
    assert alias_name("p-", Family.SNAPSHOTS) == "p-hpc-queue-snapshots"
    assert template_name("p-", Family.JOBS, "v3") == "p-hpc-jobs-v3"


@pytest.mark.parametrize("bad", ["", "1", "v", "v1-x", "V1", "v1*"])
def test_bad_generation(bad: str) -> None:
    with pytest.raises(ValueError):
        index_name("", Family.JOBS, bad, "2026.11")


def test_patterns_of_families_do_not_overlap() -> None:
    # hpc-jobs-v1-* must never match an events index: templates and alias moves rely on it.
    assert not index_name("", Family.EVENTS, "v1", "2026.11").startswith("hpc-jobs-v1-")


@pytest.mark.parametrize("family", list(Family))
def test_every_family_has_a_strict_mapping(family: Family) -> None:
    body = family_body(family)
    assert body["mappings"]["dynamic"] == "strict"
    assert body["description"]


def test_live_template_carries_the_alias_and_a_replay_one_does_not() -> None:
    live = index_template("p-", Family.JOBS, "v1", live=True)
    assert live["index_patterns"] == ["p-hpc-jobs-v1-*"]
    assert live["template"]["aliases"] == {"p-hpc-jobs": {}}
    replay = index_template("p-", Family.JOBS, "v2", live=False)
    assert "aliases" not in replay["template"]
    assert replay["template"]["mappings"] == live["template"]["mappings"]


@pytest.mark.parametrize(("family", "schema"), [
    (Family.JOBS, "JobState"), (Family.EVENTS, "JobEvent"), (Family.SNAPSHOTS, "QueueSnapshot"),
])
def test_every_schema_field_has_a_mapping(family: Family, schema: str) -> None:
    # The mappings are strict: a field the agents send that the mapping lacks would send
    # every document to the DLQ.
    from pipeline.codecs.schemas import load_schema

    props = family_body(family)["mappings"]["properties"]
    assert load_schema(schema).field_names <= set(props)


# -- index names valid whatever a record's time or the configured prefix say -----------

#: 9999-12-31T23:59:59.999Z, the last instant of the documented range
LAST_MS = 253_402_300_799_999


def test_month_of_the_ends_of_the_documented_range() -> None:
    assert month_of(0) == "1970.01"
    assert month_of(LAST_MS) == "9999.12"
    assert month_of(4_102_444_800_000) == "2100.01"  # far, but a real month


@pytest.mark.parametrize("bad", [-1, LAST_MS + 1, 1e300 * 1000, -1e300, float("nan"),
                                 float("inf"), float("-inf"), 10**400])
def test_month_of_refuses_times_outside_the_range(bad: float) -> None:
    from pipeline.sink.names import TimeRangeError

    with pytest.raises(TimeRangeError):
        month_of(bad)


@pytest.mark.parametrize("prefix", ["", "t-", "site.a_", "x" * 220])
def test_valid_prefixes(prefix: str) -> None:
    from pipeline.sink.names import check_prefix

    assert check_prefix(prefix) == prefix
    assert len(index_name(prefix, Family.SNAPSHOTS, "v999999", "9999.12").encode()) <= 255


@pytest.mark.parametrize("prefix", ["T-", "-x", "_x", "+x", "a b", "a/b", "a*", "a?", 'a"',
                                    "a<", "a>", "a|", "a,", "a#", "a:", "a\\b", ".", "..",
                                    "x" * 221, "é" * 111])
def test_invalid_prefixes_are_refused(prefix: str) -> None:
    from pipeline.sink.names import check_prefix

    with pytest.raises(ValueError, match="index_prefix"):
        check_prefix(prefix)
    with pytest.raises(ValueError):
        index_name(prefix, Family.JOBS, "v1", "2026.11")


@pytest.mark.parametrize("month", ["-2100.01", "10000.01", "2026.13", "2026.1", "", "UNDATED"])
def test_index_name_refuses_a_month_that_is_not_one(month: str) -> None:
    with pytest.raises(ValueError):
        index_name("", Family.JOBS, "v1", month)
