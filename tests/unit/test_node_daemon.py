"""``jobstream edge node``: the records it spools (format, scheduler, key, payload, as the
worker will read them), its schedule, its metrics, its configuration and its command.

The spool is in ``tmp_path`` and its drainer is not started, except in the command's
``--once`` test, where it talks to a port nothing listens on: no Kafka is needed.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from node_tasks import Children, wait_until_running
from node_tasks import children as children  # noqa: F401 - the fixture
from prometheus_client import REGISTRY
from test_node_procs import link_proc
from test_node_sampler import CLUSTER, EdgeFactory, flux_id, slurm_id
from test_node_sampler import edges as edges  # noqa: F401 - the fixture

from pipeline.cli import main
from pipeline.codecs.codec import raw_from_avro
from pipeline.core.fluid import f58_decode
from pipeline.edges.base import record_key
from pipeline.edges.node.daemon import FORMAT, NodeEdge, build_sampler, node_name
from pipeline.edges.node.gpus import GpuJobs, GpuReader
from pipeline.edges.node.procs import ProcReader
from pipeline.edges.node.sampler import Sampler
from pipeline.edges.node.usage import Reading
from pipeline.parsers.node_usage import parse_node_usage
from pipeline.runtime.children import free_port
from pipeline.runtime.config import Config, load_config
from pipeline.runtime.errors import ConfigError, SpoolError

SLEEP = "import time\ntime.sleep(60)\n"


def metric(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


# --- what goes into the spool --------------------------------------------------------------

def test_the_spool_holds_one_node_usage_record_per_job_keyed_as_the_scheduler_s(
        children: Children, edges: EdgeFactory) -> None:
    sid, fid = slurm_id(), flux_id()
    wait_until_running(children.start(SLEEP, SLURM_JOB_ID=sid),
                       children.start(SLEEP, FLUX_JOB_ID=fid))
    edge = edges([ProcReader()])
    published = metric("jobstream_node_samples_published_total", cluster=CLUSTER)
    intervals = metric("jobstream_node_interval_cpu_seconds_count")
    payloads = edge.sample_once()
    ours = {p["job_id"] for p in payloads} & {sid, fid}
    assert ours == {sid, fid}
    records = {}
    for spooled in edge.runtime.spool.read(limit=10_000):
        raw = raw_from_avro(edge.runtime.codec.decode(spooled.value))
        assert spooled.key is not None and spooled.key.decode() == raw.key
        records[json.loads(raw.payload)["job_id"]] = raw
    assert len(records) == len(payloads)
    decimal = str(f58_decode(fid))
    for job_id, scheduler, key in ((sid, "slurm", f"{CLUSTER}:{sid}"),
                                   (fid, "flux", f"{CLUSTER}:{decimal}")):
        raw = records[job_id]
        assert (raw.cluster, raw.scheduler, raw.format, raw.key) == (
            CLUSTER, scheduler, FORMAT, key)
        # the key is the one the worker's parser gives the record: the job's partition
        assert record_key(FORMAT, raw.payload, CLUSTER) == key
        [event] = parse_node_usage(raw.payload, cluster=CLUSTER)
        assert event.job_id == key.split(":", 1)[1] and event.event == "usage"
    assert metric("jobstream_node_samples_published_total", cluster=CLUSTER) == \
        published + len(payloads)
    assert metric("jobstream_node_interval_cpu_seconds_count") == intervals + 1
    assert metric("jobstream_node_jobs", reader="procs") == len(payloads)
    assert edge.published == len(payloads) and edge.intervals == 1


def test_a_spool_that_refuses_loses_that_interval_only(
        children: Children, edges: EdgeFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    sid = slurm_id()
    wait_until_running(children.start(SLEEP, SLURM_JOB_ID=sid))
    edge = edges([ProcReader()])

    def full(records: object) -> list[int]:
        raise SpoolError("spool full")

    monkeypatch.setattr(edge.runtime, "publish_many", full)
    lost = edge.sample_once()
    monkeypatch.undo()
    assert edge.lost == len(lost) > 0 and edge.published == 0
    after = edge.sample_once()
    assert edge.published == len(after) and edge.runtime.spool.depth() == len(after)


def test_read_errors_are_counted_in_the_metrics(children: Children, edges: EdgeFactory,
                                                tmp_path: Path) -> None:
    bad = children.start(SLEEP, SLURM_JOB_ID="not-a-job")
    wait_until_running(bad)
    edge = edges([ProcReader(link_proc(tmp_path / "proc", bad.pid))])
    before = metric("jobstream_node_read_errors_total")
    assert edge.sample_once() == []
    assert metric("jobstream_node_read_errors_total") == before + 1


# --- the schedule ---------------------------------------------------------------------------

class Timed:
    """A reader that takes ``cost`` seconds and notes when it was asked."""

    def __init__(self, cost: float) -> None:
        self.cost = cost
        self.calls: list[float] = []

    def sample(self) -> list[Reading]:
        self.calls.append(time.monotonic())
        time.sleep(self.cost)
        return []


def run_for(edge: NodeEdge, seconds: float) -> float:
    stop = threading.Event()
    thread = threading.Thread(target=edge.loop, args=(stop,))
    thread.start()
    time.sleep(seconds)
    t0 = time.monotonic()
    stop.set()
    thread.join(10)
    assert not thread.is_alive()
    return time.monotonic() - t0


def schedule_edge(edges: EdgeFactory, reader: Timed, interval: float) -> NodeEdge:
    edge = edges([])
    edge.sampler = Sampler([reader], "n1")
    edge.interval_s = interval
    return edge


def test_samples_keep_to_the_schedule_without_drift(edges: EdgeFactory) -> None:
    reader = Timed(0.05)
    edge = schedule_edge(edges, reader, 0.2)
    run_for(edge, 1.5)
    start = reader.calls[0]
    assert len(reader.calls) >= 7
    # tick k at start + k x interval: the 50 ms each sample takes does not add up
    assert all(abs(t - (start + k * 0.2)) < 0.06 for k, t in enumerate(reader.calls)), [
        round(t - start, 3) for t in reader.calls]
    assert edge.skipped_ticks == 0


def test_a_sample_longer_than_the_interval_skips_ticks_not_catches_up(
        edges: EdgeFactory, caplog: pytest.LogCaptureFixture) -> None:
    reader = Timed(0.5)
    edge = schedule_edge(edges, reader, 0.2)
    run_for(edge, 1.9)
    gaps = [b - a for a, b in zip(reader.calls, reader.calls[1:], strict=False)]
    assert gaps and all(0.55 <= g <= 0.7 for g in gaps), gaps  # on the tick after the end
    assert edge.skipped_ticks >= 2 * len(gaps)
    assert "skipped" in caplog.text


def test_the_loop_stops_on_the_event_while_it_waits(edges: EdgeFactory) -> None:
    reader = Timed(0.0)
    edge = schedule_edge(edges, reader, 30.0)
    assert run_for(edge, 0.3) < 1.0
    assert len(reader.calls) == 1


# --- configuration --------------------------------------------------------------------------

def no_pynvml() -> Any:
    raise ImportError("no pynvml")


def test_the_sampler_is_built_as_edge_node_says() -> None:
    cfg = Config().replace(edge={"node": {"readers": ("procs",), "gpus": False,
                                          "name": "n9", "schedulers": ("flux",)}})
    sampler = build_sampler(cfg)
    assert [type(r) for r in sampler.readers] == [ProcReader] and sampler.gpus is None
    assert sampler.node == "n9" and sampler.schedulers == {"flux"}
    assert sampler.readers[0].schedulers == ("flux",)  # type: ignore[attr-defined]
    default = build_sampler(Config(), gpu_reader=GpuReader(load=no_pynvml))
    assert [type(r).__name__ for r in default.readers] == ["CgroupReader", "ProcReader"]
    assert isinstance(default.gpus, GpuJobs)
    assert default.node == node_name(Config()) == socket.gethostname().split(".")[0]


@pytest.mark.parametrize("node", [{"readers": ("cgroup", "nvidia")}, {"readers": ()},
                                  {"schedulers": ("pbs",)}, {"interval_s": 0}])
def test_a_reader_or_scheduler_it_does_not_know_is_a_config_error(node: dict) -> None:
    with pytest.raises(ConfigError, match="edge.node"):
        build_sampler(Config().replace(edge={"node": node}))


def test_the_environment_overrides_edge_node() -> None:
    cfg = load_config("", environ={"JOBSTREAM_EDGE__NODE__INTERVAL_S": "10",
                                   "JOBSTREAM_EDGE__NODE__READERS": "procs",
                                   "JOBSTREAM_EDGE__NODE__GPUS": "off",
                                   "JOBSTREAM_EDGE__NODE__FLUX_SLICES": "a.slice, b.slice"})
    node = cfg.edge.node
    assert (node.interval_s, node.readers, node.gpus, node.flux_slices) == (
        10.0, ("procs",), False, ("a.slice", "b.slice"))
    assert (node.cgroup_root, node.proc_root, node.metrics_port) == ("/sys/fs/cgroup", "/proc", 0)


# --- the command ------------------------------------------------------------------------------

def node_env(tmp_path: Path) -> dict[str, str]:
    return {"JOBSTREAM_EDGE__NODE__READERS": "procs", "JOBSTREAM_EDGE__NODE__GPUS": "false",
            "JOBSTREAM_EDGE__NODE__NAME": "cli-node", "JOBSTREAM_CLUSTER": CLUSTER,
            "JOBSTREAM_EDGE__SPOOL_DIR": str(tmp_path / "spool"),
            # nothing listens there: no record reaches any Kafka of this machine
            "JOBSTREAM_KAFKA__BOOTSTRAP": f"127.0.0.1:{free_port()}"}


def test_once_with_print_prints_the_payloads_and_touches_no_spool(
        children: Children, tmp_path: Path) -> None:
    sid = slurm_id()
    wait_until_running(children.start(SLEEP, SLURM_JOB_ID=sid))
    result = CliRunner().invoke(main, ["edge", "node", "--once", "--print"],
                                env=node_env(tmp_path))
    assert result.exit_code == 0, result.output
    lines = [json.loads(line) for line in result.output.splitlines() if line.startswith("{")]
    [ours] = [p for p in lines if p["job_id"] == sid]
    assert (ours["node"], ours["reader"], ours["v"]) == ("cli-node", "procs", 1)
    assert not (tmp_path / "spool").exists()


def test_once_without_kafka_keeps_the_samples_in_the_spool_and_says_so(
        children: Children, tmp_path: Path) -> None:
    wait_until_running(children.start(SLEEP, SLURM_JOB_ID=slurm_id()))
    result = CliRunner().invoke(main, ["edge", "node", "--once", "--timeout", "0.5"],
                                env=node_env(tmp_path))
    assert result.exit_code == 69, result.output
    assert "not confirmed by Kafka" in result.output
    assert (tmp_path / "spool" / "node.db").exists()


@pytest.mark.parametrize("args", [["--print"], ["--interval", "0"]])
def test_the_command_refuses_what_makes_no_sense(args: list[str], tmp_path: Path) -> None:
    result = CliRunner().invoke(main, ["edge", "node", *args], env=node_env(tmp_path))
    assert result.exit_code == 2, result.output


#: What ``jobstream edge node`` must not load (issue 33: 40 MiB resident on every compute
#: node): the other areas and their libraries, fastavro (3.5 MiB with cramjam: without a
#: registry the records are written by pipeline.codecs.single_object, the codec that
#: decodes is not made), and NVML's bindings where the driver's library is not there.
NOT_IN_THE_NODE_DAEMON = ("agents", "pipeline.sink", "pipeline.tooling", "pipeline.fold",
                          "pipeline.dashboards", "pipeline.replay", "pipeline.edges.slurm",
                          "pipeline.edges.flux", "elasticsearch", "faust", "aiokafka",
                          "rich", "hypothesis", "fastavro", "cramjam", "pipeline.codecs.codec")


def test_the_node_daemon_loads_nothing_it_does_not_run(tmp_path: Path) -> None:
    """What the command imports up to its first records spooled and its metrics served,
    in a process of its own."""
    import subprocess
    import sys

    code = ("import ctypes, json, sys\n"
            "from pipeline.cli import main\n"
            "from pipeline.edges.cli import edge\n"
            "from pipeline.edges.base import EdgeRuntime\n"
            "from pipeline.edges.node.daemon import NodeEdge, build_sampler, record_of\n"
            "from pipeline.edges.node.gpus import NVML_LIBRARY, GpuReader\n"
            "from pipeline.runtime import metrics\n"
            "from pipeline.runtime.config import load_config\n"
            "GpuReader()\n"
            "cfg = load_config('', environ={'JOBSTREAM_EDGE__SPOOL_DIR': sys.argv[1]})\n"
            "runtime = EdgeRuntime(cfg, 'node')\n"
            "runtime.publish_many([record_of('c1', {'scheduler': 'slurm', 'job_id': '7'})])\n"
            "server = metrics.serve('127.0.0.1', 0)\n"
            "server.shutdown()\n"
            "runtime.spool.close()\n"
            "try:\n"
            "    ctypes.CDLL(NVML_LIBRARY)\n"
            "    driver = True\n"
            "except OSError:\n"
            "    driver = False\n"
            "print(json.dumps([driver, sorted(sys.modules)]))\n")
    done = subprocess.run([sys.executable, "-c", code, str(tmp_path / "spool")],
                          capture_output=True, text=True, timeout=120, check=True)
    driver, modules = json.loads(done.stdout.splitlines()[-1])
    unwanted = [m for m in modules
                if any(m == n or m.startswith(n + ".") for n in NOT_IN_THE_NODE_DAEMON)]
    assert unwanted == []
    assert driver or "pynvml" not in modules
