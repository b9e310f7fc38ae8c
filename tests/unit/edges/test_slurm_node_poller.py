"""The Slurm edge's node poller over recorded node documents, with a fake command runner,
down to the spool (Kafka is unreachable: its confirmations are given by hand)."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, Any

import pytest

from pipeline.codecs.codec import raw_from_avro
from pipeline.core.model import RawRecord
from pipeline.edges.base import EdgeRuntime
from pipeline.edges.slurm import SlurmEdge
from pipeline.edges.slurm.nodes import NODES_META, NodePoller
from pipeline.edges.slurm.polling import PollError
from pipeline.parsers import parse_parts, parse_record
from pipeline.runtime.config import Config
from pipeline.runtime.errors import SpoolError

DATA = Path(__file__).parents[2] / "data" / "slurm"
DOCS = {"22.05": DATA / "nodes_v0.0.38_22.05.json", "24.05": DATA / "nodes_v0.0.41_24.05.json"}
VERSIONS = {"22.05": b"slurm-wlm 22.05.8\n", "24.05": b"slurm 24.05.0\n"}


class FakeSlurm:
    """The runner: prints ``doc`` for the node command, the version for ``--version``."""

    def __init__(self, release: str) -> None:
        self.doc: dict[str, Any] = json.loads(DOCS[release].read_bytes())
        self.version = VERSIONS[release]
        self.calls: list[list[str]] = []

    def __call__(self, argv: list[str], timeout: float, out: IO[bytes]) -> None:
        self.calls.append(argv)
        out.write(self.version if argv[-1] == "--version" else json.dumps(self.doc).encode())

    def node(self, name: str) -> dict[str, Any]:
        return next(n for n in self.doc["nodes"] if n["name"] == name)


@pytest.fixture(params=sorted(DOCS))
def slurm(request: pytest.FixtureRequest) -> FakeSlurm:
    return FakeSlurm(request.param)


@pytest.fixture
def runtimes(edge_cfg: Config) -> Iterator[Callable[[], EdgeRuntime]]:
    """New runtimes on one spool file, as an edge restarted (the previous one closed)."""
    made: list[EdgeRuntime] = []

    def new() -> EdgeRuntime:
        if made:
            made[-1].spool.close()
        made.append(EdgeRuntime(edge_cfg, "slurm"))
        return made[-1]

    yield new
    made[-1].spool.close()


def spooled(runtime: EdgeRuntime, after: int = 0) -> list[tuple[int, bytes | None, RawRecord]]:
    return [(r.seq, r.key, raw_from_avro(runtime.codec.decode(r.value)))
            for r in runtime.spool.read(after, 100_000)]


def confirm(runtime: EdgeRuntime, seqs: list[int]) -> None:
    # what the drainer does with Kafka's delivery reports: delete, then tell the listeners
    runtime.spool.delete(seqs)
    runtime._acked(seqs)


def nodes_of(records: list[tuple[int, bytes | None, RawRecord]]) -> list[str]:
    return [json.loads(r.payload)["nodes"][0]["name"] for _, _, r in records]


def last_seq(runtime: EdgeRuntime) -> int:
    rows = runtime.spool.read(0, 100_000)
    return rows[-1].seq if rows else 0


class TestPublishedNodes:
    def test_first_poll_publishes_each_node_keyed_and_parsable(
            self, runtimes: Callable[[], EdgeRuntime], slurm: FakeSlurm) -> None:
        rt = runtimes()
        poller = NodePoller(rt, runner=slurm)
        assert poller.poll_once() == len(slurm.doc["nodes"])
        records = spooled(rt)
        assert nodes_of(records) == [n["name"] for n in slurm.doc["nodes"]]
        for _, key, rec in records:
            doc = json.loads(rec.payload)
            assert len(doc["nodes"]) == 1 and doc["meta"] == slurm.doc["meta"]
            assert doc.get("last_update") == slurm.doc.get("last_update")
            [event] = parse_record("slurm-nodes", rec.payload, cluster="testcluster",
                                   received_at=rec.received_at)
            assert key == f"testcluster:{event.node}".encode() == event.key.encode()
            assert (rec.format, rec.scheduler, rec.cluster) == \
                ("slurm-nodes", "slurm", "testcluster")

    def test_unchanged_or_only_load_changed_publishes_nothing(
            self, runtimes: Callable[[], EdgeRuntime], slurm: FakeSlurm) -> None:
        poller = NodePoller(runtimes(), runner=slurm)
        poller.poll_once()
        assert poller.poll_once() == 0
        for node in slurm.doc["nodes"]:
            node["cpu_load"] += 170
            node["alloc_cpus"] = 1
            for memory in ("free_memory", "free_mem"):
                if isinstance(node.get(memory), dict):
                    node[memory]["number"] -= 1000
                elif memory in node:
                    node[memory] -= 1000
            busy = node["last_busy"]
            node["last_busy"] = ({**busy, "number": busy["number"] + 60}
                                 if isinstance(busy, dict) else busy + 60)
        if "last_update" in slurm.doc:
            slurm.doc["last_update"]["number"] += 60
        assert poller.poll_once() == 0

    @pytest.mark.parametrize("change", ["drain", "reason", "by", "reason_time", "partitions"])
    def test_a_changed_state_field_publishes_that_node_only(
            self, runtimes: Callable[[], EdgeRuntime], slurm: FakeSlurm, change: str) -> None:
        rt = runtimes()
        poller = NodePoller(rt, runner=slurm)
        poller.poll_once()
        before = last_seq(rt)
        node = slurm.doc["nodes"][1]
        if change == "drain":  # to DOWN, whichever shape the state has
            node["state"] = ["DOWN"] if isinstance(node["state"], list) else "down"
        elif change == "reason":
            node["reason"] = "replaced DIMM, burn-in"
        elif change == "by":
            node["reason_set_by_user"] = "carol"
        elif change == "reason_time":
            at = node["reason_changed_at"]
            node["reason_changed_at"] = ({**at, "number": at["number"] + 5}
                                         if isinstance(at, dict) else at + 5)
        else:
            node["partitions"] = [*node["partitions"], "maint"]
        assert poller.poll_once() == 1
        [(_, key, rec)] = spooled(rt, before)
        assert json.loads(rec.payload)["nodes"] == [node]
        assert key == f"testcluster:{node['name']}".encode()
        assert poller.poll_once() == 0

    def test_a_change_undone_before_kafka_confirmed_it_is_published(
            self, runtimes: Callable[[], EdgeRuntime], slurm: FakeSlurm) -> None:
        rt = runtimes()
        poller = NodePoller(rt, runner=slurm)
        poller.poll_once()
        confirm(rt, [s for s, _, _ in spooled(rt)])
        node = slurm.doc["nodes"][0]
        reason = node["reason"]
        node["reason"] = "drained a moment"
        assert poller.poll_once() == 1  # not confirmed yet
        node["reason"] = reason
        before = last_seq(rt)
        assert poller.poll_once() == 1
        assert nodes_of(spooled(rt, before)) == [node["name"]]

    def test_a_node_gone_and_back_is_published_again(
            self, runtimes: Callable[[], EdgeRuntime], slurm: FakeSlurm) -> None:
        poller = NodePoller(runtimes(), runner=slurm)
        poller.poll_once()
        gone = slurm.doc["nodes"].pop()
        assert poller.poll_once() == 0
        slurm.doc["nodes"].append(gone)
        assert poller.poll_once() == 1


class TestRestart:
    def test_confirmed_views_survive_a_restart(
            self, runtimes: Callable[[], EdgeRuntime], slurm: FakeSlurm) -> None:
        rt = runtimes()
        NodePoller(rt, runner=slurm).poll_once()
        confirm(rt, [s for s, _, _ in spooled(rt)])
        rt = runtimes()
        poller = NodePoller(rt, runner=slurm)
        assert poller.poll_once() == 0
        slurm.node(slurm.doc["nodes"][2]["name"])["reason"] = "new reason"
        assert poller.poll_once() == 1
        assert nodes_of(spooled(rt)) == [slurm.doc["nodes"][2]["name"]]

    def test_an_unconfirmed_publish_is_published_again_after_a_restart(
            self, runtimes: Callable[[], EdgeRuntime], slurm: FakeSlurm) -> None:
        rt = runtimes()
        NodePoller(rt, runner=slurm).poll_once()
        records = spooled(rt)
        lost = records[3]
        confirm(rt, [s for s, _, _ in records if s != lost[0]])
        rt.spool.delete([lost[0]])  # never delivered (say, quarantined): gone either way
        rt = runtimes()
        assert NodePoller(rt, runner=slurm).poll_once() == 1
        assert nodes_of(spooled(rt)) == nodes_of([lost])

    def test_a_restart_republishes_a_node_whose_last_record_was_unconfirmed(
            self, runtimes: Callable[[], EdgeRuntime], slurm: FakeSlurm) -> None:
        """Drained (confirmed), resumed (spooled, not confirmed), restart, drained again:
        the resume may still reach Kafka after the restart, so the drain goes out again
        although it is what Kafka confirmed last."""
        rt = runtimes()
        poller = NodePoller(rt, runner=slurm)
        poller.poll_once()
        confirm(rt, [s for s, _, _ in spooled(rt)])
        node = next(n for n in slurm.doc["nodes"] if n["reason"])
        reason = node["reason"]
        node["reason"] = ""
        assert poller.poll_once() == 1
        node["reason"] = reason
        rt = runtimes()
        before = last_seq(rt)
        assert NodePoller(rt, runner=slurm).poll_once() == 1
        assert nodes_of(spooled(rt, before)) == [node["name"]]

    def test_a_confirmation_after_the_restart_counts(
            self, runtimes: Callable[[], EdgeRuntime], slurm: FakeSlurm) -> None:
        """A record spooled by the previous run is only known by the key it left
        unconfirmed: it is published again, and once that copy is confirmed, no more."""
        rt = runtimes()
        NodePoller(rt, runner=slurm).poll_once()
        rt = runtimes()
        poller = NodePoller(rt, runner=slurm)
        old = spooled(rt)
        confirm(rt, [s for s, _, _ in old])  # the previous run's records: not tracked
        assert poller.poll_once() == len(slurm.doc["nodes"])
        confirm(rt, [s for s, _, _ in spooled(rt)])
        assert json.loads(rt.spool.get_meta(NODES_META) or "")["unconfirmed"] == []
        assert NodePoller(runtimes(), runner=slurm).poll_once() == 0

    def test_a_publish_that_failed_is_tried_again(
            self, runtimes: Callable[[], EdgeRuntime], slurm: FakeSlurm,
            monkeypatch: pytest.MonkeyPatch) -> None:
        rt = runtimes()
        poller = NodePoller(rt, runner=slurm)

        def full(records: Any) -> list[int]:
            raise SpoolError("spool: database or disk is full")

        monkeypatch.setattr(rt, "publish_many", full)
        with pytest.raises(SpoolError):
            poller.poll_once()
        monkeypatch.undo()
        assert poller.poll_once() == len(slurm.doc["nodes"])
        rt = runtimes()  # and the failed attempt left nothing that hides a node
        assert NodePoller(rt, runner=slurm).poll_once() == len(slurm.doc["nodes"])


class TestCommand:
    @pytest.mark.parametrize(("release", "command"), [
        ("22.05", ["sinfo", "--json"]), ("24.05", ["scontrol", "show", "nodes", "--json"])])
    def test_chosen_by_the_slurm_version(self, runtimes: Callable[[], EdgeRuntime],
                                         release: str, command: list[str]) -> None:
        slurm = FakeSlurm(release)
        poller = NodePoller(runtimes(), runner=slurm)
        poller.poll_once()
        poller.poll_once()
        assert slurm.calls == [["scontrol", "--version"], command, command]

    def test_the_configured_command_is_used_as_given(self, edge_cfg: Config) -> None:
        cfg = edge_cfg.replace(edge={"slurm": {"nodes_command": "/opt/slurm/bin/sinfo --json"}})
        slurm = FakeSlurm("22.05")
        rt = EdgeRuntime(cfg, "slurm")
        try:
            NodePoller(rt, runner=slurm).poll_once()
        finally:
            rt.spool.close()
        assert slurm.calls == [["/opt/slurm/bin/sinfo", "--json"]]

    def test_no_version_is_a_poll_error(self, runtimes: Callable[[], EdgeRuntime]) -> None:
        slurm = FakeSlurm("24.05")
        slurm.version = b"scontrol: error: Unable to contact slurm controller\n"
        with pytest.raises(PollError, match="printed no version"):
            NodePoller(runtimes(), runner=slurm).poll_once()

    def test_sinfo_records_instead_of_nodes_are_a_poll_error(
            self, runtimes: Callable[[], EdgeRuntime]) -> None:
        slurm = FakeSlurm("24.05")
        slurm.doc = {"sinfo": [{"nodes": {"nodes": ["cpu01"]}}], "meta": {}, "errors": []}
        rt = runtimes()
        with pytest.raises(PollError, match="no nodes list"):
            NodePoller(rt, runner=slurm).poll_once()
        assert spooled(rt) == []


def test_a_bad_node_goes_out_once_per_change_with_its_neighbours(
        runtimes: Callable[[], EdgeRuntime]) -> None:
    slurm = FakeSlurm("24.05")
    slurm.doc["nodes"][0]["state"] = 7
    rt = runtimes()
    poller = NodePoller(rt, runner=slurm)
    assert poller.poll_once() == len(slurm.doc["nodes"])
    _, key, rec = spooled(rt)[0]
    [part] = parse_parts("slurm-nodes", rec.payload, cluster="testcluster")
    assert key is None and part.error is not None and part.error.reason == "bad-type"
    assert poller.poll_once() == 0


def test_the_edge_polls_nodes_by_default(edge_cfg: Config) -> None:
    assert Config().edge.slurm.nodes
    cfg = edge_cfg.replace(edge={"slurm": {"receiver": False, "hooks": False,
                                           "nodes": True}})
    edge = SlurmEdge(cfg)
    try:
        assert edge.components == [edge.nodes]
        assert edge.nodes.cfg.nodes_interval_s == 60.0
    finally:
        edge.runtime.spool.close()
