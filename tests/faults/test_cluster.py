"""Faults on a three-broker cluster (a KRaft quorum of three nodes, topics replicated with
the cluster's defaults: three copies, two in sync for a write): the broker leading most of
the raw topic's and the jobs changelog's partitions SIGKILLed while records flow, a
rolling restart of all three, a broker down for longer than the worker's session, and two
workers and two sinks with one worker SIGKILLed for good. Each ends with Elasticsearch
checked against the offline fold of the workload (every field); while two brokers of three
run, the edge must keep delivering (its spool may hold what waits for a dead broker's
fencing, never the outage's records)."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from harness import (
    STEADY_RATE,
    WORKER_SESSION_TIMEOUT_S,
    DepthWatch,
    Flow,
    Publisher,
    all_in_sync,
    busiest_broker,
    coordinator,
    describe_group,
    leaders,
    record,
    replication_factors,
    spec,
    wait_until,
)

from pipeline.kafka.topics import canonical_topic, jobs_changelog_topic
from pipeline.tooling.stack import kafka_nodes, start_broker, stop_broker

#: the coordinator's broker stays down this long: its group's session runs out meanwhile
LONG_DOWN_S = 2.5 * WORKER_SESSION_TIMEOUT_S
#: Kafka's default broker.session.timeout.ms (the stack keeps it): a SIGKILLed broker is
#: fenced this long after its last heartbeat
BROKER_SESSION_S = 9.0
#: a broker SIGKILLed stays down this long: past the controller's fencing of it, which
#: alone moves its leaderships and takes it out of the ISRs (until then every acks=all
#: write waits for it, on every partition it follows), the producers' metadata refresh
#: (SPOOL_BOUND's allowance), and the few seconds the edge's spool takes to drain what
#: came meanwhile, before the 2 s in which it must be empty again. At 15 s a fencing
#: that took 13 s under load left 1,000 records in that window (CI run K).
KILLED_DOWN_S = BROKER_SESSION_S + 6.0 + 5.0
#: the most the edge's spool may hold during a fault: what comes while acks=all writes
#: wait for a dead broker's fencing, its partitions' new leaders and the producer's
#: metadata refresh; never the outage's length
SPOOL_BOUND = round(STEADY_RATE * (BROKER_SESSION_S + 6.0))
#: the same for a controlled stop, which hands its leaderships over before the broker
#: goes: no fencing to wait for, only the producer's metadata refresh
CONTROLLED_SPOOL_BOUND = round(STEADY_RATE * 6.0)
#: records published during a fault below which the spool's checks prove nothing
MIN_PUBLISHED_IN_FAULT = 1000


def spool_bound(watch: DepthWatch, t0: float, t1: float, *, settled: float | None = None,
                bound: int = SPOOL_BOUND) -> str:
    """The edge's spool during a fault [t0, t1] (records flowing), the note's words for
    it. It holds at most ``bound``, however long the fault. With ``settled`` (the
    moment before the broker comes back) it must have emptied again by then: the edge
    delivers on two brokers of three alone, so one that stopped sending would hold
    everything published since ``t0``. Without it, the fault must have outlasted twice
    the bound's worth of records, so that such an edge would exceed the bound."""
    depth, published = watch.between(t0, t1)
    timeline = watch.timeline(t0, t1)
    print(f"  spool depth by second of the fault: {timeline}", flush=True)
    assert depth <= bound, \
        f"the edge's spool reached {depth} records (bound {bound}) while {published} " \
        f"were published with two brokers of three up; depth by second: {timeline}"
    note = f"spool max {depth} of {published} published meanwhile"
    if settled is None:
        assert published >= 2 * bound, \
            f"only {published} records published during the fault: the bound proves nothing"
        return note
    last, _ = watch.between(settled - 2.0, settled)
    _, before = watch.between(t0, settled)
    assert before >= MIN_PUBLISHED_IN_FAULT, \
        f"only {before} records published while the broker was down: proves nothing"
    assert last <= STEADY_RATE, \
        f"the edge's spool still held {last} records before the broker came back: it did " \
        f"not deliver on two brokers of three; depth by second: {timeline}"
    return f"{note}, {last} before the restart"


def changelog(flow: Flow) -> str:
    return jobs_changelog_topic(flow.cfg.worker.app_id)


def flow_topics(flow: Flow) -> list[str]:
    """Every topic of the flow: jobstream's own and the worker's internal ones."""
    t, app = flow.cfg.topics, flow.cfg.worker.app_id
    return [t.raw, t.events, t.state, t.snapshots, t.dlq, canonical_topic(app), changelog(flow)]


@dataclass(frozen=True)
class Outage:
    """Which broker went down (and why it was chosen), at which record, and when it went
    down, was asked back, was back, and the last record was sent."""

    node: int
    chosen: str
    at_record: int
    down: float
    restart: float
    back: float
    end: float


def broker_outage(flow: Flow, choose: Callable[[], tuple[int, str]], down_s: float, *,
                  kill: bool) -> tuple[Outage, str]:
    """Records flow at the steady rate; after a fifth of them the node ``choose()`` names
    goes down (SIGKILL or a controlled stop) for ``down_s``, then comes back (also when
    the scenario fails: the cluster serves the next ones), and the publisher finishes.
    The outage and the spool's words for it."""
    with DepthWatch(flow) as watch:
        publisher = Publisher(flow, flow.records, STEADY_RATE).start()
        publisher.wait_published(len(flow.records) // 5)
        node, chosen = choose()
        at = flow.published
        stop_broker(flow.cfg, node, kill=kill)
        down = time.monotonic()
        try:
            time.sleep(down_s)
        finally:
            restart = time.monotonic()
            start_broker(flow.cfg, node)
        back = time.monotonic()
        out = Outage(node, chosen, at, down, restart, back, publisher.join())
    bound = spool_bound(watch, out.down, min(out.back, out.end), settled=out.restart,
                        bound=SPOOL_BOUND if kill else CONTROLLED_SPOOL_BOUND)
    return out, bound


def recovered(flow: Flow, out: Outage) -> float:
    """Wait until the flow caught up; the recovery time, from the broker back or the last
    record, whichever later; then until the broker is back in every ISR."""
    flow.wait_caught_up()
    recovery = time.monotonic() - max(out.back, out.end)
    wait_until("the restarted broker back in every ISR", lambda: all_in_sync(flow.cfg),
               alive=flow.procs)
    return recovery


def test_leader_sigkill(make_cluster_flow: Any) -> None:
    """SIGKILL the broker that leads most partitions of the raw topic and the jobs
    changelog while records flow; restart it after it was fenced and its partitions had
    new leaders."""
    flow: Flow = make_cluster_flow(spec(seed=31, jobs=360))
    # the cluster's defaults apply to every topic: the changelog (the job states) too
    factors = replication_factors(flow.cfg, flow_topics(flow))
    assert set(factors.values()) == {3}, f"replication factors: {factors}"
    raw, table = flow.cfg.topics.raw, changelog(flow)

    def busiest() -> tuple[int, str]:
        node, _ = busiest_broker(flow.cfg, [raw, table])
        return node, (f"leader of {leaders(flow.cfg, [raw])[node]} raw and "
                      f"{leaders(flow.cfg, [table])[node]} changelog partitions of "
                      f"{flow.cfg.kafka.partitions} each")

    out, bound = broker_outage(flow, busiest, KILLED_DOWN_S, kill=True)
    recovery = recovered(flow, out)
    record(flow.verify(
        recovery,
        note=f"node {out.node} ({out.chosen}) SIGKILLed at record {out.at_record}, "
             f"restarted after {KILLED_DOWN_S:.0f} s, back {out.back - out.down:.0f} s "
             f"after the kill, every replica in sync {time.monotonic() - out.back:.0f} s "
             f"later at most; {bound} (acks=all writes wait for the dead replica until it "
             "is fenced); recovery from the broker back or the last record, whichever "
             "later"))


def test_rolling_restart(make_cluster_flow: Any) -> None:
    """Each broker in turn: a controlled stop, a start, and on to the next only once it
    is back in every ISR, while records flow."""
    flow: Flow = make_cluster_flow(spec(seed=32, jobs=600))
    steps: list[str] = []
    with DepthWatch(flow) as watch:
        publisher = Publisher(flow, flow.records, STEADY_RATE).start()
        publisher.wait_published(len(flow.records) // 10)
        first = time.monotonic()
        for node in kafka_nodes(flow.cfg):
            t0 = time.monotonic()
            stop_broker(flow.cfg, node)
            start_broker(flow.cfg, node)
            wait_until(f"node {node} back in every ISR", lambda: all_in_sync(flow.cfg),
                       alive=flow.procs)
            steps.append(f"{time.monotonic() - t0:.0f}")
        back = time.monotonic()
        end = publisher.join()
    bound = spool_bound(watch, first, min(back, end), bound=CONTROLLED_SPOOL_BOUND)
    flow.wait_caught_up()
    record(flow.verify(
        time.monotonic() - max(back, end),
        note=f"nodes 1-3 stopped and restarted in turn ({' + '.join(steps)} s, each until "
             f"back in every ISR); {bound}; recovery from the last node in sync or the "
             "last record, whichever later"))


def test_broker_down_past_the_session(make_cluster_flow: Any) -> None:
    """The broker coordinating the worker's group stopped for 2.5 times the worker's
    session timeout while records flow, then started again."""
    flow: Flow = make_cluster_flow(spec(seed=33, jobs=360))
    out, bound = broker_outage(
        flow, lambda: (coordinator(flow.cfg, flow.cfg.worker.app_id),
                       "the worker group's coordinator"), LONG_DOWN_S, kill=False)
    recovery = recovered(flow, out)
    record(flow.verify(
        recovery,
        note=f"node {out.node} ({out.chosen}) stopped, down {out.back - out.down:.0f} s "
             f"(session {WORKER_SESSION_TIMEOUT_S:.0f} s); {bound}; recovery from the "
             "broker back or the last record, whichever later"))


def test_two_workers_one_sigkilled(make_cluster_flow: Any) -> None:
    """Two workers and two sinks share the partitions; one worker is SIGKILLed for good
    half-way, with records of its partitions it had not committed: the other takes its
    partitions over (their table state from the changelog), and the documents equal the
    offline fold (as in every scenario)."""
    flow: Flow = make_cluster_flow(spec(seed=34, jobs=360), workers=2, sinks=2)
    group = flow.cfg.worker.app_id
    shares = flow.worker_partitions()
    assert len(shares) == 2 and min(shares) > 0, f"the workers' shares: {shares}"
    publisher = Publisher(flow, flow.records, STEADY_RATE).start()
    publisher.wait_published(len(flow.records) * 2 // 5)
    members = describe_group(flow.cfg, group).members
    kill = flow.kill(flow.workers[1])
    rebalanced = flow.wait_groups(workers=1)
    # the victim's member: the one gone from the group (the survivor keeps its member id)
    left = {m.member_id for m in describe_group(flow.cfg, group).members}
    gone = [m for m in members if m.member_id not in left]
    if len(gone) == 1:
        lag = kill.on((tp.topic, tp.partition) for tp in gone[0].assignment.topic_partitions)
        whose = "of its partitions"
    else:  # the survivor joined again under a new id: the group's as a whole
        lag, whose = kill.lag, "of the group (its own partitions not told apart)"
    end = publisher.join()
    flow.wait_caught_up()
    record(flow.verify(time.monotonic() - end,
                       note=f"2 workers ({shares} partitions), 2 sinks; worker-2 "
                            f"SIGKILLed at record {kill.at_record} with {lag} records "
                            f"{whose} uncommitted, not restarted; the group was stable with "
                            f"worker 1 alone {rebalanced:.0f} s later; recovery from the "
                            "last record"))
    assert lag > 0, f"worker-2 was killed with nothing uncommitted {whose}: proves nothing"
    # every record is folded where it is read, by the group's leader and the other alike
    assert flow.rekeyed() == 0, f"{flow.rekeyed()} events re-keyed through the canonical topic"
