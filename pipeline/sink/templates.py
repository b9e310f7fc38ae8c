"""Index templates, index creation and alias moves for the index families.

The mappings are data: ``schemas/elasticsearch/<family>.json`` (``description``,
``settings``, ``mappings``). From them this module builds one composable index template per
family and generation (``<prefix>hpc-jobs-v1`` matching ``<prefix>hpc-jobs-v1-*``).
The template of the *live* generation also carries the family's alias, so that next
month's index joins the alias the moment a bulk request creates it; the template of a
generation being replayed carries none until :func:`swap_aliases` makes it live.

Everything here is idempotent: the sink calls :func:`ensure_indices` on every start.
Only APIs of the server core are used (no ILM, no data streams, no ``GET /``): the
Elasticsearch of the local stack is the integ-test distribution, which has no modules.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from functools import cache
from pathlib import Path
from typing import Any

from elasticsearch import ApiError, BadRequestError, Elasticsearch, NotFoundError

from pipeline import PACKAGE_DIR
from pipeline.runtime.errors import ConfigError, SinkError
from pipeline.sink.names import (
    CURRENT,
    SINGLE_INDEX,
    UNDATED,
    Family,
    alias_name,
    check_generation,
    check_prefix,
    index_name,
    index_pattern,
    month_of,
)

__all__ = [
    "FIXED_PARAMS",
    "TEMPLATE_PRIORITY",
    "ensure_indices",
    "existing_mapping",
    "family_body",
    "index_template",
    "live_generation",
    "swap_aliases",
    "template_name",
]

logger = logging.getLogger(__name__)

#: Above Elasticsearch's built-in templates (priority 100..) so ours always win.
TEMPLATE_PRIORITY = 500


def mapping_dir() -> Path:
    return PACKAGE_DIR / "_schemas" / "elasticsearch"


@cache
def family_body(family: Family) -> Mapping[str, Any]:
    """The parsed ``schemas/elasticsearch/<family>.json`` (read once per process)."""
    path = mapping_dir() / f"{family.value}.json"
    try:
        body = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise SinkError(f"index mapping {path} cannot be read: {exc}") from exc
    return body


def template_name(prefix: str, family: Family, generation: str) -> str:
    return f"{prefix}{family.value}-{check_generation(generation)}"


def index_template(prefix: str, family: Family, generation: str, *, live: bool
                   ) -> dict[str, Any]:
    """The body of ``PUT _index_template/<template_name>``."""
    body = family_body(family)
    template: dict[str, Any] = {"settings": body["settings"], "mappings": body["mappings"]}
    if live:
        template["aliases"] = {alias_name(prefix, family): {}}
    return {
        "index_patterns": [index_pattern(prefix, family, generation)],
        "priority": TEMPLATE_PRIORITY,
        "template": template,
        "_meta": {"description": body.get("description", ""), "generation": generation,
                  "managed_by": "jobstream"},
    }


def live_generation(es: Elasticsearch, prefix: str) -> str | None:
    """The generation the ``hpc-jobs`` alias points at, or None when there is no alias."""
    alias = alias_name(prefix, Family.JOBS)
    try:
        found = es.indices.get_alias(name=alias)
    except NotFoundError:
        return None
    stem = f"{prefix}{Family.JOBS.value}-"
    generations = {name[len(stem):].split("-", 1)[0] for name in found
                   if name.startswith(stem)}
    if len(generations) != 1:
        raise SinkError(f"alias {alias} points at indices of {len(generations)} generations "
                        f"({', '.join(sorted(found))}); move it with swap_aliases")
    return generations.pop()


def ensure_indices(es: Elasticsearch, prefix: str, generation: str, *,
                   live: bool | None = None, now_ms: int | None = None) -> bool:
    """Put the templates of ``generation``, update the mappings of its existing indices and
    create this month's indices (and the undated jobs index, and the one index of each
    :data:`~pipeline.sink.names.SINGLE_INDEX` family), so that the aliases exist before
    the first document.

    ``live``: whether this generation carries the aliases; None = it does if the aliases
    point at it or nowhere yet. Returns the ``live`` decided.
    """
    check_generation(generation)
    try:
        check_prefix(prefix)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    if live is None:
        current = live_generation(es, prefix)
        live = current in (None, generation)
    for family in Family:
        es.indices.put_index_template(name=template_name(prefix, family, generation),
                                      **index_template(prefix, family, generation, live=live))
        _update_existing(es, prefix, family, generation)
        months: Iterable[str] = [_this_month(now_ms)]
        if family in SINGLE_INDEX:
            months = [CURRENT]
        elif family is Family.JOBS:
            months = [*months, UNDATED]
        for month in months:
            _create_index(es, index_name(prefix, family, generation, month))
        if live:
            # Indices made before the generation was live (none, normally) join too.
            es.indices.update_aliases(actions=[{"add": {
                "index": index_pattern(prefix, family, generation),
                "alias": alias_name(prefix, family)}}])
    logger.info("indices ready prefix=%r generation=%s live=%s", prefix, generation, live)
    return live


def swap_aliases(es: Elasticsearch, prefix: str, from_gen: str, to_gen: str) -> None:
    """Move every family's alias from ``from_gen``'s indices to ``to_gen``'s, atomically.

    Readers see either all of the old generation or all of the new one, never a mix and
    never nothing. The templates follow, so that new months of ``to_gen`` join the aliases
    and new months of ``from_gen`` do not.
    """
    check_generation(from_gen)
    check_generation(to_gen)
    if from_gen == to_gen:
        raise ValueError("swap_aliases: from and to generation are the same")
    for family in Family:
        es.indices.put_index_template(name=template_name(prefix, family, from_gen),
                                      **index_template(prefix, family, from_gen, live=False))
    actions: list[dict[str, Any]] = []
    for family in Family:
        alias = alias_name(prefix, family)
        actions.append({"remove": {"index": index_pattern(prefix, family, from_gen),
                                   "alias": alias, "must_exist": False}})
        actions.append({"add": {"index": index_pattern(prefix, family, to_gen), "alias": alias}})
    try:
        es.indices.update_aliases(actions=actions)
    except ApiError as exc:
        raise SinkError(f"cannot move the aliases from {from_gen} to {to_gen}: {exc}") from exc
    for family in Family:
        es.indices.put_index_template(name=template_name(prefix, family, to_gen),
                                      **index_template(prefix, family, to_gen, live=True))
    logger.info("aliases moved prefix=%r from=%s to=%s", prefix, from_gen, to_gen)


def _this_month(now_ms: int | None) -> str:
    if now_ms is None:
        now_ms = int(time.time() * 1000)
    return month_of(now_ms)


def _create_index(es: Elasticsearch, name: str) -> None:
    try:
        es.indices.create(index=name)
    except BadRequestError as exc:
        if _error_type(exc) != "resource_already_exists_exception":
            raise


def _update_existing(es: Elasticsearch, prefix: str, family: Family, generation: str) -> None:
    """New fields of the mapping and the refresh interval reach the existing indices too (a
    changed type cannot: that needs a new generation).

    Each index is sent the mapping with the parameters Elasticsearch cannot change in place
    (:data:`FIXED_PARAMS`) as it has them (:func:`existing_mapping`): an index made before a
    field lost its index or doc values keeps them, and the sink still starts."""
    body = family_body(family)
    pattern = index_pattern(prefix, family, generation)
    found = es.indices.get_mapping(index=pattern, allow_no_indices=True)
    groups: dict[str, list[str]] = {}
    for index in sorted(found):
        have = (found[index].get("mappings") or {}).get("properties") or {}
        mapping = existing_mapping(body["mappings"], have)
        groups.setdefault(json.dumps(mapping, sort_keys=True), []).append(index)
    for text, indices in groups.items():
        for names in _name_lists(indices):
            try:
                es.indices.put_mapping(index=names, **json.loads(text))
            except BadRequestError as exc:
                raise SinkError(
                    f"the mapping of {pattern} cannot take the current {family.value} "
                    f"mapping ({_error_type(exc)}: {exc}); reprocess into a new generation "
                    f"(jobstream replay)") from exc
    refresh = body["settings"]["index"].get("refresh_interval")
    if refresh:
        es.indices.put_settings(index=pattern, allow_no_indices=True,
                                settings={"index": {"refresh_interval": refresh}})


#: Field parameters Elasticsearch refuses to change on an existing field (the whole put
#: mapping fails): a field that stops being indexed, or loses its doc values, keeps both
#: in the indices made before, and has the new ones in the indices made after.
FIXED_PARAMS: tuple[str, ...] = ("index", "doc_values", "enabled")


def existing_mapping(ours: Mapping[str, Any], have: Mapping[str, Any]) -> dict[str, Any]:
    """``ours`` (a family's ``mappings``) as an index whose fields are ``have`` (its
    ``properties``) can take it: every field it has keeps its :data:`FIXED_PARAMS` (set or
    left at Elasticsearch's default as they are), everything else is ours, so new fields
    and the parameters Elasticsearch does change in place (``ignore_above``) reach it.
    A field whose type differs is left as ours, for Elasticsearch to refuse. Pure."""
    return {**ours, "properties": _keep_fixed(ours.get("properties") or {}, have)}


def _keep_fixed(ours: Mapping[str, Any], have: Mapping[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, spec in ours.items():
        old = have.get(name)
        if not isinstance(old, Mapping) or old.get("type", "object") != spec.get(
                "type", "object"):
            out[name] = spec
            continue
        kept = {k: v for k, v in spec.items() if k not in FIXED_PARAMS}
        kept.update({k: old[k] for k in FIXED_PARAMS if k in old})
        for inner in ("properties", "fields"):  # an object's fields, multi-fields
            if inner in spec:
                kept[inner] = _keep_fixed(spec[inner], old.get(inner) or {})
        out[name] = kept
    return out


#: Bytes of index names in one request line: Elasticsearch's default
#: ``http.max_initial_line_length`` is 4 KB
_NAMES_BYTES = 3000


def _name_lists(indices: Sequence[str]) -> Iterator[str]:
    """``indices`` as comma-separated lists short enough for one request line."""
    batch: list[str] = []
    size = 0
    for name in indices:
        if batch and size + len(name) + 1 > _NAMES_BYTES:
            yield ",".join(batch)
            batch, size = [], 0
        batch.append(name)
        size += len(name) + 1
    if batch:
        yield ",".join(batch)


def _error_type(exc: ApiError) -> str:
    body = exc.body if isinstance(exc.body, dict) else {}
    error = body.get("error")
    return error.get("type", "") if isinstance(error, dict) else ""
