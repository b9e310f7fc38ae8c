"""The job-state and node-state tables seen through bounded caches of live folds.

Reading a job's state from the table costs a RocksDB read, a JSON decode and a
``JobFold.from_dict`` on every event, while most events belong to a job seen moments ago
(a job's events come in bursts). :class:`JobStates` keeps the folds of the most recently
used jobs in memory (LRU, bounded by the size of their table values: a count of folds
would not bound memory, since a fold of a whole job's life is five times one of a pending
job, and a big job's fifty). The table stays the truth: every change is written
through at once (RocksDB, and its changelog at the next commit), and the cache is emptied
whenever this worker's partitions change, because another worker may have written the
table in between and recovery rewrites it.

Table values are the JSON bytes of ``JobFold.to_dict()`` (``JobFold.to_json()``, each
event encoded once): the table's serializer is ``raw`` (with Faust's ``json`` a dict is
encoded twice, for the store and for the changelog). The bytes are the JSON Faust's
serializer wrote before, so a store or changelog of an earlier version reads the same.

The node table (:class:`NodeStates`) is read the same way: a node's state is a head and
segments (:meth:`pipeline.fold.node_state.NodeFold.save`), each JSON.
"""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from collections import OrderedDict
from collections.abc import Iterator, Mapping, MutableMapping
from typing import Any, Generic, TypeVar

from agents.table import JobsTable
from pipeline.fold import JobFold, StateTooLarge
from pipeline.fold.node_state import NodeFold

__all__ = ["FOLD_CACHE_BYTES", "MAX_STATE_BYTES", "NODE_CACHE_BYTES", "JobStates",
           "NodeStates", "decode_state", "encode_state", "is_segment_key", "load_node",
           "segment_key", "stored_nodes"]

F = TypeVar("F")

#: a job state's budget when none is given (``worker.max_state_bytes``' default)
MAX_STATE_BYTES = 512 * 1024

#: the folds kept in memory, counted by their table values' length: a fold in memory
#: takes about six times its value (its events, each event's JSON, the incarnation
#: folded), so ~25 MiB in all. That holds 4,000 pending jobs of a catch-up (~930-byte
#: values) or ~850 running ones of a live feed (~4.6 KB): 2,048 of the latter held 52 MiB
#: (benchmarks/2026-12-07/fold_cache.py). A miss costs the job's whole fold again (~1 ms
#: on a slow core), so a small budget costs CPU: 2 MiB cost 9 % more per event than
#: 2,048 folds.
FOLD_CACHE_BYTES = 4 * 1024 * 1024
#: the same for the nodes' folds: a Flux node's value is ~66 KB once its window is full
#: (256 events), so this holds ~125 nodes, and not 2,048 of them (~800 MiB)
NODE_CACHE_BYTES = 8 * 1024 * 1024


def encode_state(fold: JobFold, max_bytes: int = MAX_STATE_BYTES) -> bytes:
    """A fold's table value, at most ``max_bytes`` long (:meth:`JobFold.fit`; raises
    :class:`~pipeline.fold.StateTooLarge`)."""
    return fold.fit(max_bytes)


def decode_state(value: bytes | str | Mapping[str, Any] | None) -> dict[str, Any] | None:
    """A table value (JSON bytes; a dict from an older serializer) -> the state dict."""
    if value is None:
        return None
    if isinstance(value, Mapping):
        return dict(value)
    return dict(json.loads(value))


class _States(ABC, Generic[F]):
    """Key -> fold, through a bounded LRU of folds, writing through to ``table``."""

    def __init__(self, table: MutableMapping[bytes, Any],
                 capacity_bytes: int = FOLD_CACHE_BYTES,
                 max_bytes: int = MAX_STATE_BYTES) -> None:
        self.table = table
        self.capacity_bytes = capacity_bytes
        self.max_bytes = max_bytes
        self._folds: OrderedDict[bytes, tuple[F, int]] = OrderedDict()  # fold, value length
        self.cached_bytes = 0
        self.hits = self.misses = 0

    @abstractmethod
    def _read(self, key: bytes) -> tuple[F, int] | None:
        """The key's fold from the table and its stored length; None: no state."""

    @abstractmethod
    def _write(self, key: bytes, fold: F) -> int:
        """Write the fold to the table, within ``max_bytes`` (else StateTooLarge); its
        stored length."""

    def get(self, key: bytes) -> F | None:
        """The key's fold, None if the table has no state for it."""
        cached = self._folds.get(key)
        if cached is not None:
            self.hits += 1
            self._folds.move_to_end(key)
            return cached[0]
        self.misses += 1
        read = self._read(key)
        if read is None:
            return None
        fold, size = read
        self._remember(key, fold, size)
        return fold

    def put(self, key: bytes, fold: F) -> None:
        """Write the state (always: see agents/jobs.py). A state that cannot fit its
        budget (:class:`~pipeline.fold.StateTooLarge`) is not written, and its fold is
        forgotten: the key goes on from its last state written."""
        try:
            size = self._write(key, fold)
        except StateTooLarge:
            self._drop(key)
            raise
        self._remember(key, fold, size)

    def flushed(self) -> None:
        """A batch's outputs are confirmed: the table keeps the offsets its changelog
        reached (agents.table)."""
        if isinstance(self.table, JobsTable):
            self.table.persist_offsets()

    def forget(self, key: bytes) -> None:
        """Drop the key's fold from memory: its next event starts from the table."""
        self._drop(key)

    def clear(self) -> None:
        """Forget every fold (partitions moved: the table may have changed under us)."""
        self._folds.clear()
        self.cached_bytes = 0

    def _drop(self, key: bytes) -> None:
        cached = self._folds.pop(key, None)
        if cached is not None:
            self.cached_bytes -= cached[1]

    def _remember(self, key: bytes, fold: F, size: int) -> None:
        """Keep ``fold`` as the newest; the oldest go until the rest fit the budget (the
        newest stays even alone above it)."""
        self._drop(key)
        self._folds[key] = (fold, size)
        self.cached_bytes += size
        while self.cached_bytes > self.capacity_bytes and len(self._folds) > 1:
            _, (_, old) = self._folds.popitem(last=False)
            self.cached_bytes -= old


class JobStates(_States[JobFold]):
    """Job key -> JobFold, over the jobs table."""

    def _read(self, key: bytes) -> tuple[JobFold, int] | None:
        value = self.table.get(key)
        state = decode_state(value)
        if state is None:
            return None
        return JobFold.from_dict(state), len(value) if isinstance(value, bytes | str) else 0

    def _write(self, key: bytes, fold: JobFold) -> int:
        value = encode_state(fold, self.max_bytes)
        self.table[key] = value
        return len(value)

    def delete(self, key: bytes) -> None:
        self._drop(key)
        if key in self.table:
            del self.table[key]


def segment_key(key: bytes, number: int) -> bytes:
    """The table key of a node's stored segment (:mod:`pipeline.fold.node_state`,
    "Stored"): NUL is in no node key (:func:`agents.canonical.fit_node_event` refuses
    one)."""
    return b"%s\x00%d" % (key, number)


def is_segment_key(key: bytes) -> bool:
    return b"\x00" in key


def load_node(table: Mapping[bytes, Any], key: bytes, head: Mapping[str, Any]) -> NodeFold:
    """The fold of node ``key`` whose stored head is ``head``, its segments read from
    ``table``."""
    return NodeFold.load(head, {n: table[segment_key(key, n)] for n in NodeFold.segments(head)})


def stored_nodes(table: Mapping[bytes, Any]) -> Iterator[tuple[bytes, NodeFold]]:
    """Every node of ``table`` (its heads; segments skipped) and its fold."""
    for key, value in table.items():
        if is_segment_key(key):
            continue
        head = decode_state(value)
        if head is not None:
            yield key, load_node(table, key, head)


class NodeStates(_States[NodeFold]):
    """Node key (``cluster:node``) -> NodeFold, over the nodes table: a head under the
    node's key and its segments under :func:`segment_key` (:meth:`NodeFold.save`), within
    the same state budget as a job's; the cache has a budget of its own
    (:data:`NODE_CACHE_BYTES`).

    The first save of a node after :meth:`clear` (the worker started, or its partitions
    moved) writes its state whole: the store may then hold segments its changelog lacks
    (written before a crash, never confirmed), and a save of the changes only would name
    them in a head the changelog gets. A node saved since holds nothing more in the store
    than in the changelog: a batch whose outputs are not confirmed stops the worker."""

    def __init__(self, table: MutableMapping[bytes, Any],
                 capacity_bytes: int = NODE_CACHE_BYTES,
                 max_bytes: int = MAX_STATE_BYTES) -> None:
        super().__init__(table, capacity_bytes, max_bytes)
        self._saved: set[bytes] = set()  # nodes saved since the last clear()

    def _read(self, key: bytes) -> tuple[NodeFold, int] | None:
        head = decode_state(self.table.get(key))
        if head is None:
            return None
        fold = load_node(self.table, key, head)
        return fold, fold.stored_bytes

    def _write(self, key: bytes, fold: NodeFold) -> int:
        saved = fold.save(self.max_bytes, whole=key not in self._saved)
        for number, value in saved.segments:
            self.table[segment_key(key, number)] = value
        self.table[key] = saved.head
        for number in saved.dead:
            dead = segment_key(key, number)
            if dead in self.table:
                del self.table[dead]
        self._saved.add(key)
        return fold.stored_bytes

    def clear(self) -> None:
        super().clear()
        self._saved.clear()
