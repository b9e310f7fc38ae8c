"""The sampler on real processes and real cgroups, through the daemon's sample-once path
(:meth:`NodeEdge.sample_once`, its spool in ``tmp_path``, no drainer), each payload parsed
back by the ``node-usage`` parser.

The processes are children started with ``SLURM_JOB_ID`` or ``FLUX_JOB_ID`` (F58, as
flux-shell sets it); the cgroups are the test's own cgroup v1 trees
(``test_node_cgroups.Tree``). The 10,000-process test forks them for real: 50 small
Python parents, one per job, each forking 200 sleeping children that inherit its
environment (about 4 s on this two-core machine; ``posix_spawn`` of 10,000 ``sleep``
took 15 s). A few tests feed the sampler readings of their own, where the case cannot be
made with real processes (a reader that fails, one that stops reporting a job).
"""

from __future__ import annotations

import logging
import os
import random
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from node_tasks import Children, busy, wait_until_running, waited_s
from node_tasks import children as children  # noqa: F401 - the fixture
from test_node_cgroups import BUSY, MOUNT, SLEEP, Tree, rmdir, slurm_job
from test_node_cgroups import tree as tree  # noqa: F401 - the fixture
from test_node_procs import link_proc

from pipeline.core import jsontext
from pipeline.core.fluid import f58_decode, f58_encode
from pipeline.core.model import JobEvent
from pipeline.edges.base import EdgeRuntime
from pipeline.edges.node.cgroups import CgroupReader
from pipeline.edges.node.daemon import NodeEdge
from pipeline.edges.node.procs import ProcReader
from pipeline.edges.node.sampler import Sampler
from pipeline.edges.node.usage import JobGone, JobSample, Reading, SampleError
from pipeline.parsers.node_usage import parse_node_usage
from pipeline.runtime.config import Config

CLUSTER = "nodetest"
HZ = os.sysconf("SC_CLK_TCK")
Payload = dict[str, Any]







EdgeFactory = Callable[..., NodeEdge]


@pytest.fixture
def edges(tmp_path: Path) -> Iterator[EdgeFactory]:
    """Node edges whose spools are in ``tmp_path``; their drainers are never started."""
    made: list[NodeEdge] = []

    def make(readers: list[Any], *, gpus: Any = None, node: str = "n17") -> NodeEdge:
        cfg = Config(cluster=CLUSTER)
        runtime = EdgeRuntime(cfg, "node", spool_path=tmp_path / f"spool{len(made)}" / "n.db")
        edge = NodeEdge(cfg, Sampler(readers, node, gpus=gpus), runtime, interval_s=30.0)
        made.append(edge)
        return edge

    yield make
    for edge in made:
        edge.runtime.stop(0.1)


def slurm_id() -> str:
    return str(random.randint(10**8, 10**9 - 1))


def flux_id() -> str:
    return f58_encode(random.randint(2**40, 2**50))


def of_job(payloads: list[Payload], job_id: str) -> list[Payload]:
    return [p for p in payloads if p["job_id"] == job_id]


def one(payloads: list[Payload], job_id: str) -> Payload:
    found = of_job(payloads, job_id)
    assert len(found) == 1, found
    return found[0]


def parsed(payload: Payload) -> JobEvent:
    """The payload as the worker reads it: JSON bytes through the node-usage parser."""
    events = parse_node_usage(jsontext.dumps(payload), cluster=CLUSTER)
    assert len(events) == 1
    return events[0]




def cores(p: Payload) -> float:
    assert p["interval_s"] is not None and p["cpu_interval_s"] is not None, p
    return float(p["cpu_interval_s"]) / float(p["interval_s"])


# --- CPU of an interval, through the process path and through a cgroup --------------------

def test_a_busy_task_is_one_core_and_a_sleeping_one_none(
        children: Children, edges: EdgeFactory) -> None:
    sid, fid = slurm_id(), flux_id()
    sleeper = children.start(SLEEP, SLURM_JOB_ID=sid)
    worker = children.start(busy(), FLUX_JOB_ID=fid)
    wait_until_running(sleeper, worker)
    edge = edges([ProcReader()])
    first, waited = edge.sample_once(), waited_s(worker.pid)
    time.sleep(1.5)
    second, waited = edge.sample_once(), waited_s(worker.pid) - waited
    f0, f1, s1 = one(first, fid), one(second, fid), one(second, sid)
    assert (f0["interval_s"], f0["cpu_interval_s"]) == (None, None)
    assert 1.4 <= f1["interval_s"] <= 3.0
    # a core for all the time it could run (what it waited for a CPU left out)
    runnable = f1["interval_s"] - waited
    assert 0.5 * runnable <= f1["cpu_interval_s"], (f1, waited)  # the VM steals some too
    assert cores(f1) <= 1.05 + 2 / HZ / f1["interval_s"]
    assert cores(s1) < 0.05
    assert f1["epoch"] == f0["epoch"] and f1["epoch"].startswith("p")
    assert f1["cpu_s"] >= f0["cpu_s"] + f1["cpu_interval_s"] - 1e-9
    assert f1["mem_peak_bytes"] >= f1["mem_bytes"] > 0  # the edge's max: no kernel peak here
    event = parsed(f1)
    assert (event.scheduler, event.job_id, event.job_id_f58) == ("flux", str(f58_decode(fid)),
                                                                 fid)
    assert event.context["cpu_interval_s"] == f1["cpu_interval_s"]
    assert event.context["node"] == "n17" and event.context["reader"] == "procs"
    assert parsed(s1).job_id == sid


def test_a_job_in_a_cgroup_is_read_there_and_not_again_from_its_processes(
        tree: Tree, edges: EdgeFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    roots, job = slurm_job(tree)
    monkeypatch.setenv("SLURM_JOB_ID", job.job_id)  # as slurmstepd starts the task
    child = tree.start(BUSY, job.cpu_dir, job.memory_dir)
    time.sleep(0.3)
    edge = edges([CgroupReader(roots), ProcReader()])
    edge.sample_once()
    w0 = waited_s(child.pid)
    time.sleep(1.5)
    p = one(edge.sample_once(), job.job_id)
    runnable = p["interval_s"] - (waited_s(child.pid) - w0)
    assert p["reader"] == "cgroup-v1" and p["epoch"] == f"cg{job.cpu_dir.stat().st_ino}"
    assert 0.5 * runnable <= p["cpu_interval_s"] and cores(p) <= 1.05  # what it could run
    assert p["mem_peak_bytes"] >= p["mem_bytes"] > 0 and p["mem_limit_bytes"] is None
    assert p["processes"] == 1
    assert parsed(p).context["reader"] == "cgroup-v1"


# --- counter resets -----------------------------------------------------------------------

def test_a_counter_that_begins_again_is_a_new_epoch_never_a_negative_interval(
        tree: Tree, edges: EdgeFactory) -> None:
    """The job's cgroup re-created (a requeue: a new inode) and then its counter reset in
    place (root writes 0 to ``cpuacct.usage``: the same inode)."""
    roots, job = slurm_job(tree)
    child = tree.start(BUSY, job.cpu_dir, job.memory_dir)
    time.sleep(0.3)
    edge = edges([CgroupReader(roots)])
    samples = [one(edge.sample_once(), job.job_id)]
    deadline = time.monotonic() + 10.0
    while (s := one(edge.sample_once(), job.job_id))["cpu_s"] <= 0.3:
        assert time.monotonic() < deadline, "the busy task got no CPU in 10 s"
        time.sleep(0.1)
    samples.append(s)
    tree.stop(child)
    rmdir(job.memory_dir)
    rmdir(job.cpu_dir)
    tree.mkdir(job.cpu_dir, job.memory_dir)
    tree.start(BUSY, job.cpu_dir, job.memory_dir)
    time.sleep(0.2)
    requeued = one(edge.sample_once(), job.job_id)
    samples.append(requeued)
    assert requeued["epoch"] != samples[0]["epoch"] and not requeued["final"]
    assert requeued["cpu_interval_s"] == requeued["cpu_s"]  # all of the new counter
    (job.cpu_dir / "cpuacct.usage").write_text("0")
    reset = one(edge.sample_once(), job.job_id)
    samples.append(reset)
    assert reset["epoch"] == requeued["epoch"] + ".1"
    time.sleep(0.3)
    samples.append(one(edge.sample_once(), job.job_id))
    assert samples[-1]["epoch"] == reset["epoch"]
    assert samples[-1]["cpu_s"] >= reset["cpu_s"]
    for p in samples[1:]:
        assert p["interval_s"] is not None and p["cpu_interval_s"] >= 0, p
        assert parsed(p).context["cpu_interval_s"] == p["cpu_interval_s"]
    # within each epoch the counter only goes forward, as the fold takes it
    by_epoch: dict[str, list[float]] = {}
    for p in samples:
        by_epoch.setdefault(p["epoch"], []).append(p["cpu_s"])
    assert len(by_epoch) == 3 and all(v == sorted(v) for v in by_epoch.values())


# --- jobs that end ------------------------------------------------------------------------

def test_a_job_whose_last_process_ends_gets_one_final_record(
        children: Children, edges: EdgeFactory) -> None:
    sid = slurm_id()
    child = children.start(busy(), SLURM_JOB_ID=sid)
    wait_until_running(child)
    edge = edges([ProcReader()])
    last = one(edge.sample_once(), sid)
    children.stop(child)
    final = one(edge.sample_once(), sid)
    assert final["final"] is True and final["reason"] == "no process left"
    assert (final["processes"], final["interval_s"], final["cpu_interval_s"]) == (0, None, None)
    assert final["cpu_s"] == last["cpu_s"] and final["epoch"] == last["epoch"]
    assert parsed(final).context["final"] is True
    assert of_job(edge.sample_once(), sid) == []


def test_a_job_whose_cgroup_is_removed_gets_one_final_record(
        tree: Tree, edges: EdgeFactory) -> None:
    roots, job = slurm_job(tree)
    child = tree.start(SLEEP, job.cpu_dir, job.memory_dir)
    edge = edges([CgroupReader(roots)])
    last = one(edge.sample_once(), job.job_id)
    tree.stop(child)
    rmdir(job.memory_dir)
    rmdir(job.cpu_dir)
    final = one(edge.sample_once(), job.job_id)
    assert (final["final"], final["reason"]) == (True, "cgroup removed")
    assert final["mem_peak_bytes"] == last["mem_peak_bytes"]
    assert of_job(edge.sample_once(), job.job_id) == []


# --- the wall clock -----------------------------------------------------------------------

def test_a_clock_step_back_gives_no_interval(children: Children, edges: EdgeFactory) -> None:
    sid = slurm_id()
    wait_until_running(children.start(busy(), SLURM_JOB_ID=sid))
    clock = iter([1_800_000_000.0, 1_800_000_030.0, 1_800_000_010.0, 1_800_000_040.0])
    edge = edges([ProcReader(clock=lambda: next(clock))])
    got = [one(edge.sample_once(), sid) for _ in range(4)]
    assert [p["interval_s"] for p in got] == [None, 30.0, None, 30.0]
    assert got[2]["cpu_interval_s"] is None
    assert got[1]["cpu_interval_s"] >= 0 and got[3]["cpu_interval_s"] >= 0
    assert len({p["epoch"] for p in got}) == 1  # the counter went on: the same epoch
    assert parsed(got[2]).context["interval_s"] is None


# --- many processes -----------------------------------------------------------------------

#: one job's parent: forks the job's sleeping children, which inherit its environment;
#: on SIGTERM it kills and reaps them itself (10,000 orphans left to init to reap would
#: still be exiting, and taking the CPU, during the next tests)
FORKER = ("import os, signal, sys, time\n"
          "kids = []\n"
          "def end(*_):\n"
          "    for kid in kids:\n"
          "        os.kill(kid, signal.SIGKILL)\n"
          "    for kid in kids:\n"
          "        os.waitpid(kid, 0)\n"
          "    os._exit(0)\n"
          "for _ in range(int(sys.argv[1])):\n"
          "    kid = os.fork()\n"
          "    if kid == 0:\n"
          "        signal.signal(signal.SIGTERM, signal.SIG_DFL)\n"
          "        time.sleep(600)\n"
          "        os._exit(0)\n"
          "    kids.append(kid)\n"
          "signal.signal(signal.SIGTERM, end)\n"
          "print('ready', flush=True)\n"
          "while True:\n"
          "    time.sleep(600)\n")


def test_ten_thousand_processes_on_the_node_are_sampled(edges: EdgeFactory) -> None:
    jobs, per_job = 50, 200
    base = random.randint(10**8, 10**9 - jobs - 1)
    ids = [str(base + j) for j in range(jobs)]
    env = {"PATH": os.environ.get("PATH", "")}
    parents: list[subprocess.Popen[str]] = []
    try:
        for job_id in ids:  # each in a session of its own: killed whole, by its group id
            parents.append(subprocess.Popen(
                [sys.executable, "-S", "-c", FORKER, str(per_job)],
                env={**env, "SLURM_JOB_ID": job_id}, stdout=subprocess.PIPE, text=True,
                start_new_session=True))
        for parent in parents:
            assert parent.stdout is not None and parent.stdout.readline().strip() == "ready"
        reader = ProcReader()
        edge = edges([reader])
        for _ in range(2):
            t0 = time.monotonic()
            payloads = edge.sample_once()
            elapsed = time.monotonic() - t0
            found = {p["job_id"]: p["processes"] for p in payloads if p["job_id"] in ids}
            assert found == dict.fromkeys(ids, per_job + 1)
        assert reader.stats.processes >= jobs * (per_job + 1)
        assert elapsed < 10, elapsed
        assert edge.runtime.spool.depth() >= 2 * jobs
    finally:
        for parent in parents:
            parent.terminate()
        for parent in parents:
            try:
                parent.wait(timeout=60)
            except subprocess.TimeoutExpired:
                pass
            if parent.returncode != 0:  # it could not reap them: kill its group whole
                os.killpg(parent.pid, signal.SIGKILL)
                parent.wait(timeout=10)


# --- what cannot be read ------------------------------------------------------------------

def test_a_job_id_that_does_not_parse_is_counted_and_logged_not_raised(
        children: Children, edges: EdgeFactory, tmp_path: Path,
        caplog: pytest.LogCaptureFixture) -> None:
    sid = slurm_id()
    bad = children.start(SLEEP, SLURM_JOB_ID="12ab")
    good = children.start(SLEEP, SLURM_JOB_ID=sid)
    wait_until_running(bad, good)
    edge = edges([ProcReader(link_proc(tmp_path / "proc", bad.pid, good.pid))])
    with caplog.at_level(logging.WARNING, logger="pipeline.edges.node.sampler"):
        payloads = edge.sample_once()
        assert [p["job_id"] for p in payloads] == [sid]
        assert edge.sampler.errors_total == 1
        lines = [r.getMessage() for r in caplog.records]
        assert len(lines) == 1 and "12ab" in lines[0] and "not a Slurm job id" in lines[0]
        edge.sample_once()
    assert len(caplog.records) == 1


def test_an_error_every_interval_is_counted_each_time_and_logged_once(
        tree: Tree, edges: EdgeFactory, caplog: pytest.LogCaptureFixture) -> None:
    roots, job = slurm_job(tree)
    bad = Path(tree.prefix, f"uid_{os.getuid()}", "job_12x")
    tree.mkdir(MOUNT / "cpuacct" / bad, MOUNT / "memory" / bad)
    edge = edges([CgroupReader(roots)])
    with caplog.at_level(logging.WARNING, logger="pipeline.edges.node.sampler"):
        for _ in range(3):
            assert [p["job_id"] for p in edge.sample_once()] == [job.job_id]
    assert edge.sampler.errors_total == 3
    assert len(caplog.records) == 1 and "job_12x" in caplog.records[0].getMessage()


# --- the rules the real cases cannot all make: readings of the test's own ------------------

def reading(job_id: str, cpu: float, at: float, *, source: str = "procs",
            epoch: str = "p1.00", mem: int = 1 << 20, peak: int | None = None) -> JobSample:
    return JobSample(scheduler="slurm", job_id=job_id, source=source,  # type: ignore[arg-type]
                     sampled_at=at, cpu_usage_s=cpu, cpu_user_s=cpu, cpu_system_s=0.0,
                     mem_current_bytes=mem, mem_peak_bytes=peak, mem_rss_bytes=mem,
                     mem_file_bytes=None, mem_limit_bytes=None, processes=1, epoch=epoch)


class Failing:
    def sample(self) -> list[Reading]:
        raise OSError("cannot list /proc")


def test_the_first_reader_to_find_a_job_keeps_it_and_a_failed_reader_ends_none(
        caplog: pytest.LogCaptureFixture) -> None:
    sampler = Sampler([], "n1", run="r1", clock=lambda: 5000.0)
    cg = reading("7", 10.0, 1000.0, source="cgroup-v1", epoch="cg9")
    pr = reading("7", 3.0, 1000.0)
    first = sampler.take([[cg], [pr]], {})
    assert [(p["reader"], p["cpu_s"]) for p in first.payloads] == [("cgroup-v1", 10.0)]
    # the process reader's word on the job is not taken, not even that it is gone
    second = sampler.take([[reading("7", 40.0, 1030.0, source="cgroup-v1", epoch="cg9")],
                           [JobGone("slurm", "7", "procs", 1030.0, "no process")]], {})
    assert [(p["cpu_interval_s"], p["final"]) for p in second.payloads] == [(30.0, False)]
    with caplog.at_level(logging.WARNING, logger="pipeline.edges.node.sampler"):
        for _ in range(2):  # the owner failed: the job is not ended, the failure counted
            failed = sampler.take([None, []], {}, ["CgroupReader failed: boom"])
            assert failed.payloads == [] and failed.error_count == 1
    assert len(caplog.records) == 1
    # an error reading the job keeps it; the owner no longer finding it ends it
    kept = sampler.take([[SampleError("slurm", "7", "cgroup-v1", "x", "unreadable")]], {})
    assert kept.payloads == []
    gone = sampler.take([[]], {})
    assert [(p["final"], p["reason"], p["sampled_at"]) for p in gone.payloads] == [
        (True, "cgroup removed", 5000.0)]
    assert sampler.take([[]], {}).payloads == []


def test_a_reader_that_raises_is_a_failure_of_the_interval_not_an_exception() -> None:
    result = Sampler([Failing()], "n1").sample()
    assert result.payloads == [] and result.failures == [
        "Failing failed: OSError: cannot list /proc"]


def test_the_peak_is_the_kernels_or_the_largest_seen_in_the_epoch() -> None:
    sampler = Sampler([], "n1")
    mems = [10, 30, 20]
    peaks = [sampler.take([[reading("8", 1.0 + i, 100.0 + i, mem=m)]], {}).payloads[0]
             ["mem_peak_bytes"] for i, m in enumerate(mems)]
    assert peaks == [10, 30, 30]
    renewed = sampler.take([[reading("8", 0.5, 110.0, mem=5, epoch="p2.00")]], {})
    assert renewed.payloads[0]["mem_peak_bytes"] == 5  # a new epoch: a new peak
    kernel = sampler.take([[reading("8", 1.0, 120.0, mem=5, epoch="p2.00", peak=99)]], {})
    assert kernel.payloads[0]["mem_peak_bytes"] == 99
