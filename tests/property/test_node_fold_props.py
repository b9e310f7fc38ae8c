"""The node fold does not depend on the order or copies of its events (pipeline.fold.nodes),
nor does the worker's bounded fold (pipeline.fold.node_state) within its window.

Generated node event sets are messy on purpose: equal timestamps, a host of two ranks,
drains over drains with every ``overwrite``, truncates, jobs allocated and freed, Slurm
polls that see the same state again, reasons stamped before the poll, and copies of one
``event_id`` with different content.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from datafiles import vector
from hypothesis import given, settings
from hypothesis import strategies as st

from agents.states import NodeStates, decode_state, is_segment_key, segment_key
from pipeline.core.model import make_event_id
from pipeline.core.nodes import NodeEvent
from pipeline.fold.node_state import KEEP_NODE_EVENTS, MAX_SEGMENTS, NodeFold
from pipeline.fold.nodes import STATES, event_order, fold_nodes
from pipeline.parsers.flux_resource import RankMaps, parse_resource_journal

T0 = 1_700_000_000.0
#: few distinct times, so that many events share one
times = st.sampled_from([T0 + i for i in (0, 1, 2, 3, 5, 8, 13)])
FLUX_NODES = {"n0": [0], "n1": [1], "m": [5, 6]}  # m: a host with two ranks
FLUX_NAMES = ["restart", "resource-define", "online", "offline", "torpid", "lively", "drain",
              "undrain", "truncate", "alloc", "free", "mystery"]
REASONS = [None, "bad DIMM", "maintenance"]
SLURM_STATES = [["IDLE"], ["MIXED"], ["IDLE", "DRAIN"], ["MIXED", "DRAIN"], ["DOWN"],
                ["DOWN", "NOT_RESPONDING"], ["IDLE", "NOT_RESPONDING"], ["IDLE", "POWERED_DOWN"],
                ["UNKNOWN"]]


def _flux_context(name: str) -> st.SearchStrategy[dict[str, Any]]:
    if name == "restart":
        return st.fixed_dictionaries({"online": st.booleans()})
    if name == "drain":
        return st.fixed_dictionaries({"overwrite": st.sampled_from([0, 1, 2])})
    if name == "truncate":
        drain = st.none() | st.fixed_dictionaries({"timestamp": times,
                                                   "reason": st.sampled_from(REASONS)})
        return st.fixed_dictionaries({"online": st.booleans(), "torpid": st.booleans(),
                                      "drain": drain})
    if name in ("alloc", "free"):
        return st.fixed_dictionaries({"job_id": st.sampled_from(["1", "2"])})
    return st.just({})


@st.composite
def flux_events(draw: st.DrawFn) -> NodeEvent:
    node = draw(st.sampled_from(sorted(FLUX_NODES)))
    name = draw(st.sampled_from(FLUX_NAMES))
    ts = draw(times)
    context = {**draw(_flux_context(name)), "rank": draw(st.sampled_from(FLUX_NODES[node]))}
    reason = draw(st.sampled_from(REASONS)) if name in ("drain", "truncate") else None
    return NodeEvent(cluster="c", scheduler="flux", node=node, event=name, timestamp=ts,
                     source="flux-resource-journal", reason=reason, context=context,
                     event_id=make_event_id("c", "flux", "node", node, context["rank"], name,
                                            ts, context.get("job_id", "")))


@st.composite
def slurm_events(draw: st.DrawFn) -> NodeEvent:
    """One poll's event of a node, made as :mod:`pipeline.parsers.slurm_nodes` makes it."""
    node = draw(st.sampled_from(["s0", "s1"]))
    states = draw(st.sampled_from(SLURM_STATES))
    reason = draw(st.sampled_from(REASONS))
    ts = draw(times)
    changed = draw(st.none() | st.sampled_from([T0 - 5, T0 + 2, T0 + 4, T0 + 20]))
    by = draw(st.sampled_from([None, "root", "slurm"])) if reason else None
    context = {"state": states, "reason_changed_at": changed, "partitions": ["p"],
               "observed": "last_update"}
    return NodeEvent(cluster="c", scheduler="slurm", node=node, event="state", timestamp=ts,
                     source="slurm-nodes", reason=reason, by=by, context=context,
                     event_id=make_event_id("c", "slurm", "node", node, "state",
                                            "+".join(states), reason or "", changed or 0.0, ts))


@st.composite
def event_sets(draw: st.DrawFn) -> list[NodeEvent]:
    events = draw(st.lists(flux_events() | slurm_events(), min_size=1, max_size=30))
    # copies of one id whose content differs (sources should not do it; the fold must still
    # pick the same one in any order)
    for ev in draw(st.lists(st.sampled_from(events), max_size=3)):
        events.append(replace(ev, timestamp=draw(times), context={**ev.context, "odd": 1}))
    return events


@settings(max_examples=400, deadline=None)
@given(data=st.data(), events=event_sets())
def test_shuffled_and_duplicated_events_fold_to_the_same_documents(
        data: st.DataObject, events: list[NodeEvent]) -> None:
    copies = data.draw(st.lists(st.sampled_from(events), max_size=len(events)))
    shuffled = data.draw(st.permutations(events + copies))
    assert fold_nodes(shuffled) == fold_nodes(events)


@settings(max_examples=300, deadline=None)
@given(data=st.data(), events=event_sets())
def test_revision_only_grows_as_events_arrive(data: st.DataObject,
                                              events: list[NodeEvent]) -> None:
    """Any events arriving first, then the rest: no document's revision goes down (the
    sink's external version), and a new distinct event raises it."""
    order = data.draw(st.permutations(events))
    cut = data.draw(st.integers(0, len(order)))
    before = {d["node"]: d["revision"] for d in fold_nodes(order[:cut])}
    after = {d["node"]: d["revision"] for d in fold_nodes(order)}
    assert all(after[node] >= rev for node, rev in before.items())
    new_ids = {ev.key for ev in order[cut:]
               if ev.event_id not in {e.event_id for e in order[:cut]}}
    assert all(after[key.split(":", 1)[1]] > before.get(key.split(":", 1)[1], 0)
               for key in new_ids)


@settings(max_examples=300, deadline=None)
@given(events=event_sets())
def test_documents_are_well_formed(events: list[NodeEvent]) -> None:
    for doc in fold_nodes(events):
        assert doc["state"] in STATES
        assert set(doc["state_s"]) == set(STATES)
        assert all(v >= 0 for v in doc["state_s"].values())
        # the current state has lasted since `since`, up to the newest event
        assert doc["since"] <= doc["updated_at"]
        assert doc["state_s"][doc["state"]] * 1000 >= doc["updated_at"] - doc["since"] - 1
        assert doc["revision"] == len({ev.event_id for ev in events if ev.node == doc["node"]})


def _recorded() -> list[NodeEvent]:
    maps = RankMaps()
    out: list[NodeEvent] = []
    for line in vector("flux", "real-0.88-resource-journal.jsonl").read_bytes().splitlines():
        out += parse_resource_journal(maps.record(line), cluster="fluxtest")
    return out


RECORDED = _recorded()


@settings(max_examples=100, deadline=None)
@given(data=st.data())
def test_the_recorded_journal_folds_the_same_in_any_order(data: st.DataObject) -> None:
    copies = data.draw(st.lists(st.sampled_from(RECORDED), max_size=10))
    assert fold_nodes(data.draw(st.permutations(RECORDED + copies))) == fold_nodes(RECORDED)


# -- the worker's bounded fold (pipeline.fold.node_state) -------------------------------


def _bounded_documents(arrivals: list[NodeEvent], keep: int, saved: set[int],
                       read: set[int], looked: set[int]) -> list[dict[str, Any]]:
    """The documents of :class:`NodeFold` s given ``arrivals`` in that order, one per node,
    each saved into a table (:class:`agents.states.NodeStates`' entries: a head and
    segments) after the arrivals numbered in ``saved`` and read back from it after those
    in ``read``; after those in ``looked``, the node's document is the fold of its events
    so far (as the worker writes one at the end of each batch)."""
    folds: dict[str, NodeFold] = {}
    nodes = NodeStates({}, capacity_bytes=0)
    for i, ev in enumerate(arrivals):
        fold = folds.setdefault(ev.key, NodeFold(keep))
        fold.add(ev)
        if i in looked:
            assert [fold.document()] == fold_nodes(e for e in arrivals[:i + 1] if e.key == ev.key)
        key = ev.key.encode()
        if i in saved or i in read:
            nodes.put(key, fold)
        if i in read:
            head = decode_state(nodes.table[key])
            assert head is not None
            folds[ev.key] = NodeFold.load(head, {n: nodes.table[segment_key(key, n)]
                                                 for n in NodeFold.segments(head)}, keep)
    docs = [folds[key].document() for key in sorted(folds)]
    assert all(doc is not None for doc in docs)
    heads = [decode_state(v) or {} for k, v in nodes.table.items() if not is_segment_key(k)]
    assert all(len(NodeFold.segments(head)) <= MAX_SEGMENTS for head in heads)
    return docs  # type: ignore[return-value]


@settings(max_examples=400, deadline=None)
@given(data=st.data(), events=event_sets(), keep=st.sampled_from([1, 2, 3, 5, KEEP_NODE_EVENTS]))
def test_the_bounded_fold_gives_every_events_documents_within_its_window(
        data: st.DataObject, events: list[NodeEvent], keep: int) -> None:
    """Copies and any order in which no event comes more than ``keep`` places late: the
    documents of every event (fold_nodes'), none dropped, through any saves."""
    copies = data.draw(st.lists(st.sampled_from(events), max_size=len(events)))
    ordered = sorted(events + copies, key=event_order)
    late = data.draw(st.lists(st.integers(0, keep - 1), min_size=len(ordered),
                              max_size=len(ordered)))
    arrivals = [ev for _, _, ev in sorted(
        ((i + d, i, ev) for i, (d, ev) in enumerate(zip(late, ordered, strict=True))),
        key=lambda t: t[:2])]
    points = st.lists(st.integers(0, len(arrivals) - 1), max_size=len(arrivals))
    saved, read = set(data.draw(points)), set(data.draw(points))
    looked = set(data.draw(st.lists(st.integers(0, len(arrivals) - 1), max_size=10)))
    docs = _bounded_documents(arrivals, keep, saved, read, looked)
    assert docs == fold_nodes(events)
    assert all(doc["events_dropped"] == 0 for doc in docs)


@settings(max_examples=200, deadline=None)
@given(data=st.data(), events=event_sets(), keep=st.sampled_from([1, 2, 3]))
def test_the_bounded_fold_only_raises_its_revision_in_any_order(
        data: st.DataObject, events: list[NodeEvent], keep: int) -> None:
    """Beyond the window too: every new distinct event raises the document's revision
    (folded or counted as dropped), and a copy of an event just seen changes nothing."""
    arrivals = data.draw(st.permutations(events))
    fold = NodeFold(keep)
    node = arrivals[0].key
    seen: set[str] = set()
    revision = 0
    for ev in (e for e in arrivals if e.key == node):
        changed = fold.add(ev)
        doc = fold.document()
        assert doc is not None
        assert doc["revision"] >= revision
        if ev.event_id not in seen:
            assert changed and doc["revision"] == revision + 1
        assert fold.add(ev) is False  # the same event again, at once
        seen.add(ev.event_id)
        revision = doc["revision"]
    doc = fold.document()
    assert doc is not None
    assert doc["revision"] == len(seen)
