"""Service faults on the private stack: the Kafka broker stopped and started and
Elasticsearch stopped for 30 s (each watched by a real Prometheus on the shipped alert
rules, which fire and resolve), a real edge
SIGKILLed while Kafka is down, and the edge's spool running out of disk. Each ends with
Elasticsearch checked against the offline fold of the workload, and with the fault shown
to have held records up."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from alerts import INTERVAL_S, wall, watching
from datafiles import unavailable
from harness import STEADY_RATE, Flow, Proc, record, spec, wait_until

from pipeline.runtime.errors import SpoolError
from pipeline.tooling.stack import start_service, stop_service

KAFKA_OUTAGE_S = 20.0
ES_OUTAGE_S = 30.0


def _held(flow: Flow, service: str) -> int:
    """Records held up by ``service`` being down: in the edge's spool for Kafka,
    uncommitted by the sink for Elasticsearch."""
    if service == "elasticsearch":
        return flow.lag()["sink"]
    return flow.edge.spool.depth() if flow.edge is not None else 0


def _outage(flow: Flow, service: str, seconds: float) -> tuple[float, float, int, int]:
    """Half the records before, half while ``service`` is down for ``seconds``; the
    moments it stopped and was back, and how many records were held up (:func:`_held`)
    when it had just stopped and when it came back."""
    half = len(flow.records) // 2
    flow.publish(flow.records[:half], STEADY_RATE)
    stop_service(flow.cfg, service)
    down = time.monotonic()
    at_stop = _held(flow, service)
    flow.publish(flow.records[half:], STEADY_RATE)
    time.sleep(max(0.0, seconds - (time.monotonic() - down)))
    held = _held(flow, service)
    start_service(flow.cfg, service)
    return down, time.monotonic(), at_stop, held


#: what a Kafka outage fires: the worker folds nothing new of any cluster, and the edge's
#: records wait in its spool
KAFKA_OUTAGE_ALERTS = ("JobstreamClusterStale", "JobstreamSpoolOld")


def test_kafka_broker_stop_start(make_flow: Any, tmp_path: Path) -> None:
    """The only broker stopped for 20 s while records flow: the edge's writes fail, its
    spool grows, and once the broker is back the drainer sends them again. A real
    Prometheus scrapes the worker, the sink and the edge meanwhile, on the shipped alert
    rules with their durations scaled to seconds (alerts.py): the stale-cluster and the
    spool-age alerts fire during the outage, and resolve once Kafka is back."""
    flow: Flow = make_flow(spec(seed=21), metrics=True)
    with watching(flow, tmp_path / "prometheus") as alerts:
        start = time.time()
        down, back, at_stop, held = _outage(flow, "kafka", KAFKA_OUTAGE_S)
        assert flow.edge is not None
        # what the edge's producer last reported (librdkafka's error callback): the outage
        producer_said = flow.edge.drainer.last_error
        assert held > at_stop, \
            f"the spool held {at_stop} records when Kafka stopped and {held} when it came " \
            "back: no write waited for Kafka, the test proves nothing"
        flow.wait_caught_up()  # the spool is empty again: every write refused was retried
        recovery_s = time.monotonic() - back
        wait_until("the spool-age alert to resolve",
                   lambda: "JobstreamSpoolOld" not in alerts.firing(), guard_s=60)
        end = time.time()
        spans = {name: alerts.spans(name, start, end) for name in KAFKA_OUTAGE_ALERTS}
        # not expected to fire, shown for the record (docs/deploying.md#alert-rules)
        seen = alerts.report([*KAFKA_OUTAGE_ALERTS, "JobstreamConsumerLagGrowing"], start, end)
    print(f"  [{flow.name}] alerts, in s from the start (Kafka down "
          f"{wall(down) - start:.1f}-{wall(back) - start:.1f} s): {seen}")
    record(flow.verify(recovery_s,
                       note=f"broker down {KAFKA_OUTAGE_S:.0f} s; the edge's spool grew from "
                            f"{at_stop} to {held} records meanwhile, all delivered once it "
                            f"was back (its producer's last error: {producer_said}); "
                            f"alerts fired and resolved: {', '.join(KAFKA_OUTAGE_ALERTS)}"))
    # the first stretch: begun while Kafka was down, still on when it came back, over
    # before the end (a cluster quiet once the workload is all in fires again later)
    _fired_and_resolved(spans, down, back, end, seen)


#: what an Elasticsearch outage fires: the sink's lag (past what Elasticsearch acknowledged)
#: grows on the topics it indexes
ES_OUTAGE_ALERTS = ("JobstreamConsumerLagGrowing",)


def test_elasticsearch_stop_start(make_flow: Any, tmp_path: Path) -> None:
    """Elasticsearch stopped for 30 s while records flow: the sink's bulk requests fail and
    its records wait in Kafka, uncommitted, until it is back. Watched by a real Prometheus
    as the Kafka outage is: the consumer-lag alert fires on the sink's group during the
    outage (its lag over the threshold and growing) and resolves by the end."""
    flow: Flow = make_flow(spec(seed=22), metrics=True)
    with watching(flow, tmp_path / "prometheus") as alerts:
        start = time.time()
        down, back, _, held = _outage(flow, "elasticsearch", ES_OUTAGE_S)
        assert held > 0, "nothing waited for Elasticsearch: the test proves nothing"
        flow.wait_caught_up()
        recovery_s = time.monotonic() - back
        wait_until("the consumer-lag alert to resolve",
                   lambda: not set(ES_OUTAGE_ALERTS) & alerts.firing(), guard_s=60)
        end = time.time()
        spans = {name: alerts.spans(name, start, end) for name in ES_OUTAGE_ALERTS}
        seen = alerts.report(list(ES_OUTAGE_ALERTS), start, end)
        groups = alerts.labels("JobstreamConsumerLagGrowing", "group", start, end)
    print(f"  [{flow.name}] alerts, in s from the start (Elasticsearch down "
          f"{wall(down) - start:.1f}-{wall(back) - start:.1f} s): {seen}")
    record(flow.verify(recovery_s,
                       note=f"Elasticsearch down {ES_OUTAGE_S:.0f} s; {held} outputs waiting "
                            f"in Kafka then; alerts fired and resolved: "
                            f"{', '.join(ES_OUTAGE_ALERTS)} (groups {sorted(groups)})"))
    assert groups == {flow.group("sink")}, f"the lag alert's groups: {groups}"
    # a rule on the lag's growth: it may resolve before Elasticsearch is back, once the
    # workload is all published and the lag stands still
    _fired_and_resolved(spans, down, back, end, seen, until_back=False)


def _fired_and_resolved(spans: dict[str, list[tuple[float, float]]], down: float,
                        back: float, end: float, seen: str, *, until_back: bool = True) -> None:
    """Each alert's first stretch begun while the service was down (``down`` and ``back``
    monotonic), still on when it came back if ``until_back``, and over before ``end``."""
    for name, stretches in spans.items():
        assert stretches, f"{name} never fired: {seen}"
        fired, resolved = stretches[0]
        assert wall(down) < fired < wall(back), f"{name} did not fire during the outage: {seen}"
        assert not until_back or resolved >= wall(back) - INTERVAL_S, \
            f"{name} resolved before the service was back: {seen}"
        assert resolved < end - 2 * INTERVAL_S, f"{name} did not resolve: {seen}"


def spool_depth(path: Path) -> int:
    if not path.exists():
        return 0
    try:
        with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as db:
            return int(db.execute("SELECT count(*) FROM records").fetchone()[0])
    except sqlite3.Error:
        return 0


def test_edge_sigkill_with_kafka_down(make_flow: Any, tmp_path: Path) -> None:
    """The Flux edge replays a recorded journal of the workload (``jobstream edge flux
    --recorded``) while Kafka is down; SIGKILLed with records in its spool, restarted
    (replaying the journal from the start, as a reconnect does), then Kafka comes back."""
    flow: Flow = make_flow(spec(seed=23, slurm=False))
    # the journal is the journal's records; the node samples of its running jobs go
    # through the scenario's own edge runtime, into its spool, while Kafka is down too
    lines = [r for r in flow.records if r.format == "flux-journal"]
    samples = [r for r in flow.records if r.format != "flux-journal"]
    assert samples, "the workload sends node samples of its running jobs"
    journal = tmp_path / "journal.jsonl"
    journal.write_bytes(b"".join(r.payload + b"\n" for r in lines))
    edge_cfg = flow.cfg.replace(cluster="flux-a",
                                edge={"spool_dir": str(tmp_path / "edge-spool")})
    spool = tmp_path / "edge-spool" / "flux.db"
    edge = Proc("edge", edge_cfg, ["edge", "flux", "--recorded", str(journal), "--interval",
                                   "0.002"], tmp_path / "edge.log")
    stop_service(flow.cfg, "kafka")
    down = time.monotonic()
    edge.start()
    flow.publish(samples, STEADY_RATE * 10)
    half = len(lines) // 2
    wait_until("the edge to spool half the journal", lambda: spool_depth(spool) >= half,
               alive=[edge])
    edge.kill()
    killed_at = spool_depth(spool)
    edge.start()
    wait_until("the restarted edge to spool more", lambda: spool_depth(spool) > killed_at,
               alive=[edge])
    time.sleep(max(0.0, KAFKA_OUTAGE_S - (time.monotonic() - down)))
    start_service(flow.cfg, "kafka")
    back = time.monotonic()
    assert edge.proc is not None
    assert edge.proc.wait(300) == 0, edge.log.read_text()[-3000:]
    edge.expected_exit = True
    # the journal's lines; those spooled before the kill twice (nothing was confirmed, so
    # the restarted edge replayed them): folded offline once, as the worker must
    flow.published_by_edge(lines)
    flow.wait_caught_up()
    record(flow.verify(time.monotonic() - back,
                       note=f"edge killed with {killed_at} records spooled, Kafka down "
                            f"{back - down:.0f} s"))


# -- disk full ----------------------------------------------------------------------------

SMALL_DISK = 1 << 20
#: a size limit counts only the spool's records (the WAL is not in it): smaller than the disk
SPOOL_LIMIT = 256 << 10


class SmallDisk:
    """Where the edge's spool lives: a 1 MiB tmpfs (``kind`` "tmpfs", needs root), or a
    directory whose spool gets ``edge.spool_max_bytes`` = 256 KiB ("spool_max_bytes")."""

    def __init__(self, path: Path, kind: str) -> None:
        self.path = path
        self.kind = kind

    def grow(self) -> None:
        """Space returns: the operator frees or adds some (a tmpfs grows to 16 MiB). A
        size limit needs nothing: the spool frees its own room as it drains."""
        if self.kind == "tmpfs":
            subprocess.run(["mount", "-o", f"remount,size={16 * SMALL_DISK}",
                            str(self.path)], check=True)


@pytest.fixture(params=["tmpfs", "spool_max_bytes"])
def small_disk(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[SmallDisk]:
    mnt = tmp_path / "small-disk"
    mnt.mkdir(mode=0o700)  # the edge refuses a spool directory others can enter
    if request.param == "spool_max_bytes":
        yield SmallDisk(mnt, request.param)
        return
    if os.geteuid() != 0 or subprocess.run(
            ["mount", "-t", "tmpfs", "-o", f"size={SMALL_DISK},mode=0700", "tmpfs", str(mnt)],
            capture_output=True, check=False).returncode != 0:
        # CI runs as root: there a tmpfs that cannot be mounted is a broken run, not a skip
        unavailable("cannot mount a small tmpfs here (needs root)",
                    "cannot mount a small tmpfs under CI (it runs as root)")
    try:
        yield SmallDisk(mnt, "tmpfs")
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


def test_spool_disk_full(make_flow: Any, small_disk: SmallDisk) -> None:
    """Kafka down, the edge's spool fills its small disk: appends fail with a clear error
    and store nothing half-way; what was spooled is intact. Kafka comes back: the spool
    drains (on a full disk even its deletes are refused: it keeps delivering and retries
    them until space returns). The refused records, kept by their source as Slurm keeps a
    refused jobcomp record, are offered again until the spool takes them: everything
    arrives, once."""
    flow: Flow = make_flow(spec(seed=24), start=False,
                           name=f"spool_disk_full_{small_disk.kind}")
    limit = SPOOL_LIMIT if small_disk.kind == "spool_max_bytes" else 0
    flow.start(edge_cfg=flow.cfg.replace(edge={"spool_dir": str(small_disk.path),
                                               "spool_max_bytes": limit}))
    assert flow.edge is not None
    stop_service(flow.cfg, "kafka")
    refused_at: int | None = None
    error = ""
    for i, rec in enumerate(flow.records):
        try:
            flow.publish([rec], STEADY_RATE * 10)
        except SpoolError as exc:
            refused_at, error = i, str(exc)
            break
    assert refused_at is not None, "the small disk never filled: the test proves nothing"
    assert "disk (or the spool's size limit) is full" in error, error
    # nothing half-written, nothing lost: the spool is sound and holds every accepted record
    path = flow.edge.spool.path
    with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as db:
        assert db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    assert flow.edge.spool.depth() == refused_at
    with pytest.raises(SpoolError):  # still full: the next record is refused too
        flow.publish([flow.records[refused_at]], STEADY_RATE)
    start_service(flow.cfg, "kafka")
    back = time.monotonic()
    if small_disk.kind == "tmpfs":
        wait_until("the records to be delivered (their deletes refused)",
                   lambda: flow.edge is not None and flow.edge.drainer.delivered == 0
                   and "cannot delete" in (flow.edge.drainer.last_error or ""))
        small_disk.grow()
        back = time.monotonic()
    rest = flow.records[refused_at:]
    while rest:
        try:
            flow.publish(rest[:50], STEADY_RATE * 10)
        except SpoolError:
            time.sleep(0.2)
            continue
        rest = rest[50:]
    flow.wait_caught_up()
    size = "1 MiB tmpfs" if small_disk.kind == "tmpfs" else "spool_max_bytes of 256 KiB"
    record(flow.verify(time.monotonic() - back,
                       note=f"{size} full after {refused_at} records (SpoolError: disk full); "
                            "recovery from "
                            + ("space back" if small_disk.kind == "tmpfs" else "Kafka back")))
