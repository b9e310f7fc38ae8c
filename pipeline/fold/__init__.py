"""The fold: canonical job events -> job documents (docs/design.md, section 5).

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

Field rules that are choices (Flux facts: docs/flux.md, "States, transitions, results"):

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
  none, its journal has no usage (docs/design.md, section 5, "Usage").
  ``cpu_eff_x_nh`` and ``mem_eff_x_nh`` are ``cpu_eff_pct`` and ``mem_max_pct`` times
  ``node_hours``, for node-hour weighted means without scripts. ``node_hours`` counts
  every run of a requeued job while the efficiencies are the latest run's: the earlier
  runs' hours weigh the latest run's figure (sacct without ``--duplicates`` has no other).
* ``user_annotations``: what the job's ``memo`` events set (``flux job memo``, and jobtap
  plugins such as flux-accounting's fair-share factor; ``flux jobs`` shows them as
  ``user.*``), folded as flux-core merges them: the last value of each key in fold order,
  ``null`` removing the key, an object merged key by key into the object at its key.
  Flat in the document, by dotted path, each value as its text (a string as it is, any
  other value as compact JSON). The order and copies of the memos do not matter: the
  state keeps per path the position of its last memo, a tombstone for a removal, so a
  removal wins over an older value however they arrive (the rules:
  :mod:`~pipeline.fold.annotations`). A memo is folded like any event besides: it is
  kept in its window (so copies are told from new memos), counts in ``revision`` and
  moves ``updated_at`` (the document changed then; a running job's ``run_s`` and hours
  run to it), and costs its own size, not the job's memos before it. Bounded ("Bounds"
  below), what is not kept counted in ``user_annotations_dropped``.
* ``revision``: the number of distinct (event id, content) pairs folded for the job key
  (node samples: their own part instead, :attr:`pipeline.fold.usage.NodeUsage.revision`)
  (kept or dropped: "Bounds" below), memos included, so every change of the document,
  a user annotation too, gives it a higher revision (the sink's external version).
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
raises :class:`StateTooLarge` when even one event per window does not fit. The user
annotations keep at most :data:`USER_ANNOTATION_KEYS` paths (the smallest in path order,
so the same ones in any order; removed and object paths count), each path at most
:data:`USER_ANNOTATION_KEY_BYTES` dotted and value :data:`USER_ANNOTATION_VALUE_BYTES`
(cut beyond), so at most :data:`USER_ANNOTATION_BYTES` in a document; a memo's write
not kept whole is counted in ``user_annotations_dropped``. A memo its full window does
not keep is still folded into them, and counted dropped if it changed them (a copy of
one folded before changes nothing).

Within the bounds nothing changes: the documents of a job whose windows never fill are
those of every event. Beyond them, the kept events are the same for any order and any
duplication (the first and the latest of every event seen), so the documents' fields are
too, but for the counts: an event sorting before the window of a full kind is neither kept
nor counted, as it cannot be told from a copy of one dropped before; so the counts, and
``revision`` with them, are exact when events arrive in fold order (the sources' own
order) and a lower bound otherwise. ``revision`` counts dropped events too, so it still
grows with every event that changes the state.

Documents never carry scripts or environments (the parsers drop them; facts hold none).

The package, by concern (each module's docstring says more); callers import the names
below from ``pipeline.fold`` itself:

* :mod:`~pipeline.fold.order`: the total order of a job's events, one event made of two
  copies of an id, and the cut of an id's events into incarnations and runs;
* :mod:`~pipeline.fold.bounds`: what a job's state keeps ("Bounds"): windows, their
  caps, the context and facts kept of an event, the bounds of the user annotations;
* :mod:`~pipeline.fold.annotations`: a job's user annotations, folded from its memos;
* :mod:`~pipeline.fold.run_state`: one run's state and what follows from it: its times,
  hours, pending reason and result;
* :mod:`~pipeline.fold.incarnation`: one incarnation, its events applied run after run;
* :mod:`~pipeline.fold.document`: the job document of an incarnation, and its id;
* :mod:`~pipeline.fold.presentation`: the presentation-only fields (Elasticsearch date
  ranges, XDMoD buckets, ratios, node-hour weights), derived in one step, last, from the
  document's other fields;
* :mod:`~pipeline.fold.encoding`: a job's state as JSON (the table value);
* :mod:`~pipeline.fold.jobfold`: :class:`JobFold`, the incremental cache over them
  (deduplication, the bounds, the live incarnation, the encoded entries), and
  :func:`fold`;
* :mod:`~pipeline.fold.nodes`: apart from the jobs, node events into node documents
  (``fold_nodes``, imported from there).

May import: ``pipeline.core``, ``pipeline.runtime`` and the standard library. Nothing
else of jobstream: the codecs, the worker, the sink and the tooling import this.
"""

from pipeline.fold.bounds import (
    FOLD_CONTEXT,
    KEEP_PER_WINDOW,
    STATE_FACT_CHARS,
    STATE_TEXT_CHARS,
    USER_ANNOTATION_BYTES,
    USER_ANNOTATION_KEY_BYTES,
    USER_ANNOTATION_KEYS,
    USER_ANNOTATION_VALUE_BYTES,
    StateTooLarge,
)
from pipeline.fold.document import DOC_FIELDS, doc_id
from pipeline.fold.jobfold import JobFold, fold
from pipeline.fold.order import event_order

__all__ = ["DOC_FIELDS", "FOLD_CONTEXT", "KEEP_PER_WINDOW", "STATE_FACT_CHARS",
           "STATE_TEXT_CHARS", "USER_ANNOTATION_BYTES", "USER_ANNOTATION_KEYS",
           "USER_ANNOTATION_KEY_BYTES", "USER_ANNOTATION_VALUE_BYTES", "JobFold",
           "StateTooLarge", "doc_id", "event_order", "fold"]
