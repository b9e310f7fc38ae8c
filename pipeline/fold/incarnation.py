"""One incarnation of a job: its events applied in fold order, run after run.

An :class:`Incarnation` is given the ordered events of one incarnation (or, on the
incremental path, one event at a time after them), cuts them into runs by submit time,
merges their facts by precedence and moves each run's state with one handler per event
name (:mod:`pipeline.fold`, "Runs" and "Field rules"). Its document is built from what it
holds by :func:`pipeline.fold.document.document`, which reads it; it knows of its job's
fold only the :class:`JobHead` it needs.
"""

from __future__ import annotations

import math
import weakref
from collections.abc import Callable, Mapping
from typing import Any, Protocol

from pipeline.core.model import JobEvent
from pipeline.fold.annotations import UserAnnotations
from pipeline.fold.order import assign, is_final, submit_time
from pipeline.fold.run_state import (
    COMPLETING,
    DONE,
    FLUX_DEPEND,
    FLUX_PRIORITY,
    FLUX_REPRIORITIZE,
    FLUX_SCHED,
    RUN_FACTS,
    RUNNING,
    JobException,
    Run,
    earliest,
    latest,
    run_hours,
    run_started,
    times,
)
from pipeline.fold.usage import NodeUsage

__all__ = ["Incarnation", "JobHead"]

#: Facts the fold reads itself rather than copying.
_OWN_FACTS: frozenset[str] = frozenset({"t_submit", "restart_count"})


class JobHead(Protocol):
    """What an incarnation reads of its job's fold (a :class:`~pipeline.fold.JobFold`)."""

    cluster: str | None
    scheduler: str | None
    job_id: str | None
    job_id_f58: str | None

    @property
    def dropped(self) -> Mapping[str, int]: ...

    @property
    def annotations(self) -> UserAnnotations: ...

    @property
    def usage(self) -> NodeUsage: ...


class Incarnation:
    """Applies the ordered events of one incarnation, run after run."""

    def __init__(self, jf: JobHead, number: int, revision: int, *, split_runs: bool) -> None:
        # weak: the fold keeps its live incarnation (JobFold._live), and a cycle would keep
        # every fold the worker's cache let go until a full collection, which the worker's
        # thresholds make rare (agents/cli.py): 2 KiB and more per job it ever folded
        self._jf = weakref.ref(jf)
        self.number = number
        self.revision = revision
        self.split_runs = split_runs
        self.identity: dict[str, tuple[tuple[int, bool], Any]] = {}
        self.run = Run()
        self.run_index = 0
        self.started_any = False
        self.prior_hours: list[float | None] = [None, None, None]
        self.exceptions: list[JobException] = []
        self.tracked: JobException | None = None
        self.requeues_by_source: dict[str, int] = {}
        self.restart_count: int | None = None
        self.t_submit: float | None = None
        self.updated_at = -math.inf
        # the latest run ended in a requeue and was closed: later events cannot continue it
        self.interrupted = False

    @property
    def jf(self) -> JobHead:
        jf = self._jf()
        assert jf is not None, "an incarnation outlived its fold"
        return jf

    def fold(self, events: list[JobEvent]) -> int:
        """Apply ``events`` (the incarnation's, in fold order); the number of its runs."""
        starts = sorted({s for ev in events if (s := submit_time(ev)) is not None})
        # Every start has its events (the ones stating it), so no run is empty.
        parts = assign(events, starts) if self.split_runs and len(starts) > 1 else [events]
        for index, run_events in enumerate(parts):
            if index:
                self._close_run(end_fallback=starts[index])
                self.run, self.run_index = Run(), index
            for ev in run_events:
                self.apply(ev)
        if self.run.requeued_at is not None:  # interrupted: the job waits for its next run
            self._close_run(end_fallback=self.run.requeued_at)
            self.run = Run()
            self.interrupted = True
        return len(parts)

    # -- applying events

    def apply(self, ev: JobEvent) -> None:
        self.updated_at = max(self.updated_at, ev.timestamp)
        s = submit_time(ev)
        if s is not None:
            self.t_submit = earliest(self.t_submit, s)
        rc = ev.facts.get("restart_count")
        if isinstance(rc, int):
            self.restart_count = rc if self.restart_count is None else max(
                self.restart_count, rc)
        self._merge_facts(ev)
        handler = _HANDLERS.get(ev.event)
        if handler is not None:
            handler(self, ev)

    def _merge_facts(self, ev: JobEvent) -> None:
        final = is_final(ev)
        prec = (self.run_index, final)
        for name, value in ev.facts.items():
            if value is None or name in _OWN_FACTS:
                continue
            if name in RUN_FACTS:
                old = self.run.facts.get(name)
                if old is None or final >= old[0]:
                    self.run.facts[name] = (final, value)
            else:
                old_id = self.identity.get(name)
                if old_id is None or prec >= old_id[0]:
                    self.identity[name] = (prec, value)

    def _close_run(self, end_fallback: float) -> None:
        run, scheduler = self.run, self.jf.scheduler
        if run_started(run, scheduler):
            self.started_any = True
        end = run.requeued_at if run.requeued_at is not None else end_fallback
        for i, h in enumerate(run_hours(run, times(run, scheduler), end_fallback=end)):
            if h is not None:
                self.prior_hours[i] = (self.prior_hours[i] or 0.0) + h

    def _advance(self, state: int) -> None:
        self.run.state = max(self.run.state, state)
        if state == RUNNING:
            self.run.started = True

    def _on_priority(self, ev: JobEvent) -> None:
        run = self.run
        if run.state >= RUNNING:
            return
        prio = ev.context.get("priority")
        run.flux_state = FLUX_SCHED
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
            run.flux_state = max(run.flux_state, FLUX_DEPEND)
        elif name == "depend":
            run.flux_state = max(run.flux_state, FLUX_PRIORITY)
        elif name in FLUX_REPRIORITIZE and run.flux_state == FLUX_SCHED:
            run.flux_state = FLUX_PRIORITY
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

    def _on_eligible(self, ev: JobEvent) -> None:
        self.run.t_eligible = earliest(self.run.t_eligible, ev.timestamp)

    def _on_alloc(self, ev: JobEvent) -> None:
        self.run.t_alloc = earliest(self.run.t_alloc, ev.timestamp)
        self._advance(RUNNING)

    def _on_prolog(self, ev: JobEvent) -> None:
        start, end = self.run.prolog
        if ev.event == "prolog-start":
            self.run.prolog = (earliest(start, ev.timestamp), end)
        else:
            self.run.prolog = (start, latest(end, ev.timestamp))
        self._advance(RUNNING)

    def _on_start(self, ev: JobEvent) -> None:
        self.run.t_start = earliest(self.run.t_start, ev.timestamp)
        self._advance(RUNNING)

    def _on_exception(self, ev: JobEvent) -> None:
        ctx = ev.context
        severity = ctx.get("severity")
        note = ctx.get("note")
        exc = JobException(type=str(ctx.get("type", "")),
                           severity=severity if isinstance(severity, int) else 0,
                           note=note if isinstance(note, str) and note else None,
                           timestamp=ev.timestamp)
        self.exceptions.append(exc)
        # flux-core job-list tracks the most severe exception, the first at equal severity
        if self.tracked is None or exc.severity < self.tracked.severity:
            self.tracked = exc
        if exc.severity == 0 and self.run.state < COMPLETING:
            self.run.t_end = earliest(self.run.t_end, ev.timestamp)
            self._advance(COMPLETING)

    def _on_finish(self, ev: JobEvent) -> None:
        run = self.run
        status = ev.context.get("status")
        if not isinstance(status, int):
            code, sig = ev.facts.get("exit_code"), ev.facts.get("signal")
            status = 0 if code == 0 and not sig else 1
        fatal = self.tracked is not None and self.tracked.severity == 0
        run.success = status == 0 and not fatal
        if run.state < COMPLETING:
            run.t_end = earliest(run.t_end, ev.timestamp)
        self._advance(COMPLETING)

    def _on_epilog(self, ev: JobEvent) -> None:
        start, end = self.run.epilog
        if ev.event == "epilog-start":
            self.run.epilog = (earliest(start, ev.timestamp), end)
        else:
            self.run.epilog = (start, latest(end, ev.timestamp))
        self._advance(COMPLETING)

    def _on_end(self, ev: JobEvent) -> None:
        if is_final(ev):
            self.run.t_end_final = earliest(self.run.t_end_final, ev.timestamp)
            self._advance(DONE)
        else:
            self.run.t_end = earliest(self.run.t_end, ev.timestamp)
            self._advance(COMPLETING)

    def _on_requeue(self, ev: JobEvent) -> None:
        if "restart_count" not in ev.facts:
            self.requeues_by_source[ev.source] = self.requeues_by_source.get(ev.source, 0) + 1
        # A requeue stated before the run started announces this run; after, it ends it.
        if self.run.started or self.run.state >= RUNNING:
            self.run.requeued_at = earliest(self.run.requeued_at, ev.timestamp)

    def _on_clean(self, ev: JobEvent) -> None:
        self.run.t_clean = earliest(self.run.t_clean, ev.timestamp)
        self._advance(DONE)

    def _on_invalidate(self, ev: JobEvent) -> None:
        self.run.invalidated = True
        self._advance(DONE)


_HANDLERS: dict[str, Callable[[Incarnation, JobEvent], None]] = {
    "submit": Incarnation._on_flux_pending,
    "validate": Incarnation._on_flux_pending,
    "depend": Incarnation._on_flux_pending,
    "urgency": Incarnation._on_flux_pending,
    "jobspec-update": Incarnation._on_flux_pending,
    "flux-restart": Incarnation._on_flux_pending,
    "dependency-add": Incarnation._on_flux_pending,
    "dependency-remove": Incarnation._on_flux_pending,
    "reason": Incarnation._on_reason,
    "priority": Incarnation._on_priority,
    "eligible": Incarnation._on_eligible,
    "alloc": Incarnation._on_alloc,
    "prolog-start": Incarnation._on_prolog,
    "prolog-finish": Incarnation._on_prolog,
    "start": Incarnation._on_start,
    "exception": Incarnation._on_exception,
    "finish": Incarnation._on_finish,
    "epilog-start": Incarnation._on_epilog,
    "epilog-finish": Incarnation._on_epilog,
    "end": Incarnation._on_end,
    "requeue": Incarnation._on_requeue,
    "clean": Incarnation._on_clean,
    "invalidate": Incarnation._on_invalidate,
}
