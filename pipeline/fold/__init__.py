"""The fold: canonical job events -> job documents (design section 4, "The job document").

One pure function, ``fold(events)``, used by ``jobstream fold`` and, through the incremental
:class:`JobFold`, by the stream agents. The output does not depend on the order or on
duplication of its input:

1. events are deduplicated by ``event_id`` (two copies of one id that differ, e.g. a journal
   ``submit`` with its jobspec facts and an eventlog ``submit`` without, are merged key by
   key: union of facts, and for a key both give, the larger canonical JSON value);
2. the events of a job are sorted by a total order (:func:`event_order`): ``timestamp``,
   ``seq`` (None last), lifecycle position of the event name (for moments stated at the
   same second), source rank (hook < squeue < sacct < jobcomp: the more complete record
   applies later), ``event_id``;
3. they are applied one by one. Facts merge "later wins, never overwritten by absence", with
   a precedence above order: a later run beats an earlier one, and within a run the final
   record (an ``end`` event stating a ``result``: jobcomp, sacct, squeue) beats every other
   source, so a late hook or poll cannot undo the final values.

Identity. A document describes one incarnation of a job. Flux ids never repeat. A Slurm id
is reused after a wrap of ``MaxJobId``, so its events are split by submit time (``t_submit``
facts, ``submit`` event timestamps): a later submit time starts a new incarnation unless it
is a requeue, because Slurm gives a requeued job a new submit time too
(``batch_requeue_fini``): it continues the previous incarnation when a ``requeue`` event,
or a final ``end`` with result ``node_fail`` or ``preempted`` (jobcomp cannot tell those
from requeues), lies between the two, or when it states a higher ``restart_count``. An
event without a submit time belongs to the incarnation with the latest submit not after
its timestamp.

Runs. A requeued job stays one document. Within an incarnation every submit time opens a
run (Slurm's own accounting splits requeued jobs the same way); an event belongs to the run
of its submit time, or, without one, to the latest run opened at or before its timestamp.
The run fields (``t_eligible`` .. ``t_clean``, result, exit code, node list, counts) describe
the latest run; a run interrupted by a ``requeue`` (after it started) shows as ``pending``
until the next run. Usage hours add up every run. ``requeue_count`` is the largest of:
the highest ``restart_count`` stated, the ``requeue`` events of any one source, and the
number of runs minus one (each alone counts every requeue at most once; sources report
one requeue with different ids, so adding them up would double count).

Field rules that are choices (Flux facts: flux.md section 2.3):

* ``t_alloc``: Flux ``alloc`` (flux-core's ``t_run``); Slurm: ``t_start`` (Slurm's start
  time *is* the allocation), else the time of an ``alloc`` (PrologSlurmctld) event.
* ``t_start``: Flux ``start`` (job shells launched); Slurm start time.
* ``t_eligible``: Slurm ``eligible``. Flux: the ``priority`` event that made the job
  schedulable (entering SCHED with a non-zero priority; a hold, priority 0, starts over):
  the counterpart of Slurm's eligible time, which also leaves out dependency and hold time.
* ``t_end``: Flux ``finish`` or the first fatal exception, whichever comes first
  (flux-core's ``t_cleanup``); Slurm: the end time. ``t_clean``: Flux ``clean``.
* ``state``: pending, then running (alloc, prolog, start), completing (Flux: finish or a
  fatal exception; Slurm: an ``end`` without a result, i.e. EpilogSlurmctld, whose
  environment never says how the job ended), done (Flux ``clean``; Slurm: a final record).
* ``wait_s`` = t_start - t_submit, ``eligible_wait_s`` = t_start - t_eligible. ``run_s`` is
  the allocation's wall time, t_end - (t_alloc or t_start): flux-core's ``runtime`` and
  Slurm's ``elapsed``; while running it runs up to the newest event time (never the wall
  clock, so a fold is reproducible). On Flux, wait and run overlap by the prolog. Negative
  differences (clock skew between sources) are left out.
* ``result``, Flux, as flux-core job-list computes it (success = ``finish`` status 0 with no
  fatal exception before it -> completed; else the tracked exception, the most severe and
  the first at equal severity: ``cancel`` -> cancelled, ``timeout`` -> timeout; else
  failed), with flux-core's FAILED refined when the tracked exception is fatal: ``oom`` ->
  oom, ``node-failure`` -> node_fail, ``exec`` (the job's own task failed to start) ->
  failed, any other type (dependency, operator-raised, scheduler, plugin) -> exception.
  Slurm: the ``result`` of the final record. A result appears only once the job is done.
* ``cancelled_before_start``: once done, whether the job was cancelled before any run
  started; None before.
* ``pending_reason``: why the job waits, while its latest run has not started. It stays
  after the end of a run that never started (a job cancelled while pending keeps the
  reason it waited for, which operators ask for) and is None once the run has started
  (running, completing, or done after running). Flux, from the RFC 21 events in order:
  ``held`` (urgency 0), else ``dependency`` (in DEPEND, or a ``dependency-add`` without
  its ``dependency-remove``), else ``priority`` (in PRIORITY, or priority 0 in SCHED),
  else ``resources`` (in SCHED with a non-zero priority and urgency); None in NEW. Slurm:
  the ``state_reason`` of squeue / sacct (``reason`` events, one per reason a run was seen
  with). Slurm states no time for a reason (``last_sched_evaluation`` moves at every
  scheduling cycle, and events stamped with it would grow a pending job's state without
  bound), so when a run was seen with several reasons the one furthest along a job's
  usual path wins: held < begin time / dependency < other reasons (limits, nodes) <
  Priority < Resources (a job re-held after it waited for Priority still shows Priority).
* Usage at the end of a run (``cpu_time_s``, ``cpu_eff_pct``, ``mem_max_mb``,
  ``mem_max_pct``, ``gpu_util_pct``): copied from the run's final records as the source
  computed them, never recomputed here from another source's times, so each figure is
  one accounting record's. Slurm: sacct's steps (``pipeline.parsers.slurm_json``, which
  holds the definitions: seff's TotalCPU = user + system of every step, over elapsed x
  allocated CPUs; the largest step MaxRSS, in MiB, over the memory allocated per node;
  the mean ``gres/gpuutil`` where the site accounts it). They arrive after the end (the
  sacct poll), so a running job has none and a done job gains them later; jobcomp and
  squeue state none, so their final records never erase them. Like every run fact they
  describe the latest run of a requeued job (sacct without ``--duplicates`` reports the
  latest run and its steps only); an interrupted run's usage is not added in. Flux:
  none, its journal has no usage (design 4, "null where the source cannot tell").
  ``cpu_eff_x_nh`` and ``mem_eff_x_nh`` are ``cpu_eff_pct`` and ``mem_max_pct`` times
  ``node_hours``, for node-hour weighted means without scripts. ``node_hours`` counts
  every run of a requeued job while the efficiencies are the latest run's: the earlier
  runs' hours weigh the latest run's figure (sacct without ``--duplicates`` has no other).
* ``memo`` events (``flux job memo``: a job's owner and its workflow tools post any number
  of them) state no fact and change no field but ``updated_at``: they are not folded
  (:func:`folds`), so neither ``revision`` nor ``updated_at`` moves with them, and a job's
  state and the cost of folding it do not grow with its memos. They are in the events
  index like every event.
* ``revision``: the number of distinct (event id, content) pairs folded for the job key
  (kept or dropped: "Bounds" below).
  It only grows as events arrive, is the same for any order, and is shared by every
  incarnation of a key (an event can move to a new incarnation when its submit arrives; a
  shared count still only grows, so Elasticsearch's external version check holds).

Bounds. A job's owner can post events without end (``flux job urgency``, ``flux job
raise`` in a loop), and a job's state is one Kafka record (the table's changelog) that
must stay under the broker's message size. So a job's state keeps, of each *window* (the
events of one name, names the fold does not know sharing one; for ``exception``, of one
severity), at most :data:`KEEP_PER_WINDOW`: the first in fold order (which decides
``t_eligible``, a Flux job's tracked exception and ``t_end``) and the latest after it
(which decide urgency, priority and the pending reason). The others are dropped from the
state and counted: ``events_dropped`` (every window) and ``exceptions_dropped`` (so a
document's ``exceptions`` list is the kept ones, at most ``KEEP_PER_WINDOW`` per
severity); every event stays in the events index. The state keeps of an event's context
only the keys the fold reads (:data:`FOLD_CONTEXT`), free text cut to
:data:`STATE_TEXT_CHARS` characters (a dependency description longer than that by its
hash, as the fold only compares them), text facts to :data:`STATE_FACT_CHARS` (so in the
document too), and a long node list as runs of numbered names. :meth:`JobFold.fit` keeps
the state JSON under a byte budget by narrowing that job's windows (kept in its state) and
raises :class:`StateTooLarge` when even one event per window does not fit.

Within the bounds nothing changes: the documents of a job whose windows never fill are
those of every event. Beyond them, the kept events are the same for any order and any
duplication (the first and the latest of every event seen), so the documents' fields are
too, but for the counts: an event sorting before the window of a full kind is neither kept
nor counted, as it cannot be told from a copy of one dropped before; so the counts, and
``revision`` with them, are exact when events arrive in fold order (the sources' own
order) and a lower bound otherwise. ``revision`` counts dropped events too, so it still
grows with every event that changes the state.

Documents never carry scripts or environments (the parsers drop them; facts hold none).
"""

from __future__ import annotations

import hashlib
import heapq
import math
import re
import weakref
from bisect import bisect_right
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from pipeline.core.buckets import duration_bucket, gpu_bucket, size_bucket
from pipeline.core.jsontext import canonical, dumps_text
from pipeline.core.model import CANONICAL_EVENTS, RESULTS, JobEvent, job_key

__all__ = ["DOC_FIELDS", "FOLD_CONTEXT", "KEEP_PER_WINDOW", "STATE_FACT_CHARS",
           "STATE_TEXT_CHARS", "JobFold",
           "StateTooLarge", "doc_id", "event_order", "fold", "folds"]

#: Every field of a job document, in output order (unknown values are None): the fields of
#: the ``JobState`` schema, plus ``incarnation`` (0 but for a reused Slurm job id).
DOC_FIELDS: tuple[str, ...] = (
    "cluster", "scheduler", "job_id", "job_id_f58", "incarnation", "job_name",
    "array_id", "array_task", "het_id", "het_offset",
    "user", "uid", "group", "gid", "bank", "queue", "qos",
    "bank_path", "reservation", "wckey", "dependency", "cwd",
    "state", "result", "exit_code", "signal", "cancelled_before_start", "derived_exit_code",
    "exceptions", "requeue_count", "restart_count",
    "t_submit", "t_eligible", "t_alloc", "t_start", "t_end", "t_clean", "expiration",
    "wait_s", "eligible_wait_s", "run_s", "prolog_s", "epilog_s",
    "timelimit_s", "nodes_req", "cores_req", "gpus_req", "mem_req_mb", "tres_req",
    "nnodes", "ncores", "ngpus", "mem_alloc_mb", "tres_alloc", "nodelist", "first_node",
    "failed_node",
    "node_hours", "core_hours", "gpu_hours",
    "timelimit_used_pct", "expansion_factor", "ef_x_nh",
    "size_bucket", "gpu_bucket", "wait_bucket", "runtime_bucket",
    "run_interval", "pending_interval",
    "cpu_time_s", "cpu_eff_pct", "mem_max_mb", "mem_max_pct", "gpu_util_pct",
    "cpu_eff_x_nh", "mem_eff_x_nh",
    "pending_reason",
    "events_dropped", "exceptions_dropped",
    "revision", "updated_at",
)

#: Events a job's state keeps of one window (module docstring, "Bounds"): a real job has a
#: handful of each name, requeued ones one per run.
KEEP_PER_WINDOW = 100
#: The context keys the fold reads (its handlers): all a job's state keeps of a context.
FOLD_CONTEXT: frozenset[str] = frozenset(
    {"urgency", "priority", "description", "state_reason", "type", "severity", "note",
     "status"})
#: Free text of a context (an exception's type and note) kept in a job's state, at most.
STATE_TEXT_CHARS = 1024
#: Text facts kept in a job's state, at most: no real name, account or path is longer
#: (PATH_MAX is 4096), and the events index keeps them whole.
STATE_FACT_CHARS = 4096

#: Facts copied to the document as they are (latest value wins).
_IDENTITY_FACTS: tuple[str, ...] = (
    "job_name", "array_id", "array_task", "het_id", "het_offset", "user", "uid", "group",
    "gid", "bank", "queue", "qos", "cwd", "timelimit_s", "nodes_req", "cores_req",
    "gpus_req", "mem_req_mb",
)
#: What accounting measured for a run, stated with its end (see the module docstring).
_USAGE_FACTS: tuple[str, ...] = (
    "cpu_time_s", "cpu_eff_pct", "mem_max_mb", "mem_max_pct", "gpu_util_pct",
)
#: Facts that belong to one run of the job.
_RUN_FACTS: frozenset[str] = frozenset(
    {"t_eligible", "t_start", "t_end", "exit_code", "signal", "result", "nnodes", "ncores",
     "ngpus", "nodelist", "expiration", "mem_alloc_mb", *_USAGE_FACTS}
)
#: Facts the fold reads itself rather than copying.
_OWN_FACTS: frozenset[str] = frozenset({"t_submit", "restart_count"})

_SOURCE_RANK: Mapping[str, int] = {
    "slurm-hook": 0, "slurm-squeue": 1, "slurm-sacct": 2, "slurm-jobcomp": 3,
}

# Lifecycle position of event names, to order events stated at the same instant.
_PHASE_ORDER: tuple[str, ...] = (
    "submit", "jobspec-update", "dependency-add", "dependency-remove", "set-flags",
    "validate", "invalidate", "depend", "flux-restart", "urgency", "priority", "eligible",
    "reason",
    "resource-update", "alloc", "prolog-start", "prolog-finish", "start", "memo",
    "preempt", "exception", "finish", "release", "epilog-start", "epilog-finish", "free",
    "end", "requeue", "clean",
)
_PHASE_RANK: Mapping[str, int] = {name: i for i, name in enumerate(_PHASE_ORDER)}
_PHASE_UNKNOWN = _PHASE_RANK["memo"]

# Document states, ordered: within one run a job never goes back.
_PENDING, _RUNNING, _COMPLETING, _DONE = 0, 1, 2, 3
_STATE_NAMES = ("pending", "running", "completing", "done")

# Fatal Flux exception types with a result finer than flux-core's FAILED.
_FLUX_FATAL_RESULTS: Mapping[str, str] = {
    "oom": "oom", "node-failure": "node_fail", "exec": "failed",
}
# Slurm results that a requeue also produces (the run's record looks final).
_REQUEUE_RESULTS = frozenset({"node_fail", "preempted"})

# Flux pending sub-states (RFC 21), in the order a job passes them.
_FLUX_NEW, _FLUX_DEPEND, _FLUX_PRIORITY, _FLUX_SCHED = range(4)
# Events that send a job in SCHED back to PRIORITY (flux.md 2.3).
_FLUX_REPRIORITIZE = frozenset({"urgency", "jobspec-update", "flux-restart"})
# Slurm reasons before a job can be eligible at all; every other reason is ranked between
# them and Priority (see the module docstring).
_SLURM_REASON_RANK: Mapping[str, int] = {
    "JobHeldUser": 0, "JobHeldAdmin": 0, "BeginTime": 1, "Dependency": 1,
    "Priority": 3, "Resources": 4,
}
_SLURM_REASON_OTHER = 2


#: Events that can state no fact, posted without bound by a job's users (module docstring).
_NOT_FOLDED = frozenset({"memo"})


def folds(event: JobEvent) -> bool:
    """Whether ``event`` is folded into its job's state (a memo is not)."""
    return event.event not in _NOT_FOLDED or bool(event.facts)


def _slurm_reason(reasons: Iterable[str]) -> str | None:
    """The reason a run seen with ``reasons`` waits for (ties: the larger name)."""
    return max(reasons, key=lambda r: (_SLURM_REASON_RANK.get(r, _SLURM_REASON_OTHER), r),
               default=None)


def event_order(ev: JobEvent) -> tuple[Any, ...]:
    """The total order in which the fold applies a job's events."""
    return (ev.timestamp, ev.seq is None, ev.seq or 0,
            _PHASE_RANK.get(ev.event, _PHASE_UNKNOWN), _SOURCE_RANK.get(ev.source, 0),
            ev.event_id)


def doc_id(doc: Mapping[str, Any]) -> str:
    """Elasticsearch id of a job document: ``cluster:job_id``.

    A later incarnation of a reused Slurm job id adds ``@<t_submit in ms>``.
    """
    base = f"{doc['cluster']}:{doc['job_id']}"
    if doc.get("incarnation"):
        return f"{base}@{doc['t_submit']}"
    return base


def fold(events: Iterable[JobEvent]) -> list[dict[str, Any]]:
    """Job documents of ``events`` (any jobs, any order, duplicates allowed), by doc id."""
    folds: dict[str, JobFold] = {}
    for ev in events:
        jf = folds.get(ev.key)
        if jf is None:
            jf = folds[ev.key] = JobFold()
        jf.add(ev)
    docs = [doc for jf in folds.values() for doc in jf.documents()]
    docs.sort(key=doc_id)
    return docs


# --------------------------------------------------------------------------- incremental


def _fingerprint(ev: JobEvent) -> str:
    text = canonical([ev.event, repr(ev.timestamp), ev.source, ev.seq, ev.context, ev.facts])
    return hashlib.blake2b(text.encode(), digest_size=8).hexdigest()


class StateTooLarge(ValueError):
    """A job's state does not fit its byte budget even with one event per window."""


def _window_of(ev: JobEvent) -> str:
    """The window of an event in its job's state (module docstring, "Bounds")."""
    if ev.event == "exception":
        severity = ev.context.get("severity")
        return f"exception/{severity if isinstance(severity, int) else 0}"
    # Flux eventlogs are extensible: names we do not know share one window, so a record
    # naming thousands of them cannot make thousands of windows
    return ev.event if ev.event in CANONICAL_EVENTS else "other"


def _state_text(value: Any) -> Any:
    """A context value as a job's state keeps it: numbers as they are, text cut to
    :data:`STATE_TEXT_CHARS`, anything else as its JSON text, cut."""
    if value is None or isinstance(value, bool | int | float):
        return value
    text = value if isinstance(value, str) else canonical(value)
    return text if len(text) <= STATE_TEXT_CHARS else text[:STATE_TEXT_CHARS]


def _state_parts(context: Mapping[str, Any], facts: Mapping[str, Any]
                 ) -> tuple[dict[str, Any], dict[str, Any]]:
    """An event's context and facts as its job's state keeps them (new dicts): the context
    keys the fold reads, bounded, and text facts cut to :data:`STATE_FACT_CHARS`. Plain
    loops: this runs for every event folded."""
    kept: dict[str, Any] = {}
    for k, v in context.items():
        if k in FOLD_CONTEXT:
            kind = type(v)
            kept[k] = v if kind is int or kind is float or v is None or (
                kind is str and len(v) <= STATE_TEXT_CHARS) else _state_text(v)
    desc = context.get("description")
    if isinstance(desc, str) and len(desc) > STATE_TEXT_CHARS:
        # compared, never shown: two long descriptions must stay two
        kept["description"] = "blake2b:" + hashlib.blake2b(
            desc.encode(errors="surrogatepass"), digest_size=16).hexdigest()
    out = dict(facts)
    for k, v in facts.items():
        if type(v) is str and len(v) > STATE_FACT_CHARS:
            out[k] = v[:STATE_FACT_CHARS]
    return kept, out


#: A node list of more names than this is kept in a job's state as runs of numbered names.
_RUNS_FROM = 16
_NUMBERED = re.compile(r"(.*?)([0-9]{1,18})([^0-9]*)", re.DOTALL)


def _node_runs(names: list[Any]) -> list[list[Any]]:
    """``["n01", "n02", "n03", "login"]`` -> ``[["n", 1, 3, 2, ""], ["login"]]``: names as
    runs of (prefix, first number, count, zero-padded width, suffix), in their order, or
    alone. Exact by construction (a run's names are formatted back and compared), with no
    hostlist syntax to escape: a 10,000-node job's list is a few runs, not 150 KB in
    every event of its state that states it."""
    runs: list[list[Any]] = []
    for name in names:
        m = _NUMBERED.fullmatch(name) if isinstance(name, str) else None
        if m is None:
            runs.append([name])
            continue
        prefix, digits, suffix = m.groups()
        number, width = int(digits), len(digits)
        if f"{number:0{width}d}" != digits:
            runs.append([name])
            continue
        last = runs[-1] if runs else None
        if (last is not None and len(last) == 5 and last[0] == prefix and last[4] == suffix
                and last[3] == width and last[1] + last[2] == number
                and len(str(number)) <= width):
            last[2] += 1
        else:
            runs.append([prefix, number, 1, width, suffix])
    return runs


def _node_names(runs: list[list[Any]]) -> list[Any]:
    out: list[Any] = []
    for run in runs:
        if len(run) == 1:
            out.append(run[0])
        else:
            prefix, first, count, width, suffix = run
            out.extend(f"{prefix}{i:0{width}d}{suffix}" for i in range(first, first + count))
    return out


@dataclass(slots=True)
class _Window:
    """The order of a full window's kept events: its first, and a min-heap of the rest
    (the latest), by fold order."""

    first: tuple[tuple[Any, ...], str]
    rest: list[tuple[tuple[Any, ...], str]]

    @classmethod
    def of(cls, name: str, events: Iterable[JobEvent]) -> _Window:
        entries = sorted((event_order(ev), ev.event_id) for ev in events
                         if _window_of(ev) == name)
        window = cls(entries[0], entries[1:])
        heapq.heapify(window.rest)
        return window

    def push(self, ev: JobEvent) -> None:
        entry = (event_order(ev), ev.event_id)
        if entry < self.first:
            entry, self.first = self.first, entry
        heapq.heappush(self.rest, entry)

    def admit(self, ev: JobEvent, keep: int) -> str:
        """Take ``ev`` into a full window; the id of the event it drops (maybe its own)."""
        entry = (event_order(ev), ev.event_id)
        if entry < self.first:
            entry, self.first = self.first, entry
        if keep <= 1:
            return entry[1]
        if entry < self.rest[0]:
            return entry[1]
        return heapq.heapreplace(self.rest, entry)[1]

    def trim(self, keep: int) -> list[str]:
        """Drop the window's events beyond ``keep``, earliest of the rest first."""
        out = []
        while self.rest and len(self.rest) + 1 > keep:
            out.append(heapq.heappop(self.rest)[1])
        return out


def _merge_maps(a: Mapping[str, Any], b: Mapping[str, Any]) -> dict[str, Any]:
    """Key-wise union; where both have a key, the larger canonical value (commutative)."""
    out = dict(a)
    for k, v in b.items():
        if k not in out or canonical(v) > canonical(out[k]):
            out[k] = v
    return out


def _merge_variants(a: JobEvent, b: JobEvent) -> JobEvent:
    """One event from two copies with the same id; the same result in either order."""
    seqs = [s for s in (a.seq, b.seq) if s is not None]
    return replace(
        a,
        event=min(a.event, b.event),
        timestamp=min(a.timestamp, b.timestamp),
        source=min(a.source, b.source),
        seq=min(seqs) if seqs else None,
        context=_merge_maps(a.context, b.context),
        facts=_merge_maps(a.facts, b.facts),
        job_id_f58=a.job_id_f58 or b.job_id_f58,
    )


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
                 "_json", "_live", "_new", "_counts", "_windows", "_dropped", "__weakref__")

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
        self._windows: dict[str, _Window] = {}  # the full windows' order, made when full
        self._dropped: dict[str, int] = {}  # window -> events dropped

    @property
    def key(self) -> str | None:
        """``cluster:job_id`` (None while empty)."""
        return None if self.cluster is None else job_key(self.cluster, self.job_id or "")

    @property
    def revision(self) -> int:
        """Distinct (event id, content) pairs folded, the dropped ones included: grows
        with every new fact."""
        return sum(len(fps) for fps in self._fps.values()) + sum(self._dropped.values())

    @property
    def dropped(self) -> Mapping[str, int]:
        """Window -> events dropped from the state (module docstring, "Bounds")."""
        return self._dropped

    @property
    def done(self) -> bool:
        """Whether the job's latest incarnation is done."""
        docs = self.documents()
        return bool(docs) and docs[-1]["state"] == "done"

    def __len__(self) -> int:
        return len(self._events)

    def add(self, event: JobEvent) -> bool:
        """Fold in one event; False if it was already there (a duplicate) or is not
        folded (:func:`folds`)."""
        if not folds(event):
            return False
        if self.cluster is None:
            self.cluster, self.scheduler, self.job_id = (
                event.cluster, event.scheduler, event.job_id)
        elif (event.cluster, event.scheduler, event.job_id) != (
                self.cluster, self.scheduler, self.job_id):
            raise ValueError(f"event of {event.scheduler} job {event.key} added to the fold "
                             f"of {self.scheduler} job {self.key}")
        # the fingerprint of the event as it came; the state keeps less of it
        fp = _fingerprint(event)
        fps = self._fps.get(event.event_id)
        if fps is not None and fp in fps:
            return False
        context, facts = _state_parts(event.context, event.facts)
        # without jobspec, R and record (dataclasses.replace costs four times as much)
        compact = JobEvent(cluster=event.cluster, scheduler=event.scheduler,
                           job_id=event.job_id, event=event.event, timestamp=event.timestamp,
                           source=event.source, event_id=event.event_id, seq=event.seq,
                           context=context, facts=facts, job_id_f58=event.job_id_f58)
        old = self._events.get(event.event_id)
        if old is None:
            if not self._make_room(compact):
                return False
            self._events[event.event_id] = compact
            self._new.append(compact)
            fps = self._fps[event.event_id] = set()
        else:
            assert fps is not None
            merged = self._events[event.event_id] = _merge_variants(old, compact)
            self._live = None
            name = _window_of(merged)
            if name in self._windows:  # the merged copy may sort elsewhere
                self._windows[name] = _Window.of(name, self._events.values())
        fps.add(fp)
        self._json.pop(event.event_id, None)
        if event.job_id_f58 and (self.job_id_f58 is None or event.job_id_f58 < self.job_id_f58):
            self.job_id_f58 = event.job_id_f58
        return True

    def _make_room(self, ev: JobEvent) -> bool:
        """Count a new event into its window; when the window is full, drop its event that
        sorts between the first and the latest (False: that is ``ev`` itself)."""
        name = _window_of(ev)
        count = self._counts.get(name, 0)
        if count < self.keep:
            self._counts[name] = count + 1
            window = self._windows.get(name)
            if window is not None:
                window.push(ev)
            return True
        window = self._windows.get(name)
        if window is None:
            window = self._windows[name] = _Window.of(name, self._events.values())
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
                window = _Window.of(name, self._events.values())
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
            return []
        new, self._new = sorted(self._new, key=event_order), []
        live, self._live = self._live, None
        if live is not None and live.continues(new):
            for ev in new:
                live.add(ev)
            if live.incarnation.run.requeued_at is None:
                live.incarnation.revision = self.revision
                self._live = live
                return [live.incarnation._document(runs=1)]
        ordered = self.events()
        slurm = self.scheduler == "slurm"
        parts = _split_incarnations(ordered) if slurm else [ordered]
        revision = self.revision
        incarnations = [_Incarnation(self, n, revision, split_runs=slurm)
                        for n in range(len(parts))]
        docs = [inc.fold(evs) for inc, evs in zip(incarnations, parts, strict=True)]
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
        head = {"cluster": self.cluster, "scheduler": self.scheduler, "job_id": self.job_id,
                "job_id_f58": self.job_id_f58}
        if self._dropped:
            head["dropped"] = dict(sorted(self._dropped.items()))
        if self.keep != KEEP_PER_WINDOW:
            head["keep"] = self.keep
        return head

    def _entry(self, ev: JobEvent) -> dict[str, Any]:
        facts = dict(ev.facts)
        nodelist = facts.get("nodelist")
        if isinstance(nodelist, list) and len(nodelist) > _RUNS_FROM:
            facts["nodelist"] = {"runs": _node_runs(nodelist)}
        return {"event_id": ev.event_id, "event": ev.event, "timestamp": ev.timestamp,
                "source": ev.source, "seq": ev.seq, "context": dict(ev.context),
                "facts": facts, "fps": sorted(self._fps[ev.event_id])}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> JobFold:
        jf = cls()
        jf.cluster, jf.scheduler, jf.job_id = d["cluster"], d["scheduler"], d["job_id"]
        jf.job_id_f58 = d.get("job_id_f58")
        jf.keep = int(d.get("keep", KEEP_PER_WINDOW))
        jf._dropped = {str(k): int(v) for k, v in (d.get("dropped") or {}).items()}
        for e in d.get("events", ()):
            # a state written before the bounds: the same rules, applied as it is read
            context, facts = _state_parts(e.get("context") or {}, e.get("facts") or {})
            nodelist = facts.get("nodelist")
            if isinstance(nodelist, dict):
                facts["nodelist"] = _node_names(nodelist["runs"])
            ev = JobEvent(cluster=d["cluster"], scheduler=d["scheduler"], job_id=d["job_id"],
                          event=e["event"], timestamp=float(e["timestamp"]), source=e["source"],
                          event_id=e["event_id"], seq=e.get("seq"), context=context,
                          facts=facts, job_id_f58=jf.job_id_f58)
            if jf._make_room(ev):
                jf._events[ev.event_id] = ev
                jf._fps[ev.event_id] = set(e.get("fps") or [_fingerprint(ev)])
        return jf


# --------------------------------------------------------------------------- incarnations


def _submit_time(ev: JobEvent) -> float | None:
    t = ev.facts.get("t_submit")
    if isinstance(t, int | float):
        return float(t)
    return ev.timestamp if ev.event == "submit" else None


def _is_final(ev: JobEvent) -> bool:
    """A completion record: an ``end`` that states how the job ended."""
    return ev.event == "end" and ev.facts.get("result") in RESULTS


def _split_incarnations(ordered: list[JobEvent]) -> list[list[JobEvent]]:
    """Cut the events of one Slurm job id into incarnations (see the module docstring)."""
    restarts: dict[float, int | None] = {}
    for ev in ordered:
        s = _submit_time(ev)
        if s is None:
            continue
        rc = ev.facts.get("restart_count")
        rc = rc if isinstance(rc, int) else None
        known = restarts.get(s)
        restarts[s] = rc if known is None else (known if rc is None else max(known, rc))
    if len(restarts) < 2:
        return [ordered]
    requeued_at = [ev.timestamp for ev in ordered if ev.event == "requeue" or (
        _is_final(ev) and ev.facts["result"] in _REQUEUE_RESULTS)]
    times = sorted(restarts)
    starts = [times[0]]
    for prev, s in zip(times, times[1:], strict=False):
        rc, prev_rc = restarts[s], restarts[prev]
        requeue = any(prev <= r <= s for r in requeued_at) or (
            rc is not None and rc > (prev_rc or 0))
        if not requeue:
            starts.append(s)
    return _assign(ordered, starts)


def _assign(ordered: list[JobEvent], starts: list[float]) -> list[list[JobEvent]]:
    """Events grouped by the start (submit time) they belong to, keeping their order."""
    groups: list[list[JobEvent]] = [[] for _ in starts]
    for ev in ordered:
        s = _submit_time(ev)
        idx = bisect_right(starts, ev.timestamp if s is None else s) - 1
        groups[max(idx, 0)].append(ev)
    return groups


# --------------------------------------------------------------------------- one incarnation


def _ms(t: float | None) -> int | None:
    return None if t is None else round(t * 1000)


def _span_s(start_ms: int | None, end_ms: int | None) -> float | None:
    if start_ms is None or end_ms is None or end_ms < start_ms:
        return None
    return (end_ms - start_ms) / 1000


def _min(a: float | None, b: float) -> float:
    return b if a is None or b < a else a


def _max(a: float | None, b: float) -> float:
    return b if a is None or b > a else a


@dataclass(slots=True)
class _Exception:
    type: str
    severity: int
    note: str | None
    timestamp: float


@dataclass(slots=True)
class _Run:
    """What one run of the job (between requeues) told."""

    facts: dict[str, tuple[bool, Any]] = field(default_factory=dict)
    state: int = _PENDING
    started: bool = False
    eligible_since: float | None = None
    t_eligible: float | None = None
    t_alloc: float | None = None
    t_start: float | None = None
    t_end: float | None = None
    t_end_final: float | None = None
    t_clean: float | None = None
    prolog: tuple[float | None, float | None] = (None, None)
    epilog: tuple[float | None, float | None] = (None, None)
    success: bool | None = None
    invalidated: bool = False
    requeued_at: float | None = None
    flux_state: int = _FLUX_NEW
    urgency: int | None = None
    priority: int | float | None = None
    dependencies: set[str] = field(default_factory=set)
    reasons: set[str] = field(default_factory=set)

    def flux_reason(self) -> str | None:
        if self.urgency == 0:
            return "held"
        if self.dependencies or self.flux_state == _FLUX_DEPEND:
            return "dependency"
        if self.flux_state == _FLUX_PRIORITY or (
                self.flux_state == _FLUX_SCHED and self.priority == 0):
            return "priority"
        return "resources" if self.flux_state == _FLUX_SCHED else None

    def fact(self, name: str) -> Any:
        entry = self.facts.get(name)
        return None if entry is None else entry[1]


@dataclass(slots=True)
class _Times:
    """Lifecycle times of one run, in seconds."""

    t_eligible: float | None
    t_alloc: float | None
    t_start: float | None
    t_end: float | None
    t_clean: float | None

    @property
    def run_begin(self) -> float | None:
        return self.t_alloc if self.t_alloc is not None else self.t_start


class _Incarnation:
    """Applies the ordered events of one incarnation and renders its document."""

    def __init__(self, jf: JobFold, number: int, revision: int, *, split_runs: bool) -> None:
        # weak: the fold keeps its live incarnation (JobFold._live), and a cycle would keep
        # every fold the worker's cache let go until a full collection, which the worker's
        # thresholds make rare (agents/cli.py): 2 KiB and more per job it ever folded
        self._jf = weakref.ref(jf)
        self.number = number
        self.revision = revision
        self.split_runs = split_runs
        self.identity: dict[str, tuple[tuple[int, bool], Any]] = {}
        self.run = _Run()
        self.run_index = 0
        self.started_any = False
        self.prior_hours: list[float | None] = [None, None, None]
        self.exceptions: list[_Exception] = []
        self.tracked: _Exception | None = None
        self.requeues_by_source: dict[str, int] = {}
        self.restart_count: int | None = None
        self.t_submit: float | None = None
        self.updated_at = -math.inf
        # the latest run ended in a requeue and was closed: later events cannot continue it
        self.interrupted = False

    @property
    def jf(self) -> JobFold:
        jf = self._jf()
        assert jf is not None, "an incarnation outlived its fold"
        return jf

    def fold(self, events: list[JobEvent]) -> dict[str, Any]:
        starts = sorted({s for ev in events if (s := _submit_time(ev)) is not None})
        # Every start has its events (the ones stating it), so no run is empty.
        runs = _assign(events, starts) if self.split_runs and len(starts) > 1 else [events]
        for index, run_events in enumerate(runs):
            if index:
                self._close_run(end_fallback=starts[index])
                self.run, self.run_index = _Run(), index
            for ev in run_events:
                self._apply(ev)
        if self.run.requeued_at is not None:  # interrupted: the job waits for its next run
            self._close_run(end_fallback=self.run.requeued_at)
            self.run = _Run()
            self.interrupted = True
        return self._document(runs=len(runs))

    # -- applying events

    def _apply(self, ev: JobEvent) -> None:
        self.updated_at = max(self.updated_at, ev.timestamp)
        s = _submit_time(ev)
        if s is not None:
            self.t_submit = _min(self.t_submit, s)
        rc = ev.facts.get("restart_count")
        if isinstance(rc, int):
            self.restart_count = rc if self.restart_count is None else max(
                self.restart_count, rc)
        self._merge_facts(ev)
        handler = _HANDLERS.get(ev.event)
        if handler is not None:
            handler(self, ev)

    def _merge_facts(self, ev: JobEvent) -> None:
        final = _is_final(ev)
        prec = (self.run_index, final)
        for name, value in ev.facts.items():
            if value is None or name in _OWN_FACTS:
                continue
            if name in _RUN_FACTS:
                old = self.run.facts.get(name)
                if old is None or final >= old[0]:
                    self.run.facts[name] = (final, value)
            else:
                old_id = self.identity.get(name)
                if old_id is None or prec >= old_id[0]:
                    self.identity[name] = (prec, value)

    def _close_run(self, end_fallback: float) -> None:
        run = self.run
        if self._run_started(run):
            self.started_any = True
        end = run.requeued_at if run.requeued_at is not None else end_fallback
        for i, h in enumerate(self._run_hours(run, self._times(run), end_fallback=end)):
            if h is not None:
                self.prior_hours[i] = (self.prior_hours[i] or 0.0) + h

    def _advance(self, state: int) -> None:
        self.run.state = max(self.run.state, state)
        if state == _RUNNING:
            self.run.started = True

    def _on_priority(self, ev: JobEvent) -> None:
        run = self.run
        if run.state >= _RUNNING:
            return
        prio = ev.context.get("priority")
        run.flux_state = _FLUX_SCHED
        if isinstance(prio, int | float):
            run.priority = prio
        if isinstance(prio, int | float) and prio <= 0:
            run.eligible_since = None
        elif run.eligible_since is None:
            run.eligible_since = ev.timestamp

    def _on_flux_pending(self, ev: JobEvent) -> None:
        """The RFC 21 events that move a job between its pending sub-states."""
        run = self.run
        name, ctx = ev.event, ev.context
        if name in ("submit", "urgency"):
            urgency = ctx.get("urgency")
            if isinstance(urgency, int) and not isinstance(urgency, bool):
                run.urgency = urgency
        if name == "validate":
            run.flux_state = max(run.flux_state, _FLUX_DEPEND)
        elif name == "depend":
            run.flux_state = max(run.flux_state, _FLUX_PRIORITY)
        elif name in _FLUX_REPRIORITIZE and run.flux_state == _FLUX_SCHED:
            run.flux_state = _FLUX_PRIORITY
        elif name in ("dependency-add", "dependency-remove"):
            desc = ctx.get("description")
            key = desc if isinstance(desc, str) else ""
            if name == "dependency-add":
                run.dependencies.add(key)
            else:
                run.dependencies.discard(key)

    def _on_reason(self, ev: JobEvent) -> None:
        reason = ev.context.get("state_reason")
        if isinstance(reason, str) and reason:
            self.run.reasons.add(reason)

    def _pending_reason(self, run: _Run) -> str | None:
        if self._run_started(run):
            return None
        if self.jf.scheduler == "flux":
            return run.flux_reason()
        return _slurm_reason(run.reasons)

    def _on_eligible(self, ev: JobEvent) -> None:
        self.run.t_eligible = _min(self.run.t_eligible, ev.timestamp)

    def _on_alloc(self, ev: JobEvent) -> None:
        self.run.t_alloc = _min(self.run.t_alloc, ev.timestamp)
        self._advance(_RUNNING)

    def _on_prolog(self, ev: JobEvent) -> None:
        start, end = self.run.prolog
        if ev.event == "prolog-start":
            self.run.prolog = (_min(start, ev.timestamp), end)
        else:
            self.run.prolog = (start, _max(end, ev.timestamp))
        self._advance(_RUNNING)

    def _on_start(self, ev: JobEvent) -> None:
        self.run.t_start = _min(self.run.t_start, ev.timestamp)
        self._advance(_RUNNING)

    def _on_exception(self, ev: JobEvent) -> None:
        ctx = ev.context
        severity = ctx.get("severity")
        note = ctx.get("note")
        exc = _Exception(type=str(ctx.get("type", "")),
                         severity=severity if isinstance(severity, int) else 0,
                         note=note if isinstance(note, str) and note else None,
                         timestamp=ev.timestamp)
        self.exceptions.append(exc)
        # flux-core job-list tracks the most severe exception, the first at equal severity
        if self.tracked is None or exc.severity < self.tracked.severity:
            self.tracked = exc
        if exc.severity == 0 and self.run.state < _COMPLETING:
            self.run.t_end = _min(self.run.t_end, ev.timestamp)
            self._advance(_COMPLETING)

    def _on_finish(self, ev: JobEvent) -> None:
        run = self.run
        status = ev.context.get("status")
        if not isinstance(status, int):
            code, sig = ev.facts.get("exit_code"), ev.facts.get("signal")
            status = 0 if code == 0 and not sig else 1
        fatal = self.tracked is not None and self.tracked.severity == 0
        run.success = status == 0 and not fatal
        if run.state < _COMPLETING:
            run.t_end = _min(run.t_end, ev.timestamp)
        self._advance(_COMPLETING)

    def _on_epilog(self, ev: JobEvent) -> None:
        start, end = self.run.epilog
        if ev.event == "epilog-start":
            self.run.epilog = (_min(start, ev.timestamp), end)
        else:
            self.run.epilog = (start, _max(end, ev.timestamp))
        self._advance(_COMPLETING)

    def _on_end(self, ev: JobEvent) -> None:
        if _is_final(ev):
            self.run.t_end_final = _min(self.run.t_end_final, ev.timestamp)
            self._advance(_DONE)
        else:
            self.run.t_end = _min(self.run.t_end, ev.timestamp)
            self._advance(_COMPLETING)

    def _on_requeue(self, ev: JobEvent) -> None:
        if "restart_count" not in ev.facts:
            self.requeues_by_source[ev.source] = self.requeues_by_source.get(ev.source, 0) + 1
        # A requeue stated before the run started announces this run; after, it ends it.
        if self.run.started or self.run.state >= _RUNNING:
            self.run.requeued_at = _min(self.run.requeued_at, ev.timestamp)

    def _on_clean(self, ev: JobEvent) -> None:
        self.run.t_clean = _min(self.run.t_clean, ev.timestamp)
        self._advance(_DONE)

    def _on_invalidate(self, ev: JobEvent) -> None:
        self.run.invalidated = True
        self._advance(_DONE)

    # -- rendering

    def _times(self, run: _Run) -> _Times:
        """A run's lifecycle times: stated facts first, then event times."""
        t_end = run.fact("t_end")
        if t_end is None:
            t_end = run.t_end_final if run.t_end_final is not None else run.t_end
        t_start = run.fact("t_start")
        if t_start is None:
            t_start = run.t_start
        t_alloc = run.t_alloc
        if self.jf.scheduler == "slurm":
            # Slurm's start time is the allocation, and more exact than when a hook ran;
            # with only the prolog hook's alloc seen yet, that moment is the start.
            if t_start is not None:
                t_alloc = t_start
            else:
                t_start = t_alloc
        t_eligible = run.fact("t_eligible")
        if t_eligible is None:
            t_eligible = run.t_eligible if run.t_eligible is not None else run.eligible_since
        return _Times(t_eligible, t_alloc, t_start, t_end, run.t_clean)

    def _run_started(self, run: _Run) -> bool:
        return run.started or self._times(run).t_start is not None

    @staticmethod
    def _run_hours(run: _Run, times: _Times, end_fallback: float) -> list[float | None]:
        end = times.t_end if times.t_end is not None else end_fallback
        run_s = _span_s(_ms(times.run_begin), _ms(end))
        if run_s is None:
            return [None, None, None]
        counts = (run.fact("nnodes"), run.fact("ncores"), run.fact("ngpus"))
        return [None if c is None else run_s * c / 3600 for c in counts]

    def _result(self, run: _Run) -> str | None:
        if run.state < _DONE:
            return None
        stated = run.fact("result")
        if stated in RESULTS:
            return str(stated)
        if run.invalidated:
            return "exception"
        if run.success:
            return "completed"
        exc = self.tracked
        if exc is None:
            return "failed"
        if exc.type == "cancel":
            return "cancelled"
        if exc.type == "timeout":
            return "timeout"
        if exc.severity == 0:
            return _FLUX_FATAL_RESULTS.get(exc.type, "exception")
        return "failed"

    def _document(self, runs: int) -> dict[str, Any]:
        jf, run = self.jf, self.run
        doc: dict[str, Any] = dict.fromkeys(DOC_FIELDS)
        doc.update(cluster=jf.cluster, scheduler=jf.scheduler, job_id=jf.job_id,
                   job_id_f58=jf.job_id_f58, incarnation=self.number)
        for name in _IDENTITY_FACTS:
            entry = self.identity.get(name)
            if entry is not None:
                doc[name] = entry[1]

        times = self._times(run)
        result = self._result(run)
        requeues = max(runs - 1, self.restart_count or 0,
                       max(self.requeues_by_source.values(), default=0))
        doc.update(
            state=_STATE_NAMES[run.state], result=result,
            exit_code=run.fact("exit_code"), signal=run.fact("signal"),
            cancelled_before_start=None if result is None else (
                result == "cancelled" and not (self.started_any or self._run_started(run))),
            exceptions=[{"type": e.type, "severity": e.severity, "note": e.note,
                         "timestamp": _ms(e.timestamp)} for e in self.exceptions],
            requeue_count=requeues, restart_count=self.restart_count,
        )

        t_submit, updated_at = _ms(self.t_submit), _ms(self.updated_at)
        t_eligible, t_alloc, t_start = (
            _ms(times.t_eligible), _ms(times.t_alloc), _ms(times.t_start))
        t_end, begin = _ms(times.t_end), _ms(times.run_begin)
        doc.update(t_submit=t_submit, t_eligible=t_eligible, t_alloc=t_alloc, t_start=t_start,
                   t_end=t_end, t_clean=_ms(times.t_clean),
                   expiration=_ms(run.fact("expiration")))
        wait_s = _span_s(t_submit, t_start)
        run_s = _span_s(begin, t_end if t_end is not None else updated_at)
        doc.update(
            wait_s=wait_s, eligible_wait_s=_span_s(t_eligible, t_start), run_s=run_s,
            prolog_s=_span_s(_ms(run.prolog[0]), _ms(run.prolog[1])),
            epilog_s=_span_s(_ms(run.epilog[0]), _ms(run.epilog[1])),
        )

        nodelist = run.fact("nodelist")
        doc.update(nnodes=run.fact("nnodes"), ncores=run.fact("ncores"),
                   ngpus=run.fact("ngpus"), mem_alloc_mb=run.fact("mem_alloc_mb"),
                   nodelist=list(nodelist) if nodelist else None,
                   first_node=nodelist[0] if nodelist else None)
        hours = self._run_hours(run, times, end_fallback=self.updated_at)
        for i, name in enumerate(("node_hours", "core_hours", "gpu_hours")):
            prior, current = self.prior_hours[i], hours[i]
            if prior is not None or current is not None:
                doc[name] = (prior or 0.0) + (current or 0.0)
        self._derived(doc, wait_s, run_s)
        for name in _USAGE_FACTS:
            doc[name] = run.fact(name)
        self._usage_weights(doc)

        if begin is not None:
            doc["run_interval"] = _interval(begin, t_end)
        if t_submit is not None:
            left_queue = next((t for t in (t_start, begin, t_end) if t is not None), None)
            doc["pending_interval"] = _interval(t_submit, left_queue)
        doc["pending_reason"] = self._pending_reason(run)
        dropped = jf.dropped
        if dropped:
            doc["events_dropped"] = sum(dropped.values())
            doc["exceptions_dropped"] = sum(
                n for name, n in dropped.items() if name.startswith("exception/")) or None
        doc.update(revision=self.revision, updated_at=updated_at)
        return doc

    @staticmethod
    def _derived(doc: dict[str, Any], wait_s: float | None, run_s: float | None) -> None:
        """Ratios and XDMoD buckets, stored because panels may not compute them."""
        timelimit = doc["timelimit_s"]
        if run_s is not None and isinstance(timelimit, int | float) and timelimit > 0:
            doc["timelimit_used_pct"] = run_s / timelimit * 100
        if run_s and wait_s is not None:
            doc["expansion_factor"] = (wait_s + run_s) / run_s
            if doc["node_hours"] is not None:
                doc["ef_x_nh"] = doc["expansion_factor"] * doc["node_hours"]
        cores = doc["ncores"] if doc["ncores"] is not None else doc["cores_req"]
        gpus = doc["ngpus"] if doc["ngpus"] is not None else doc["gpus_req"]
        for name, bucket in (("size_bucket", size_bucket(cores)),
                             ("gpu_bucket", gpu_bucket(gpus)),
                             ("wait_bucket", duration_bucket(wait_s)),
                             ("runtime_bucket", duration_bucket(run_s))):
            if bucket is not None:
                doc[name] = bucket[1]

    @staticmethod
    def _usage_weights(doc: dict[str, Any]) -> None:
        """Efficiencies times node-hours: panels may not divide (no scripts), so a
        node-hour weighted mean is sum(product) / sum(node_hours) of the jobs that have
        the efficiency, two sums and a Grafana expression, as ``ef_x_nh`` does."""
        hours = doc["node_hours"]
        if hours is None:
            return
        for eff, product in (("cpu_eff_pct", "cpu_eff_x_nh"), ("mem_max_pct", "mem_eff_x_nh")):
            if doc[eff] is not None:
                doc[product] = doc[eff] * hours


@dataclass(slots=True)
class _Live:
    """A folded incarnation that events sorting after its last one may continue
    (:meth:`JobFold.documents`)."""

    incarnation: _Incarnation
    last: tuple[Any, ...]  # the fold order of its last event
    submits: set[float]  # the submit times its events state
    split_runs: bool  # a Slurm job: a second submit time starts a run or an incarnation

    @classmethod
    def of(cls, incarnation: _Incarnation, ordered: list[JobEvent], *,
           split_runs: bool) -> _Live | None:
        """``incarnation`` folded from ``ordered``, if later events may continue it."""
        submits = {s for ev in ordered if (s := _submit_time(ev)) is not None}
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
            self.submits.update(s for ev in new if (s := _submit_time(ev)) is not None)
            return len(self.submits) <= 1
        return True

    def add(self, ev: JobEvent) -> None:
        self.incarnation._apply(ev)
        self.last = event_order(ev)


def _interval(gte: int, lt: int | None) -> dict[str, int | None] | None:
    """An Elasticsearch date_range value; open-ended while the end is unknown.

    None when it is empty (end = start, e.g. a Slurm job started in its submit second):
    Elasticsearch refuses a range whose exclusive end is its start, and an empty interval
    overlaps no time bucket anyway.
    """
    if lt == gte:
        return None
    return {"gte": gte, "lt": lt if lt is not None and lt >= gte else None}


_HANDLERS = {
    "submit": _Incarnation._on_flux_pending,
    "validate": _Incarnation._on_flux_pending,
    "depend": _Incarnation._on_flux_pending,
    "urgency": _Incarnation._on_flux_pending,
    "jobspec-update": _Incarnation._on_flux_pending,
    "flux-restart": _Incarnation._on_flux_pending,
    "dependency-add": _Incarnation._on_flux_pending,
    "dependency-remove": _Incarnation._on_flux_pending,
    "reason": _Incarnation._on_reason,
    "priority": _Incarnation._on_priority,
    "eligible": _Incarnation._on_eligible,
    "alloc": _Incarnation._on_alloc,
    "prolog-start": _Incarnation._on_prolog,
    "prolog-finish": _Incarnation._on_prolog,
    "start": _Incarnation._on_start,
    "exception": _Incarnation._on_exception,
    "finish": _Incarnation._on_finish,
    "epilog-start": _Incarnation._on_epilog,
    "epilog-finish": _Incarnation._on_epilog,
    "end": _Incarnation._on_end,
    "requeue": _Incarnation._on_requeue,
    "clean": _Incarnation._on_clean,
    "invalidate": _Incarnation._on_invalidate,
}
