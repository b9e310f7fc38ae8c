"""``jobstream publish --format F PATH...``: source record files -> ``hpc.jobs.raw``.

For backfills and tests. Each record becomes one RawRecord (payload = the record's bytes
untouched), keyed ``cluster:job_id`` by the format's parser. A record the parser rejects
is reported on stderr (``path:line: reason: message``, like ``jobstream parse``) and sent to
the DLQ topic with the headers of :mod:`pipeline.kafka.dlq` instead; the exit code is then 1.
Whatever the parser raises is such a rejection: an exception that is not a ParseError (a
parser bug) is reason ``internal-error`` with its message, and the run goes on.

A ``squeue``/``sacct`` document with some bad jobs and some good ones is published whole,
keyed by its first good job: the worker dead-letters each bad job on its own when it reads
the record (:func:`pipeline.parsers.normalize.normalize_parts`), so publishing the document is
what keeps its good jobs. Its bad jobs are reported here (``path:line jobs[i]: reason:
message``) and make the exit code 1; a document none of whose jobs is good is a rejected
record.

Records go straight to Kafka through a producer with the edges' settings
(:func:`pipeline.kafka.producer.producer_config`: idempotent, ``acks=all``, the site's properties
file), not through a spool: the input file is itself the durable copy, and a run that
could not deliver everything fails (exit 69) and can simply be repeated (duplicates are
dropped downstream).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import click
from confluent_kafka import KafkaError, KafkaException

from pipeline.codecs.codec import raw_to_avro
from pipeline.core.model import RawRecord
from pipeline.edges.base import raw_codec
from pipeline.kafka.dlq import dlq_headers, dropped
from pipeline.kafka.producer import producer_config
from pipeline.parsers import FORMATS, Part, parse_parts, split_records
from pipeline.runtime.backoff import retry
from pipeline.runtime.config import Config
from pipeline.runtime.errors import ParseError, ServiceError
from pipeline.runtime.invocation import get_config

__all__ = ["PublishResult", "publish", "publish_records"]

logger = logging.getLogger(__name__)


@dataclass
class PublishResult:
    published: int = 0
    bad: int = 0
    #: bad jobs of published multi-job records (the worker dead-letters them)
    bad_parts: int = 0
    failed: int = 0
    errors: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class SourceRecord:
    where: str
    payload: bytes


def _records(fmt: str, paths: Sequence[Path], *, jobspec: Path | None, r_path: Path | None,
             job_id: str | None) -> Iterator[SourceRecord]:
    for path in paths:
        data = path.read_bytes()
        if fmt == "flux-eventlog" and (jobspec or r_path or job_id):
            from pipeline.parsers.flux import build_eventlog_record

            # bad --jobspec/--R/--id is a usage problem: ParseError ends the command
            payload = build_eventlog_record(
                data, jobspec.read_bytes() if jobspec else None,
                r_path.read_bytes() if r_path else None, job_id)
            yield SourceRecord(f"{path}:1", payload)
            continue
        for line, payload in split_records(fmt, data):
            yield SourceRecord(f"{path}:{line}", payload)


class _Sender:
    """One producer; counts delivery failures."""

    def __init__(self, cfg: Config) -> None:
        from confluent_kafka import Producer

        self.producer = Producer(producer_config(cfg, "jobstream-publish"))
        self.failed = 0
        self.last_error = ""

    def _delivered(self, err: Any, msg: Any) -> None:
        if err is not None:
            self.failed += 1
            self.last_error = f"{err.name()}: {err.str()}"

    def send(self, topic: str, value: bytes | None, key: str | None,
             headers: list[tuple[str, bytes]] | None = None) -> None:
        """Queue one record; ParseError ``too-large`` if the producer refuses it for its
        size (over ``message.max.bytes``: the topic could not take it either)."""
        try:
            retry(lambda: self.producer.produce(
                topic, value=value, key=key.encode() if key else None, headers=headers,
                on_delivery=self._delivered), on=BufferError, wait=lambda: self.producer.poll(0.1))
        except KafkaException as exc:
            err = exc.args[0] if exc.args else None
            if isinstance(err, KafkaError) and err.code() == KafkaError.MSG_SIZE_TOO_LARGE:
                raise ParseError("too-large", f"the record is {len(value or b'')} bytes, "
                                              "more than Kafka takes") from exc
            raise
        self.producer.poll(0)

    def flush(self, timeout: float) -> int:
        deadline = time.monotonic() + timeout
        left = self.producer.flush(1.0)
        while left and time.monotonic() < deadline:
            left = self.producer.flush(1.0)
        return left


def publish_records(cfg: Config, fmt: str, records: Iterator[SourceRecord], *,
                    on_record: Any = None, flush_timeout: float = 130.0) -> PublishResult:
    """Publish source records of format ``fmt``; bad ones go to the DLQ topic."""
    if fmt not in FORMATS:
        raise click.BadParameter(f"unknown format {fmt!r}", param_hint="--format")
    scheduler = FORMATS[fmt][0]
    codec = raw_codec(cfg)
    sender = _Sender(cfg)
    result = PublishResult()
    for rec in records:
        now = time.time()
        try:
            parts = _parts(fmt, rec.payload, cfg.cluster, now)
        except ParseError as exc:
            _reject(sender, cfg, fmt, rec, result, exc.reason, exc.message)
        except Exception as exc:  # noqa: BLE001 - a parser bug: this record's, not the run's
            logger.debug("%s: parser failed", rec.where, exc_info=True)
            _reject(sender, cfg, fmt, rec, result, "internal-error",
                    f"{type(exc).__name__}: {exc}")
        else:
            for part in parts:
                if part.error is not None:
                    result.bad_parts += 1
                    result.errors.append(f"{rec.where} jobs[{part.index}]: "
                                         f"{part.error.reason}: {part.error.message}")
            first = next((p.events[0] for p in parts if p.events), None)
            key = first.key if first is not None else None
            # a format of either scheduler (node-usage) is its record's
            of_record = scheduler or (first.scheduler if first is not None else None)
            raw = RawRecord(cluster=cfg.cluster, scheduler=of_record,  # type: ignore[arg-type]
                            format=fmt, received_at=now, payload=rec.payload, key=key)
            try:
                sender.send(cfg.topics.raw, codec.encode(raw_to_avro(raw)), key)
            except ParseError as exc:
                _reject(sender, cfg, fmt, rec, result, exc.reason, exc.message)
            else:
                result.published += 1
        if on_record is not None:
            on_record(rec)
    left = sender.flush(flush_timeout)
    result.failed = sender.failed + left
    if result.failed:
        raise ServiceError(f"{result.failed} record(s) not delivered to Kafka at "
                           f"{cfg.kafka.bootstrap} ({sender.last_error or 'timed out'}); "
                           "run the publish again (duplicates are dropped downstream)")
    return result


def _parts(fmt: str, payload: bytes, cluster: str, now: float) -> list[Part]:
    """The record's parts; ParseError if the record is bad, or if it has jobs and none of
    them is good (then it goes to the DLQ whole, as the worker would send it)."""
    parts = parse_parts(fmt, payload, cluster=cluster, received_at=now)
    bad = [p for p in parts if p.error is not None]
    if bad and len(bad) == len(parts):
        first = bad[0].error
        assert first is not None
        more = f" (and {len(bad) - 1} more refused job(s))" if len(bad) > 1 else ""
        raise ParseError(first.reason, first.message + more)
    return parts


def _reject(sender: _Sender, cfg: Config, fmt: str, rec: SourceRecord, result: PublishResult,
            reason: str, message: str) -> None:
    result.bad += 1
    result.errors.append(f"{rec.where}: {reason}: {message}")
    extra = {"format": fmt, "origin": rec.where}
    try:
        sender.send(cfg.topics.dlq, rec.payload, None,
                    dlq_headers(reason, "publish", message, extra))
    except ParseError as exc:  # too large for the DLQ too: the file keeps it, the DLQ says where
        sender.send(cfg.topics.dlq, None, None, dlq_headers(
            reason, "publish", message, {**extra, **dropped("value", rec.payload, exc.message)}))


@click.command("publish")
@click.option("--format", "fmt", required=True, type=click.Choice(sorted(FORMATS)),
              help="Source format of the files.")
@click.option("--jobspec", type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="flux-eventlog: the job's jobspec (flux job info ID jobspec).")
@click.option("--R", "r_path", type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="flux-eventlog: the job's R (flux job info ID R).")
@click.option("--id", "job_id", help="flux-eventlog: the job id (decimal, f58 or dothex).")
@click.option("--progress/--no-progress", default=True, help="Show a progress bar.")
@click.argument("paths", nargs=-1, required=True,
                type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.pass_context
def publish(ctx: click.Context, fmt: str, jobspec: Path | None, r_path: Path | None,
            job_id: str | None, progress: bool, paths: tuple[Path, ...]) -> None:
    """Publish source records to the raw topic (backfills, tests)."""
    cfg = get_config(ctx)
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeRemainingColumn,
        TransferSpeedColumn,
    )

    total = sum(p.stat().st_size for p in paths)
    records = _records(fmt, paths, jobspec=jobspec, r_path=r_path, job_id=job_id)
    bar = Progress(TextColumn("publishing {task.description}"), BarColumn(),
                   TransferSpeedColumn(), MofNCompleteColumn(), TimeRemainingColumn(),
                   transient=True, disable=not progress)
    with bar:
        task = bar.add_task(fmt, total=total)
        result = publish_records(
            cfg, fmt, records, on_record=lambda rec: bar.advance(task, len(rec.payload) + 1))
    for line in result.errors:
        click.echo(f"jobstream publish: {line}", err=True)
    click.echo(f"published {result.published} record(s) to {cfg.topics.raw}"
               + (f"; {result.bad} bad record(s) sent to {cfg.topics.dlq}" if result.bad
                  else "")
               + (f"; {result.bad_parts} bad job(s) in published records, which the worker "
                  f"sends to {cfg.topics.dlq}" if result.bad_parts else ""), err=True)
    if result.bad or result.bad_parts:
        ctx.exit(1)
