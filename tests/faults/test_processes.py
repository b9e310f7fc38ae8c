"""Process faults: the worker SIGKILLed at random points (repeated, seeded), the worker
frozen past its session, the sink SIGKILLed, and a burst of ten times the steady rate.
Each ends with Elasticsearch checked against the offline fold of the workload: nothing
lost, nothing doubled, nothing processed twice; and each fault shown to have bitten (a
kill that found its victim with records it had not committed, a freeze its group evicted
the worker for)."""

from __future__ import annotations

import random
import signal
import time
from typing import Any

from harness import (
    STEADY_RATE,
    WORKER_SESSION_TIMEOUT_S,
    Flow,
    Kill,
    member_ids,
    record,
    spec,
    wait_until,
)


def test_no_fault(make_flow: Any) -> None:
    """The baseline: the same flow with no fault (what recovery times compare with)."""
    flow: Flow = make_flow(spec(seed=11))
    flow.publish(flow.records, STEADY_RATE)
    t_end = time.monotonic()
    flow.wait_caught_up()
    record(flow.verify(time.monotonic() - t_end, note="catch-up after the last record"))


def kill_points(rng: random.Random, total: int, n: int) -> list[int]:
    """``n`` distinct record counts in (10%, 95%) of ``total`` at which to strike."""
    return sorted(rng.sample(range(total // 10, total * 95 // 100), n))


def kills_bit(kills: list[Kill]) -> str:
    """The note's words for a scenario's kills; at least one must have found its victim
    with records it had not committed, or the kills tested nothing."""
    lags = [k.lag for k in kills]
    assert max(lags) > 0, \
        f"no kill found {kills[0].victim} with a record it had not committed: {lags}"
    return (f"{len(kills)} kills (at records {[k.at_record for k in kills[:-1]]} and after "
            f"the last), uncommitted then {lags}")


def test_worker_sigkill_repeated(make_flow: Any) -> None:
    """SIGKILL the worker at five seeded random points while records flow (restarting it
    each time at once, so a kill may land in the previous restart's rebalance or table
    recovery), and once more after the last record, before it caught up."""
    rng = random.Random(7)
    flow: Flow = make_flow(spec(seed=12))
    points = kill_points(rng, len(flow.records), 5)
    kills: list[Kill] = []

    def strike(published: int) -> None:
        if points and published >= points[0]:
            points.pop(0)
            kills.append(flow.kill(flow.worker))
            flow.worker.start()

    flow.publish(flow.records, STEADY_RATE, during=strike)
    assert len(kills) == 5
    # after the last record, while the worker works through its backlog
    wait_until("the worker to process records", lambda: flow.lag()["worker"] > 0 or
               flow.caught_up(), alive=flow.procs)
    kills.append(flow.kill(flow.worker))
    flow.worker.start()
    t_restart = time.monotonic()
    flow.wait_caught_up()
    record(flow.verify(time.monotonic() - t_restart, note=kills_bit(kills)))


def test_sink_sigkill(make_flow: Any) -> None:
    """SIGKILL the sink at three seeded random points while records flow and once after
    the last record; it restarts at once each time and rewrites what it had not
    committed."""
    rng = random.Random(8)
    flow: Flow = make_flow(spec(seed=13))
    points = kill_points(rng, len(flow.records), 3)
    kills: list[Kill] = []

    def strike(published: int) -> None:
        if points and published >= points[0]:
            points.pop(0)
            kills.append(flow.kill(flow.sink))
            flow.sink.start()

    flow.publish(flow.records, STEADY_RATE, during=strike)
    assert len(kills) == 3
    wait_until("the sink to have records to write", lambda: flow.lag()["sink"] > 0 or
               flow.caught_up(), alive=flow.procs)
    kills.append(flow.kill(flow.sink))
    flow.sink.start()
    t_restart = time.monotonic()
    flow.wait_caught_up()
    record(flow.verify(time.monotonic() - t_restart, note=kills_bit(kills)))


def test_burst_ten_times_the_steady_rate(make_flow: Any) -> None:
    """Half the records at the steady rate, the other half at ten times that rate."""
    flow: Flow = make_flow(spec(seed=14, jobs=480))
    half = len(flow.records) // 2
    flow.publish(flow.records[:half], STEADY_RATE)
    t_burst = time.monotonic()
    flow.publish(flow.records[half:], STEADY_RATE * 10)
    t_end = time.monotonic()
    flow.wait_caught_up()
    record(flow.verify(time.monotonic() - t_end,
                       note=f"{len(flow.records) - half} records in {t_end - t_burst:.1f} s "
                            f"({STEADY_RATE * 10:.0f}/s); recovery = backlog drained"))


def test_worker_frozen_past_its_session(make_flow: Any) -> None:
    """SIGSTOP the worker (a hung VM, a stalled NFS mount) for 1.5 times its session
    timeout while records flow: the group evicts it; SIGCONT, and it must find out, join
    again and take its partitions back."""
    flow: Flow = make_flow(spec(seed=15))
    group = flow.cfg.worker.app_id
    half = len(flow.records) // 2
    flow.publish(flow.records[:half], STEADY_RATE)
    before = member_ids(flow.cfg, group)
    assert before is not None and len(before) == 1, f"the worker's group: {before}"
    assert flow.worker.proc is not None
    frozen = time.monotonic()
    flow.worker.proc.send_signal(signal.SIGSTOP)
    try:
        flow.publish(flow.records[half:], STEADY_RATE)
        # the broker's view: the group drops the frozen member once its session runs out
        wait_until("the worker's group to evict the frozen worker",
                   lambda: (ids := member_ids(flow.cfg, group)) is not None
                   and not ids & before, guard_s=3 * WORKER_SESSION_TIMEOUT_S, poll_s=0.5)
        evicted = time.monotonic() - frozen
        time.sleep(max(0.0, 1.5 * WORKER_SESSION_TIMEOUT_S - (time.monotonic() - frozen)))
    finally:
        flow.worker.proc.send_signal(signal.SIGCONT)
    back = time.monotonic()
    flow.wait_caught_up()
    after = member_ids(flow.cfg, group)
    # it found out it was evicted: it joined again, as a new member
    assert after and not after & before, f"the worker's group before {before}, after {after}"
    record(flow.verify(time.monotonic() - back,
                       note=f"frozen {back - frozen:.0f} s (session "
                            f"{WORKER_SESSION_TIMEOUT_S:.0f} s); the group had evicted it "
                            f"{evicted:.0f} s after the freeze at most, and it joined again "
                            "as a new member"))
