"""Source parsers: pure functions from one source record to canonical job events.

A *record* is what one raw-topic message carries (``RawRecord.payload``): one journal
response, one jobcomp line, one ``squeue --json`` / ``sacct --json`` document, one hook
environment, one line of the lua submit plugins, or (``flux-eventlog``) one JSON object
``{"id", "eventlog", "jobspec", "R"}`` built by the CLI from a job's eventlog, jobspec and
R files, or (``node-usage``, either scheduler's) one sample of a job on one node.

Two formats tell about nodes, not jobs (:data:`NODE_FORMATS`): ``flux-resource-journal``
(one ``resource.journal`` response, RFC 44 resource events) and ``slurm-nodes`` (one
``scontrol show nodes --json`` document). Their parsers return
:class:`pipeline.core.nodes.NodeEvent` s, keyed ``cluster:node``, which fold into node
documents (:mod:`pipeline.fold.nodes`), never into a job's state: a stage that folds jobs
checks :data:`NODE_FORMATS` first. A ``slurm-nodes`` document's parts are its nodes.

``parse_record(fmt, payload, cluster=...)`` returns the events of a record or raises
:class:`pipeline.runtime.errors.ParseError`; ``split_records(fmt, data)`` cuts a file into records
for the CLI and ``jobstream publish``.

A ``squeue --json`` or ``sacct --json`` document lists many jobs, and one bad job must not
cost its neighbours their events: ``parse_parts(fmt, payload, cluster=...)`` gives such a
record as :class:`Part` s, one per job, each with its events or the ParseError that refused
it (a parser's unexpected exception in one job included, as reason ``internal-error``);
only what is wrong with the document itself (not JSON, no ``jobs``) raises. Every other
format is one part holding the record's events. ``parse_record`` stays all or nothing: it
raises the first part's error, so a caller that cannot set one job aside never loses it
silently.

May import: ``pipeline.core``, ``pipeline.runtime`` and the standard library. Not the fold
(its sibling), the codecs, Kafka or anything above: a parser is a pure function.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from pipeline.core.model import JobEvent
from pipeline.runtime.errors import ParseError

__all__ = ["FORMATS", "MULTI_JOB", "NODE_FORMATS", "Part", "PartsParser", "RecordParser",
           "parse_parts", "parse_record", "split_records", "strict_events"]


class RecordParser(Protocol):
    def __call__(self, payload: bytes, *, cluster: str, received_at: float | None = None
                 ) -> list[JobEvent]: ...


@dataclass(frozen=True, slots=True)
class Part:
    """One job of a record (or, ``whole``, a record of a format of one job a record, whose
    refusal is the record's).

    ``source`` is the part's own JSON value as the record held it, for a refused part's DLQ
    record.
    """

    index: int
    events: list[JobEvent] = field(default_factory=list)
    error: ParseError | None = None
    source: Any = None
    whole: bool = False


class PartsParser(Protocol):
    def __call__(self, payload: bytes, *, cluster: str, received_at: float | None = None
                 ) -> list[Part]: ...


def strict_events(parts: Sequence[Part]) -> list[JobEvent]:
    """The events of every part, or the first refused part's ParseError."""
    events: list[JobEvent] = []
    for part in parts:
        if part.error is not None:
            raise part.error
        events.extend(part.events)
    return events


def _flux_journal() -> RecordParser:
    from pipeline.parsers.flux import parse_journal_response
    return parse_journal_response


def _flux_eventlog() -> RecordParser:
    from pipeline.parsers.flux import parse_eventlog_record
    return parse_eventlog_record


def _slurm_jobcomp() -> RecordParser:
    from pipeline.parsers.slurm import parse_jobcomp
    return parse_jobcomp


def _slurm_squeue() -> RecordParser:
    from pipeline.parsers.slurm import parse_squeue
    return parse_squeue


def _slurm_sacct() -> RecordParser:
    from pipeline.parsers.slurm import parse_sacct
    return parse_sacct


def _slurm_squeue_parts() -> PartsParser:
    from pipeline.parsers.slurm_json import squeue_parts
    return squeue_parts


def _slurm_sacct_parts() -> PartsParser:
    from pipeline.parsers.slurm_json import sacct_parts
    return sacct_parts


def _slurm_hook() -> RecordParser:
    from pipeline.parsers.slurm import parse_hook
    return parse_hook


def _slurm_submit_plugin() -> RecordParser:
    from pipeline.parsers.slurm import parse_submit_plugin
    return parse_submit_plugin


def _node_usage() -> RecordParser:
    from pipeline.parsers.node_usage import parse_node_usage
    return parse_node_usage


def _flux_resource_journal() -> RecordParser:
    from pipeline.parsers.flux_resource import parse_resource_journal
    return parse_resource_journal  # type: ignore[return-value]  # NodeEvents (NODE_FORMATS)


def _slurm_nodes() -> RecordParser:
    from pipeline.parsers.slurm_nodes import parse_slurm_nodes
    return parse_slurm_nodes  # type: ignore[return-value]  # NodeEvents (NODE_FORMATS)


def _slurm_nodes_parts() -> PartsParser:
    from pipeline.parsers.slurm_nodes import nodes_parts
    return nodes_parts


#: format name -> (scheduler, loader of its record parser, True if a file holds one record a
#: line); the scheduler is None for a format of either, whose record says which
FORMATS: dict[str, tuple[str | None, Callable[[], RecordParser], bool]] = {
    "flux-journal": ("flux", _flux_journal, True),
    "flux-eventlog": ("flux", _flux_eventlog, False),
    "slurm-jobcomp": ("slurm", _slurm_jobcomp, True),
    "slurm-squeue": ("slurm", _slurm_squeue, False),
    "slurm-sacct": ("slurm", _slurm_sacct, False),
    "slurm-hook": ("slurm", _slurm_hook, False),
    "slurm-submit-plugin": ("slurm", _slurm_submit_plugin, True),
    "node-usage": (None, _node_usage, True),
    "flux-resource-journal": ("flux", _flux_resource_journal, True),
    "slurm-nodes": ("slurm", _slurm_nodes, False),
}

#: formats whose records tell about nodes: their events are NodeEvents (module docstring)
NODE_FORMATS: frozenset[str] = frozenset({"flux-resource-journal", "slurm-nodes"})


#: formats whose records list many jobs (or nodes) -> loader of their parts parser
MULTI_JOB: dict[str, Callable[[], PartsParser]] = {
    "slurm-squeue": _slurm_squeue_parts,
    "slurm-sacct": _slurm_sacct_parts,
    "slurm-nodes": _slurm_nodes_parts,
}


def parse_parts(fmt: str, payload: bytes, *, cluster: str,
                received_at: float | None = None) -> list[Part]:
    """The parts of one record of format ``fmt`` (see the module docstring); ParseError
    if the record as a whole is bad."""
    parser = _PARTS_PARSERS.get(fmt)
    if parser is None:
        loader = MULTI_JOB.get(fmt)
        if loader is None:
            return [Part(0, parse_record(fmt, payload, cluster=cluster,
                                         received_at=received_at), whole=True)]
        parser = _PARTS_PARSERS[fmt] = loader()
    return parser(payload, cluster=cluster, received_at=received_at)


def parse_record(fmt: str, payload: bytes, *, cluster: str,
                 received_at: float | None = None) -> list[JobEvent]:
    """Canonical events of one record of format ``fmt``; ParseError if it is bad."""
    parser = _PARSERS.get(fmt)
    if parser is None:
        try:
            _, loader, _ = FORMATS[fmt]
        except KeyError:
            raise ParseError("unknown-format", f"unknown format {fmt!r}; known: "
                             + ", ".join(sorted(FORMATS))) from None
        parser = _PARSERS[fmt] = loader()
    return parser(payload, cluster=cluster, received_at=received_at)


#: Parsers loaded so far, by format: a loader's import costs more than a small record's
#: parse, so it runs once per format and process.
_PARSERS: dict[str, RecordParser] = {}
_PARTS_PARSERS: dict[str, PartsParser] = {}


def split_records(fmt: str, data: bytes) -> Iterator[tuple[int, bytes]]:
    """Cut a file of format ``fmt`` into records: ``(line number, payload)``.

    Line formats give one record per non-blank line; document formats give the whole file
    as one record (line 1). A ``flux-resource-journal`` file's lines get their rank maps.
    """
    if fmt not in FORMATS:
        raise ParseError("unknown-format", f"unknown format {fmt!r}")
    if not FORMATS[fmt][2]:
        yield 1, data
        return
    # a file of resource.journal responses is one connection's: each record gets the rank
    # map of the latest restart before it (pipeline.parsers.flux_resource)
    add_map = _rank_maps() if fmt == "flux-resource-journal" else None
    for n, line in enumerate(data.split(b"\n"), 1):
        if line.strip(b" \t\r\x00"):
            line = line.rstrip(b"\r")
            yield n, add_map(line) if add_map is not None else line


def _rank_maps() -> Callable[[bytes], bytes]:
    from pipeline.parsers.flux_resource import RankMaps
    return RankMaps().record
