"""Index names, generations, months, and the template bodies built from the mapping files."""

from __future__ import annotations

from typing import Any

import pytest

from pipeline.sink.names import (
    CURRENT,
    UNDATED,
    Family,
    alias_name,
    index_name,
    index_pattern,
    month_of,
)
from pipeline.sink.templates import (
    ensure_indices,
    family_body,
    index_template,
    swap_aliases,
    template_name,
)


def test_month_of_is_utc() -> None:
    assert month_of(1_793_491_199_999) == "2026.10"  # 2026-10-31T23:59:59.999Z
    assert month_of(1_793_491_200_000) == "2026.11"


def test_names() -> None:
    assert index_name("p-", Family.JOBS, "v1", "2026.11") == "p-hpc-jobs-v1-2026.11"
    assert index_pattern("", Family.EVENTS, "v2") == "hpc-job-events-v2-*"
    assert alias_name("p-", Family.SNAPSHOTS) == "p-hpc-queue-snapshots"
    assert template_name("p-", Family.JOBS, "v3") == "p-hpc-jobs-v3"
    assert index_name("p-", Family.NODES, "v1", CURRENT) == "p-hpc-nodes-v1-current"
    assert alias_name("p-", Family.NODES) == "p-hpc-nodes"
    assert index_pattern("p-", Family.NODES, "v2") == "p-hpc-nodes-v2-*"


@pytest.mark.parametrize("month", ["2026.11", UNDATED, "", "Current"])
def test_the_nodes_have_one_index_per_generation(month: str) -> None:
    with pytest.raises(ValueError, match="one index per generation"):
        index_name("", Family.NODES, "v1", month)


@pytest.mark.parametrize("family", [Family.JOBS, Family.EVENTS, Family.SNAPSHOTS])
def test_a_monthly_family_has_no_current_index(family: Family) -> None:
    with pytest.raises(ValueError, match="YYYY.MM"):
        index_name("", family, "v1", CURRENT)


@pytest.mark.parametrize("bad", ["", "1", "v", "v1-x", "V1", "v1*"])
def test_bad_generation(bad: str) -> None:
    with pytest.raises(ValueError):
        index_name("", Family.JOBS, bad, "2026.11")


def test_patterns_of_families_do_not_overlap() -> None:
    # hpc-jobs-v1-* must never match an events index: templates and alias moves rely on it.
    assert not index_name("", Family.EVENTS, "v1", "2026.11").startswith("hpc-jobs-v1-")
    names = [index_name("", Family.NODES, "v1", CURRENT),
             *(index_name("", f, "v1", "2026.11") for f in Family if f is not Family.NODES)]
    for family in Family:
        stem = index_pattern("", family, "v1")[:-1]
        assert sum(name.startswith(stem) for name in names) == 1, family


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
    (Family.NODES, "NodeState"),
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
    assert len(index_name(prefix, Family.NODES, "v999999", CURRENT).encode()) <= 255


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


# -- what the sink creates and moves: every family, the nodes' one index ---------------

class _Indices:
    """The ``es.indices`` calls of ensure_indices and swap_aliases, recorded."""

    def __init__(self) -> None:
        self.templates: dict[str, dict[str, Any]] = {}
        self.created: list[str] = []
        self.alias_actions: list[dict[str, Any]] = []

    def put_index_template(self, *, name: str, **body: Any) -> None:
        self.templates[name] = body

    def get_mapping(self, **_: Any) -> dict[str, Any]:
        return {}  # no index of the generation yet

    def put_mapping(self, **_: Any) -> None:
        pass

    def put_settings(self, **_: Any) -> None:
        pass

    def create(self, *, index: str) -> None:
        self.created.append(index)

    def update_aliases(self, *, actions: list[dict[str, Any]]) -> None:
        self.alias_actions += actions


class _Es:
    def __init__(self) -> None:
        self.indices = _Indices()


NOV_2026 = 1_794_000_000_000  # 2026-11-06T21:20:00Z


def test_ensure_indices_makes_the_nodes_current_index_with_its_alias() -> None:
    es = _Es()
    ensure_indices(es, "p-", "v1", live=True, now_ms=NOV_2026)  # type: ignore[arg-type]
    ix = es.indices
    assert "p-hpc-nodes-v1-current" in ix.created
    assert not [name for name in ix.created if name.startswith("p-hpc-nodes-v1-2")]
    assert {"p-hpc-jobs-v1-2026.11", "p-hpc-jobs-v1-undated", "p-hpc-job-events-v1-2026.11",
            "p-hpc-queue-snapshots-v1-2026.11"} <= set(ix.created)
    nodes = ix.templates["p-hpc-nodes-v1"]
    assert nodes["index_patterns"] == ["p-hpc-nodes-v1-*"]
    assert nodes["template"]["aliases"] == {"p-hpc-nodes": {}}
    assert nodes["template"]["mappings"] == family_body(Family.NODES)["mappings"]
    assert {"add": {"index": "p-hpc-nodes-v1-*", "alias": "p-hpc-nodes"}} in ix.alias_actions


def test_swap_moves_the_nodes_alias_with_the_others() -> None:
    es = _Es()
    swap_aliases(es, "p-", "v1", "v2")  # type: ignore[arg-type]
    actions = es.indices.alias_actions
    assert {"remove": {"index": "p-hpc-nodes-v1-*", "alias": "p-hpc-nodes",
                       "must_exist": False}} in actions
    assert {"add": {"index": "p-hpc-nodes-v2-*", "alias": "p-hpc-nodes"}} in actions
    assert "aliases" not in es.indices.templates["p-hpc-nodes-v1"]["template"]
