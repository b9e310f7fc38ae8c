"""Source parsers: pure functions from one source record to canonical job events.

A *record* is what one raw-topic message carries (``RawRecord.payload``): one journal
response, one jobcomp line, one ``squeue --json`` / ``sacct --json`` document, one hook
environment, one line of the lua submit plugins, or (``flux-eventlog``) one JSON object
``{"id", "eventlog", "jobspec", "R"}`` built by the CLI from a job's eventlog, jobspec and
R files.

``parse_record(fmt, payload, cluster=...)`` returns the events of a record or raises
:class:`pipeline.errors.ParseError`; ``split_records(fmt, data)`` cuts a file into records
for the CLI and ``jobstream publish``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Protocol

from pipeline.errors import ParseError
from pipeline.model import JobEvent

__all__ = ["FORMATS", "parse_record", "split_records", "RecordParser"]


class RecordParser(Protocol):
    def __call__(self, payload: bytes, *, cluster: str, received_at: float | None = None
                 ) -> list[JobEvent]: ...


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


def _slurm_hook() -> RecordParser:
    from pipeline.parsers.slurm import parse_hook
    return parse_hook


def _slurm_submit_plugin() -> RecordParser:
    from pipeline.parsers.slurm import parse_submit_plugin
    return parse_submit_plugin


#: format name -> (scheduler, loader of its record parser, True if a file holds one record a line)
FORMATS: dict[str, tuple[str, Callable[[], RecordParser], bool]] = {
    "flux-journal": ("flux", _flux_journal, True),
    "flux-eventlog": ("flux", _flux_eventlog, False),
    "slurm-jobcomp": ("slurm", _slurm_jobcomp, True),
    "slurm-squeue": ("slurm", _slurm_squeue, False),
    "slurm-sacct": ("slurm", _slurm_sacct, False),
    "slurm-hook": ("slurm", _slurm_hook, False),
    "slurm-submit-plugin": ("slurm", _slurm_submit_plugin, True),
}


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


def split_records(fmt: str, data: bytes) -> Iterator[tuple[int, bytes]]:
    """Cut a file of format ``fmt`` into records: ``(line number, payload)``.

    Line formats give one record per non-blank line; document formats give the whole file
    as one record (line 1).
    """
    if fmt not in FORMATS:
        raise ParseError("unknown-format", f"unknown format {fmt!r}")
    if not FORMATS[fmt][2]:
        yield 1, data
        return
    for n, line in enumerate(data.split(b"\n"), 1):
        if line.strip(b" \t\r\x00"):
            yield n, line.rstrip(b"\r")
