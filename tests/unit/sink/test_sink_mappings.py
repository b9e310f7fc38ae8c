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
from pipeline.sink.templates import family_body

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
