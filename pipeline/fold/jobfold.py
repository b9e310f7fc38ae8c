"""The incremental fold: :class:`JobFold`, one job key's deduplicated, bounded events, the
user annotations its memos set and the incarnation it folded last, and :func:`fold`, the
batch fold made of them.

The stream agents keep one ``JobFold`` per job in a Faust table and ask it for the
job's documents after every batch that touches the job. Folding all of a job's events
again each time would cost as much as its history, so a ``JobFold`` caches what does not
change while events arrive in fold order: the folded incarnation (:class:`_Live`), to
which it applies only the events added since, and each event's encoded entry of the state
JSON (:mod:`pipeline.fold.encoding`). Anything else folds all the events again, so
``documents()`` always equals ``fold()`` of every event added so far.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from pipeline.core.jsontext import dumps_text
from pipeline.core.model import JobEvent, job_key
from pipeline.fold.annotations import UserAnnotations, memo_order
from pipeline.fold.bounds import (
    KEEP_PER_WINDOW,
    StateTooLarge,
    Window,
    state_parts,
    window_of,
)
from pipeline.fold.document import doc_id, document
from pipeline.fold.encoding import (
    annotations_of,
    event_entry,
    event_of_entry,
    fingerprint,
    state_head,
    usage_of,
)
from pipeline.fold.incarnation import Incarnation
from pipeline.fold.order import event_order, merge_variants, split_incarnations, submit_time
from pipeline.fold.usage import USAGE_EVENT, NodeUsage, Sample

__all__ = ["JobFold", "fold"]


def fold(events: Iterable[JobEvent]) -> list[dict[str, Any]]:
    """Job documents of ``events`` (any jobs, any order, duplicates allowed), by doc id."""
    by_key: dict[str, JobFold] = {}
    for ev in events:
        jf = by_key.get(ev.key)
        if jf is None:
            jf = by_key[ev.key] = JobFold()
        jf.add(ev)
    docs = [doc for jf in by_key.values() for doc in jf.documents()]
    docs.sort(key=doc_id)
    return docs


class JobFold:
    """The deduplicated events of one job key, and their documents.

    Holds compact events only (no ``jobspec``, ``R`` or ``record``: the facts carry what a
    document needs). ``documents()`` always equals ``fold()`` of every event added so far;
    ``to_dict()`` / ``from_dict()`` store it as JSON (a Faust table value), and
    ``to_json()`` gives the same JSON as bytes, each event encoded once: a job's table
    entry is written at every batch that touches it, and re-encoding its every event each
    time cost more than folding them.

    A job's events mostly arrive in fold order, so ``documents()`` keeps the incarnation
    it folded and applies only the events added since, while each sorts after the last one
    applied; any other change (an event that sorts earlier, a new copy of an id, a second
    Slurm submit time, which starts a run or an incarnation) folds all events again.
    """

    __slots__ = ("cluster", "scheduler", "job_id", "job_id_f58", "keep", "_events", "_fps",
                 "_json", "_live", "_new", "_counts", "_windows", "_dropped", "_annotations",
                 "_usage", "__weakref__")

    def __init__(self) -> None:
        self.cluster: str | None = None
        self.scheduler: str | None = None
        self.job_id: str | None = None
        self.job_id_f58: str | None = None
        self._events: dict[str, JobEvent] = {}
        self._fps: dict[str, set[str]] = {}
        self._json: dict[str, str] = {}  # event id -> its entry in to_json(), once made
        # the folded incarnation and the order of its last event; the events added since
        self._live: _Live | None = None
        self._new: list[JobEvent] = []
        #: events kept of one window at most; fit() lowers it for a state over its budget
        self.keep = KEEP_PER_WINDOW
        self._counts: dict[str, int] = {}  # window -> events kept
        self._windows: dict[str, Window] = {}  # the full windows' order, made when full
        self._dropped: dict[str, int] = {}  # window -> events dropped
        self._annotations = UserAnnotations()  # what the memos set, kept apart from them
        self._usage = NodeUsage()  # the node samples' latest per counter, kept apart too

    @property
    def key(self) -> str | None:
        """``cluster:job_id`` (None while empty)."""
        return None if self.cluster is None else job_key(self.cluster, self.job_id or "")

    @property
    def revision(self) -> int:
        """Distinct (event id, content) pairs folded, the dropped ones included, plus the
        node samples' part (:attr:`pipeline.fold.usage.NodeUsage.revision`): grows with
        every new fact."""
        return (sum(len(fps) for fps in self._fps.values()) + sum(self._dropped.values())
                + self._usage.revision)

    @property
    def dropped(self) -> Mapping[str, int]:
        """Window -> events dropped from the state (:mod:`pipeline.fold`, "Bounds")."""
        return self._dropped

    @property
    def annotations(self) -> UserAnnotations:
        """The job's user annotations, folded from its memos (not to be changed)."""
        return self._annotations

    @property
    def usage(self) -> NodeUsage:
        """The job's node samples, the latest of each counter (not to be changed)."""
        return self._usage

    @property
    def done(self) -> bool:
        """Whether the job's latest incarnation is done."""
        docs = self.documents()
        return bool(docs) and docs[-1]["state"] == "done"

    def __len__(self) -> int:
        return len(self._events)

    def __bool__(self) -> bool:
        # a job known only by its node samples has no events, and is not an empty fold
        return bool(self._events) or bool(len(self._usage))

    def add(self, event: JobEvent) -> bool:
        """Fold in one event; False if it was already there (a duplicate), or may have been
        (one its full window does not keep: :mod:`pipeline.fold`, "Bounds")."""
        if self.cluster is None:
            self.cluster, self.scheduler, self.job_id = (
                event.cluster, event.scheduler, event.job_id)
        elif (event.cluster, event.scheduler, event.job_id) != (
                self.cluster, self.scheduler, self.job_id):
            raise ValueError(f"event of {event.scheduler} job {event.key} added to the fold "
                             f"of {self.scheduler} job {self.key}")
        if event.job_id_f58 and (self.job_id_f58 is None or event.job_id_f58 < self.job_id_f58):
            self.job_id_f58 = event.job_id_f58
        if event.event == USAGE_EVENT:
            # a node sample: folded into the job's usage, never kept as an event
            # (pipeline.fold.usage: the latest sample of each counter holds everything)
            return self._usage.post(Sample.of(event.context, event.event_id))
        # the fingerprint of the event as it came; the state keeps less of it
        fp = fingerprint(event)
        fps = self._fps.get(event.event_id)
        if fps is not None and fp in fps:
            return False
        memo = event.event == "memo"
        # a memo's context is folded into the annotations, whole; the event keeps none
        posted = self._annotations.post(event.context, memo_order(event, fp)) if memo else (
            False, 0)
        context, facts = state_parts({} if memo else event.context, event.facts)
        # without jobspec, R and record (dataclasses.replace costs four times as much)
        compact = JobEvent(cluster=event.cluster, scheduler=event.scheduler,
                           job_id=event.job_id, event=event.event, timestamp=event.timestamp,
                           source=event.source, event_id=event.event_id, seq=event.seq,
                           context=context, facts=facts, job_id_f58=event.job_id_f58)
        old = self._events.get(event.event_id)
        if old is None:
            if not self._make_room(compact):
                if not posted[0]:
                    return False
                # a copy would have changed nothing: a new memo, counted as the window's
                name = window_of(compact)
                self._dropped[name] = self._dropped.get(name, 0) + 1
                self._annotations.dropped += posted[1]
                return True
            self._events[event.event_id] = compact
            self._new.append(compact)
            fps = self._fps[event.event_id] = set()
        else:
            assert fps is not None
            merged = self._events[event.event_id] = merge_variants(old, compact)
            self._live = None
            name = window_of(merged)
            if name in self._windows:  # the merged copy may sort elsewhere
                self._windows[name] = Window.of(name, self._events.values())
        fps.add(fp)
        self._annotations.dropped += posted[1]
        self._json.pop(event.event_id, None)
        return True

    def _make_room(self, ev: JobEvent) -> bool:
        """Count a new event into its window; when the window is full, drop its event that
        sorts between the first and the latest (False: that is ``ev`` itself)."""
        name = window_of(ev)
        count = self._counts.get(name, 0)
        if count < self.keep:
            self._counts[name] = count + 1
            window = self._windows.get(name)
            if window is not None:
                window.push(ev)
            return True
        window = self._windows.get(name)
        if window is None:
            window = self._windows[name] = Window.of(name, self._events.values())
        out = window.admit(ev, self.keep)
        if out == ev.event_id:
            return False
        self._forget(out)
        self._dropped[name] = self._dropped.get(name, 0) + 1
        return True

    def _forget(self, event_id: str) -> None:
        del self._events[event_id]
        self._fps.pop(event_id, None)
        self._json.pop(event_id, None)
        self._live = None

    def fit(self, max_bytes: int) -> bytes:
        """:meth:`to_json`, at most ``max_bytes`` long: while it is longer, every window of
        this job keeps a quarter as many events (at least one), the rest counted dropped.

        :raises StateTooLarge: one event per window is still too much (huge facts).
        """
        data = self.to_json()
        while len(data) > max_bytes and self.keep > 1:
            self.keep = max(1, self.keep // 4)
            self._windows.clear()
            for name, count in list(self._counts.items()):
                if count <= self.keep:
                    continue
                window = Window.of(name, self._events.values())
                for event_id in window.trim(self.keep):
                    self._forget(event_id)
                self._counts[name] = self.keep
                self._dropped[name] = self._dropped.get(name, 0) + count - self.keep
            data = self.to_json()
        if len(data) > max_bytes:
            raise StateTooLarge(f"the state of job {self.key} is {len(data)} bytes with one "
                                f"event of each name, over its budget of {max_bytes}")
        return data

    def events(self) -> list[JobEvent]:
        """The deduplicated events, in fold order."""
        return sorted(self._events.values(), key=event_order)

    def documents(self) -> list[dict[str, Any]]:
        """The job documents (one per incarnation, oldest first)."""
        if not self._events:
            if not len(self._usage):
                return []
            # only node samples: a job no scheduler record named (yet)
            alone = Incarnation(self, 0, self.revision, split_runs=False)
            return [document(alone, alone.fold([]))]
        new, self._new = sorted(self._new, key=event_order), []
        live, self._live = self._live, None
        if live is not None and live.continues(new):
            for ev in new:
                live.add(ev)
            if live.incarnation.run.requeued_at is None:
                live.incarnation.revision = self.revision
                self._live = live
                return [document(live.incarnation, runs=1)]
        ordered = self.events()
        slurm = self.scheduler == "slurm"
        parts = split_incarnations(ordered) if slurm else [ordered]
        revision = self.revision
        incarnations = [Incarnation(self, n, revision, split_runs=slurm)
                        for n in range(len(parts))]
        docs = [document(inc, inc.fold(evs))
                for inc, evs in zip(incarnations, parts, strict=True)]
        if len(parts) == 1 and not incarnations[0].interrupted:
            self._live = _Live.of(incarnations[0], ordered, split_runs=slurm)
        return docs

    def to_dict(self) -> dict[str, Any]:
        """JSON-able state."""
        return {**self._head(), "events": [self._entry(ev) for ev in self.events()]}

    def to_json(self) -> bytes:
        """The JSON of :meth:`to_dict`, compact, as bytes: each event's entry is encoded
        once and kept until the event changes."""
        entries = self._json
        parts = []
        for ev in self.events():
            part = entries.get(ev.event_id)
            if part is None:
                part = entries[ev.event_id] = dumps_text(self._entry(ev))
            parts.append(part)
        head = dumps_text(self._head())
        return f'{head[:-1]},"events":[{",".join(parts)}]}}'.encode()

    def _head(self) -> dict[str, Any]:
        return state_head(self.cluster, self.scheduler, self.job_id, self.job_id_f58,
                          self._dropped, self.keep, self._annotations, self._usage)

    def _entry(self, ev: JobEvent) -> dict[str, Any]:
        return event_entry(ev, self._fps[ev.event_id])

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> JobFold:
        jf = cls()
        jf.cluster, jf.scheduler, jf.job_id = d["cluster"], d["scheduler"], d["job_id"]
        jf.job_id_f58 = d.get("job_id_f58")
        jf.keep = int(d.get("keep", KEEP_PER_WINDOW))
        jf._dropped = {str(k): int(v) for k, v in (d.get("dropped") or {}).items()}
        jf._annotations = annotations_of(d)
        jf._usage = usage_of(d)
        for e in d.get("events", ()):
            ev = event_of_entry(d, e, jf.job_id_f58)
            if jf._make_room(ev):
                jf._events[ev.event_id] = ev
                jf._fps[ev.event_id] = set(e.get("fps") or [fingerprint(ev)])
        return jf


@dataclass(slots=True)
class _Live:
    """A folded incarnation that events sorting after its last one may continue
    (:meth:`JobFold.documents`)."""

    incarnation: Incarnation
    last: tuple[Any, ...]  # the fold order of its last event
    submits: set[float]  # the submit times its events state
    split_runs: bool  # a Slurm job: a second submit time starts a run or an incarnation

    @classmethod
    def of(cls, incarnation: Incarnation, ordered: list[JobEvent], *,
           split_runs: bool) -> _Live | None:
        """``incarnation`` folded from ``ordered``, if later events may continue it."""
        submits = {s for ev in ordered if (s := submit_time(ev)) is not None}
        if split_runs and len(submits) > 1:
            return None
        return cls(incarnation, event_order(ordered[-1]), submits, split_runs)

    def continues(self, new: list[JobEvent]) -> bool:
        """Whether applying ``new`` (in fold order) after the events applied equals
        folding them all again; remembers their submit times (a live that does not
        continue is dropped)."""
        if not new:
            return True
        if event_order(new[0]) <= self.last:
            return False
        if self.split_runs:
            self.submits.update(s for ev in new if (s := submit_time(ev)) is not None)
            return len(self.submits) <= 1
        return True

    def add(self, ev: JobEvent) -> None:
        self.incarnation.apply(ev)
        self.last = event_order(ev)
