"""Where the e2e window starts: when the worker folded its first event, found after the
run by that record's Kafka timestamp, with the CPU each watched process had used by then.

The first record on the events topic, where the clock started before issue 34, comes late.
The worker hands each event to its producer as it folds it, but the producer holds the
records (the worker's producer ``linger.ms``) until the batch is flushed (the worker's
batch size and time), so up to a batch had been folded, on CPU left out of the window,
when the clock started, and its events were counted all the same (BENCHMARKS.md, "Today's
figures", has how much that read high).
What else tells when the worker starts, and how well:

* ``jobstream_worker_records_read`` counts a batch's records at the batch's end
  (:mod:`agents.batch`: one ``inc`` per batch), the moment of the first output again; and
  the bench runs the flow with metrics off.
* The raw topic's committed offsets move once a batch's outputs are confirmed, later
  still; a consumer's fetch position is not seen from outside.
* The events' CreateTime: librdkafka stamps a record with the wall clock, in
  milliseconds, when ``produce()`` is called, which is when the worker folded the event,
  whatever the linger. The first record of each partition of the events topic is that
  partition's earliest (a producer appends a partition's records in the order it made
  them), and the earliest of those is the worker's first event (of the first worker
  to start, when there are several).

So the window starts at that CreateTime (:func:`first_stamp_ms`). It is known only once
the records are on the topic, so the CPU of every watched process is sampled into a
:class:`CpuHistory` at each poll (every 50 ms) from the spawn until the first output, and
each process's baseline is interpolated between the two samples around the start
(:func:`baseline_at`). The errors, all in the JSON (``e2e.window``):

* the start lies within ``error_s`` of the first event's making: the timestamp's
  millisecond, plus the wall-to-monotonic mapping, read at the spawn and again at the end
  (how far it moved in between is counted too);
* before that moment the worker had taken one raw record and decoded and parsed it (and,
  if it had sent nothing before, made its producer): at most ``events_before_at_most``
  events (the most one record of the workload holds) of work counted but not timed. That
  holds when every record holds an event, as the bench's workload does (else None: a
  record without events emits nothing, and several could come first);
* each CPU baseline is off by less than what the process used between the two samples
  around the start plus one tick of /proc's accounting (``cpu_error_s``).
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from confluent_kafka import KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, OffsetSpec

from pipeline.kafka.positions import Positions
from pipeline.runtime.config import Config
from pipeline.runtime.errors import ServiceError
from pipeline.tooling.bench.rss import CLOCK_TICK_S, RssSampler

__all__ = ["STAMP_RESOLUTION_S", "Baseline", "Clock", "CpuHistory", "CpuSample",
           "WindowStart", "baseline_at", "earliest_stamp_ms", "first_stamp_ms"]

#: a CreateTime is whole milliseconds, cut: the record was made within this after it
STAMP_RESOLUTION_S = 0.001
_TIMEOUT_S = 30.0


@dataclass(frozen=True)
class Clock:
    """``time.time() - time.monotonic()`` at one moment, to place a wall-clock time (a
    Kafka timestamp) on the monotonic clock the bench times with."""

    offset: float
    #: how far off ``offset`` can be: half the time the two readings took
    error: float

    @classmethod
    def read(cls, tries: int = 5) -> Clock:
        """The closest of ``tries`` pairs of readings (a pair the scheduler split is wide)."""
        best: Clock | None = None
        for _ in range(tries):
            before = time.monotonic()
            wall = time.time()
            after = time.monotonic()
            pair = cls(wall - (before + after) / 2, (after - before) / 2)
            if best is None or pair.error < best.error:
                best = pair
        assert best is not None
        return best

    def monotonic(self, epoch_s: float) -> float:
        return epoch_s - self.offset


@dataclass(frozen=True)
class CpuSample:
    """CPU seconds of each process, read between ``before`` and ``after`` (monotonic)."""

    before: float
    after: float
    cpu_s: Mapping[str, float]
    #: of which the JVMs' JIT compiler threads (:meth:`RssSampler.jit_cpu_s`)
    jit_cpu_s: Mapping[str, float]


class CpuHistory:
    """The CPU of the processes an :class:`RssSampler` watches, one sample per call: the
    window's start is found after the fact, so its baselines come from here."""

    def __init__(self, rss: RssSampler) -> None:
        self.rss = rss
        self.samples: list[CpuSample] = []

    def sample(self) -> None:
        before = time.monotonic()
        cpu = self.rss.cpu_now()
        jit = self.rss.jit_cpu_s()
        self.samples.append(CpuSample(before, time.monotonic(), cpu, jit))


@dataclass(frozen=True)
class Baseline:
    """Each process's CPU at one moment, from the samples around it."""

    cpu_s: dict[str, float]
    jit_cpu_s: dict[str, float]
    #: per process, more than the baseline can be off: what the process used between the
    #: two samples, and a tick
    error_s: dict[str, float]
    #: from the sample before the moment to the sample after it
    gap_s: float


def baseline_at(samples: Sequence[CpuSample], t: float) -> Baseline:
    """CPU at monotonic time ``t``, interpolated between the last sample read wholly before
    ``t`` and the first read wholly after it. CPU time only grows, so the truth lies
    between the two readings (the later one short of it by less than a tick): the
    interpolation is off by less than their difference and a tick."""
    prior = [s for s in samples if s.after <= t]
    later = [s for s in samples if s.before >= t]
    if not prior or not later:
        span = (f"{samples[0].before:.3f}-{samples[-1].after:.3f}" if samples
                else "no samples")
        raise ServiceError(f"the e2e window's start ({t:.3f}) is outside the CPU samples "
                           f"({span}): the wall clock stepped during the run?")
    a, b = prior[-1], later[0]
    ta, tb = (a.before + a.after) / 2, (b.before + b.after) / 2
    share = min(max((t - ta) / (tb - ta), 0.0), 1.0) if tb > ta else 0.0

    def between(x: Mapping[str, float], y: Mapping[str, float]) -> dict[str, float]:
        return {k: v + share * (y.get(k, v) - v) for k, v in x.items()}

    return Baseline(
        cpu_s=between(a.cpu_s, b.cpu_s), jit_cpu_s=between(a.jit_cpu_s, b.jit_cpu_s),
        error_s={k: b.cpu_s.get(k, v) - v + CLOCK_TICK_S for k, v in a.cpu_s.items()},
        gap_s=b.before - a.after)


def earliest_stamp_ms(found: Sequence[tuple[int, int]]) -> int | None:
    """The earliest timestamp of (offset, timestamp) pairs, one per partition, as a
    list-offsets by time answers them (offset -1: the partition has no such record)."""
    stamps = [stamp for offset, stamp in found if offset >= 0 and stamp >= 0]
    return min(stamps, default=None)


def first_stamp_ms(cfg: Config, topics: Sequence[str]) -> int:
    """The earliest CreateTime of the first record of each partition of ``topics``: a
    list-offsets for time 0 answers each partition's first record with its timestamp."""
    admin = AdminClient(cfg.librdkafka())
    tps = [TopicPartition(t, p) for t, p in Positions(admin).partitions(topics)]
    if not tps:
        raise ServiceError(f"no topic {', '.join(topics)}")
    futures = admin.list_offsets({tp: OffsetSpec.for_timestamp(0) for tp in tps},
                                 request_timeout=_TIMEOUT_S)
    found = []
    for tp, future in futures.items():
        try:
            info = future.result(timeout=_TIMEOUT_S)
        except KafkaException as exc:
            raise ServiceError(f"kafka: the first record of {tp.topic}[{tp.partition}]: "
                               f"{exc}") from exc
        found.append((info.offset, info.timestamp))
    stamp = earliest_stamp_ms(found)
    if stamp is None:
        raise ServiceError(f"no record on {', '.join(topics)}")
    return stamp


@dataclass(frozen=True)
class WindowStart:
    """The e2e window's start and its errors (module docstring), for the JSON."""

    #: what the window starts at
    method: str
    #: the start lies within this of the worker's first event being made
    error_s: float
    #: how far the wall clock moved against the monotonic one from the spawn to the end
    #: (included in ``error_s``)
    clock_drift_s: float
    #: work done before the start (the first raw record's decode and parse), in events
    #: (None: a record of the workload holds no event, so no bound)
    events_before_at_most: int | None
    #: from the start to the first record seen on the events topic, where the clock
    #: started before issue 34 (that window is ``seconds`` minus this)
    first_output_after_s: float
    #: per process, more than its CPU baseline can be off
    cpu_error_s: dict[str, float]
    #: the sum of ``cpu_error_s`` over the sum of the window's CPU seconds
    cpu_error_share: float | None
    #: between the two CPU samples around the start
    cpu_sample_gap_s: float
