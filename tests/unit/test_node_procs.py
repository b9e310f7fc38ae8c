"""The process path on real processes: children started with ``SLURM_JOB_ID`` or
``FLUX_JOB_ID`` as slurmstepd and flux-shell set them, found in ``/proc`` and their CPU and
memory counted, each environment read once per (pid, start time).

Some tests scan a ``/proc`` of their own: a directory of links to the real
``/proc/<pid>`` of their children only, so that what is counted is exactly known while
every file read is still the kernel's. The 10,000-process test links 10,000 names to a
few real processes, since this two-core machine cannot run 10,000 of its own.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import time
from pathlib import Path

import pytest
from datafiles import unavailable
from node_tasks import SLEEP, Children, busy, wait_until_running, waited_s
from node_tasks import children as children  # noqa: F401 - the fixture

from pipeline.core.fluid import f58_decode, f58_encode
from pipeline.edges.node.procs import ProcReader, parse_job_id, parse_stat
from pipeline.edges.node.usage import JobGone, JobSample, Reading, SampleError

HZ = os.sysconf("SC_CLK_TCK")
MiB = 1 << 20


#: How far two reads of one process's resident set may differ with no page touched: the
#: kernel keeps each of its three RSS counters (anon, file, shmem) per CPU and folds a
#: CPU's count in past a batch of max(32, 2 x CPUs) pages (percpu_counter), so ``stat``
#: and ``status`` may each be that many pages per CPU off, for each of the two processes
_CPUS = os.cpu_count() or 1
RSS_SLACK = 2 * 3 * max(32, 2 * _CPUS) * _CPUS * os.sysconf("SC_PAGE_SIZE")









def slurm_id() -> str:
    return str(random.randint(10**8, 10**9 - 1))


def flux_id() -> str:
    return f58_encode(random.randint(2**40, 2**50))


def of_job(readings: list[Reading], job_id: str) -> list[Reading]:
    return [r for r in readings if r.job_id == job_id]


def sample_of(readings: list[Reading], job_id: str) -> JobSample:
    found = of_job(readings, job_id)
    assert len(found) == 1 and isinstance(found[0], JobSample), found
    return found[0]


def link_proc(root: Path, *pids: int) -> Path:
    root.mkdir(exist_ok=True)
    for pid in pids:
        (root / str(pid)).symlink_to(f"/proc/{pid}")
    return root




def test_slurm_and_flux_tasks_are_found_and_their_cpu_counted(children: Children) -> None:
    sid, fid = slurm_id(), flux_id()
    s_child = children.start(SLEEP, SLURM_JOB_ID=sid)
    f_child = children.start(busy(60), FLUX_JOB_ID=fid)
    wait_until_running(s_child, f_child)
    reader = ProcReader()
    first, t0, w0 = reader.sample(), time.monotonic(), waited_s(f_child.pid)
    time.sleep(1.5)
    second, elapsed = reader.sample(), time.monotonic() - t0
    runnable = elapsed - (waited_s(f_child.pid) - w0)
    s0, s1 = sample_of(first, sid), sample_of(second, sid)
    f0, f1 = sample_of(first, fid), sample_of(second, fid)
    assert (s1.scheduler, s1.source, s1.processes) == ("slurm", "procs", 1)
    assert (f1.scheduler, f1.job_id, f1.processes) == ("flux", fid, 1)
    assert f1.cpu_usage_s - f0.cpu_usage_s > 0.5 * runnable  # what it could run
    assert f1.cpu_usage_s - f0.cpu_usage_s <= elapsed * 1.05 + 2 / HZ
    assert s1.cpu_usage_s - s0.cpu_usage_s < 0.05
    assert f1.mem_current_bytes > 1 * MiB and f1.mem_current_bytes == f1.mem_rss_bytes
    assert (f1.mem_peak_bytes, f1.mem_limit_bytes) == (None, None)
    # every environment read is of a process not seen before, or of one that exec'd
    stats = reader.stats
    assert stats.environ_reads == stats.new_processes + stats.environ_rereads


def test_the_flux_id_forms_flux_shell_writes_name_the_same_job(
        children: Children, tmp_path: Path) -> None:
    n = random.randint(2**40, 2**50)
    forms = [f58_encode(n), "f" + f58_encode(n)[1:], str(n), hex(n)]
    procs = [children.start(SLEEP, FLUX_JOB_ID=form) for form in forms]
    both = children.start(SLEEP, SLURM_JOB_ID=(sid := slurm_id()), FLUX_JOB_ID=flux_id())
    wait_until_running(*procs, both)
    root = link_proc(tmp_path / "proc", *(p.pid for p in [*procs, both]))
    readings = ProcReader(root).sample()
    assert sample_of(readings, f58_encode(n)).processes == 4
    assert sample_of(readings, sid).processes == 1  # Slurm first, by default
    flux_first = ProcReader(root, schedulers=("flux", "slurm")).sample()
    assert sid not in {r.job_id for r in flux_first} and len(flux_first) == 2


def test_an_environment_is_read_once_per_process_and_gone_pids_are_forgotten(
        children: Children, tmp_path: Path) -> None:
    sid = slurm_id()
    a, b = children.start(SLEEP, SLURM_JOB_ID=sid), children.start(SLEEP, SLURM_JOB_ID=sid)
    wait_until_running(a, b)
    root = link_proc(tmp_path / "proc", a.pid, b.pid)
    reader = ProcReader(root)
    for _ in range(3):
        assert sample_of(reader.sample(), sid).processes == 2
    assert (reader.stats.environ_reads, reader.stats.new_processes) == (2, 2)
    c = children.start(SLEEP, SLURM_JOB_ID=sid)
    wait_until_running(c)
    link_proc(root, c.pid)
    assert sample_of(reader.sample(), sid).processes == 3
    assert reader.stats.environ_reads == 3 and reader.stats.cached == 3
    for child in (a, b):
        child.kill()
        child.wait(timeout=10)
    assert sample_of(reader.sample(), sid).processes == 1
    assert reader.stats.cached == 1 and reader.stats.vanished == 2
    c.kill()
    c.wait(timeout=10)
    gone = reader.sample()
    assert [(type(r), r.job_id) for r in gone] == [(JobGone, sid)]
    assert reader.sample() == [] and reader.stats.cached == 0


def test_a_process_read_before_its_exec_into_a_task_is_read_again_after_it(
        children: Children, tmp_path: Path) -> None:
    """As slurmstepd starts a task: fork, set the environment, exec. Read between the fork
    and the exec, the process has no job yet; after the exec its name changed."""
    sid = slurm_id()
    child = subprocess.Popen(
        [sys.executable, "-c", "import os, sys\nsys.stdin.readline()\n"
         f"os.execve('/bin/sleep', ['sleep', '60'], {{'SLURM_JOB_ID': '{sid}'}})\n"],
        stdin=subprocess.PIPE, text=True, env={"PATH": os.environ.get("PATH", "")})
    children.procs.append(child)
    wait_until_running(child)
    reader = ProcReader(link_proc(tmp_path / "proc", child.pid))
    assert reader.sample() == []
    assert child.stdin is not None
    child.stdin.write("exec\n")
    child.stdin.flush()
    deadline = time.monotonic() + 10
    while b"(sleep)" not in Path(f"/proc/{child.pid}/stat").read_bytes():
        assert time.monotonic() < deadline
        time.sleep(0.01)
    assert sample_of(reader.sample(), sid).processes == 1
    assert reader.stats.environ_reads == 2 and reader.stats.new_processes == 1
    assert reader.stats.environ_rereads == 1
    reader.sample()
    assert reader.stats.environ_reads == 2  # a job's process is not read again


def test_the_cpu_of_a_task_that_ended_stays_with_its_job(
        children: Children, tmp_path: Path) -> None:
    sid = slurm_id()
    worker = children.start(busy(1.2), SLURM_JOB_ID=sid)
    sleeper = children.start(SLEEP, SLURM_JOB_ID=sid)
    wait_until_running(worker, sleeper)
    root = link_proc(tmp_path / "proc", worker.pid, sleeper.pid)
    reader = ProcReader(root)
    deadline = time.monotonic() + 10.0
    while (before := sample_of(reader.sample(), sid)).cpu_usage_s <= 0.4:
        assert time.monotonic() < deadline, "the busy task got no CPU in 10 s"
        time.sleep(0.1)
    worker.wait(timeout=30)
    after = sample_of(reader.sample(), sid)
    assert before.processes == 2 and after.processes == 1
    assert before.cpu_usage_s > 0.4
    assert after.cpu_usage_s >= before.cpu_usage_s  # not a drop the tracker took for a reset


def test_a_stat_line_as_the_last_scan_s_is_not_parsed_again_a_changed_one_is(
        children: Children, tmp_path: Path) -> None:
    sid, bid = slurm_id(), slurm_id()
    sleeper = children.start(SLEEP, SLURM_JOB_ID=sid)
    worker = children.start(busy(60), SLURM_JOB_ID=bid)
    wait_until_running(sleeper, worker)
    reader = ProcReader(link_proc(tmp_path / "proc", sleeper.pid, worker.pid))
    first = reader.sample()
    assert reader.stats.lines_parsed == 2
    deadline = time.monotonic() + 10.0
    while (now := reader.sample()) and \
            sample_of(now, bid).cpu_usage_s <= sample_of(first, bid).cpu_usage_s:
        assert time.monotonic() < deadline, "the busy task's CPU not counted in 10 s"
        time.sleep(0.1)
    # the busy task's line again when it ran, never the sleeping task's
    assert 1 <= reader.stats.lines_parsed - 2 <= reader.stats.scans - 1
    slept, then = sample_of(now, sid), sample_of(first, sid)
    assert (slept.cpu_usage_s, slept.mem_current_bytes, slept.processes, slept.epoch) == (
        then.cpu_usage_s, then.mem_current_bytes, then.processes, then.epoch)


def test_a_job_id_that_does_not_parse_is_one_error_value(
        children: Children, tmp_path: Path) -> None:
    bad = children.start(SLEEP, SLURM_JOB_ID="12ab")
    wait_until_running(bad)
    reader = ProcReader(link_proc(tmp_path / "proc", bad.pid))
    first = reader.sample()
    assert len(first) == 1 and isinstance(first[0], SampleError)
    assert first[0].job_id == "12ab" and "not a Slurm job id" in first[0].reason
    assert reader.sample() == [] and reader.stats.environ_reads == 1


def test_environments_another_user_cannot_read_are_skipped(children: Children) -> None:
    """A reader that is not root cannot read root's processes' environments: it skips them
    (a real permission error, the reader run in a child that gave up root)."""
    if os.geteuid() != 0:
        unavailable("giving up root needs root", "the process tests must run as root in CI")
    sid = slurm_id()
    wait_until_running(children.start(SLEEP, SLURM_JOB_ID=sid))
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: no pytest from here on, only os._exit
        try:
            os.setgid(65534)
            os.setuid(65534)
            reader = ProcReader()
            found = [r.job_id for r in reader.sample()]
            os.write(write_end, json.dumps({"found": found,
                                            "denied": reader.stats.environ_denied}).encode())
        finally:
            os._exit(0)
    os.close(write_end)
    with os.fdopen(read_end) as pipe:
        result = json.loads(pipe.read() or "{}")
    os.waitpid(pid, 0)
    assert result["denied"] >= 1 and sid not in result["found"]


def test_ten_thousand_processes_have_their_environment_read_once(
        children: Children, tmp_path: Path) -> None:
    sid, fid = slurm_id(), flux_id()
    real = [children.start(SLEEP, SLURM_JOB_ID=sid), children.start(SLEEP, FLUX_JOB_ID=fid)]
    wait_until_running(*real)
    root = tmp_path / "proc"
    root.mkdir()
    for i in range(10_000):
        (root / str(4_000_000 + i)).symlink_to(f"/proc/{real[i % 2].pid}")
    reader = ProcReader(root)
    first = reader.sample()
    assert sample_of(first, sid).processes == sample_of(first, fid).processes == 5_000
    assert reader.stats.environ_reads == 10_000
    second = reader.sample()
    assert sample_of(second, sid).processes == 5_000
    assert reader.stats.environ_reads == 10_000 and reader.stats.cached == 10_000


def test_stat_is_split_at_its_last_parenthesis(children: Children) -> None:
    """A command name may hold spaces and parentheses; the start time read past it must be
    the process's (checked against the boot clock, ``/proc/uptime``)."""
    started = time.monotonic()
    child = children.start("import time\nopen('/proc/self/comm', 'w').write('a) b (c')\n"
                           "print('renamed', flush=True)\ntime.sleep(60)\n")
    assert child.stdout is not None and child.stdout.readline().strip() == "renamed"
    text = Path(f"/proc/{child.pid}/stat").read_bytes()
    assert b"(a) b (c)" in text
    stat = parse_stat(text)
    uptime = float(Path("/proc/uptime").read_text().split()[0])
    assert abs(stat.start / HZ - (uptime - (time.monotonic() - started))) < 1.0
    assert stat.comm == b"a) b (c" and stat.utime >= 0 and stat.stime >= 0
    with pytest.raises(ValueError, match="not a /proc/<pid>/stat line"):
        parse_stat(b"12 (truncated")


def test_job_ids_are_written_as_the_scheduler_writes_them() -> None:
    assert parse_job_id("slurm", "4242") == "4242"
    assert parse_job_id("flux", "\u01922bfE7Z1") == "\u01922bfE7Z1"
    assert parse_job_id("flux", "f2bfE7Z1") == "\u01922bfE7Z1"
    n = f58_decode("f2bfE7Z1")
    assert parse_job_id("flux", str(n)) == parse_job_id("flux", hex(n)) == "\u01922bfE7Z1"
    for scheduler, raw in (("slurm", "12ab"), ("slurm", ""), ("flux", "\u01920OIl"),
                           ("flux", "not-an-id")):
        with pytest.raises(ValueError):
            parse_job_id(scheduler, raw)  # type: ignore[arg-type]


def start_wall(pid: int) -> float:
    """The wall time process ``pid`` started, from the kernel's boot time and its stat."""
    btime = next(int(line.split()[1]) for line in Path("/proc/stat").read_text().splitlines()
                 if line.startswith("btime "))
    return btime + parse_stat(Path(f"/proc/{pid}/stat").read_bytes()).start / HZ


def test_the_epoch_is_the_start_of_the_earliest_process_and_a_new_job_life_a_new_one(
        children: Children, tmp_path: Path) -> None:
    sid = slurm_id()
    first = children.start(SLEEP, SLURM_JOB_ID=sid)
    time.sleep(0.05)
    second = children.start(SLEEP, SLURM_JOB_ID=sid)
    wait_until_running(first, second)
    root = link_proc(tmp_path / "proc", first.pid, second.pid)
    reader = ProcReader(root)  # no stat under this root: btime from the clocks
    epoch = sample_of(reader.sample(), sid).epoch
    assert epoch.startswith("p") and epoch == f"p{float(epoch[1:]):.2f}"
    assert abs(float(epoch[1:]) - start_wall(first.pid)) <= 1.01  # btime is whole seconds
    # under /proc itself: its btime, exactly
    assert sample_of(ProcReader().sample(), sid).epoch == f"p{start_wall(first.pid):.2f}"
    first.kill()
    first.wait(timeout=10)
    assert sample_of(reader.sample(), sid).epoch == epoch  # the job goes on: its epoch too
    second.kill()
    second.wait(timeout=10)
    assert [type(r) for r in reader.sample()] == [JobGone]
    third = children.start(SLEEP, SLURM_JOB_ID=sid)  # the job requeued on this node
    wait_until_running(third)
    link_proc(root, third.pid)
    renewed = sample_of(reader.sample(), sid).epoch
    assert renewed != epoch and abs(float(renewed[1:]) - start_wall(third.pid)) <= 1.01
    assert float(renewed[1:]) - float(epoch[1:]) > 0.1


def vm_rss(pid: int) -> int:
    return next(int(line.split()[1]) * 1024 for line in
                Path(f"/proc/{pid}/status").read_text().splitlines()
                if line.startswith("VmRSS:"))


def test_stat_files_stay_open_between_scans_and_close_with_their_processes(
        children: Children, tmp_path: Path) -> None:
    """Each process's ``stat`` is read again through the file kept open; its resident set
    is ``status``'s ``VmRSS``, from the same line; past the files it may keep, the reader
    opens the others at each read."""
    sid = slurm_id()
    a, b = children.start(SLEEP, SLURM_JOB_ID=sid), children.start(SLEEP, SLURM_JOB_ID=sid)
    wait_until_running(a, b)
    root = link_proc(tmp_path / "proc", a.pid, b.pid)
    reader = ProcReader(root)
    # read around the sample: a child still starting on a loaded machine grows meanwhile
    rss_before = vm_rss(a.pid) + vm_rss(b.pid)
    first = sample_of(reader.sample(), sid)
    rss_after = vm_rss(a.pid) + vm_rss(b.pid)
    assert reader.stats.stat_files_open == 2
    low, high = sorted((rss_before, rss_after))
    assert low - RSS_SLACK <= first.mem_current_bytes <= high + RSS_SLACK
    assert sample_of(reader.sample(), sid).processes == 2
    a.kill()
    a.wait(timeout=10)
    (root / str(a.pid)).unlink()  # as /proc lists it no more
    assert sample_of(reader.sample(), sid).processes == 1
    assert reader.stats.stat_files_open == 1
    few = ProcReader(root)
    few._stat.max_open = 0  # a process whose RLIMIT_NOFILE is spent
    assert sample_of(few.sample(), sid).processes == 1 and few.stats.stat_files_open == 0
    reader.close()
    assert sample_of(reader.sample(), sid).processes == 1  # opened anew
