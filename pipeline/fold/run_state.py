"""One run of a job (between requeues): what its events told, and what follows from it.

:class:`Run` holds a run's state as the incarnation applies its events
(:mod:`pipeline.fold.incarnation`); the functions below read it: the run's lifecycle
times (stated facts first, then event times), whether it started, its resource hours, why
it waits and how it ended (:mod:`pipeline.fold`, "Field rules"). They are the
definitions a document's run fields come from, kept apart from the order events are
applied in and from the document's shape.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from pipeline.core.model import RESULTS

__all__ = ["COMPLETING", "DONE", "FLUX_DEPEND", "FLUX_NEW", "FLUX_PRIORITY",
           "FLUX_REPRIORITIZE", "FLUX_SCHED", "PENDING", "RUNNING", "RUN_FACTS", "STATE_NAMES",
           "USAGE_FACTS", "JobException", "Run", "Times", "earliest", "latest", "ms",
           "pending_reason", "result", "run_hours", "run_started", "span_s", "times"]

# Document states, ordered: within one run a job never goes back.
PENDING, RUNNING, COMPLETING, DONE = 0, 1, 2, 3
STATE_NAMES = ("pending", "running", "completing", "done")

#: What accounting measured for a run, stated with its end (:mod:`pipeline.fold`).
USAGE_FACTS: tuple[str, ...] = (
    "cpu_time_s", "cpu_eff_pct", "mem_max_mb", "mem_max_pct", "gpu_util_pct",
)
#: Facts that belong to one run of the job.
RUN_FACTS: frozenset[str] = frozenset(
    {"t_eligible", "t_start", "t_end", "exit_code", "signal", "result", "nnodes", "ncores",
     "ngpus", "nodelist", "expiration", "mem_alloc_mb", *USAGE_FACTS}
)

# Flux pending sub-states (RFC 21), in the order a job passes them.
FLUX_NEW, FLUX_DEPEND, FLUX_PRIORITY, FLUX_SCHED = range(4)
# Events that send a job in SCHED back to PRIORITY (docs/flux.md, "States, transitions, results").
FLUX_REPRIORITIZE = frozenset({"urgency", "jobspec-update", "flux-restart"})

# Fatal Flux exception types with a result finer than flux-core's FAILED.
_FLUX_FATAL_RESULTS: Mapping[str, str] = {
    "oom": "oom", "node-failure": "node_fail", "exec": "failed",
}
# Slurm reasons before a job can be eligible at all; every other reason is ranked between
# them and Priority (:mod:`pipeline.fold`, ``pending_reason``).
_SLURM_REASON_RANK: Mapping[str, int] = {
    "JobHeldUser": 0, "JobHeldAdmin": 0, "BeginTime": 1, "Dependency": 1,
    "Priority": 3, "Resources": 4,
}
_SLURM_REASON_OTHER = 2


def ms(t: float | None) -> int | None:
    """Seconds -> epoch milliseconds, the documents' unit."""
    return None if t is None else round(t * 1000)


def span_s(start_ms: int | None, end_ms: int | None) -> float | None:
    """Seconds from one millisecond time to another; None if unknown or negative (skew)."""
    if start_ms is None or end_ms is None or end_ms < start_ms:
        return None
    return (end_ms - start_ms) / 1000


def earliest(a: float | None, b: float) -> float:
    return b if a is None or b < a else a


def latest(a: float | None, b: float) -> float:
    return b if a is None or b > a else a


@dataclass(slots=True)
class JobException:
    """An exception raised on a Flux job, as its document lists it."""

    type: str
    severity: int
    note: str | None
    timestamp: float


@dataclass(slots=True)
class Run:
    """What one run of the job (between requeues) told."""

    facts: dict[str, tuple[bool, Any]] = field(default_factory=dict)
    state: int = PENDING
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
    flux_state: int = FLUX_NEW
    urgency: int | None = None
    priority: int | float | None = None
    dependencies: set[str] = field(default_factory=set)
    reasons: set[str] = field(default_factory=set)

    def flux_reason(self) -> str | None:
        if self.urgency == 0:
            return "held"
        if self.dependencies or self.flux_state == FLUX_DEPEND:
            return "dependency"
        if self.flux_state == FLUX_PRIORITY or (
                self.flux_state == FLUX_SCHED and self.priority == 0):
            return "priority"
        return "resources" if self.flux_state == FLUX_SCHED else None

    def fact(self, name: str) -> Any:
        entry = self.facts.get(name)
        return None if entry is None else entry[1]


@dataclass(slots=True)
class Times:
    """Lifecycle times of one run, in seconds."""

    t_eligible: float | None
    t_alloc: float | None
    t_start: float | None
    t_end: float | None
    t_clean: float | None

    @property
    def run_begin(self) -> float | None:
        return self.t_alloc if self.t_alloc is not None else self.t_start


def times(run: Run, scheduler: str | None) -> Times:
    """A run's lifecycle times: stated facts first, then event times."""
    t_end = run.fact("t_end")
    if t_end is None:
        t_end = run.t_end_final if run.t_end_final is not None else run.t_end
    t_start = run.fact("t_start")
    if t_start is None:
        t_start = run.t_start
    t_alloc = run.t_alloc
    if scheduler == "slurm":
        # Slurm's start time is the allocation, and more exact than when a hook ran;
        # with only the prolog hook's alloc seen yet, that moment is the start.
        if t_start is not None:
            t_alloc = t_start
        else:
            t_start = t_alloc
    t_eligible = run.fact("t_eligible")
    if t_eligible is None:
        t_eligible = run.t_eligible if run.t_eligible is not None else run.eligible_since
    return Times(t_eligible, t_alloc, t_start, t_end, run.t_clean)


def run_started(run: Run, scheduler: str | None) -> bool:
    return run.started or times(run, scheduler).t_start is not None


def run_hours(run: Run, run_times: Times, end_fallback: float) -> list[float | None]:
    """Node, core and GPU hours of a run, up to ``end_fallback`` while it has no end."""
    end = run_times.t_end if run_times.t_end is not None else end_fallback
    run_s = span_s(ms(run_times.run_begin), ms(end))
    if run_s is None:
        return [None, None, None]
    counts = (run.fact("nnodes"), run.fact("ncores"), run.fact("ngpus"))
    return [None if c is None else run_s * c / 3600 for c in counts]


def _slurm_reason(reasons: Iterable[str]) -> str | None:
    """The reason a run seen with ``reasons`` waits for (ties: the larger name)."""
    return max(reasons, key=lambda r: (_SLURM_REASON_RANK.get(r, _SLURM_REASON_OTHER), r),
               default=None)


def pending_reason(run: Run, scheduler: str | None) -> str | None:
    """Why the run waits; None once it has started."""
    if run_started(run, scheduler):
        return None
    if scheduler == "flux":
        return run.flux_reason()
    return _slurm_reason(run.reasons)


def result(run: Run, tracked: JobException | None) -> str | None:
    """How the run ended, once done: the stated result, else Flux's, from ``tracked``
    (the incarnation's most severe exception, the first at equal severity)."""
    if run.state < DONE:
        return None
    stated = run.fact("result")
    if stated in RESULTS:
        return str(stated)
    if run.invalidated:
        return "exception"
    if run.success:
        return "completed"
    exc = tracked
    if exc is None:
        return "failed"
    if exc.type == "cancel":
        return "cancelled"
    if exc.type == "timeout":
        return "timeout"
    if exc.severity == 0:
        return _FLUX_FATAL_RESULTS.get(exc.type, "exception")
    return "failed"
