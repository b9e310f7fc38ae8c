"""The process path: the tasks whose environment names a job, summed per job from ``/proc``,
for nodes where a job has no cgroup of its own (the way Slurm's ``jobacct_gather/linux``
works: SchedMD/slurm ``src/plugins/jobacct_gather/common/common_jag.c``).

Which job a process belongs to is in its environment: slurmstepd sets ``SLURM_JOB_ID`` in
every task, flux-shell sets ``FLUX_JOB_ID``, in F58 (flux-framework/flux-core
``doc/man7/flux-environment.rst``: "The current jobid in F58 form", ``ƒ2bfE7Z1``; older
shells wrote it in decimal, ``"%ju"`` in ``src/shell/task.c``, and ``FLUX_F58_FORCE_ASCII``
makes the prefix an ASCII ``f``). Every form is accepted (``pipeline.core.fluid``) and
written as F58 with its ``ƒ``. A process with both variables (a Flux instance inside a
Slurm allocation) goes to the first of ``schedulers``.

Each interval lists ``/proc`` and reads each process's ``stat``: its start time (field
22) tells a reused pid from the process seen before, and ``utime``/``stime`` (fields 14
and 15, in USER_HZ ticks) its CPU, the line split at its last ``)`` as ``common_jag.c``
does, since a command name may hold spaces and parentheses. A process seen for the first
time has its ``environ`` read once, the job found there cached under (pid, start time).
A process found in no job is read again if its command name changed: slurmstepd and
flux-shell fork, set the task's environment and exec, and a process read between the
fork and the exec still had its parent's environment (kernel threads, which rename
themselves, have none and are not read again). The resident set is ``stat``'s too (field
24, in pages: what ``status`` shows as ``VmRSS``); cache entries of pids that are gone are
forgotten. The per-interval work at 10,000 processes is thus 10,000 reads of ``stat``, and
``environ`` only for the processes that are new. Each ``stat`` stays open between
intervals and is read again with ``pread`` (:class:`_StatFiles`), which spares the kernel
a path walk and the reader an open and a close per process and interval; a kept file of a
process that ended reads ESRCH, never another process's figures, even when its pid is
reused. At most half the soft ``RLIMIT_NOFILE`` are kept open (the systemd unit raises it);
past that, the others are opened at each read. A line equal to the process's at the last
scan (its ``hash()`` equal: a process that slept since, most of a node's) is not parsed
again, its figures are the last scan's.

A job's CPU is the CPU of its live processes plus the last CPU seen of those that ended
while it ran, so that its counter does not go backwards each time a task exits (which
:class:`~.usage.CounterTracker` would take for a reset); what a process used between the
last sample and its exit is not seen. Memory is the sum of the processes' resident sets,
which counts a page shared by two processes twice; ``use_pss`` sums ``smaps_rollup``'s
proportional share instead (Slurm's ``JobAcctGatherParams=UsePss``), at the cost of the
kernel walking every mapping of every process.

Processes that vanish mid-read and environments that cannot be read (another user's
process when not root) are skipped and counted in :attr:`ProcReader.stats`; a job id that
does not parse is one :class:`~.usage.SampleError`, when the process is first seen.

A job's counter epoch is ``p`` and the wall time its earliest process started, of those
found in the scan that first found the job: the boot time (``btime`` of ``/proc/stat``)
plus that process's start (ticks since boot), with 2 decimals. It stays the job's until
the job is gone from this node; a requeued job's new processes, found after that, give a
new one. It does not move when a process that started earlier turns up later (one read
before its exec): a moving epoch would split one counter in two. The boot time is read
once; under a ``proc_root`` without a ``stat`` (a test's directory of links) it is the
wall clock less ``CLOCK_BOOTTIME`` in whole seconds, as the kernel gives ``btime``: the
same second but at its edges and after the clock was stepped.
"""

from __future__ import annotations

import os
import re
import resource
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

from pipeline.core.fluid import decode_jobid, f58_encode
from pipeline.edges.node.usage import JobGone, JobSample, Reading, SampleError, Scheduler

__all__ = ["ProcReader", "ProcStats", "Stat", "boot_time", "parse_job_id", "parse_stat"]

_USER_HZ = os.sysconf("SC_CLK_TCK")
_PAGE = os.sysconf("SC_PAGE_SIZE")
_VARIABLE: dict[Scheduler, bytes] = {"slurm": b"SLURM_JOB_ID=", "flux": b"FLUX_JOB_ID="}
_SLURM_ID = re.compile(r"[0-9]+")

JobKey = tuple[Scheduler, str]


class Stat(NamedTuple):
    """What the reader takes of ``/proc/<pid>/stat``; times in clock ticks, the resident
    set in pages."""

    comm: bytes
    utime: int
    stime: int
    start: int
    rss: int = 0


def parse_stat(text: bytes) -> Stat:
    """``/proc/<pid>/stat`` -> its command name, utime, stime, start time and rss."""
    try:
        close = text.rindex(b")")
        # fields 3 to 24, and the rest in one; the kernel puts one space between fields
        rest = text[close + 2:].split(b" ", 22)
        return Stat(text[text.index(b"(") + 1:close], int(rest[11]), int(rest[12]),
                    int(rest[19]), int(rest[21]))
    except (ValueError, IndexError):
        raise ValueError(f"not a /proc/<pid>/stat line: {text[:80]!r}") from None


def parse_job_id(scheduler: Scheduler, raw: str) -> str:
    """A job id as found in a task's environment -> as the scheduler writes it (Slurm's
    decimal, Flux's F58 with ``ƒ``); ValueError when it is not one."""
    if scheduler == "slurm":
        if not _SLURM_ID.fullmatch(raw):
            raise ValueError(f"SLURM_JOB_ID={raw!r} is not a Slurm job id")
        return raw
    try:
        return f58_encode(decode_jobid(raw))
    except ValueError as e:
        raise ValueError(f"FLUX_JOB_ID={raw!r}: {e}") from None


def boot_time(proc_root: str = "/proc") -> float:
    """The wall time the system booted, in whole seconds: ``btime`` of
    ``<proc_root>/stat``, else the wall clock less the time since boot."""
    try:
        with open(f"{proc_root}/stat", "rb") as fh:
            for line in fh:
                if line.startswith(b"btime "):
                    return float(int(line.split()[1]))
    except (OSError, ValueError, IndexError):
        pass
    return float(int(time.time() - time.clock_gettime(time.CLOCK_BOOTTIME)))  # as btime: s


def _read(path: str) -> bytes:
    fd = os.open(path, os.O_RDONLY)
    try:
        chunks = []
        while chunk := os.read(fd, 65536):
            chunks.append(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


class _StatFiles:
    """The ``stat`` file of each process, kept open from one scan to the next."""

    #: more than any ``stat`` line (52 numbers and a 16-byte name)
    SIZE = 4096

    def __init__(self, proc_root: str) -> None:
        self.proc_root = proc_root
        soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
        self.max_open = max(0, soft // 2) if soft != resource.RLIM_INFINITY else 1 << 20
        #: pid -> its kept ``stat`` file (read in place by ProcReader.sample)
        self.fds: dict[str, int] = {}

    def read(self, pid: str) -> bytes:
        """The process's ``stat`` now; OSError when it is gone."""
        fd = self.fds.get(pid)
        if fd is not None:
            try:
                return os.pread(fd, self.SIZE, 0)
            except OSError:  # that process ended; the pid may be another's now
                del self.fds[pid]
                os.close(fd)
        fd = os.open(f"{self.proc_root}/{pid}/stat", os.O_RDONLY)
        try:
            text = os.pread(fd, self.SIZE, 0)
        except OSError:
            os.close(fd)
            raise
        if len(self.fds) < self.max_open:
            self.fds[pid] = fd
        else:
            os.close(fd)
        return text

    def keep_only(self, pids: Iterable[str]) -> None:
        """Close the files of the pids not in ``pids`` (those of the last scan)."""
        live = set(pids)
        for pid in [p for p in self.fds if p not in live]:
            os.close(self.fds.pop(pid))

    @property
    def open(self) -> int:
        return len(self.fds)

    def close(self) -> None:
        self.keep_only(())


def _kib_line(text: bytes, key: bytes) -> int:
    """The ``<key> <n> kB`` line of ``smaps_rollup``, in bytes (0 if none: kernel threads
    and zombies have no memory lines)."""
    at = text.find(b"\n" + key)
    if at < 0:
        return 0
    return int(text[at + len(key) + 1:].split(None, 1)[0]) * 1024


@dataclass
class ProcStats:
    """What the reader did, cumulative except ``processes`` (the pids of the last scan) and
    ``cached`` (the processes it remembers, those of the last scan)."""

    scans: int = 0
    processes: int = 0
    cached: int = 0
    #: ``stat`` files kept open for the next scan
    stat_files_open: int = 0
    new_processes: int = 0
    environ_reads: int = 0
    environ_rereads: int = 0
    environ_denied: int = 0
    vanished: int = 0
    #: ``stat`` lines parsed; a line as the process's of the last scan is not
    lines_parsed: int = 0


@dataclass(slots=True)
class _Process:
    start: int
    comm: bytes
    job: JobKey | None
    #: its environment will not name a job later: it named one, or cannot be read
    settled: bool
    #: its CPU at the last scan, in clock ticks, and its resident pages
    utime: int = 0
    stime: int = 0
    pages: int = 0
    #: ``hash()`` of its ``stat`` line at the last scan (0: none yet)
    line: int = 0


class ProcReader:
    """The jobs of the processes under ``proc_root``, one reading per job per :meth:`sample`;
    a job whose last process went away since the previous sample is reported gone once."""

    def __init__(self, proc_root: Path = Path("/proc"),
                 schedulers: Sequence[Scheduler] = ("slurm", "flux"),
                 use_pss: bool = False, clock: Callable[[], float] = time.time) -> None:
        self.proc_root = str(proc_root)
        self.schedulers = tuple(schedulers)
        self.use_pss = use_pss
        self.stats = ProcStats()
        self._clock = clock
        self._processes: dict[str, _Process] = {}
        #: per job, the CPU ticks (user, system) of its processes that ended
        self._retired: dict[JobKey, tuple[int, int]] = {}
        self._active: set[JobKey] = set()
        self._epochs: dict[JobKey, str] = {}
        self._stat = _StatFiles(self.proc_root)
        self._btime: float | None = None

    def close(self) -> None:
        """Close the ``stat`` files kept open (a reader goes on after it, opening anew)."""
        self._stat.close()

    def __del__(self) -> None:
        stat = getattr(self, "_stat", None)
        if stat is not None:
            stat.close()

    def job_of(self, pid: int) -> JobKey | None:
        """The job of process ``pid`` as the last :meth:`sample` found it (None: in no job,
        or not seen)."""
        process = self._processes.get(str(pid))
        return process.job if process is not None else None

    def _epoch(self, key: JobKey, first_start: int) -> str:
        epoch = self._epochs.get(key)
        if epoch is None:
            if self._btime is None:
                self._btime = boot_time(self.proc_root)
            epoch = self._epochs[key] = f"p{self._btime + first_start / _USER_HZ:.2f}"
        return epoch

    def _identify(self, pid: str, start: int, comm: bytes,
                  readings: list[Reading]) -> _Process:
        """The process as its environment says, an unparsable job id appended to
        ``readings``."""
        path = f"{self.proc_root}/{pid}/environ"
        self.stats.environ_reads += 1
        try:
            environ = _read(path)
        except PermissionError:
            self.stats.environ_denied += 1
            return _Process(start, comm, None, settled=True)
        except FileNotFoundError:
            self.stats.vanished += 1
            return _Process(start, comm, None, settled=False)
        except OSError:  # ESRCH: a kernel thread, which has no environment
            return _Process(start, comm, None, settled=True)
        variables = environ.split(b"\0")
        for scheduler in self.schedulers:
            prefix = _VARIABLE[scheduler]
            raw = next((v[len(prefix):] for v in variables if v.startswith(prefix)), None)
            if raw is None:
                continue
            text = raw.decode("utf-8", "replace")
            try:
                job = (scheduler, parse_job_id(scheduler, text))
            except ValueError as e:
                readings.append(SampleError(scheduler, text, "procs", path, str(e)))
                return _Process(start, comm, None, settled=True)
            return _Process(start, comm, job, settled=True)
        return _Process(start, comm, None, settled=False)

    def _pss(self, pid: str) -> int:
        try:
            return _kib_line(_read(f"{self.proc_root}/{pid}/smaps_rollup"), b"Pss:")
        except (OSError, ValueError):
            return 0  # gone since its stat was read: its CPU still counts, its memory is freed

    def _retire(self, process: _Process) -> None:
        if process.job is not None:
            user, system = self._retired.get(process.job, (0, 0))
            self._retired[process.job] = (user + process.utime, system + process.stime)

    def sample(self) -> list[Reading]:
        """Scan the processes once. Raises OSError only if ``proc_root`` cannot be listed."""
        now = self._clock()
        pids = [name for name in os.listdir(self.proc_root) if name.isdigit()]
        stats = self.stats
        stats.scans += 1
        stats.processes = len(pids)
        readings: list[Reading] = []
        #: per job: [user ticks, system ticks, memory, processes, earliest start]
        usage: dict[JobKey, list[int]] = {}
        live: dict[str, _Process] = {}
        # The loop runs once per process of the node (10,000 a scan): its names are bound
        # once, the kept ``stat`` file is read in place (see _StatFiles.read) and only the
        # fields needed are converted; the command name only of a process not settled.
        fds, pread, size = self._stat.fds, os.pread, _StatFiles.SIZE
        reopen, known = self._stat.read, self._processes.get
        memory = None if self.use_pss else _PAGE
        for pid in pids:
            fd = fds.get(pid)
            try:
                text = pread(fd, size, 0) if fd is not None else reopen(pid)
            except OSError:
                if fd is None:
                    stats.vanished += 1
                    continue
                try:  # that process ended; the pid may be another's now
                    text = reopen(pid)
                except OSError:
                    stats.vanished += 1
                    continue
            process = known(pid)
            line = hash(text)
            if process is not None and process.line == line:
                # The line the last scan parsed (most processes of a node sleep between
                # two scans): the same start, name, CPU and memory. Two different lines
                # hash alike once in 2^64 (a 64-bit SipHash with this process's key): an
                # interval's stale counters, made good by the next change of the line.
                utime, stime, start, pages = (process.utime, process.stime, process.start,
                                              process.pages)
            else:
                stats.lines_parsed += 1
                close = text.rfind(b")")  # as parse_stat does, without its Stat
                fields = text[close + 2:].split(b" ", 22)
                try:
                    if close < 0:
                        raise ValueError(text)
                    utime, stime, start = int(fields[11]), int(fields[12]), int(fields[19])
                    pages = int(fields[21])
                except (ValueError, IndexError):
                    stats.vanished += 1
                    continue
                if process is None or process.start != start:
                    if process is not None:  # the pid was reused: the old process ended
                        self._retire(process)
                    process = self._identify(pid, start, text[text.find(b"(") + 1:close],
                                             readings)
                    stats.new_processes += 1
                elif not process.settled:
                    comm = text[text.find(b"(") + 1:close]
                    if process.comm != comm:  # it exec'd
                        process = self._identify(pid, start, comm, readings)
                        stats.environ_rereads += 1
                process.utime, process.stime, process.pages = utime, stime, pages
                process.line = line
            live[pid] = process
            job = process.job
            if job is not None:
                rss = pages * memory if memory else self._pss(pid)
                u = usage.get(job)
                if u is None:
                    usage[job] = [utime, stime, rss, 1, start]
                else:
                    u[0] += utime
                    u[1] += stime
                    u[2] += rss
                    u[3] += 1
                    if start < u[4]:
                        u[4] = start
        for pid, process in self._processes.items():
            if pid not in live:
                self._retire(process)
        self._processes = live
        self._stat.keep_only(live)
        stats.cached = len(live)
        stats.stat_files_open = self._stat.open
        for (scheduler, job_id), (utime, stime, mem, processes, first) in usage.items():
            retired_user, retired_system = self._retired.get((scheduler, job_id), (0, 0))
            user = (retired_user + utime) / _USER_HZ
            system = (retired_system + stime) / _USER_HZ
            readings.append(JobSample(
                scheduler=scheduler, job_id=job_id, source="procs", sampled_at=now,
                cpu_usage_s=user + system, cpu_user_s=user, cpu_system_s=system,
                mem_current_bytes=mem, mem_peak_bytes=None, mem_rss_bytes=mem,
                mem_file_bytes=None, mem_limit_bytes=None, processes=processes,
                epoch=self._epoch((scheduler, job_id), first)))
        for scheduler, job_id in self._active - usage.keys():
            readings.append(JobGone(scheduler, job_id, "procs", now,
                                    "no process of the job left on this node"))
        self._active = set(usage)
        self._retired = {k: v for k, v in self._retired.items() if k in self._active}
        self._epochs = {k: v for k, v in self._epochs.items() if k in self._active}
        return readings
