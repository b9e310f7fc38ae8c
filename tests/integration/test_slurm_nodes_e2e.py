"""A node drained, resumed and downed on the real Slurm 22.05 test cluster, end to end: the
Slurm edge's node poller (``nodes = true``) -> Kafka -> worker -> sink -> the node
documents of ``<prefix>hpc-nodes`` (issue 36, "On the real Slurm cluster a drained,
resumed and downed node appear with reason and times").

The edge runs as a site runs it (``python -m pipeline.edges slurm``, ``JOBSTREAM_*``
variables) with only its node poller, every :data:`INTERVAL_S`. Its first poll publishes
every node; then ``scontrol update`` drains the node (reason, by root, Slurm's reason
time), resumes it and downs it, and after each the test waits for the node's document to
show it: state, reason, who set it, since when, and the seconds counted in each state.

The times: on 22.05 ``sinfo --json`` has no ``last_update``, so an event's time is the
poll that saw it (``pipeline.parsers.slurm_nodes``); a drain or a down begins at Slurm's
own reason time (``reason_changed_at``, whole seconds), a resume at the poll that saw it.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from slurm_cluster import SlurmCluster
from slurm_e2e import EdgeProcess, module_config, read_dlq, read_raw, wait_for
from waiting import wait_until

from pipeline.core.model import RawRecord
from pipeline.kafka.topics import ensure_topics
from pipeline.replay.readback import NOT_YET, client, nodes_alias
from pipeline.runtime.children import Child
from pipeline.runtime.config import Config
from pipeline.tooling.demo import wait_ready

pytest_plugins = ["conftest_slurm"]

#: seconds between the edge's node polls (60 by default: too slow for a test)
INTERVAL_S = 2.0
#: a few polls and the flow's latency (worker and sink flushes, Elasticsearch's refresh);
#: a guard against hangs, never an assertion about speed
DOC_WAIT_S = 90.0
#: a resumed node is IDLE+NOT_RESPONDING until slurmctld next pings its slurmd
SETTLE_S = 60.0
DRAIN_REASON = "jobstream e2e: drain"
DOWN_REASON = "jobstream e2e: down"


@dataclass
class Step:
    """One change: the node's document once it showed it, what Slurm said of the node then
    (its ``sinfo --json`` object), the wall clock around the ``scontrol update`` and when
    the document was found."""

    doc: dict[str, Any]
    slurm: dict[str, Any]
    before: float
    after: float
    seen: float


@dataclass
class Observed:
    nodes: list[str]
    host: str
    #: node -> its first document (before any change)
    first: dict[str, dict[str, Any]] = field(default_factory=dict)
    steps: dict[str, Step] = field(default_factory=dict)
    #: every node document at the end, by node
    last: dict[str, dict[str, Any]] = field(default_factory=dict)
    raw: list[RawRecord] = field(default_factory=list)
    dlq: list[tuple[dict[str, str], bytes]] = field(default_factory=list)


def node_documents(cfg: Config) -> dict[str, dict[str, Any]]:
    """node -> its document in the nodes alias ({} before the sink made the index)."""
    with client(cfg) as es:
        resp = es.options(ignore_status=NOT_YET).search(
            index=nodes_alias(cfg), size=1000, ignore_unavailable=True,
            allow_no_indices=True, query={"match_all": {}})
    return {h["_source"]["node"]: h["_source"] for h in resp.get("hits", {}).get("hits", [])}


def slurm_nodes(cluster: SlurmCluster) -> dict[str, dict[str, Any]]:
    """node -> its object in ``sinfo --json``, what the edge polls on 22.05."""
    doc = json.loads(cluster.run(["sinfo", "--json"]).stdout)
    return {n["name"]: n for n in doc["nodes"]}


@pytest.fixture(scope="module")
def nodes_cfg(stack_base_cfg: Config, tmp_path_factory: pytest.TempPathFactory,
              slurm_cluster: SlurmCluster) -> Iterator[Config]:
    # the documents' cluster: sinfo's meta names none on 22.05, so the edge's config does
    with module_config(stack_base_cfg, slurm_cluster.spec.cluster,
                       tmp_path_factory.mktemp("slurm-nodes-e2e")) as cfg:
        yield cfg.replace(edge={"slurm": {
            "receiver": False, "hooks": False, "poller": False, "nodes": True,
            "nodes_interval_s": INTERVAL_S}})


@pytest.fixture(scope="module")
def observed(slurm_cluster: SlurmCluster, nodes_cfg: Config,
             tmp_path_factory: pytest.TempPathFactory) -> Iterator[Observed]:
    cfg = nodes_cfg
    host = slurm_cluster.spec.host
    logs = tmp_path_factory.mktemp("slurm-nodes-e2e-logs")
    wait_until(lambda: slurm_cluster.node_state() == "idle", timeout=SETTLE_S,
               what=f"node {host} idle before the test", interval=0.5)
    r = Observed(nodes=sorted(slurm_nodes(slurm_cluster)), host=host)
    ensure_topics(cfg)
    edge = EdgeProcess(cfg, logs / "edge.log", env=slurm_cluster.env)
    worker = Child("worker", cfg, ["worker", "--name", "slurm-nodes-e2e"], logs / "worker.log")
    sink = Child("sink", cfg, ["sink"], logs / "sink.log")
    try:
        worker.start()
        sink.start()
        wait_ready(cfg, [worker, sink], [cfg.worker.app_id, f"{cfg.worker.app_id}-sink"])
        edge.start()
        checks = [edge.check, worker.check, sink.check]

        def every_node_shown() -> bool:
            r.first = node_documents(cfg)
            return set(r.first) == set(r.nodes)

        wait_for("every node's first document", every_node_shown, checks, DOC_WAIT_S,
                 interval=0.5, detail=lambda: str(r.first))

        def change(name: str, settled: str, shown: dict[str, Any], *update: str) -> None:
            """``scontrol update`` the node, wait until sinfo shows it ``settled`` and its
            document has ``shown``; note the step."""
            before = time.time()
            slurm_cluster.run(["scontrol", "update", f"nodename={host}", *update])
            after = time.time()
            wait_until(lambda: slurm_cluster.node_state() == settled, timeout=SETTLE_S,
                       what=f"node {host} {settled} in sinfo", interval=0.5)
            slurm = slurm_nodes(slurm_cluster)[host]
            doc: dict[str, Any] = {}

            def shows() -> bool:
                doc.clear()
                doc.update(node_documents(cfg).get(host, {}))
                return all(doc.get(k) == v for k, v in shown.items())

            wait_for(f"the node's document {shown}", shows, checks, DOC_WAIT_S,
                     interval=0.5, detail=lambda: str(doc))
            r.steps[name] = Step(dict(doc), slurm, before, after, time.time())

        change("drain", "drained", {"state": "drained", "reason": DRAIN_REASON},
               "state=drain", f"reason={DRAIN_REASON}")
        change("resume", "idle", {"state": "up", "reason": None}, "state=resume")
        change("down", "down", {"state": "down", "reason": DOWN_REASON},
               "state=down", f"reason={DOWN_REASON}")
        r.last = node_documents(cfg)
        r.raw = [rec for rec in read_raw(cfg, cfg.topics.raw) if rec.format == "slurm-nodes"]
        r.dlq = read_dlq(cfg, cfg.topics.dlq)
        # what each step showed, in the -s output
        print(json.dumps({"first": r.first, "records": len(r.raw), **{
            name: {"doc": s.doc, "reason_changed_at": s.slurm.get("reason_changed_at")}
            for name, s in r.steps.items()}}, indent=1))
        yield r
    finally:
        edge.stop()
        for child in (worker, sink):
            child.stop()
        # the cluster as the other modules expect it
        slurm_cluster.run(["scontrol", "update", f"nodename={host}", "state=resume"],
                          check=False)
        wait_until(lambda: slurm_cluster.node_state() == "idle", timeout=SETTLE_S,
                   what=f"node {host} idle again", interval=0.5)


def _ms(seconds: float) -> int:
    return round(seconds * 1000)


def began(doc: dict[str, Any], previous: dict[str, Any]) -> int:
    """When a drain or a down shown by ``doc`` began: Slurm's reason time, but not before
    the poll that last saw the node otherwise (``previous``'s newest event): the reason
    time is whole seconds, so a change in the second of that poll is stamped before it."""
    return max(doc["reason_at"], previous["updated_at"])


def test_the_first_poll_published_every_node_and_every_node_is_up(
        observed: Observed) -> None:
    first_poll = min(rec.received_at for rec in observed.raw)
    published = [rec for rec in observed.raw if rec.received_at == first_poll]
    names = []
    for rec in published:
        [node] = json.loads(rec.payload)["nodes"]  # one node per record
        names.append(node["name"])
        assert rec.key == f"{rec.cluster}:{node['name']}"
    assert sorted(names) == observed.nodes
    for doc in observed.first.values():
        assert (doc["state"], doc["scheduler"], doc["responding"], doc["drained"]) == (
            "up", "slurm", True, False), doc
        assert doc["since"] == _ms(first_poll) and doc["updated_at"] == doc["since"], doc
        assert "reason" not in doc and "reason_by" not in doc, doc


def test_a_drained_node_shows_its_reason_who_set_it_and_since_when(
        observed: Observed) -> None:
    step = observed.steps["drain"]
    doc, slurm = step.doc, step.slurm
    assert (doc["state"], doc["drained"], doc["reason"], doc["reason_by"]) == (
        "drained", True, DRAIN_REASON, "root")
    assert "DRAIN" in doc["scheduler_state"].split("+")
    # Slurm stamps the reason as it drains the node (whole seconds)
    assert step.before - 1 <= slurm["reason_changed_at"] <= step.after + 1
    first = observed.first[observed.host]
    assert doc["reason_at"] == slurm["reason_changed_at"] * 1000
    assert doc["since"] == began(doc, first)
    assert doc["state_s"]["up"] == pytest.approx((doc["since"] - first["since"]) / 1000,
                                                 abs=0.002)


def test_a_resumed_node_is_up_without_a_reason_since_the_resume(observed: Observed) -> None:
    drain, step = observed.steps["drain"].doc, observed.steps["resume"]
    doc = step.doc
    assert (doc["state"], doc["drained"], doc["responding"]) == ("up", False, True)
    assert "reason" not in doc and "reason_by" not in doc and "reason_at" not in doc
    # the poll that saw it up, after the resume
    assert _ms(step.before) <= doc["since"] <= _ms(step.seen)
    # the drained time ends at the first poll after the resume; that poll may have seen
    # the node IDLE+NOT_RESPONDING (unresponsive) before slurmctld pinged its slurmd
    drained_s, unresponsive_s = doc["state_s"]["drained"], doc["state_s"]["unresponsive"]
    held = step.before - observed.steps["drain"].after
    assert drained_s >= held - 1  # Slurm's reason time is whole seconds
    assert drained_s + unresponsive_s == pytest.approx((doc["since"] - drain["since"]) / 1000,
                                                       abs=0.002)


def test_a_downed_node_shows_its_reason_and_every_state_its_time(observed: Observed) -> None:
    resume, step = observed.steps["resume"].doc, observed.steps["down"]
    doc, slurm = step.doc, step.slurm
    assert (doc["state"], doc["drained"], doc["responding"], doc["reason"],
            doc["reason_by"]) == ("down", False, False, DOWN_REASON, "root")
    assert doc["scheduler_state"].split("+")[0] == "DOWN"
    assert step.before - 1 <= slurm["reason_changed_at"] <= step.after + 1
    assert doc["reason_at"] == slurm["reason_changed_at"] * 1000
    assert doc["since"] == began(doc, resume)
    state_s = doc["state_s"]
    # the times of the states before are kept, the up time since the resume added, the
    # down time counted up to the newest event
    assert state_s["drained"] == resume["state_s"]["drained"] > 0
    assert state_s["up"] == pytest.approx(
        resume["state_s"]["up"] + (doc["since"] - resume["since"]) / 1000, abs=0.002)
    assert state_s["down"] == pytest.approx((doc["updated_at"] - doc["since"]) / 1000,
                                            abs=0.002)
    assert doc["revision"] > resume["revision"]


def test_one_document_per_node_and_nothing_refused(observed: Observed) -> None:
    assert sorted(observed.last) == observed.nodes
    assert observed.last[observed.host]["state"] == "down"
    assert {d["cluster"] for d in observed.last.values()} == {observed.raw[0].cluster}
    assert observed.dlq == []
