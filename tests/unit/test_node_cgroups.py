"""The cgroup readers on real cgroups, with real busy, sleeping and memory-touching
processes placed in them, against what ``/proc`` says of the same processes.

Each test makes its own uniquely named tree (``jobstream-test-<hex>/uid_<uid>/job_<id>``
under the ``cpuacct`` and ``memory`` mounts: a Slurm prefix of its own, so that a real
slurmd's ``slurm/`` tree is never touched) and removes it afterwards, failed or not: its
processes are killed, anything left in it moved back to the test's own cgroup, the
directories removed deepest first. They need root and writable v1 hierarchies; without,
they skip, and fail under ``CI=true``.

cgroup v2: this machine binds every controller to v1 and mounts an empty unified
hierarchy beside them, where ``cpu.stat`` (a core file) accounts CPU for real but no
``memory.*`` file exists. The v2 CPU reader is tested there on a real cgroup; the v2
memory files, and content the kernel never writes (to see the error values), only in
files written in the kernel's format under ``tmp_path``.
"""

from __future__ import annotations

import errno
import os
import random
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from datafiles import unavailable
from node_tasks import waited_s
from waiting import wait_until

from pipeline.core.fluid import f58_decode, f58_encode
from pipeline.edges.node.cgroups import (
    CgroupReader,
    CgroupRoots,
    JobCgroup,
    discover,
    read_cpu_stat,
    read_job,
)
from pipeline.edges.node.usage import JobGone, JobSample, SampleError

MOUNT = Path("/sys/fs/cgroup")
HZ = os.sysconf("SC_CLK_TCK")
MiB = 1 << 20

BUSY = "import time\nt = time.time()\nwhile time.time() - t < 60: pass\n"
SLEEP = "import time\ntime.sleep(60)\n"


def touch(n_bytes: int) -> str:
    """A child that makes ``n_bytes`` resident (one write per page), says so, and sleeps."""
    return (f"import time\nb = bytearray({n_bytes})\nb[::4096] = b'x' * ({n_bytes} // 4096)\n"
            "print('ready', flush=True)\ntime.sleep(60)\n")


def own_cgroup(mount: Path, controller: str) -> Path:
    """The test process's own cgroup in the hierarchy mounted at ``mount``."""
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        _, names, path = line.split(":", 2)
        if controller in names.split(","):
            return mount / path.lstrip("/")
    return mount


def proc_cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / HZ


class Tree:
    """A cgroup tree the test owns: directories to make, processes to put in them, all
    undone by :meth:`remove`."""

    def __init__(self, tops: dict[Path, Path], prefix: str = "") -> None:
        self.tops = tops  # top directory -> where its processes go back
        self.prefix = prefix
        self.children: list[subprocess.Popen[str]] = []

    def mkdir(self, *dirs: Path) -> None:
        for d in dirs:
            d.mkdir(parents=True, exist_ok=True)

    def start(self, code: str, *cgroups: Path) -> subprocess.Popen[str]:
        """A python child placed in ``cgroups`` before it does anything of its own: it waits
        for a line on stdin, sent once its pid is in every ``cgroup.procs``."""
        child = subprocess.Popen([sys.executable, "-c", "import sys\nsys.stdin.readline()\n"
                                  + code], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                 text=True)
        self.children.append(child)
        for cgroup in cgroups:
            (cgroup / "cgroup.procs").write_text(str(child.pid))
        assert child.stdin is not None
        child.stdin.write("go\n")
        child.stdin.flush()
        return child

    def stop(self, child: subprocess.Popen[str]) -> None:
        child.kill()
        child.wait(timeout=10)

    def remove(self) -> None:
        for child in self.children:
            if child.poll() is None:
                self.stop(child)
        for top, home in self.tops.items():
            if top.exists():
                remove_cgroups(top, home)


def rmdir(path: Path) -> None:
    for _ in range(100):  # a cgroup is busy for a moment after its last process is reaped
        try:
            path.rmdir()
            return
        except FileNotFoundError:
            return
        except OSError as e:
            if e.errno != errno.EBUSY:
                raise
            time.sleep(0.02)
    path.rmdir()


def remove_cgroups(top: Path, home: Path) -> None:
    for dirpath, _, _ in os.walk(top, topdown=False):
        procs = Path(dirpath) / "cgroup.procs"
        for pid in procs.read_text().split() if procs.exists() else []:
            try:
                (home / "cgroup.procs").write_text(pid)
            except OSError:
                pass  # gone meanwhile
        rmdir(Path(dirpath))


@pytest.fixture
def tree() -> Iterator[Tree]:
    """Own directories in the v1 ``cpuacct`` and ``memory`` hierarchies."""
    if os.geteuid() != 0:
        unavailable("making cgroups needs root", "the cgroup tests must run as root in CI")
    for controller, probe in (("cpuacct", "cpuacct.usage"), ("memory", "memory.stat")):
        if not (MOUNT / controller / probe).exists():
            unavailable(f"no cgroup v1 {controller} hierarchy at {MOUNT / controller}")
    prefix = f"jobstream-test-{uuid.uuid4().hex[:8]}"
    t = Tree({MOUNT / c / prefix: own_cgroup(MOUNT / c, c) for c in ("cpuacct", "memory")},
             prefix)
    try:
        t.mkdir(*t.tops)
    except OSError as e:
        t.remove()
        unavailable(f"the cgroup v1 hierarchies are not writable: {e}")
    try:
        yield t
    finally:
        t.remove()


def slurm_job(tree: Tree) -> tuple[CgroupRoots, JobCgroup]:
    prefix = tree.prefix
    job_id = str(random.randint(10**8, 10**9 - 1))
    rel = Path(prefix, f"uid_{os.getuid()}", f"job_{job_id}")
    job = JobCgroup("slurm", job_id, "cgroup-v1", MOUNT / "cpuacct" / rel, MOUNT / "memory" / rel)
    tree.mkdir(job.cpu_dir, job.memory_dir)
    return CgroupRoots(slurm_prefix=prefix, flux_slices=()), job


def read(job: JobCgroup) -> JobSample:
    reading = read_job(job)
    assert isinstance(reading, JobSample), reading
    return reading


# --- Slurm cgroup/v1, real ---------------------------------------------------------------

def test_discovery_finds_the_job_tree_slurm_makes(tree: Tree) -> None:
    roots, job = slurm_job(tree)
    assert discover(roots) == [job]


def test_a_busy_process_uses_about_one_core_and_cpuacct_agrees_with_proc(tree: Tree) -> None:
    _, job = slurm_job(tree)
    child = tree.start(BUSY, job.cpu_dir, job.memory_dir)
    time.sleep(0.2)
    before, proc_before, t0 = read(job), proc_cpu_s(child.pid), time.monotonic()
    wait_before = waited_s(child.pid)
    time.sleep(1.5)
    after, proc_after, elapsed = read(job), proc_cpu_s(child.pid), time.monotonic() - t0
    used = after.cpu_usage_s - before.cpu_usage_s
    # a core for all the time it could run: what it waited for a CPU other work held is
    # not its to use (the machine's other tests share its two cores)
    runnable = elapsed - (waited_s(child.pid) - wait_before)
    assert used > 0.5 * runnable, (used, elapsed, runnable)  # the VM steals some too
    assert used <= elapsed * 1.05 + 0.05
    # /proc's ticks (1/HZ s) against cpuacct's nanoseconds, for the same process
    assert abs(used - (proc_after - proc_before)) <= 0.1 + 0.05 * used
    assert abs(after.cpu_user_s + after.cpu_system_s - after.cpu_usage_s) <= 0.1 + 0.05 * used
    assert after.processes == 1


def test_a_sleeping_process_uses_nearly_nothing(tree: Tree) -> None:
    _, job = slurm_job(tree)
    tree.start(SLEEP, job.cpu_dir, job.memory_dir)
    time.sleep(0.2)
    before = read(job)
    time.sleep(1.0)
    after = read(job)
    assert after.cpu_usage_s - before.cpu_usage_s < 0.05
    assert after.processes == 1


def test_memory_touched_shows_in_current_peak_and_rss(tree: Tree) -> None:
    """The task in a step's cgroup, as Slurm places it: the job's figures are its tree's."""
    _, job = slurm_job(tree)
    steps = [job.cpu_dir / "step_0", job.memory_dir / "step_0"]
    tree.mkdir(*steps)
    n = 64 * MiB
    child = tree.start(touch(n), *steps)
    assert child.stdout is not None and child.stdout.readline().strip() == "ready"
    # memory.stat's counters reach the cgroup's file when the kernel flushes its per-CPU
    # statistics (every 2 s, later on a loaded machine); usage_in_bytes is charged at once
    wait_until(lambda: (read(job).mem_rss_bytes or 0) >= n, timeout=20,
               what="the touched memory in memory.stat's rss")
    s = read(job)
    assert s.mem_current_bytes >= n
    assert s.mem_peak_bytes is not None and s.mem_peak_bytes >= s.mem_current_bytes
    assert s.mem_rss_bytes is not None and s.mem_rss_bytes >= n
    assert s.mem_limit_bytes is None  # the kernel's "unlimited", not 2**63
    vm_rss = next(int(line.split()[1]) * 1024 for line in
                  Path(f"/proc/{child.pid}/status").read_text().splitlines()
                  if line.startswith("VmRSS:"))
    assert vm_rss >= n  # the same memory, seen from /proc


def test_a_memory_limit_is_read_and_processes_of_steps_below_are_counted(tree: Tree) -> None:
    _, job = slurm_job(tree)
    (job.memory_dir / "memory.limit_in_bytes").write_text(str(512 * MiB))
    steps = [job.cpu_dir / "step_0", job.memory_dir / "step_0"]
    tree.mkdir(*steps)
    tree.start(SLEEP, *steps)
    tree.start(SLEEP, *steps)
    s = read(job)
    assert s.mem_limit_bytes == 512 * MiB
    assert s.processes == 2


def test_the_epoch_is_the_cpu_directory_and_a_re_created_cgroup_has_a_new_one(
        tree: Tree) -> None:
    """A requeued job's cgroup, removed and made again under the same name: the kernel
    counts its CPU from 0 again, and its epoch says it is another counter."""
    _, job = slurm_job(tree)
    child = tree.start(BUSY, job.cpu_dir, job.memory_dir)
    time.sleep(0.3)
    first, again = read(job), read(job)
    assert first.epoch == again.epoch == f"cg{job.cpu_dir.stat().st_ino}"
    assert first.epoch != f"cg{job.memory_dir.stat().st_ino}"  # the CPU's directory
    tree.stop(child)
    rmdir(job.memory_dir)
    rmdir(job.cpu_dir)
    tree.mkdir(job.cpu_dir, job.memory_dir)
    tree.start(SLEEP, job.cpu_dir, job.memory_dir)
    renewed = read(job)
    assert renewed.epoch.startswith("cg") and renewed.epoch != first.epoch
    assert renewed.cpu_usage_s < first.cpu_usage_s  # the counter began again


def test_a_job_whose_cgroup_was_removed_is_gone(tree: Tree) -> None:
    roots, job = slurm_job(tree)
    tree.stop(tree.start(SLEEP, job.cpu_dir, job.memory_dir))
    stale = discover(roots)[0]
    rmdir(job.memory_dir)
    rmdir(job.cpu_dir)
    gone = read_job(stale)
    assert isinstance(gone, JobGone) and gone.job_id == job.job_id


def test_a_cgroup_removed_half_way_through_the_read_is_gone(tree: Tree) -> None:
    """Slurm removes the controllers' directories one after the other: the ``cpuacct``
    files are read, the ``memory`` ones have vanished."""
    _, job = slurm_job(tree)
    tree.stop(tree.start(SLEEP, job.cpu_dir, job.memory_dir))
    rmdir(job.memory_dir)
    assert isinstance(read_job(job), JobGone)


def test_a_cgroup_removed_while_read_over_and_over_never_raises(tree: Tree) -> None:
    _, job = slurm_job(tree)
    tree.stop(tree.start(SLEEP, job.cpu_dir, job.memory_dir))
    remover = threading.Timer(0.05, lambda: (rmdir(job.memory_dir), rmdir(job.cpu_dir)))
    remover.start()
    readings = []
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        readings.append(read_job(job))
        if isinstance(readings[-1], JobGone):
            break
    remover.join()
    assert isinstance(readings[-1], JobGone)
    assert all(isinstance(r, JobSample) for r in readings[:-1]), readings[:-1][-3:]


def test_the_reader_reports_a_job_gone_once_after_its_cgroup_went_away(tree: Tree) -> None:
    roots, job = slurm_job(tree)
    tree.stop(tree.start(SLEEP, job.cpu_dir, job.memory_dir))
    reader = CgroupReader(roots)
    assert [(type(r), r.job_id) for r in reader.sample()] == [(JobSample, job.job_id)]
    rmdir(job.memory_dir)
    rmdir(job.cpu_dir)
    second = reader.sample()
    assert [(type(r), r.job_id) for r in second] == [(JobGone, job.job_id)]
    assert isinstance(second[0], JobGone) and "since the last sample" in second[0].reason
    assert reader.sample() == []


def test_a_directory_that_names_no_job_is_an_error_value(tree: Tree) -> None:
    roots, job = slurm_job(tree)
    bad = Path(tree.prefix, f"uid_{os.getuid()}", "job_12x")
    tree.mkdir(MOUNT / "cpuacct" / bad, MOUNT / "memory" / bad)
    found = discover(roots)
    assert job in found
    errors = [f for f in found if isinstance(f, SampleError)]
    assert [(e.job_id, e.scheduler) for e in errors] == [("12x", "slurm")]
    assert "does not name a Slurm job id" in errors[0].reason


# --- Flux under sdexec, v1 layout, real ---------------------------------------------------

def test_a_flux_shell_unit_is_found_under_a_user_manager_and_read(tree: Tree) -> None:
    prefix = tree.prefix
    job_id = f58_encode(random.randint(2**40, 2**50))
    plain = "f" + job_id[1:]
    unit = Path(prefix, "user-0.slice", "user@0.service", "app.slice",
                f"imp-shell-0-{plain}.service")
    other = Path(prefix, "user-0.slice", "user@0.service", "app.slice", "dbus.service")
    bad = Path(prefix, "user-0.slice", "user@0.service", "shell-3-f0OIl.service")
    for rel in (unit, other, bad):
        tree.mkdir(MOUNT / "cpuacct" / rel, MOUNT / "memory" / rel)
    tree.start(BUSY, MOUNT / "cpuacct" / unit, MOUNT / "memory" / unit)
    roots = CgroupRoots(slurm_prefix="no-such-prefix", flux_slices=(prefix,))
    found = discover(roots)
    jobs = [f for f in found if isinstance(f, JobCgroup)]
    errors = [f for f in found if isinstance(f, SampleError)]
    assert [(j.scheduler, j.job_id, j.cpu_dir) for j in jobs] == [
        ("flux", job_id, MOUNT / "cpuacct" / unit)]
    assert job_id.startswith("\u0192") and f58_decode(job_id) == f58_decode(plain)
    assert [(e.scheduler, e.job_id) for e in errors] == [("flux", "f0OIl")]
    # the busy process's CPU, however loaded the machine: up to 10 s for 0.2 s of it
    deadline = time.monotonic() + 10.0
    while (s := read(jobs[0])).cpu_usage_s <= 0.2 and time.monotonic() < deadline:
        time.sleep(0.1)
    assert s.cpu_usage_s > 0.2 and s.processes == 1


# --- cgroup v2: the real unified hierarchy (CPU only here) -------------------------------

@pytest.fixture
def v2_tree() -> Iterator[tuple[Tree, Path]]:
    if os.geteuid() != 0:
        unavailable("making cgroups needs root", "the cgroup tests must run as root in CI")
    unified = next((m for m in (MOUNT, MOUNT / "unified")
                    if (m / "cgroup.controllers").exists()), None)
    if unified is None:
        unavailable("no cgroup2 hierarchy mounted")
    assert unified is not None
    top = unified / f"jobstream-test-{uuid.uuid4().hex[:8]}"
    t = Tree({top: own_cgroup(unified, "")})
    try:
        t.mkdir(top)
    except OSError as e:
        unavailable(f"the cgroup2 hierarchy is not writable: {e}")
    try:
        yield t, top
    finally:
        t.remove()


def test_v2_cpu_stat_of_a_real_cgroup_counts_a_busy_process(
        v2_tree: tuple[Tree, Path]) -> None:
    tree, top = v2_tree
    job_dir = top / "system.slice" / "slurmstepd.scope" / "job_777"
    tree.mkdir(job_dir)
    child = tree.start(BUSY, job_dir)
    time.sleep(0.2)
    (u0, _, _), p0, t0 = read_cpu_stat(job_dir), proc_cpu_s(child.pid), time.monotonic()
    w0 = waited_s(child.pid)
    time.sleep(1.5)
    (u1, user, system), p1, elapsed = read_cpu_stat(job_dir), proc_cpu_s(child.pid), \
        time.monotonic() - t0
    assert u1 - u0 > 0.5 * (elapsed - (waited_s(child.pid) - w0))  # what it could run
    assert abs((u1 - u0) - (p1 - p0)) <= 0.1 + 0.05 * (u1 - u0)
    assert abs(user + system - u1) <= 0.01 + 0.01 * u1
    roots = CgroupRoots(mount=top / "no-v1", v2_mount=top, flux_slices=())
    jobs = discover(roots)
    assert jobs == [JobCgroup("slurm", "777", "cgroup-v2", job_dir, job_dir)]
    reading = read_job(jobs[0])
    if (job_dir / "memory.current").exists():  # a machine whose memory controller is v2
        assert isinstance(reading, JobSample) and reading.processes == 1
    else:  # here: the memory controller is bound to v1, a clear error, not a crash
        assert isinstance(reading, SampleError), reading
        assert "memory." in reading.reason and "still there" in reading.reason


# --- cgroup v2 files in the kernel's format; content the kernel never writes -------------

def write(d: Path, files: dict[str, str]) -> Path:
    d.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (d / name).write_text(text)
    return d


V2_FILES = {
    "cpu.stat": "usage_usec 12345678\nuser_usec 10000000\nsystem_usec 2345678\n"
                "nr_periods 0\nnr_throttled 0\nthrottled_usec 0\nnr_bursts 0\nburst_usec 0\n",
    "memory.current": "734003200\n",
    "memory.peak": "1073741824\n",
    "memory.stat": "anon 629145600\nfile 104857600\nkernel 1048576\nshmem 0\n",
    "memory.max": "2147483648\n",
    "cgroup.procs": "",
}


def test_v2_files_are_read_as_the_kernel_writes_them(tmp_path: Path) -> None:
    job_dir = write(tmp_path / "system.slice" / "slurmstepd.scope" / "job_4242", V2_FILES)
    for d in (job_dir / "step_0", job_dir / "step_0" / "user"):  # every cgroup has one
        write(d, {"cgroup.procs": ""})
    write(job_dir / "step_0" / "user" / "task_0", {"cgroup.procs": "101\n102\n"})
    write(job_dir / "step_0" / "slurm", {"cgroup.procs": "100\n"})
    s = read_job(JobCgroup("slurm", "4242", "cgroup-v2", job_dir, job_dir), now=1234.5)
    assert s == JobSample(
        scheduler="slurm", job_id="4242", source="cgroup-v2", sampled_at=1234.5,
        cpu_usage_s=12.345678, cpu_user_s=10.0, cpu_system_s=2.345678,
        mem_current_bytes=734003200, mem_peak_bytes=1073741824, mem_rss_bytes=629145600,
        mem_file_bytes=104857600, mem_limit_bytes=2147483648, processes=3,
        epoch=f"cg{job_dir.stat().st_ino}")


def test_v2_no_limit_and_no_peak_file_are_none(tmp_path: Path) -> None:
    files = {**V2_FILES, "memory.max": "max\n"}
    del files["memory.peak"]  # kernels before 5.19
    job_dir = write(tmp_path / "job", files)
    s = read_job(JobCgroup("slurm", "1", "cgroup-v2", job_dir, job_dir))
    assert isinstance(s, JobSample)
    assert (s.mem_limit_bytes, s.mem_peak_bytes) == (None, None)


def test_v2_discovery_of_slurm_scope_jobs_and_flux_units(tmp_path: Path) -> None:
    (tmp_path / "cgroup.controllers").write_text("cpu memory pids\n")
    slurm = write(tmp_path / "system.slice" / "slurmstepd.scope" / "job_4242", {})
    write(tmp_path / "system.slice" / "slurmstepd.scope" / "system", {})
    flux = write(tmp_path / "user.slice" / "user-500.slice" / "user@500.service"
                 / "shell-0-fTE9HHdZvi3.service", {})
    write(tmp_path / "user.slice" / "user-500.slice" / "session-3.scope"
          / "shell-1-fTE9HHdZvi3.service", {})  # not under a slice or a user manager
    found = discover(CgroupRoots(mount=tmp_path))
    assert found == [
        JobCgroup("slurm", "4242", "cgroup-v2", slurm, slurm),
        JobCgroup("flux", f58_encode(f58_decode("fTE9HHdZvi3")), "cgroup-v2", flux, flux),
    ]
    assert discover(CgroupRoots(mount=tmp_path / "absent")) == []


def test_discovery_of_multiple_slurmd_namings(tmp_path: Path) -> None:
    # Slurm built with multiple-slurmd support (Debian's slurm-wlm) names its v1 tree
    # slurm_<NodeName> and its v2 scope <NodeName>_slurmstepd.scope
    (tmp_path / "cgroup.controllers").write_text("cpu memory\n")
    v2 = write(tmp_path / "system.slice" / "vm_slurmstepd.scope" / "job_7", {})
    write(tmp_path / "system.slice" / "other.scope" / "job_8", {})  # not Slurm's
    cpu = write(tmp_path / "cpuacct" / "slurm_vm" / "uid_0" / "job_5", {})
    mem = write(tmp_path / "memory" / "slurm_vm" / "uid_0" / "job_5", {})
    found = discover(CgroupRoots(mount=tmp_path, flux_slices=()))
    assert found == [JobCgroup("slurm", "5", "cgroup-v1", cpu, mem),
                     JobCgroup("slurm", "7", "cgroup-v2", v2, v2)]
    # a prefix given is the only one looked at
    assert discover(CgroupRoots(mount=tmp_path, slurm_prefix="slurm", flux_slices=(),
                                slurm_scope="system.slice/slurmstepd.scope")) == []


@pytest.mark.parametrize(("name", "text", "why"), [
    ("cpu.stat", "usage_usec lots\n", "non-negative integer"),
    ("cpu.stat", "user_usec 1\nsystem_usec 1\n", "no 'usage_usec' line"),
    ("memory.current", "-5\n", "non-negative integer"),
    ("memory.stat", "anon 1 2\n", "'<key> <integer>'"),
    ("memory.max", "unbounded\n", "non-negative integer"),
])
def test_content_that_does_not_parse_is_an_error_value_naming_the_file(
        tmp_path: Path, name: str, text: str, why: str) -> None:
    job_dir = write(tmp_path / "job", {**V2_FILES, name: text})
    e = read_job(JobCgroup("slurm", "9", "cgroup-v2", job_dir, job_dir))
    assert isinstance(e, SampleError), e
    assert e.path == str(job_dir / name) and name in e.reason and why in e.reason


def test_v1_content_that_does_not_parse_is_an_error_value(tmp_path: Path) -> None:
    v1 = {"cpuacct.usage": "1000\n", "cpuacct.stat": "user 1\nsystem 1\n",
          "cgroup.procs": "", "memory.usage_in_bytes": "4096\n",
          "memory.max_usage_in_bytes": "8192\n", "memory.stat": "total_rss 4096\n",
          "memory.limit_in_bytes": "9223372036854771712\n"}
    cpu = write(tmp_path / "cpuacct" / "job", v1)
    mem = write(tmp_path / "memory" / "job", v1)
    ok = read_job(JobCgroup("slurm", "9", "cgroup-v1", cpu, mem))
    assert isinstance(ok, JobSample) and ok.mem_limit_bytes is None
    (cpu / "cpuacct.stat").write_text("user 1\n")
    e = read_job(JobCgroup("slurm", "9", "cgroup-v1", cpu, mem))
    assert isinstance(e, SampleError) and "no 'system' line" in e.reason
    (cpu / "cpuacct.stat").unlink()
    e = read_job(JobCgroup("slurm", "9", "cgroup-v1", cpu, mem))
    assert isinstance(e, SampleError) and "cpuacct.stat is missing" in e.reason
