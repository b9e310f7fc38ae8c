"""The crash guard: a record that killed the process twice is not handled a third time.

Why. A stage that reads Kafka commits only what it has handled, so a process that dies
while handling a record (an uncaught exception from a bug, a MemoryError, the OOM killer,
a segfault in C code) restarts on that same record, and dies again, for good: one record
stops the stream. Every *error* a stage expects is already caught per record and sent to
the DLQ; the guard is for the deaths nothing can catch. It records, in a small file that
outlives the process, which coordinate the process is handling right now; the next
process reads what the last one left and knows where it died, and how many runs in a row
died at that same place. Past ``threshold`` deaths (2 by default: one may be an innocent
kill, by an operator or by the OOM killer for another process's sake), ``poisoned(coord)``
is true, and the caller dead-letters the record instead of handling it.

How. The file is a fixed :data:`CrashGuard.SIZE` bytes, ``mmap``-ed and written in place:
a coordinate and a state byte per record, no system call, no fsync. A process that dies
leaves its writes in the kernel's page cache, which the next process reads; only a crash
of the whole machine may lose them, and a power cut is no sign of a poison record. Each
write is ordered so that a death in the middle of one leaves a consistent file (the
state byte, one byte, is written last): at worst the death is counted as "between
coordinates", which says nothing about any of them.

The file holds two slots: the *suspect* (where the previous runs died, and how many in a
row), settled once when a process opens the file, and the *current* coordinate with the
state byte ``busy`` (handling it), ``idle`` (between coordinates) or ``clean`` (stopped
cleanly). On open:

* ``busy`` at C: the last run died handling C: the suspect becomes C, with one more death
  if it was C already, else one;
* ``idle``: the last run died (or exited on an error) between coordinates: the suspect
  stays what it was, neither more nor less guilty;
* ``clean``: no suspect.

Handling the suspect coordinate and getting past it (:meth:`CrashGuard.end`) clears it, so
do a clean stop (:meth:`CrashGuard.close`). A coordinate is an opaque string, or a Kafka
``(topic, partition, offset)``, which is the string ``topic[partition]@offset``.

One process per file: the file is locked (``flock``) while open, so two processes that
would share a directory take separate files (:meth:`CrashGuard.claim`).
"""

from __future__ import annotations

import fcntl
import hashlib
import logging
import mmap
import os
import struct
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import ClassVar

__all__ = ["Coord", "CrashGuard", "Death", "GuardBusyError"]

logger = logging.getLogger(__name__)

#: A coordinate: an opaque string, or a Kafka record's (topic, partition, offset).
Coord = str | tuple[str, int, int]

_MAGIC = b"JSCG"
_VERSION = 1
# layout: magic(4) version(1) state(1) pad(2) suspect_deaths(4) suspect_len(4)
#         current_len(4) pid(4) pad(8) | suspect slot | current slot
_HEADER = struct.Struct("<4sBBxxIIII8x")
_STATE_AT = 5
_SUSPECT_DEATHS_AT = 8
_SUSPECT_LEN_AT = 12
_CURRENT_LEN_AT = 16
_U32 = struct.Struct("<I")

_CLEAN, _IDLE, _BUSY = 0, 1, 2


@dataclass(frozen=True, slots=True)
class Death:
    """Where the previous runs died, and how many of them in a row."""

    coord: str
    deaths: int


class GuardBusyError(RuntimeError):
    """Another live process holds this guard file."""


class CrashGuard:
    """Which coordinate this process is handling, kept where its successor can read it.

    :param path: the guard file (created, with its directory, if absent); None = a guard
        kept in memory only (it guards nothing: for when no file can be written)
    :param threshold: deaths in a row at one coordinate that make it :meth:`poisoned`
    :param innocent: exceptions that, leaving a :meth:`handling` block, are the
        application's deliberate errors rather than a death at the coordinate (the block
        ends as if it had succeeded); ``KeyboardInterrupt`` and ``SystemExit`` always are

    For one thread: a process handles one coordinate at a time.
    """

    #: bytes of the file (four pages)
    SIZE: ClassVar[int] = 16384
    #: longest coordinate kept as it is (UTF-8 bytes); a longer one is kept as its hash
    MAX_COORD_BYTES: ClassVar[int] = (SIZE - _HEADER.size) // 2

    _SUSPECT_AT: ClassVar[int] = _HEADER.size
    _CURRENT_AT: ClassVar[int] = _HEADER.size + MAX_COORD_BYTES

    def __init__(self, path: str | os.PathLike[str] | None, *, threshold: int = 2,
                 innocent: tuple[type[BaseException], ...] = ()) -> None:
        if threshold < 1:
            raise ValueError("threshold must be at least 1")
        self.path = Path(path) if path is not None else None
        self.threshold = threshold
        self._innocent: tuple[type[BaseException], ...] = (
            KeyboardInterrupt, SystemExit, *innocent)
        self._fd = -1
        self._closed = True  # until the file is open: nothing to release
        self._mm: mmap.mmap | bytearray
        if self.path is None:
            self._mm = bytearray(self.SIZE)
        else:
            self._mm = self._open(self.path)
        self._closed = False
        self._busy = False
        self._current: bytes | None = None
        self._suspect: bytes | None = None
        self._deaths = 0
        self._section = _Section(self)
        try:
            suspect = self._settle()
        except BaseException:
            self.close(clean=False)
            raise
        if suspect:
            self._suspect, self._deaths = suspect
            logger.warning("crash guard %s: the last %d run(s) died while handling %s",
                           self.path, self._deaths, suspect[0].decode("utf-8", "replace"))

    @classmethod
    def claim(cls, directory: str | os.PathLike[str], name: str, *, threshold: int = 2,
              innocent: tuple[type[BaseException], ...] = (), slots: int = 32) -> CrashGuard:
        """The first free guard file of ``name`` in ``directory``: ``<name>.crashguard``,
        else ``<name>.1.crashguard``, ... (several processes of one name on one host).

        A restarted process takes the lowest file no live process holds, which is the one
        it left when it is alone; two that died together may swap, which only mixes the
        coordinates each one checks, never makes a coordinate guilty without deaths.
        """
        base = Path(directory)
        for n in range(slots):
            suffix = ".crashguard" if n == 0 else f".{n}.crashguard"
            try:
                return cls(base / f"{name}{suffix}", threshold=threshold, innocent=innocent)
            except GuardBusyError:
                continue
        raise GuardBusyError(f"all {slots} crash guard files of {name} in {base} are held "
                             "by live processes")

    # -- what the last runs left ----------------------------------------------------

    @property
    def last_death(self) -> Death | None:
        """The suspect: the coordinate the previous runs died at and how many in a row
        (None: none, or it was handled since)."""
        if self._suspect is None:
            return None
        return Death(self._suspect.decode("utf-8", "replace"), self._deaths)

    def deaths(self, coord: Coord) -> int:
        """How many runs in a row died while handling ``coord`` (0 for any other)."""
        if self._suspect is None:
            return 0
        return self._deaths if _key(coord) == self._suspect else 0

    def poisoned(self, coord: Coord) -> bool:
        """Whether the last ``threshold`` runs each died while handling ``coord``."""
        return self._suspect is not None and self.deaths(coord) >= self.threshold

    # -- the hot path ---------------------------------------------------------------

    def begin(self, coord: Coord) -> None:
        """This process is handling ``coord`` from now on (until :meth:`end`)."""
        key = _key(coord)
        mm = self._mm
        if self._busy:  # the previous one never ended: never a mix of the two
            mm[_STATE_AT] = _IDLE
        at = self._CURRENT_AT
        mm[at:at + len(key)] = key
        _U32.pack_into(mm, _CURRENT_LEN_AT, len(key))
        mm[_STATE_AT] = _BUSY
        self._busy = True
        self._current = key

    def end(self) -> None:
        """The coordinate is handled and the process survived it; if it was the suspect,
        it is cleared."""
        self._mm[_STATE_AT] = _IDLE
        self._busy = False
        if self._current == self._suspect and self._suspect is not None:
            self._forgive()
        self._current = None

    def handling(self, coord: Coord) -> _Section:
        """``with guard.handling(coord): ...``: :meth:`begin`, then :meth:`end` when the
        block ends normally or by an ``innocent`` exception; any other exception leaves
        the coordinate as the one the process died at, if it dies of it."""
        self.begin(coord)
        return self._section

    # -- stopping -------------------------------------------------------------------

    def close(self, *, clean: bool = True) -> None:
        """Release the file; ``clean``: the process stops cleanly, so the next one has no
        suspect (False: leave the file as a death would, e.g. when the process exits on
        an error). Closing twice does nothing."""
        if self._closed:
            return
        self._closed = True
        mm = self._mm
        if clean:
            _U32.pack_into(mm, _SUSPECT_LEN_AT, 0)
            _U32.pack_into(mm, _SUSPECT_DEATHS_AT, 0)
            mm[_STATE_AT] = _CLEAN
            self._suspect, self._deaths = None, 0
        if isinstance(mm, mmap.mmap):
            mm.close()
        if self._fd >= 0:
            os.close(self._fd)  # and the lock with it
            self._fd = -1

    def __del__(self) -> None:
        # dropped without close(): released as a death would leave it (never "clean")
        try:
            self.close(clean=False)
        except Exception:  # noqa: S110 - a half-built guard, or the interpreter's teardown
            pass

    def __enter__(self) -> CrashGuard:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close(clean=exc_type is None)

    # -- the file -------------------------------------------------------------------

    def _open(self, path: Path) -> mmap.mmap:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                raise GuardBusyError(f"{path} is held by another live process") from None
            if os.fstat(fd).st_size != self.SIZE:
                if os.fstat(fd).st_size:
                    logger.warning("crash guard %s has a wrong size: starting afresh", path)
                os.ftruncate(fd, 0)
                os.ftruncate(fd, self.SIZE)
            mm = mmap.mmap(fd, self.SIZE)
        except BaseException:
            os.close(fd)
            raise
        self._fd = fd
        return mm

    def _settle(self) -> tuple[bytes, int] | None:
        """Read what the last run left, decide the suspect, write it down, go idle."""
        mm = self._mm
        magic, version, state, deaths, suspect_len, current_len, _ = _HEADER.unpack_from(mm)
        suspect: tuple[bytes, int] | None = None
        if magic == _MAGIC and version == _VERSION and state in (_CLEAN, _IDLE, _BUSY) \
                and suspect_len <= self.MAX_COORD_BYTES and current_len <= self.MAX_COORD_BYTES:
            old = bytes(mm[self._SUSPECT_AT:self._SUSPECT_AT + suspect_len]) \
                if suspect_len else None
            if state == _BUSY:
                current = bytes(mm[self._CURRENT_AT:self._CURRENT_AT + current_len])
                suspect = (current, deaths + 1 if current == old else 1)
            elif state == _IDLE and old is not None and deaths > 0:
                suspect = (old, deaths)
        elif magic != b"\0\0\0\0":
            logger.warning("crash guard %s is not one (or of another version): starting "
                           "afresh", self.path)
        _HEADER.pack_into(mm, 0, _MAGIC, _VERSION, _IDLE, 0, 0, 0, os.getpid() & 0xFFFFFFFF)
        if suspect is not None:
            key, n = suspect
            mm[self._SUSPECT_AT:self._SUSPECT_AT + len(key)] = key
            _U32.pack_into(mm, _SUSPECT_DEATHS_AT, n)
            _U32.pack_into(mm, _SUSPECT_LEN_AT, len(key))
        return suspect

    def _forgive(self) -> None:
        _U32.pack_into(self._mm, _SUSPECT_LEN_AT, 0)
        _U32.pack_into(self._mm, _SUSPECT_DEATHS_AT, 0)
        self._suspect, self._deaths = None, 0


class _Section:
    """The context manager of :meth:`CrashGuard.handling` (one per guard, reused: no
    allocation per record)."""

    __slots__ = ("_guard",)

    def __init__(self, guard: CrashGuard) -> None:
        self._guard = guard

    def __enter__(self) -> None:
        return None

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if exc_type is None or issubclass(exc_type, self._guard._innocent):
            self._guard.end()
        # else: left busy; if the process dies of it, this is where it died


def _key(coord: Coord) -> bytes:
    if type(coord) is tuple:
        topic, partition, offset = coord
        coord = f"{topic}[{partition}]@{offset}"
    data = coord.encode("utf-8", "surrogatepass")  # type: ignore[union-attr]
    if len(data) > CrashGuard.MAX_COORD_BYTES:
        return b"sha256:" + hashlib.sha256(data).hexdigest().encode()
    return data
