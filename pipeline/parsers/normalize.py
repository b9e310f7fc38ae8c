"""The normalize stage: one raw-topic record -> its canonical events (pure).

Records of the node formats (``parsers.NODE_FORMATS``) give node events
(:class:`pipeline.core.nodes.NodeEvent`), admitted by the same rules: the worker folds them
into node documents in the same stage as the jobs' events (:mod:`agents.jobs`), each by
its own type.

A record of a multi-job format (``squeue``/``sacct --json``) is taken job by job
(:func:`normalize_parts`): a job the parser or :mod:`pipeline.core.admission` refuses becomes a
:class:`RejectedPart`, dead-lettered on its own with its reason and its own JSON, while the
record's other jobs go on. A record none of whose jobs is taken is refused whole, as any bad
record is: its DLQ record is then the raw record itself, which a replay after a fix can
take again as it came.

:func:`normalize` is all or nothing, as it always was: it raises the first refusal of any
part. It is for callers that cannot dead-letter one job (benchmarks, test harnesses), who
then see the record refused rather than one of its jobs silently missing.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar, overload

from pipeline.core.admission import admit, check_received_at
from pipeline.core.jsontext import dumps
from pipeline.core.model import JobEvent, RawRecord
from pipeline.parsers import FORMATS, parse_parts
from pipeline.runtime.errors import ParseError, Refusal

__all__ = ["RejectedPart", "normalize", "normalize_parts"]

T = TypeVar("T")


class RejectedPart(Refusal):
    """One job of a multi-job record that the stream does not take (a refusal handed
    back beside the taken events, not raised).

    ``payload`` is the job's own JSON (compact), what its DLQ record holds; ``index`` its
    place in the record's ``jobs``; ``cause`` the parser's exception when ``reason`` is
    ``internal-error``, for the log.
    """

    def __init__(self, index: int, reason: str, message: str, payload: bytes,
                 cause: BaseException | None = None) -> None:
        super().__init__(reason, message)
        self.index = index
        self.payload = payload
        self.cause = cause


def _check(raw: RawRecord) -> None:
    if raw.format not in FORMATS:
        raise ParseError("unknown-format", f"raw record of unknown format {raw.format!r}")
    scheduler = FORMATS[raw.format][0]
    if scheduler is None:  # a format of both: its payload names the scheduler
        if raw.scheduler not in ("flux", "slurm"):
            raise ParseError("bad-type", f"format {raw.format}: scheduler "
                                         f"{raw.scheduler!r} is not flux or slurm")
    elif raw.scheduler != scheduler:
        raise ParseError("bad-type", f"format {raw.format} is {scheduler}'s, the record says "
                                     f"scheduler {raw.scheduler!r}")
    check_received_at(raw)


def _same(ev: JobEvent) -> JobEvent:
    return ev


@overload
def normalize_parts(raw: RawRecord) -> tuple[list[JobEvent], list[RejectedPart]]: ...


@overload
def normalize_parts(raw: RawRecord, prepare: Callable[[JobEvent], T]
                    ) -> tuple[list[T], list[RejectedPart]]: ...


def normalize_parts(raw: RawRecord, prepare: Callable[[JobEvent], Any] = _same
                    ) -> tuple[list[Any], list[RejectedPart]]:
    """The events of the record's jobs that the stream takes, and the jobs it does not.

    ``prepare`` is applied to every event of a job with the job's admission (the worker
    fits each event to its size bound there): its ParseError refuses that job only.
    ParseError if the record as a whole is bad, or if none of its jobs is taken.
    """
    _check(raw)
    parts = parse_parts(raw.format, raw.payload, cluster=raw.cluster,
                        received_at=raw.received_at)
    taken: list[Any] = []
    rejected: list[RejectedPart] = []
    good = 0
    for part in parts:
        error = part.error
        if error is None:
            if part.whole:  # its refusal is the record's
                admit(raw, part.events)
                taken.extend(prepare(ev) for ev in part.events)
                good += 1
                continue
            try:
                admit(raw, part.events)
                prepared = [prepare(ev) for ev in part.events]
            except ParseError as exc:
                error = exc
            else:
                taken.extend(prepared)
                good += 1
                continue
        rejected.append(RejectedPart(part.index, error.reason, error.message,
                                     _compact(part.source), error.__cause__))
    if rejected and not good:
        raise _refusal(rejected)
    return taken, rejected


def normalize(raw: RawRecord) -> list[JobEvent]:
    """Canonical events of a raw record; ParseError with the reason if it cannot be parsed,
    the stream must not admit it (:mod:`pipeline.core.admission`), or any of its jobs is bad."""
    events, rejected = normalize_parts(raw)
    if rejected:
        raise _refusal(rejected)
    return events


def _refusal(rejected: list[RejectedPart]) -> ParseError:
    """The first refused job's error, for the record as a whole."""
    first = rejected[0]
    more = f" (and {len(rejected) - 1} more refused job(s))" if len(rejected) > 1 else ""
    error = ParseError(first.reason, first.message + more)
    error.__cause__ = first.cause
    return error


def _compact(value: Any) -> bytes:
    """A part's JSON as compact text. The parser read it from JSON, so it writes back; if
    it does not, its text as Python shows it is still more use in the DLQ than nothing."""
    try:
        return dumps(value)
    except (TypeError, ValueError, RecursionError):
        return repr(value).encode("utf-8", "backslashreplace")
