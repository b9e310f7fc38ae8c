"""The sink under the crash guard: its guard file, its coordinates, the record-by-record mode.

:mod:`pipeline.runtime.crashguard` remembers what a process was handling when it died; this
module says what the sink tells it (see :mod:`pipeline.sink.runner` for why):

* a conversion: ``topic[partition]@offset``;
* a flush: ``flush`` and the batch's offset range per partition (:func:`flush_coord`); a
  later batch that overlaps it (:func:`overlap`) counts as the same flush (:func:`plan`);
* a record written alone (:func:`write_one_by_one`, the mode of a batch that overlaps a
  flush that killed the sink as often as the guard's threshold): ``record <where>``.
"""

from __future__ import annotations

import hashlib
import logging
import re
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path

from pipeline.runtime.config import Config
from pipeline.runtime.crashguard import CrashGuard, GuardBusyError
from pipeline.runtime.errors import JobstreamError
from pipeline.sink.consumer import Record, Stopped
from pipeline.sink.offsets import TopicPartition
from pipeline.sink.settlement import Router

__all__ = ["CRASH_THRESHOLD", "flush_coord", "open_guard", "overlap", "parse_flush", "plan",
           "ranges", "write_one_by_one"]

logger = logging.getLogger(__name__)

#: Runs in a row that died at one coordinate before it is dead-lettered (one death may be
#: an innocent kill: an operator, or the OOM killer for another process's sake).
CRASH_THRESHOLD = 2
_FLUSH = "flush "
_RECORD = "record "
_RANGE = re.compile(r"^(.+)\[(\d+)\]@(\d+)-(\d+)$")

#: (topic, partition) -> (first, last) offset of a batch's records there
_Ranges = Mapping[TopicPartition, tuple[int, int]]


def open_guard(cfg: Config, group_id: str) -> CrashGuard:
    """The crash guard of a sink of ``group_id``: the first free one of that group in
    ``sink.state_dir`` (default ``<stack.cache_dir>/sink-state``).

    One that cannot be opened (a read-only directory) is no reason not to run: the sink
    runs unguarded, in memory, and says so, as it was before there were guards.
    """
    directory = Path(cfg.sink.state_dir or Path(cfg.stack.cache_dir) / "sink-state")
    innocent = (JobstreamError, Stopped)
    try:
        return CrashGuard.claim(directory, _file_name(group_id), threshold=CRASH_THRESHOLD,
                                innocent=innocent)
    except (OSError, GuardBusyError) as exc:
        logger.error("no crash guard (%s): a record that kills the sink would kill it again "
                     "on every start; give sink.state_dir a directory the sink may write",
                     exc)
        return CrashGuard(None, threshold=CRASH_THRESHOLD, innocent=innocent)


def _file_name(group_id: str) -> str:
    """A file name for a consumer group (any characters, any length)."""
    safe = re.sub(r"[^A-Za-z0-9._-]", "_", group_id)[:100]
    if safe != group_id or not safe:
        safe += "-" + hashlib.blake2b(group_id.encode(), digest_size=6).hexdigest()
    return safe


def plan(records: list[Record], guard: CrashGuard) -> tuple[str, bool]:
    """The flush's coordinate, and whether it is written one record at a time."""
    batch = ranges(records)
    coord = flush_coord(batch, guard.MAX_COORD_BYTES)
    last = guard.last_death
    if last is None:
        return coord, False
    if last.coord.startswith(_RECORD):
        where = last.coord[len(_RECORD):]
        return coord, any(rec.where == where for rec in records)
    if last.coord.startswith(_FLUSH) and overlap(batch, parse_flush(last.coord)):
        if last.deaths >= guard.threshold:
            return coord, True
        return last.coord, False  # the same flush again, as far as deaths count
    return coord, False


def write_one_by_one(records: list[Record], guard: CrashGuard, router: Router,
                     write: Callable[[Record], Mapping[str, str]]) -> dict[str, str]:
    """Steps 1-5 (``write``) for one record at a time, each under its coordinate
    ``record <where>``: one whose turn killed the sink in the last runs (as many as the
    guard's threshold: a kill of an innocent sink can land there too) is dead-lettered
    instead."""
    failed: dict[str, str] = {}
    for rec in records:
        coord = _RECORD + rec.where
        with guard.handling(coord):
            deaths = guard.deaths(coord)
            if guard.poisoned(coord):
                router.dead_letter_crashed(rec, deaths, "writing", guard.threshold)
            else:
                failed.update(write(rec))
    return failed


def ranges(records: Iterable[Record]) -> dict[TopicPartition, tuple[int, int]]:
    out: dict[TopicPartition, tuple[int, int]] = {}
    for rec in records:
        offset = rec.msg.offset()
        old = out.get(rec.tp)
        out[rec.tp] = (offset, offset) if old is None else (min(old[0], offset),
                                                            max(old[1], offset))
    return out


def flush_coord(ranges: _Ranges, limit: int) -> str:
    """``flush t[0]@100-250 t[1]@7-99 ...``, partitions sorted, as many as fit in
    ``limit`` bytes (a partition left out only makes an overlap less likely to be seen)."""
    text = _FLUSH.rstrip()
    for (topic, partition), (first, last) in sorted(ranges.items()):
        part = f" {topic}[{partition}]@{first}-{last}"
        if len(text.encode()) + len(part.encode()) > limit:
            break
        text += part
    return text


def parse_flush(coord: str) -> dict[TopicPartition, tuple[int, int]]:
    out: dict[TopicPartition, tuple[int, int]] = {}
    for part in coord[len(_FLUSH):].split():
        m = _RANGE.match(part)
        if m:
            out[(m[1], int(m[2]))] = (int(m[3]), int(m[4]))
    return out


def overlap(a: _Ranges, b: _Ranges) -> bool:
    return any(tp in b and a[tp][0] <= b[tp][1] and b[tp][0] <= a[tp][1] for tp in a)
