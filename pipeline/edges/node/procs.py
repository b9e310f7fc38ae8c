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
themselves, have none and are not read again). ``status`` (``VmRSS``) is read only for the
processes of jobs; cache entries of pids that are gone are forgotten. The per-interval
work at 10,000 processes is thus 10,000 reads of ``stat``, and ``environ`` only for the
processes that are new.

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
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

from pipeline.core.fluid import decode_jobid, f58_encode
from pipeline.edges.node.usage import JobGone, JobSample, Reading, SampleError, Scheduler

__all__ = ["ProcReader", "ProcStats", "Stat", "parse_job_id", "parse_stat"]

_USER_HZ = os.sysconf("SC_CLK_TCK")
_VARIABLE: dict[Scheduler, bytes] = {"slurm": b"SLURM_JOB_ID=", "flux": b"FLUX_JOB_ID="}
_SLURM_ID = re.compile(r"[0-9]+")

JobKey = tuple[Scheduler, str]


class Stat(NamedTuple):
    """What the reader takes of ``/proc/<pid>/stat``; times in clock ticks."""

    comm: bytes
    utime: int
    stime: int
    start: int


def parse_stat(text: bytes) -> Stat:
    """``/proc/<pid>/stat`` -> its command name, utime, stime and start time."""
    try:
        close = text.rindex(b")")
        rest = text[close + 2:].split()
        return Stat(text[text.index(b"(") + 1:close], int(rest[11]), int(rest[12]),
                    int(rest[19]))
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


def _read(path: str) -> bytes:
    fd = os.open(path, os.O_RDONLY)
    try:
        chunks = []
        while chunk := os.read(fd, 65536):
            chunks.append(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


def _kib_line(text: bytes, key: bytes) -> int:
    """The ``<key> <n> kB`` line of ``status`` or ``smaps_rollup``, in bytes (0 if none:
    kernel threads and zombies have no memory lines)."""
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
    new_processes: int = 0
    environ_reads: int = 0
    environ_rereads: int = 0
    environ_denied: int = 0
    vanished: int = 0


@dataclass
class _Process:
    start: int
    comm: bytes
    job: JobKey | None
    #: its environment will not name a job later: it named one, or cannot be read
    settled: bool
    user_s: float = 0.0
    system_s: float = 0.0


@dataclass
class _Usage:
    user_s: float = 0.0
    system_s: float = 0.0
    memory: int = 0
    processes: int = 0


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
        self._retired: dict[JobKey, tuple[float, float]] = {}
        self._active: set[JobKey] = set()

    def _identify(self, pid: str, stat: Stat, readings: list[Reading]) -> _Process:
        """The process as its environment says, an unparsable job id appended to
        ``readings``."""
        path = f"{self.proc_root}/{pid}/environ"
        self.stats.environ_reads += 1
        try:
            environ = _read(path)
        except PermissionError:
            self.stats.environ_denied += 1
            return _Process(stat.start, stat.comm, None, settled=True)
        except FileNotFoundError:
            self.stats.vanished += 1
            return _Process(stat.start, stat.comm, None, settled=False)
        except OSError:  # ESRCH: a kernel thread, which has no environment
            return _Process(stat.start, stat.comm, None, settled=True)
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
                return _Process(stat.start, stat.comm, None, settled=True)
            return _Process(stat.start, stat.comm, job, settled=True)
        return _Process(stat.start, stat.comm, None, settled=False)

    def _memory(self, pid: str) -> int:
        try:
            if self.use_pss:
                return _kib_line(_read(f"{self.proc_root}/{pid}/smaps_rollup"), b"Pss:")
            return _kib_line(_read(f"{self.proc_root}/{pid}/status"), b"VmRSS:")
        except (OSError, ValueError):
            return 0  # gone since its stat was read: its CPU still counts, its memory is freed

    def _retire(self, process: _Process) -> None:
        if process.job is not None:
            user, system = self._retired.get(process.job, (0.0, 0.0))
            self._retired[process.job] = (user + process.user_s, system + process.system_s)

    def sample(self) -> list[Reading]:
        """Scan the processes once. Raises OSError only if ``proc_root`` cannot be listed."""
        now = self._clock()
        pids = [name for name in os.listdir(self.proc_root) if name.isdigit()]
        self.stats.scans += 1
        self.stats.processes = len(pids)
        readings: list[Reading] = []
        usage: dict[JobKey, _Usage] = {}
        live: dict[str, _Process] = {}
        for pid in pids:
            try:
                stat = parse_stat(_read(f"{self.proc_root}/{pid}/stat"))
            except (OSError, ValueError):
                self.stats.vanished += 1
                continue
            process = self._processes.get(pid)
            if process is None or process.start != stat.start:
                if process is not None:  # the pid was reused: the old process ended
                    self._retire(process)
                process = self._identify(pid, stat, readings)
                self.stats.new_processes += 1
            elif not process.settled and process.comm != stat.comm:  # it exec'd
                process = self._identify(pid, stat, readings)
                self.stats.environ_rereads += 1
            process.user_s, process.system_s = stat.utime / _USER_HZ, stat.stime / _USER_HZ
            live[pid] = process
            if process.job is not None:
                u = usage.setdefault(process.job, _Usage())
                u.user_s += process.user_s
                u.system_s += process.system_s
                u.memory += self._memory(pid)
                u.processes += 1
        for pid, process in self._processes.items():
            if pid not in live:
                self._retire(process)
        self._processes = live
        self.stats.cached = len(live)
        for (scheduler, job_id), u in usage.items():
            user, system = self._retired.get((scheduler, job_id), (0.0, 0.0))
            user, system = user + u.user_s, system + u.system_s
            readings.append(JobSample(
                scheduler=scheduler, job_id=job_id, source="procs", sampled_at=now,
                cpu_usage_s=user + system, cpu_user_s=user, cpu_system_s=system,
                mem_current_bytes=u.memory, mem_peak_bytes=None, mem_rss_bytes=u.memory,
                mem_file_bytes=None, mem_limit_bytes=None, processes=u.processes))
        for scheduler, job_id in self._active - usage.keys():
            readings.append(JobGone(scheduler, job_id, "procs", now,
                                    "no process of the job left on this node"))
        self._active = set(usage)
        self._retired = {k: v for k, v in self._retired.items() if k in self._active}
        return readings
