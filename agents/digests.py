"""An open-addressing index of 16-byte digests to record numbers, in one flat array.

The worker keeps per tracked job a few numbers (:mod:`agents.active_jobs`) and per recent
event a digest (:class:`agents.canonical.RecentIds`). A Python dict of a million such
entries costs a key object, a value object and the dict's own slots: ~190 bytes a job,
138 MiB of a worker's 440 MiB at a million tracked jobs (benchmarks/2026-12-04). Here the
owner keeps its records in a ``bytearray`` of fixed-size records, each starting with its
digest, and this index maps a digest to its record's number with 4 bytes per slot: no
Python object per entry. Python has no such structure and no library of the project has
one for bytes records, hence this one, kept to what its two owners need.

Linear probing over a power-of-two table at most half full; the digest's first 8 bytes
are its hash (a blake2b digest is uniform). Removal shifts the entries that follow back
(Knuth's algorithm R), so no tombstones accumulate. A slot holds the record number + 1
(0: empty); the owner reads a record's digest through ``digest_of``.
"""

from __future__ import annotations

from array import array
from collections.abc import Callable, Iterable

__all__ = ["DIGEST_SIZE", "DigestIndex"]

#: bytes of a digest (blake2b's ``digest_size``): at a million entries two digests are the
#: same with a chance of ~1e-27, so a digest stands for its key
DIGEST_SIZE = 16

_MIN_SLOTS = 16


def _slots_for(entries: int) -> int:
    slots = _MIN_SLOTS
    while slots < 2 * entries + 2:
        slots *= 2
    return slots


class DigestIndex:
    """Digest -> record number; ``digest_of(n)`` is the digest of the owner's record ``n``."""

    def __init__(self, digest_of: Callable[[int], bytes], slots: int = _MIN_SLOTS) -> None:
        self._digest_of = digest_of
        self._slots = array("I", bytes(4 * slots))
        if self._slots.itemsize != 4:  # pragma: no cover - 'I' is 4 bytes where CPython runs
            self._slots = array("L", bytes(self._slots.itemsize * slots))
        self._mask = slots - 1
        self._used = 0

    def __len__(self) -> int:
        return self._used

    @property
    def nbytes(self) -> int:
        return len(self._slots) * self._slots.itemsize

    def _home(self, digest: bytes) -> int:
        return int.from_bytes(digest[:8], "little") & self._mask

    def _probe(self, digest: bytes) -> int:
        """The slot holding ``digest``, or the empty slot where it would go."""
        slots, mask, digest_of = self._slots, self._mask, self._digest_of
        i = int.from_bytes(digest[:8], "little") & mask
        while True:
            ref = slots[i]
            if ref == 0 or digest_of(ref - 1) == digest:
                return i
            i = (i + 1) & mask

    def find(self, digest: bytes) -> int:
        """The record number of ``digest``, -1 if absent."""
        return self._slots[self._probe(digest)] - 1

    def add(self, digest: bytes, number: int) -> None:
        """``digest`` (absent, or already at ``number``) is record ``number``'s."""
        i = self._probe(digest)
        if self._slots[i] == 0:
            self._used += 1
        self._slots[i] = number + 1
        if 2 * self._used > len(self._slots):
            # from the old table itself: a list of a million numbers would be ~40 MiB of
            # int objects at once, whose pages malloc keeps after
            old = self._slots
            self.rebuild((ref - 1 for ref in old if ref), self._used)

    def move(self, digest: bytes, number: int) -> None:
        """``digest`` (present) is now record ``number``'s."""
        self._slots[self._probe(digest)] = number + 1

    def remove(self, digest: bytes) -> int:
        """Forget ``digest``; its record number, -1 if it was absent."""
        slots, mask = self._slots, self._mask
        i = self._probe(digest)
        number = slots[i] - 1
        if number < 0:
            return -1
        self._used -= 1
        # algorithm R: move back every entry of the run after i whose home is not in (i, j]
        j = i
        while True:
            j = (j + 1) & mask
            ref = slots[j]
            if ref == 0:
                break
            home = self._home(self._digest_of(ref - 1))
            if (i < home <= j) if i <= j else (i < home or home <= j):
                continue
            slots[i] = ref
            i = j
        slots[i] = 0
        return number

    def numbers(self) -> list[int]:
        """Every record number held (in slot order)."""
        return [ref - 1 for ref in self._slots if ref]

    def rebuild(self, numbers: Iterable[int], entries: int) -> None:
        """Index exactly the records ``numbers`` (``entries`` of them), in a table sized
        for them."""
        slots = _slots_for(entries)
        self._slots = array(self._slots.typecode, bytes(self._slots.itemsize * slots))
        self._mask = slots - 1
        self._used = 0
        table, mask, digest_of = self._slots, self._mask, self._digest_of
        for number in numbers:
            i = int.from_bytes(digest_of(number)[:8], "little") & mask
            while table[i]:
                i = (i + 1) & mask
            table[i] = number + 1
            self._used += 1
