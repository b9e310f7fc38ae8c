"""The nodes table as agents.states.NodeStates keeps it: a head and segments per node
(pipeline.fold.node_state, "Stored")."""

from __future__ import annotations

import json

from agents.states import NodeStates, decode_state, is_segment_key, segment_key, stored_nodes
from pipeline.core.model import make_event_id
from pipeline.core.nodes import NodeEvent
from pipeline.fold.node_state import KEEP_NODE_EVENTS, MAX_SEGMENTS, NodeFold
from pipeline.fold.nodes import fold_nodes

T0 = 1_700_000_000.0
KEY = b"c:n1"


def allocations(first: int, count: int) -> list[NodeEvent]:
    """``alloc`` and ``free`` of jobs on node n1, as a Flux job's events give them."""
    out = []
    for i in range(first, first + count):
        name, job = ("alloc", "free")[i % 2], str(i // 2)
        out.append(NodeEvent(cluster="c", scheduler="flux", node="n1", event=name,
                             timestamp=T0 + i, source="flux-journal", context={"job_id": job},
                             event_id=make_event_id("c", "flux", "node", "n1", name, job,
                                                    T0 + i)))
    return out


class Changelog(dict[bytes, bytes]):
    """A store whose changes are also recorded, in order, as its changelog's records."""

    def __init__(self) -> None:
        super().__init__()
        self.records: list[tuple[bytes, bytes | None]] = []

    def __setitem__(self, key: bytes, value: bytes) -> None:
        super().__setitem__(key, value)
        self.records.append((key, value))

    def __delitem__(self, key: bytes) -> None:
        super().__delitem__(key)
        self.records.append((key, None))

    def replay(self, upto: int) -> dict[bytes, bytes]:
        """The store a worker recovers from the first ``upto`` records."""
        store: dict[bytes, bytes] = {}
        for key, value in self.records[:upto]:
            if value is None:
                store.pop(key, None)
            else:
                store[key] = value
        return store


def test_a_batch_writes_what_changed_not_the_nodes_whole_window() -> None:
    """A node whose window is full takes ~34 KB; a batch of two events writes a few KB
    (the head and one segment), and every MAX_SEGMENTS-th the window whole again."""
    nodes = NodeStates(Changelog())
    table = nodes.table
    assert isinstance(table, Changelog)
    fold = NodeFold()
    for ev in allocations(0, KEEP_NODE_EVENTS + 10):
        fold.add(ev)
    nodes.put(KEY, fold)
    whole = fold.stored_bytes
    assert whole > 30_000
    written = []
    for batch in range(3 * MAX_SEGMENTS):
        before = len(table.records)
        for ev in allocations(KEEP_NODE_EVENTS + 10 + 2 * batch, 2):
            fold.add(ev)
        nodes.put(KEY, fold)
        written.append(sum(len(v or b"") for _, v in table.records[before:]))
        head = decode_state(table[KEY])
        assert head is not None and len(NodeFold.segments(head)) <= MAX_SEGMENTS
        assert sorted(k for k in table if is_segment_key(k)) == sorted(
            segment_key(KEY, n) for n in NodeFold.segments(head))
    small = sorted(written)[:-3]  # the whole saves: one in MAX_SEGMENTS
    assert max(small) < whole / 10, (max(small), whole)
    assert sum(written) < len(written) * whole / 8, (sum(written), whole)
    [(_, stored)] = stored_nodes(table)
    events = allocations(0, KEEP_NODE_EVENTS + 10 + 6 * MAX_SEGMENTS)
    assert [stored.document()] == fold_nodes(events) == [fold.document()]


def test_a_worker_restarted_over_a_store_ahead_of_its_changelog_writes_the_state_whole() -> None:
    """A crash after the store took a batch's segment but before Kafka confirmed its
    changelog: the restarted worker reads the events again, and its save must not name
    that segment in a head the changelog gets without it."""
    store = Changelog()
    nodes = NodeStates(store)
    fold = NodeFold()
    for ev in allocations(0, 20):
        fold.add(ev)
    nodes.put(KEY, fold)
    confirmed = len(store.records)
    unconfirmed = allocations(20, 2)
    for ev in unconfirmed:
        fold.add(ev)
    nodes.put(KEY, fold)  # in the store; its changelog records are lost in the crash
    del store.records[confirmed:]

    restarted = NodeStates(store)  # the same store (RocksDB keeps it), a new process
    again = restarted.get(KEY)
    assert again is not None
    for ev in unconfirmed:  # read again: copies of what the store already holds
        assert not again.add(ev)
    restarted.put(KEY, again)

    recovered = store.replay(len(store.records))  # another worker, from the changelog
    [(_, fold_there)] = stored_nodes(recovered)
    assert [fold_there.document()] == fold_nodes(allocations(0, 22))


def test_a_state_of_the_single_value_format_reads_and_is_rewritten_in_segments() -> None:
    """A node's value as a worker before segments wrote it: the window in one value."""
    events = allocations(0, 10)
    old = {"events": [ev.to_dict() for ev in events], "summary": None, "frontier": None,
           "out": [], "dropped": 0}
    nodes = NodeStates({KEY: json.dumps(old).encode()})
    read = nodes.get(KEY)
    assert read is not None and [read.document()] == fold_nodes(events)
    read.add(allocations(10, 1)[0])
    nodes.put(KEY, read)
    head = decode_state(nodes.table[KEY])
    assert head is not None and "events" not in head
    assert sorted(nodes.table) == [KEY, segment_key(KEY, 0)]
    [(_, stored)] = stored_nodes(nodes.table)
    assert [stored.document()] == fold_nodes(allocations(0, 11))
    assert not any(stored.add(ev) for ev in events)  # copies change nothing
