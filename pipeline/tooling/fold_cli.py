"""``jobstream parse`` and ``jobstream fold``: source record files -> JSON lines, offline.

``parse`` prints every canonical event (``JobEvent.to_dict()``) of the records; ``fold``
prints the job documents they fold into, exactly as the sink would index them, sorted by
document id. No service is needed: this is how a person checks what a file of records
turns into.

A record the parser rejects is reported on stderr as one line, ``path:line: reason:
message``, and skipped; the exit code is then 1 (0 when every record was good). A bad job
of a ``squeue``/``sacct`` document is reported the same way, as ``path:line jobs[i]:
reason: message``, and only it is skipped: the document's other jobs are printed. ``-``
reads standard input. ``flux-eventlog`` files are either ready records
(``{"id", "eventlog", "jobspec", "R"}``) or, with ``--jobspec`` / ``--R`` / ``--id``, the
plain output of ``flux job eventlog --format=json``. ``slurm-squeue`` reads ``scontrol show
job --json`` too: Slurm answers both with the same job-info response.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import click

from pipeline.core.model import JobEvent
from pipeline.fold import fold as fold_events
from pipeline.fold.nodes import fold_nodes
from pipeline.parsers import FORMATS, NODE_FORMATS, parse_parts, split_records
from pipeline.runtime.errors import ParseError
from pipeline.runtime.invocation import get_config

__all__ = ["Reader", "fold", "parse"]

STDIN = "-"


@dataclass
class Reader:
    """Reads source files of one format into canonical events, noting bad records."""

    fmt: str
    cluster: str
    jobspec: bytes | None = None
    R: bytes | None = None
    job_id: str | None = None
    errors: list[str] = field(default_factory=list)

    def events(self, paths: Sequence[str]) -> Iterator[JobEvent]:
        for path in paths:
            where = "<stdin>" if path == STDIN else path
            try:
                data = sys.stdin.buffer.read() if path == STDIN else Path(path).read_bytes()
            except OSError as exc:
                self._bad(where, "unreadable", exc.strerror or str(exc))
                continue
            for line, payload in self._records(where, data):
                try:
                    parts = parse_parts(self.fmt, payload, cluster=self.cluster)
                except ParseError as exc:
                    self._bad(f"{where}:{line}", exc.reason, exc.message)
                    continue
                except Exception as exc:  # a parser bug must not end the run
                    self._bad(f"{where}:{line}", "internal-error",
                              f"{type(exc).__name__}: {exc}")
                    continue
                for part in parts:
                    if part.error is not None:
                        self._bad(f"{where}:{line} jobs[{part.index}]", part.error.reason,
                                  part.error.message)
                    yield from part.events

    def _records(self, where: str, data: bytes) -> Iterator[tuple[int, bytes]]:
        if self.fmt == "flux-eventlog" and (self.jobspec or self.R or self.job_id):
            from pipeline.parsers.flux import build_eventlog_record

            try:
                yield 1, build_eventlog_record(data, self.jobspec, self.R, self.job_id)
            except ParseError as exc:
                self._bad(f"{where}:1", exc.reason, exc.message)
            return
        yield from split_records(self.fmt, data)

    def _bad(self, where: str, reason: str, message: str) -> None:
        line = f"{where}: {reason}: {message}"
        self.errors.append(line)
        click.echo(line, err=True)


def _dumps(obj: Any) -> str:
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":"), default=str)


def _source_options(func: Callable[..., Any]) -> Callable[..., Any]:
    options = [
        click.argument("paths", nargs=-1, required=True,
                       type=click.Path(allow_dash=True, dir_okay=False, exists=True)),
        click.option("--format", "fmt", required=True, type=click.Choice(sorted(FORMATS)),
                     help="Source format of the files (slurm-squeue: also "
                          "scontrol show job --json)."),
        click.option("--cluster", default=None,
                     help="Cluster name for records that do not state it "
                          "(default: the config's cluster)."),
        click.option("--jobspec", type=click.Path(exists=True, dir_okay=False, path_type=Path),
                     help="flux-eventlog: the job's jobspec (flux job info ID jobspec)."),
        click.option("--R", "r_path",
                     type=click.Path(exists=True, dir_okay=False, path_type=Path),
                     help="flux-eventlog: the job's R (flux job info ID R)."),
        click.option("--id", "job_id",
                     help="flux-eventlog: the job id (decimal, f58 or dothex)."),
    ]
    for option in reversed(options):
        func = option(func)
    return click.pass_context(func)


def _reader(ctx: click.Context, fmt: str, cluster: str | None, jobspec: Path | None,
            r_path: Path | None, job_id: str | None) -> Reader:
    if cluster is None:
        cluster = get_config(ctx).cluster
    return Reader(fmt=fmt, cluster=cluster,
                  jobspec=jobspec.read_bytes() if jobspec else None,
                  R=r_path.read_bytes() if r_path else None, job_id=job_id)


@click.command("parse")
@_source_options
def parse(ctx: click.Context, paths: tuple[str, ...], fmt: str, cluster: str | None,
          jobspec: Path | None, r_path: Path | None, job_id: str | None) -> None:
    """Source records -> canonical events, one JSON object a line."""
    reader = _reader(ctx, fmt, cluster, jobspec, r_path, job_id)
    for ev in reader.events(paths):
        click.echo(_dumps(ev.to_dict()))
    ctx.exit(1 if reader.errors else 0)


@click.command("fold")
@_source_options
def fold(ctx: click.Context, paths: tuple[str, ...], fmt: str, cluster: str | None,
         jobspec: Path | None, r_path: Path | None, job_id: str | None) -> None:
    """Source records -> job documents as they would be indexed, one JSON object a line
    (node documents for a format of nodes: flux-resource-journal, slurm-nodes)."""
    reader = _reader(ctx, fmt, cluster, jobspec, r_path, job_id)
    docs = (fold_nodes(list(reader.events(paths))) if fmt in NODE_FORMATS
            else fold_events(reader.events(paths)))
    for doc in docs:
        click.echo(_dumps(doc))
    ctx.exit(1 if reader.errors else 0)
