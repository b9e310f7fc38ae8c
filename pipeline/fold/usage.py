"""A job's usage while it runs: its ``usage`` events (node samples) folded into figures so
far, and into the final figures where no accounting record gives them.

A node edge (:mod:`pipeline.edges.node`) sends, every interval, one sample per job on its
node: the kernel's *cumulative* counters of the job there (CPU seconds, memory at its
peak), what it holds now (memory, the last interval's CPU, its GPUs), which counter they
belong to (``epoch``: a re-created cgroup or a requeued job's new processes start a new
one) and which edge process read them (``run``: an edge's GPU sums start again with it).
Because the counters are cumulative, the job's state keeps per (node, epoch, run) only
the latest sample (by ``sampled_at``, then event id): that one is the same whatever order
and copies the samples arrive in, and it holds everything the figures need. A missing
interval loses nothing of the cumulative figures (the next sample has it); it only leaves
the "now" figures older, as ``usage_sampled_at`` tells.

The figures of a run (``schemas/README.md``, "Usage while jobs run", defines each) come
from the samples taken from 60 s before the run began (the allocation; a sample of an
earlier run of a requeued job is older than that):

* per node: CPU = the sum over its epochs of the largest ``cpu_s`` of the epoch's runs
  (the same counter read by two edge processes is counted once); peak memory = the largest
  ``mem_peak_bytes`` (the kernel's, else the edge's largest reading) or ``mem_bytes``;
  "now" = its newest sample; its memory limit = the sample's (the job's cgroup), else the
  job's allocated memory over its node count;
* the job: CPU summed over nodes, peak memory the largest per node (an allocation is per
  node), shares of the limit the largest over nodes, GPU utilization so far = GPU-busy
  seconds over GPU seconds summed over every counter kept.

The samples are not kept as events in the job's state (they would fill its windows in
minutes on a large job): a sample changes the document's usage, ``updated_at`` (the
newest sample's time, when it is the latest thing the job did) and ``revision``
(:attr:`NodeUsage.revision`), and goes to the events index like every event.

Bounds: at most :data:`USAGE_COUNTERS` (node, epoch, run) keys are kept, the first seen;
a sample of a key not kept is counted in ``usage_dropped``. Within the bound everything is
the same for any order of arrival; beyond it, which counters are kept depends on it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, fields
from operator import attrgetter
from typing import Any

__all__ = ["RUN_SLACK_S", "USAGE_COUNTERS", "USAGE_EVENT", "USAGE_FIELDS", "NodeUsage", "Sample",
           "keeps_point", "series_point", "usage_figures"]

#: the job document's fields of the usage so far, in document order
USAGE_FIELDS: tuple[str, ...] = (
    "usage_sampled_at", "usage_nodes", "usage_reader", "usage_cpu_s", "usage_cpu_eff_pct",
    "usage_cpu_now_pct", "usage_mem_mb", "usage_mem_peak_mb", "usage_mem_peak_pct",
    "usage_mem_now_pct", "usage_gpu_util_pct", "usage_gpu_now_pct", "usage_gpu_idle_since",
)

#: the event name of a node sample (:mod:`pipeline.parsers.node_usage`)
USAGE_EVENT = "usage"
#: the most (node, epoch, run) counters a job's state keeps: a 1,024-node job read by one
#: edge each; about 120 bytes each in the state
USAGE_COUNTERS = 1024
#: a sample this much before its run's allocation still belongs to it (node clocks differ
#: from the scheduler's)
RUN_SLACK_S = 60.0
_MIB = float(2**20)


@dataclass(frozen=True, slots=True)
class Sample:
    """What a job's state keeps of one node sample (the parser's context, narrowed)."""

    node: str
    epoch: str
    run: str
    sampled_at: float
    event_id: str
    reader: str
    cpu_s: float
    interval_s: float | None
    cpu_interval_s: float | None
    mem_bytes: float
    mem_peak_bytes: float | None
    mem_limit_bytes: float | None
    gpu_busy_s: float | None
    gpu_s: float | None
    gpu_count: int
    gpu_now_pct: float | None
    gpu_idle_since: float | None
    final: bool

    @property
    def key(self) -> tuple[str, str, str]:
        return (self.node, self.epoch, self.run)

    @property
    def order(self) -> tuple[float, str]:
        return (self.sampled_at, self.event_id)

    @classmethod
    def of(cls, context: Mapping[str, Any], event_id: str) -> Sample:
        gpus = [g for g in context.get("gpus") or () if isinstance(g, Mapping)]
        utils = [float(g["util_pct"]) for g in gpus if g.get("util_pct") is not None]
        return cls(
            node=str(context["node"]), epoch=str(context["epoch"]), run=str(context["run"]),
            sampled_at=float(context["sampled_at"]), event_id=event_id,
            reader=str(context.get("reader") or ""), cpu_s=float(context.get("cpu_s") or 0.0),
            interval_s=context.get("interval_s"), cpu_interval_s=context.get("cpu_interval_s"),
            mem_bytes=float(context.get("mem_bytes") or 0), mem_peak_bytes=context.get(
                "mem_peak_bytes"), mem_limit_bytes=context.get("mem_limit_bytes"),
            gpu_busy_s=context.get("gpu_busy_s"), gpu_s=context.get("gpu_s"),
            gpu_count=len(gpus), gpu_now_pct=sum(utils) / len(utils) if utils else None,
            gpu_idle_since=context.get("gpu_idle_since"), final=bool(context.get("final")))


#: a :class:`Sample`'s fields, in its order (a state's row)
_ROW = attrgetter(*(f.name for f in fields(Sample)))


class NodeUsage:
    """The latest sample of each (node, epoch, run) counter of one job, bounded."""

    __slots__ = ("_samples", "dropped")

    def __init__(self, samples: Iterable[Sample] = (), dropped: int = 0) -> None:
        self._samples: dict[tuple[str, str, str], Sample] = {}
        self.dropped = dropped
        for sample in samples:
            self.post(sample)

    def __len__(self) -> int:
        return len(self._samples)

    def samples(self) -> list[Sample]:
        return [self._samples[k] for k in sorted(self._samples)]

    @property
    def revision(self) -> int:
        """The samples' part of the job's ``revision``: the sum over the kept counters of
        their latest sample's time in milliseconds. It grows with every newer sample and
        every new counter, copies and older samples leave it, and it is the same for any
        order of arrival, as the document is; about 1.8e12 a counter, so 5 million
        counters before Elasticsearch's versions (63 bits) run out."""
        return sum(round(s.sampled_at * 1000) for s in self._samples.values())

    def post(self, sample: Sample) -> bool:
        """Keep ``sample`` if it is its counter's latest; False if it changed nothing (an
        older sample, a copy) or was not kept (counted in :attr:`dropped`)."""
        key = sample.key
        old = self._samples.get(key)
        if old is not None:
            if sample.order <= old.order:
                return False
            self._samples[key] = sample
            return True
        if len(self._samples) >= USAGE_COUNTERS:
            # never one out for another: the revision must only grow
            self.dropped += 1
            return False
        self._samples[key] = sample
        return True

    def to_state(self) -> list[list[Any]]:
        """The kept samples as lists of :class:`Sample`'s fields, in its order."""
        # every field is a JSON scalar, so the fields as they are give the rows astuple's
        # deep copies gave, at a twentieth of the cost (a job's state is encoded at every
        # sample: tests/unit/test_fold_usage.py compares the two)
        return [list(_ROW(s)) for s in self.samples()]

    @classmethod
    def from_state(cls, rows: Iterable[list[Any]], dropped: int = 0) -> NodeUsage:
        return cls((Sample(*row) for row in rows), dropped)


@dataclass(slots=True)
class _Node:
    cpu_by_epoch: dict[str, float]
    peak: float
    latest: Sample


def _by_node(samples: Iterable[Sample]) -> dict[str, _Node]:
    nodes: dict[str, _Node] = {}
    for s in samples:
        peak = max(s.mem_peak_bytes or 0.0, s.mem_bytes)
        node = nodes.get(s.node)
        if node is None:
            nodes[s.node] = _Node({s.epoch: s.cpu_s}, peak, s)
            continue
        node.cpu_by_epoch[s.epoch] = max(node.cpu_by_epoch.get(s.epoch, 0.0), s.cpu_s)
        node.peak = max(node.peak, peak)
        if s.order > node.latest.order:
            node.latest = s
    return nodes


def _pct(part: float, whole: float | None) -> float | None:
    return 100.0 * part / whole if whole else None


def usage_figures(usage: NodeUsage, *, begin: float | None, ncores: int | None,
                  nnodes: int | None, mem_alloc_mb: int | None) -> dict[str, Any] | None:
    """The ``usage_*`` fields of a run that began (was allocated) at ``begin`` (epoch
    seconds; None: every sample counts), or None when no sample belongs to it."""
    since = None if begin is None else begin - RUN_SLACK_S
    kept = [s for s in usage.samples() if since is None or s.sampled_at >= since]
    if not kept:
        return None
    nodes = _by_node(kept)
    latest = [n.latest for n in nodes.values()]
    last = max(s.sampled_at for s in latest)
    cpu = sum(sum(n.cpu_by_epoch.values()) for n in nodes.values())
    share = (mem_alloc_mb * _MIB / (nnodes or 1)) if mem_alloc_mb else None

    def limit(n: _Node) -> float | None:
        return n.latest.mem_limit_bytes or share

    peak_pcts = [p for n in nodes.values() if (p := _pct(n.peak, limit(n))) is not None]
    now_pcts = [p for n in nodes.values()
                if (p := _pct(n.latest.mem_bytes, limit(n))) is not None]
    rates = [s.cpu_interval_s / s.interval_s for s in latest
             if s.interval_s and s.cpu_interval_s is not None]
    busy = sum(s.gpu_busy_s or 0.0 for s in kept)
    gpu_time = sum(s.gpu_s or 0.0 for s in kept)
    gpu_nodes = [s for s in latest if s.gpu_count]
    gpu_now = sum((s.gpu_now_pct or 0.0) * s.gpu_count for s in gpu_nodes)
    gpu_count = sum(s.gpu_count for s in gpu_nodes)
    idle = [s.gpu_idle_since for s in gpu_nodes]
    elapsed = None if begin is None else last - begin
    readers = {s.reader for s in latest}
    return {
        "usage_sampled_at": round(last * 1000),
        "usage_nodes": len(nodes),
        "usage_reader": readers.pop() if len(readers) == 1 else "mixed",
        "usage_cpu_s": cpu,
        "usage_cpu_eff_pct": _pct(cpu, elapsed * ncores) if elapsed and elapsed > 0
        and ncores else None,
        "usage_cpu_now_pct": _pct(sum(rates), ncores) if rates and ncores else None,
        "usage_mem_mb": sum(s.mem_bytes for s in latest) / _MIB,
        "usage_mem_peak_mb": max(n.peak for n in nodes.values()) / _MIB,
        "usage_mem_peak_pct": max(peak_pcts, default=None),
        "usage_mem_now_pct": max(now_pcts, default=None),
        "usage_gpu_util_pct": _pct(busy, gpu_time) if gpu_time > 0 else None,
        "usage_gpu_now_pct": gpu_now / gpu_count if gpu_count else None,
        "usage_gpu_idle_since": round(max(idle) * 1000)  # type: ignore[type-var]
        if idle and None not in idle else None,
    }


def series_point(context: Mapping[str, Any]) -> dict[str, Any]:
    """A sample's point of the job's usage series (the events index's ``usage`` object,
    which the job page draws): one node's CPU in the interval as ``top`` shows it (100 =
    one busy core: a sample does not know the job's cores), its memory now in MiB and as a
    share of its limit, its GPUs' mean utilization. Fields not known are left out."""
    point: dict[str, Any] = {"node": context.get("node")}
    interval, cpu = context.get("interval_s"), context.get("cpu_interval_s")
    if interval and cpu is not None:
        point["cpu_now_pct"] = 100.0 * cpu / interval
    point["cpu_s"] = context.get("cpu_s")
    mem, limit = context.get("mem_bytes"), context.get("mem_limit_bytes")
    if mem is not None:
        point["mem_mb"] = mem / _MIB
        if limit:
            point["mem_pct"] = 100.0 * mem / limit
    utils = [g["util_pct"] for g in context.get("gpus") or ()
             if isinstance(g, Mapping) and g.get("util_pct") is not None]
    if utils:
        point["gpu_now_pct"] = sum(utils) / len(utils)
    return {k: v for k, v in point.items() if v is not None}


def keeps_point(context: Mapping[str, Any], every_s: float) -> bool:
    """Whether a sample is a point of the usage series thinned to one per ``every_s``
    seconds per node (0: every sample): the first sample of a node in each ``every_s``
    stretch of the clock, told from the sample alone (its time and interval), so a
    replay or a copy keeps the same points."""
    if every_s <= 0:
        return True
    at, interval = context.get("sampled_at"), context.get("interval_s")
    if not isinstance(at, int | float) or not interval:
        return True
    return int(at // every_s) != int((at - interval) // every_s)
