"""Flux jobspec V1 (RFC 25, a subset of RFC 14): redaction and job facts.

Facts are derived the way Flux's job-list does (``job_data.c``, ``libjob/jj.c``):

* ``job_name`` -- ``attributes.system.job.name``, else the basename of
  ``tasks[0].command[0]``;
* ``queue``, ``bank``, ``cwd`` -- ``attributes.system.{queue,bank,cwd}``;
* ``timelimit_s`` -- ``attributes.system.duration``; 0 means unlimited and gives no fact;
* ``nodes_req`` / ``cores_req`` / ``gpus_req`` -- the resource tree multiplied out: each
  vertex's count times the counts of the vertices above it (``node 2 > slot 4 > core 4``
  asks for 2 nodes and 32 cores). RFC 14 range counts ``{"min": ...}`` count their minimum.

Privacy: ``attributes.system.environment``, ``attributes.system.files`` (batch scripts,
RFC 37 archives) and the legacy ``attributes.system.batch`` are removed from every jobspec
and jobspec-update that leaves this module (docs/design.md, "Guarantees": scripts and environments
never go downstream). The rest (command lines, cwd, user attributes) is left to the
anonymization stage.

Malformed jobspecs raise ``ParseError("bad-jobspec", ...)`` naming the field.
"""

from __future__ import annotations

import posixpath
from collections.abc import Mapping
from typing import Any

from pipeline.core.admission import MAX_EPOCH_S
from pipeline.runtime.errors import ParseError

__all__ = [
    "MAX_DURATION_S",
    "PRIVATE_PATHS",
    "apply_updates",
    "jobspec_facts",
    "jobspec_update_facts",
    "redact_jobspec",
    "redact_update_context",
]

#: jobspec paths that never leave the parser (see module docstring).
PRIVATE_PATHS: tuple[tuple[str, ...], ...] = (
    ("attributes", "system", "environment"),
    ("attributes", "system", "files"),
    ("attributes", "system", "batch"),
)
#: V1 graphs are at most node > slot > core; deeper trees are refused rather than recursed.
_MAX_DEPTH = 16
#: counts are 64-bit everywhere downstream (Avro ``long``, the worker's summaries): a count,
#: or a tree whose counts multiply past it, is refused, not folded into a state that cannot
#: be written
_MAX_COUNT = 2**63 - 1
#: A time limit is seconds from the start, so none runs past the last time a job document
#: holds (:data:`pipeline.core.admission.MAX_EPOCH_S`, the year 5138); past it a limit is no
#: limit, and nodes x limit (the queue snapshots' node-hours) overflows to infinity.
MAX_DURATION_S = MAX_EPOCH_S


def _bad(message: str) -> ParseError:
    return ParseError("bad-jobspec", message)


def _strip(value: Any, prefix: tuple[str, ...]) -> Any:
    """``value`` (found at ``prefix``) without the private paths below it; a copy only where
    something is removed, so unchanged sub-objects are shared."""
    if not isinstance(value, dict):
        return value
    below = [p[len(prefix):] for p in PRIVATE_PATHS
             if len(p) > len(prefix) and p[: len(prefix)] == prefix]
    if not below:
        return value
    out = dict(value)
    for rest in below:
        if len(rest) == 1:
            out.pop(rest[0], None)
    for key in {rest[0] for rest in below if len(rest) > 1}:
        if key in out:
            out[key] = _strip(out[key], (*prefix, key))
    return out


def redact_jobspec(jobspec: Mapping[str, Any]) -> dict[str, Any]:
    """The jobspec without environment, files and batch script (the input is not changed)."""
    return _strip(dict(jobspec), ())


def _is_private(path: tuple[str, ...]) -> bool:
    return any(path[: len(p)] == p for p in PRIVATE_PATHS)


def redact_update_context(context: Mapping[str, Any]) -> dict[str, Any]:
    """A jobspec-update context without private paths, whether set directly
    (``attributes.system.files.script``) or inside a parent object (``attributes.system``)."""
    out: dict[str, Any] = {}
    for key, value in context.items():
        path = tuple(key.split("."))
        if not _is_private(path):
            out[key] = _strip(value, path)
    return out


def apply_updates(jobspec: Mapping[str, Any], context: Mapping[str, Any]) -> dict[str, Any]:
    """``jobspec`` with a jobspec-update context applied: each key is a period-delimited
    path set to its value (intermediate objects are created; a non-object in the way is
    replaced, as the later path wins). Copies along the paths; the input is not changed."""
    out = dict(jobspec)
    for key, value in context.items():
        node = out
        *parents, leaf = key.split(".")
        for part in parents:
            child = node.get(part)
            node[part] = dict(child) if isinstance(child, dict) else {}
            node = node[part]
        node[leaf] = value
    return out


def _obj(parent: Mapping[str, Any], key: str, where: str) -> Mapping[str, Any]:
    value = parent.get(key)
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise _bad(f"{where}{key} must be an object, not {type(value).__name__}")
    return value


def _text(system: Mapping[str, Any], key: str, where: str) -> str | None:
    value = system.get(key)
    if value is None:
        return None
    if not isinstance(value, str):
        raise _bad(f"{where}{key} must be a string, not {type(value).__name__}")
    return value or None


def _attribute_facts(jobspec: Mapping[str, Any], *, name_fallback: bool) -> dict[str, Any]:
    system = _obj(_obj(jobspec, "attributes", ""), "system", "attributes.")
    where = "attributes.system."
    facts: dict[str, Any] = {}
    name = _text(_obj(system, "job", where), "name", where + "job.")
    if name is None and name_fallback:
        name = _name_from_command(jobspec.get("tasks"))
    for fact, value in (("job_name", name), ("queue", _text(system, "queue", where)),
                        ("bank", _text(system, "bank", where)),
                        ("cwd", _text(system, "cwd", where))):
        if value is not None:
            facts[fact] = value
    duration = system.get("duration")
    if duration is not None:
        # compared, not math.isfinite: an int past a float's range raises OverflowError
        if (isinstance(duration, bool) or not isinstance(duration, int | float)
                or not 0 <= duration <= MAX_DURATION_S):
            raise _bad(f"{where}duration must be a number of seconds from 0 to "
                       f"{MAX_DURATION_S:.0f}, not {str(duration)[:40]}")
        if duration > 0:
            facts["timelimit_s"] = duration
    return facts


def _name_from_command(tasks: Any) -> str | None:
    """job-list's fallback name: the basename of the first task's argv[0] (the whole path
    when it ends in '/'). Unusable tasks give no name; validating tasks is not our job."""
    if not isinstance(tasks, list) or not tasks or not isinstance(tasks[0], dict):
        return None
    command = tasks[0].get("command")
    if not isinstance(command, list) or not command or not isinstance(command[0], str):
        return None
    arg0 = command[0]
    return (posixpath.basename(arg0) or arg0) or None


def _count(vertex: Mapping[str, Any], where: str) -> int:
    count = vertex.get("count")
    if isinstance(count, dict):  # RFC 14 range: what is asked for at least
        count = count.get("min")
    if isinstance(count, bool) or not isinstance(count, int) or not 1 <= count <= _MAX_COUNT:
        raise _bad(f"{where}.count must be an integer from 1 to 2**63 - 1, not "
                   f"{str(vertex.get('count'))[:40]}")
    return count


def _add_counts(level: Any, multiplier: int, depth: int, where: str,
                totals: dict[str, int]) -> None:
    if not isinstance(level, list):
        raise _bad(f"{where} must be a list of resource vertices")
    if depth > _MAX_DEPTH:
        raise _bad(f"{where} nests deeper than {_MAX_DEPTH} levels")
    for i, vertex in enumerate(level):
        here = f"{where}[{i}]"
        if not isinstance(vertex, dict):
            raise _bad(f"{here} must be an object")
        kind = vertex.get("type")
        if not isinstance(kind, str):
            raise _bad(f"{here}.type must be a string")
        n = multiplier * _count(vertex, here)
        if kind in totals:
            totals[kind] += n
        if n > _MAX_COUNT or totals.get(kind, 0) > _MAX_COUNT:
            raise _bad(f"{here}.count multiplies to more than 2**63 - 1 {kind} resources")
        if "with" in vertex:
            _add_counts(vertex["with"], n, depth + 1, here + ".with", totals)


def _resource_facts(resources: Any) -> dict[str, Any]:
    totals = {"node": 0, "core": 0, "gpu": 0}
    _add_counts(resources, 1, 0, "resources", totals)
    facts: dict[str, Any] = {}
    for kind, fact in (("node", "nodes_req"), ("core", "cores_req"), ("gpu", "gpus_req")):
        if totals[kind]:
            facts[fact] = totals[kind]
    return facts


def jobspec_facts(jobspec: Any) -> dict[str, Any]:
    """Facts of a whole jobspec (as on ``submit``)."""
    if not isinstance(jobspec, dict):
        raise _bad(f"jobspec must be an object, not {type(jobspec).__name__}")
    facts = _attribute_facts(jobspec, name_fallback=True)
    if jobspec.get("resources") is not None:
        facts.update(_resource_facts(jobspec["resources"]))
    return facts


def jobspec_update_facts(context: Mapping[str, Any]) -> dict[str, Any]:
    """Facts changed by a ``jobspec-update``: only those its paths set."""
    partial = apply_updates({}, context)
    try:
        facts = _attribute_facts(partial, name_fallback=False)
        if partial.get("resources") is not None:
            facts.update(_resource_facts(partial["resources"]))
    except ParseError as exc:
        raise _bad(f"jobspec-update: {exc.message}") from None
    return facts
