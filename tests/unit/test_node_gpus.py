"""The GPUs of the node edge: NVML read through a fake of the calls it makes (this machine
has no GPU), mapped to jobs through real processes (their environment, or the real cgroup
they are placed in), and folded by the sampler into the payloads' GPU figures. One test
runs the real ``pynvml`` here, which must say once that GPU usage is off.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import pytest
from node_tasks import Children, wait_until_running
from node_tasks import children as children  # noqa: F401 - the fixture
from test_node_cgroups import SLEEP, Tree, slurm_job
from test_node_cgroups import tree as tree  # noqa: F401 - the fixture
from test_node_sampler import EdgeFactory, flux_id, one, parsed, reading, slurm_id
from test_node_sampler import edges as edges  # noqa: F401 - the fixture

from pipeline.edges.node.gpus import GpuJobs, GpuReader, GpuReading, gpus_by_job
from pipeline.edges.node.pids import PidJobs, job_of_cgroup_file
from pipeline.edges.node.procs import ProcReader
from pipeline.edges.node.sampler import Sampler

MiB = 1 << 20
LOGGER = "pipeline.edges.node.gpus"


class FakeNVMLError(Exception):
    pass


@dataclass
class FakeGpu:
    util: int | None = 0
    pids: list[int] = field(default_factory=list)
    used: int = 512 * MiB
    total: int = 40_960 * MiB
    lost: bool = False


class FakeNvml:
    """The calls :class:`GpuReader` makes, as pynvml answers them (a handle per index,
    the UUID as bytes, as older bindings return it)."""

    NVMLError = FakeNVMLError

    def __init__(self, gpus: list[FakeGpu], init_error: str | None = None) -> None:
        self.gpus = gpus
        self.init_error = init_error
        self.shut = False

    def nvmlInit(self) -> None:
        if self.init_error:
            raise FakeNVMLError(self.init_error)

    def nvmlShutdown(self) -> None:
        self.shut = True

    def nvmlDeviceGetCount(self) -> int:
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> Any:
        return index

    def nvmlDeviceGetUUID(self, handle: Any) -> bytes:
        return f"GPU-0000000{handle}-fake".encode()

    def _gpu(self, handle: Any) -> FakeGpu:
        gpu = self.gpus[handle]
        if gpu.lost:
            raise FakeNVMLError("GPU is lost")
        return gpu

    def nvmlDeviceGetUtilizationRates(self, handle: Any) -> Any:
        gpu = self._gpu(handle)
        if gpu.util is None:
            raise FakeNVMLError("Not Supported")
        return SimpleNamespace(gpu=gpu.util, memory=0)

    def nvmlDeviceGetMemoryInfo(self, handle: Any) -> Any:
        gpu = self._gpu(handle)
        return SimpleNamespace(used=gpu.used, total=gpu.total, free=gpu.total - gpu.used)

    def nvmlDeviceGetComputeRunningProcesses(self, handle: Any) -> list[Any]:
        return [SimpleNamespace(pid=pid, usedGpuMemory=MiB) for pid in self._gpu(handle).pids]


# --- which job a GPU works for --------------------------------------------------------------

def test_a_gpu_is_the_job_s_whose_processes_run_on_it(children: Children) -> None:
    sid, fid = slurm_id(), flux_id()
    a1, a2 = children.start(SLEEP, SLURM_JOB_ID=sid), children.start(SLEEP, SLURM_JOB_ID=sid)
    b = children.start(SLEEP, FLUX_JOB_ID=fid)
    stranger = children.start(SLEEP)
    wait_until_running(a1, a2, b, stranger)
    procs = ProcReader()
    procs.sample()
    nvml = FakeNvml([FakeGpu(pids=[a1.pid]), FakeGpu(pids=[a2.pid, b.pid, a1.pid]),
                     FakeGpu(pids=[stranger.pid]), FakeGpu()])
    readings = GpuReader(nvml).read()
    assert [g.uuid for g in readings] == [f"GPU-0000000{i}-fake" for i in range(4)]
    jobs = gpus_by_job(readings, PidJobs(known=procs.job_of).job_of)
    assert {k: [g.index for g in v] for k, v in jobs.items()} == {
        ("slurm", sid): [0, 1], ("flux", fid): [1]}


def test_a_process_in_a_job_s_cgroup_is_the_job_s_without_its_environment(
        tree: Tree) -> None:
    _, job = slurm_job(tree)
    child = tree.start(SLEEP, job.cpu_dir, job.memory_dir)
    time.sleep(0.1)
    assert PidJobs().job_of(child.pid) == ("slurm", job.job_id)
    assert PidJobs(known=lambda pid: ("flux", "x")).job_of(child.pid) == ("slurm", job.job_id)


def test_the_job_of_a_cgroup_file_as_the_readers_name_jobs() -> None:
    v1 = ("12:memory:/slurm/uid_1000/job_4242/step_0/task_0\n"
          "3:cpu,cpuacct:/slurm/uid_1000/job_4242/step_0/task_0\n1:name=systemd:/\n")
    assert job_of_cgroup_file(v1) == ("slurm", "4242")
    v2 = "0::/system.slice/node7_slurmstepd.scope/job_77/step_0/user/task_0\n"
    assert job_of_cgroup_file(v2) == ("slurm", "77")
    flux = "0::/user.slice/user-500.slice/user@500.service/imp-shell-3-fTE9HHdZvi3.service\n"
    scheduler, job_id = job_of_cgroup_file(flux) or ("", "")
    assert scheduler == "flux" and job_id.startswith("\u0192") and job_id[1:] == "TE9HHdZvi3"
    for text in ("0::/user.slice/user-0.slice/session-3.scope\n",
                 "0::/system.slice/job_12/x\n",  # not under slurmstepd's scope
                 "0::/user.slice/shell-0-f0OIl.service\n",  # no Flux id
                 "garbage"):
        assert job_of_cgroup_file(text) is None, text


# --- the GPU figures of the payloads --------------------------------------------------------

def test_busy_gpus_add_busy_seconds_and_idle_ones_say_since_when(
        children: Children, edges: EdgeFactory) -> None:
    sid = slurm_id()
    a, b = children.start(SLEEP, SLURM_JOB_ID=sid), children.start(SLEEP, SLURM_JOB_ID=sid)
    wait_until_running(a, b)
    gpus = [FakeGpu(util=80, pids=[a.pid]), FakeGpu(util=40, pids=[b.pid])]
    procs = ProcReader()
    gpu_jobs = GpuJobs(GpuReader(FakeNvml(gpus)), PidJobs(known=procs.job_of).job_of)
    edge = edges([procs], gpus=gpu_jobs)
    first = one(edge.sample_once(), sid)
    assert (first["gpu_busy_s"], first["gpu_s"]) == (0.0, 0.0)  # no interval yet
    assert [g["util_pct"] for g in first["gpus"]] == [80.0, 40.0]
    time.sleep(0.3)
    second = one(edge.sample_once(), sid)
    dt = second["interval_s"]
    assert second["gpu_s"] == pytest.approx(2 * dt)
    assert second["gpu_busy_s"] == pytest.approx(0.8 * dt + 0.4 * dt)
    assert second["gpu_idle_since"] is None
    gpus[0].util, gpus[1].util = 2, 4
    idle = one(edge.sample_once(), sid)
    assert idle["gpu_idle_since"] == idle["sampled_at"]
    still = one(edge.sample_once(), sid)
    assert still["gpu_idle_since"] == idle["sampled_at"]
    assert still["gpu_busy_s"] == pytest.approx(
        second["gpu_busy_s"] + 0.06 * idle["interval_s"] + 0.06 * still["interval_s"])
    gpus[1].util = 50
    assert one(edge.sample_once(), sid)["gpu_idle_since"] is None
    context = parsed(still).context
    assert context["gpus"][0] == {"index": 0, "uuid": "GPU-00000000-fake", "util_pct": 2.0,
                                  "mem_bytes": 512 * MiB, "mem_total_bytes": 40_960 * MiB}
    assert context["gpu_s"] == still["gpu_s"]


def test_a_gpu_without_utilization_is_listed_but_not_summed() -> None:
    nvml = FakeNvml([FakeGpu(util=None, pids=[1]), FakeGpu(util=60, pids=[1])])
    readings = GpuReader(nvml).read()
    assert [g.util_pct for g in readings] == [None, 60.0]
    sampler = Sampler([], "n1")
    by_job = {("slurm", "5"): readings}
    sampler.take([[reading("5", 1.0, 100.0)]], by_job)
    p = sampler.take([[reading("5", 2.0, 110.0)]], by_job).payloads[0]
    assert (p["gpu_s"], p["gpu_busy_s"]) == (10.0, pytest.approx(6.0))
    assert p["gpu_idle_since"] is None and len(p["gpus"]) == 2


# --- NVML absent or failing -------------------------------------------------------------------

def test_no_driver_turns_gpu_usage_off_said_once(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, logger=LOGGER):
        reader = GpuReader(FakeNvml([FakeGpu()], init_error="Driver Not Loaded"))
        assert not reader.enabled and "Driver Not Loaded" in reader.off_reason
        assert reader.read() == [] and GpuJobs(reader, lambda pid: None)() == {}
        reader.read()
    assert [(r.levelname, r.getMessage()) for r in caplog.records] == [
        ("INFO", "GPU usage off: NVML: Driver Not Loaded")]


def test_no_bindings_and_no_gpu_turn_it_off_too(caplog: pytest.LogCaptureFixture) -> None:
    def missing() -> Any:
        raise ImportError("No module named 'pynvml'")

    with caplog.at_level(logging.INFO, logger=LOGGER):
        assert not GpuReader(load=missing).enabled
        assert not GpuReader(FakeNvml([])).enabled
    assert [r.getMessage() for r in caplog.records] == [
        "GPU usage off: nvidia-ml-py is not installed (No module named 'pynvml')",
        "GPU usage off: NVML sees no GPU"]


def test_the_real_nvml_of_this_machine_reports_off_cleanly(
        caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, logger=LOGGER):
        reader = GpuReader()
    if reader.enabled:  # a machine with a driver and GPUs: they read
        assert all(isinstance(g, GpuReading) for g in reader.read())
        reader.close()
        return
    assert reader.off_reason.startswith("NVML: ") and reader.read() == []
    assert [(r.levelname, r.getMessage()) for r in caplog.records] == [
        ("INFO", f"GPU usage off: {reader.off_reason}")]


def test_a_gpu_that_stops_answering_is_left_out_said_once(
        caplog: pytest.LogCaptureFixture) -> None:
    nvml = FakeNvml([FakeGpu(util=10), FakeGpu(util=20)])
    reader = GpuReader(nvml)
    nvml.gpus[0].lost = True
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        assert [g.index for g in reader.read()] == [1]
        assert [g.index for g in reader.read()] == [1]
    assert [r.getMessage() for r in caplog.records] == [
        "GPU 0 (GPU-00000000-fake) left out: NVML: GPU is lost"]
    nvml.gpus[0].lost = False
    assert [g.index for g in reader.read()] == [0, 1]
    reader.close()
    assert nvml.shut and reader.read() == []
