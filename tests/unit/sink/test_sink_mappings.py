"""The index mappings respect Elasticsearch's size limits by construction.

A keyword value over Lucene's term limit (32766 bytes) makes Elasticsearch refuse the
whole document (``document_parsing_exception``): every later state of a job whose owner
chose a 40 KB exception type would go to the DLQ. ``ignore_above`` keeps such a value in
``_source`` and leaves it out of the index, and the document is written.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import pytest

from pipeline.sink.names import Family
from pipeline.sink.templates import existing_mapping, family_body

#: Lucene's limit of one indexed term, in bytes
TERM_LIMIT_BYTES = 32766
#: ignore_above counts characters, and a character is up to 4 bytes of UTF-8
MAX_IGNORE_ABOVE = TERM_LIMIT_BYTES // 4

#: field types whose values are indexed as one term each
TERM_TYPES = {"keyword", "flattened", "wildcard", "constant_keyword"}


def fields(props: Mapping[str, Any], path: str = "") -> Iterator[tuple[str, Mapping[str, Any]]]:
    """Every field mapping, objects' and nested fields' properties and multi-fields too."""
    for name, spec in props.items():
        where = f"{path}{name}"
        yield where, spec
        if "properties" in spec:
            yield from fields(spec["properties"], f"{where}.")
        if "fields" in spec:
            yield from fields(spec["fields"], f"{where}.")


@pytest.mark.parametrize("family", list(Family))
def test_every_keyword_has_ignore_above_within_the_term_limit(family: Family) -> None:
    props = family_body(family)["mappings"]["properties"]
    unbounded = [name for name, spec in fields(props)
                 if spec.get("type") in TERM_TYPES
                 and not 0 < spec.get("ignore_above", 0) <= MAX_IGNORE_ABOVE]
    assert unbounded == []


@pytest.mark.parametrize("family", list(Family))
def test_text_fields_use_an_analyzer_that_splits_long_tokens(family: Family) -> None:
    # The standard analyzer cuts tokens at 255 characters: a text field has no term limit
    # to reach. A custom analyzer (keyword tokenizer, say) would bring it back.
    props = family_body(family)["mappings"]["properties"]
    custom = [name for name, spec in fields(props)
              if spec.get("type") in ("text", "match_only_text")
              and spec.get("analyzer", "standard") != "standard"]
    assert custom == []


@pytest.mark.parametrize("family", list(Family))
def test_every_field_type_is_one_whose_limits_are_known(family: Family) -> None:
    # A new field type must be looked at for its limits before it is added here.
    known = TERM_TYPES | {"text", "long", "double", "boolean", "date", "date_range", "object",
                          "nested"}
    props = family_body(family)["mappings"]["properties"]
    assert {spec.get("type", "object") for _, spec in fields(props)} <= known


# -- an existing index keeps what Elasticsearch cannot change in place ----------------

def test_an_existing_field_keeps_its_index_and_doc_values_and_takes_the_rest() -> None:
    ours = family_body(Family.EVENTS)["mappings"]
    # an index made when facts and event_id were indexed (jobstream before issue 35)
    have = {"facts": {"type": "flattened", "ignore_above": 1024},
            "event_id": {"type": "keyword", "ignore_above": 256},
            "usage": {"properties": {"cpu_now_pct": {"type": "double"}}},
            "timestamp": {"type": "double", "index": True}}
    got = existing_mapping(ours, have)
    props = got["properties"]
    assert props["facts"] == {"type": "flattened", "ignore_above": 1024}
    # ignore_above changes in place: ours reaches the index
    assert props["event_id"] == {"type": "keyword", "ignore_above": 8191}
    assert props["timestamp"] == {"type": "double", "index": True}
    assert props["usage"]["properties"]["cpu_now_pct"] == {"type": "double"}
    # fields it lacks come as they are, parameters and all
    assert props["usage"]["properties"]["mem_mb"] == ours["properties"]["usage"][
        "properties"]["mem_mb"]
    assert props["seq"] == ours["properties"]["seq"]
    assert got["dynamic"] == "strict"
    # and a fresh index (nothing in it) takes ours whole
    assert existing_mapping(ours, {}) == ours


def test_a_changed_type_is_left_for_elasticsearch_to_refuse() -> None:
    ours = family_body(Family.JOBS)["mappings"]
    got = existing_mapping(ours, {"revision": {"type": "keyword", "index": False}})
    assert got["properties"]["revision"] == {"type": "long"}


def test_multi_fields_keep_theirs_too() -> None:
    ours = {"properties": {"job_name": {"type": "keyword", "fields": {
        "text": {"type": "text", "index": False}}}}}
    have = {"job_name": {"type": "keyword", "fields": {"text": {"type": "text"}}}}
    assert existing_mapping(ours, have) == {"properties": {"job_name": {
        "type": "keyword", "fields": {"text": {"type": "text"}}}}}
