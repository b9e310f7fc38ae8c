"""The jobs' cgroups on this node, found and read: Slurm's ``cgroup/v1`` and ``cgroup/v2``
layouts and the systemd units Flux's ``sdexec`` runs job shells in.

Where the jobs are, as the schedulers name their directories:

- **Slurm, cgroup/v1**: ``<CgroupMountpoint>/<controller>/slurm/uid_<uid>/job_<id>/``
  (then ``step_<step>/``), one tree per controller: SchedMD/slurm
  ``src/plugins/cgroup/v1/xcgroup.c`` mounts each controller at ``<mountpoint>/<subsys>``
  (``xcgroup_ns_create``), makes the ``cgroup_prepend`` directory, ``/slurm`` (``/slurm_<node>``
  under multiple slurmd, ``xcgroup_create_slurm_cg``), and under it ``"%s/uid_%u"``,
  ``"%s/job_%u"``, ``"%s/step_%s"`` (``xcgroup_create_hierarchy``). The job is read from
  its ``cpuacct`` and ``memory`` trees, as ``jobacct_gather/cgroup`` fills them.
- **Slurm, cgroup/v2**: ``<init cgroup>/system.slice/slurmstepd.scope/job_<id>/``:
  ``src/plugins/cgroup/v2/cgroup_v2.c`` builds the scope from ``SYSTEM_CGSLICE``
  ``"system.slice"`` and ``SYSTEM_CGSCOPE`` ``"slurmstepd"`` (``<node>_slurmstepd.scope``
  under multiple slurmd, ``_set_int_cg_ns``) and the job directory as ``"/job_%u"``
  (``cgroup_p_step_create``), with ``step_<step>/{user,slurm}`` below.
- **Flux under sdexec**: a transient systemd unit per job shell, named
  ``"%s-%lu-%s.service"`` from the shell's name, the broker rank and the job id in
  ``f58plain`` (``shell-0-fTE9HHdZvi3.service``; systemd refuses the ``ƒ``), in
  flux-framework/flux-core ``src/modules/job-exec/bulk-exec.c`` (``exec_start_cmd``); the
  name is ``"imp-shell"`` for a multi-user instance, which runs the shell through the IMP,
  else ``"shell"`` (``src/modules/job-exec/exec.c``, ``exec_init``). Which systemd starts
  the unit (the flux user's ``systemd --user``, under ``user@<uid>.service``, or the
  system manager) and in which slice is the site's, so discovery walks the configured
  slices for unit directories of that name, descending only into slices and user
  managers. Under cgroup v1 a unit has ``cpuacct`` and ``memory`` directories only where
  systemd gave it CPU and memory accounting; one only in the ``name=systemd`` tree is left
  to the process path (:mod:`.procs`).

What is read: v1 ``cpuacct.usage`` (ns), ``cpuacct.stat`` (``user``/``system`` in USER_HZ
ticks, ``os.sysconf("SC_CLK_TCK")``), ``memory.usage_in_bytes``,
``memory.max_usage_in_bytes``, ``memory.stat`` (``total_rss``, ``total_cache``: the job
directory's own ``rss`` is about nothing, its tasks live in the step directories below),
``memory.limit_in_bytes`` (the kernel's "unlimited", just under 2**63, becomes None); v2
``cpu.stat`` (``usage_usec``, ``user_usec``, ``system_usec``), ``memory.current``,
``memory.peak`` where the kernel has it (5.19 and later), ``memory.stat`` (``anon``,
``file``), ``memory.max`` (``max`` becomes None). The processes are counted from every
``cgroup.procs`` of the job's subtree. The counter's epoch is the inode of the directory
the CPU is read from (:func:`cgroup_epoch`).

A job that ends while it is read (a directory or file vanishes) is reported
:class:`~.usage.JobGone`; content that does not parse, a file missing from a directory that
is still there, or a permission denied is a :class:`~.usage.SampleError` for that job. No
exception escapes :func:`read_job` or :meth:`CgroupReader.sample`.

Real cgroup v2 was not available on this machine: its controllers are all bound to v1, with
an empty unified hierarchy beside them. The v2 CPU reader was tested there on a real cgroup
(``cpu.stat`` is a core file of every v2 cgroup); the v2 memory files only in files written
in the kernel's format (``Documentation/admin-guide/cgroup-v2.rst``).
"""

from __future__ import annotations

import errno
import os
import re
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, TypeVar

from pipeline.core.fluid import decode_jobid, f58_encode
from pipeline.edges.node.usage import JobGone, JobSample, Reading, SampleError, Scheduler

__all__ = [
    "CgroupReader",
    "CgroupRoots",
    "JobCgroup",
    "cgroup_epoch",
    "discover",
    "parse_int",
    "parse_keyed",
    "parse_max",
    "read_cpu_stat",
    "read_job",
]

T = TypeVar("T")
CgroupSource = Literal["cgroup-v1", "cgroup-v2"]

_USER_HZ = os.sysconf("SC_CLK_TCK")
_PAGE = os.sysconf("SC_PAGE_SIZE")
#: memory.limit_in_bytes of an unlimited v1 cgroup: the largest page count, in bytes
_V1_UNLIMITED = (2**63 - 1) // _PAGE * _PAGE
_SLURM_ID = re.compile(r"[0-9]+")
_FLUX_UNIT = re.compile(r"(?:imp-)?shell-[0-9]+-(f[0-9A-Za-z]+)\.service")
_USER_MANAGER = re.compile(r"user@[0-9]+\.service")
#: what a read of a cgroup file fails with once the cgroup is removed
_VANISHED = {errno.ENOENT, errno.ENODEV, errno.ESRCH}


@dataclass(frozen=True)
class CgroupRoots:
    """Where to look. ``mount`` is Slurm's ``CgroupMountpoint``; the v1 controllers are
    directories under it. ``v2_mount`` is the cgroup2 root, by default ``mount`` itself when
    it is one (a hybrid system's ``unified`` tree carries no controllers).

    ``slurm_prefix`` and ``slurm_scope`` None (the default) find both namings of Slurm's:
    ``slurm`` and ``slurmstepd.scope``, and, where Slurm was built for multiple slurmd (as
    Debian's slurm-wlm is), ``slurm_<NodeName>`` and ``<NodeName>_slurmstepd.scope``."""

    mount: Path = Path("/sys/fs/cgroup")
    v1_cpuacct: str = "cpuacct"
    v1_memory: str = "memory"
    slurm_prefix: str | None = None
    v2_mount: Path | None = None
    slurm_scope: str | None = None
    flux_slices: tuple[str, ...] = ("user.slice", "system.slice")

    def v2_root(self) -> Path | None:
        if self.v2_mount is not None:
            return self.v2_mount
        return self.mount if (self.mount / "cgroup.controllers").exists() else None


@dataclass(frozen=True)
class JobCgroup:
    """One job's cgroup: for v1 its ``cpuacct`` and ``memory`` directories, for v2 the one
    directory twice."""

    scheduler: Scheduler
    job_id: str
    source: CgroupSource
    cpu_dir: Path
    memory_dir: Path


class _BadFile(ValueError):
    def __init__(self, path: Path, reason: str) -> None:
        super().__init__(reason)
        self.path = path
        self.reason = reason


# --- parsing: pure functions of a file's text ------------------------------------------

def parse_int(text: str) -> int:
    """A file holding one non-negative integer (``memory.current``, ``cpuacct.usage``)."""
    value = text.strip()
    if not value.isascii() or not value.isdigit():
        raise ValueError(f"expected one non-negative integer, found {value[:40]!r}")
    return int(value)


def parse_max(text: str) -> int | None:
    """``memory.max``: an integer, or ``max`` for no limit (None)."""
    return None if text.strip() == "max" else parse_int(text)


def parse_keyed(text: str) -> dict[str, int]:
    """A flat keyed file, ``<key> <integer>`` per line (``cpu.stat``, ``memory.stat``,
    ``cpuacct.stat``)."""
    fields: dict[str, int] = {}
    for line in text.splitlines():
        if not line.strip():
            continue
        parts = line.split()
        if len(parts) != 2:
            raise ValueError(f"expected '<key> <integer>', found {line[:60]!r}")
        fields[parts[0]] = parse_int(parts[1])
    return fields


# --- reading ---------------------------------------------------------------------------

def _parsed(path: Path, parse: Callable[[str], T]) -> T:
    text = path.read_text()
    try:
        return parse(text)
    except ValueError as e:
        raise _BadFile(path, f"{path.name}: {e}") from None


def _key(fields: dict[str, int], key: str, path: Path) -> int:
    if key not in fields:
        raise _BadFile(path, f"{path.name} has no '{key}' line")
    return fields[key]


def _optional(path: Path, parse: Callable[[str], T]) -> T | None:
    """A file the kernel may not have (``memory.peak`` before 5.19): None when absent from
    a directory that is still there."""
    try:
        return _parsed(path, parse)
    except FileNotFoundError:
        if path.parent.exists():
            return None
        raise


def read_cpu_stat(cgroup: Path) -> tuple[float, float, float]:
    """A v2 cgroup's ``cpu.stat``: (usage, user, system) in seconds; OSError when it cannot
    be read, ValueError when it does not parse."""
    path = cgroup / "cpu.stat"
    stat = _parsed(path, parse_keyed)
    return (_key(stat, "usage_usec", path) / 1e6, _key(stat, "user_usec", path) / 1e6,
            _key(stat, "system_usec", path) / 1e6)


def _subdirs(path: Path) -> list[Path]:
    try:
        with os.scandir(path) as entries:
            return [Path(e.path) for e in entries if e.is_dir(follow_symlinks=False)]
    except OSError:
        return []


def _count_processes(top: Path) -> int:
    """The processes of a cgroup's whole subtree; a sub-cgroup that vanishes meanwhile (a
    step that ended) counts none, the top one vanishing is the caller's."""
    count = len((top / "cgroup.procs").read_text().split())
    stack = _subdirs(top)
    while stack:
        cgroup = stack.pop()
        try:
            count += len((cgroup / "cgroup.procs").read_text().split())
        except OSError:
            continue
        stack.extend(_subdirs(cgroup))
    return count


def cgroup_epoch(cpu_dir: Path) -> str:
    """The epoch of a job's CPU counter: ``cg`` and the inode of the directory it is read
    from. kernfs numbers the inodes of the directories it makes anew (64-bit, with a
    generation, since Linux 5.5), so a cgroup removed and made again under the same name,
    a requeued job's, has another. OSError when the directory is gone."""
    return f"cg{os.stat(cpu_dir).st_ino}"


def _read_v1(job: JobCgroup, sampled_at: float) -> JobSample:
    cpu, mem = job.cpu_dir, job.memory_dir
    epoch = cgroup_epoch(cpu)  # first: what is read after is of this directory or a newer one
    ticks = _parsed(cpu / "cpuacct.stat", parse_keyed)
    stat = _parsed(mem / "memory.stat", parse_keyed)
    limit = _parsed(mem / "memory.limit_in_bytes", parse_int)
    return JobSample(
        scheduler=job.scheduler, job_id=job.job_id, source=job.source, sampled_at=sampled_at,
        cpu_usage_s=_parsed(cpu / "cpuacct.usage", parse_int) / 1e9,
        cpu_user_s=_key(ticks, "user", cpu / "cpuacct.stat") / _USER_HZ,
        cpu_system_s=_key(ticks, "system", cpu / "cpuacct.stat") / _USER_HZ,
        mem_current_bytes=_parsed(mem / "memory.usage_in_bytes", parse_int),
        mem_peak_bytes=_parsed(mem / "memory.max_usage_in_bytes", parse_int),
        mem_rss_bytes=stat.get("total_rss", stat.get("rss")),
        mem_file_bytes=stat.get("total_cache", stat.get("cache")),
        mem_limit_bytes=None if limit >= _V1_UNLIMITED else limit,
        processes=_count_processes(cpu),
        epoch=epoch,
    )


def _read_v2(job: JobCgroup, sampled_at: float) -> JobSample:
    d = job.cpu_dir
    epoch = cgroup_epoch(d)
    usage, user, system = read_cpu_stat(d)
    peak = _optional(d / "memory.peak", parse_int)
    stat = _parsed(d / "memory.stat", parse_keyed)
    return JobSample(
        scheduler=job.scheduler, job_id=job.job_id, source=job.source, sampled_at=sampled_at,
        cpu_usage_s=usage, cpu_user_s=user, cpu_system_s=system,
        mem_current_bytes=_parsed(d / "memory.current", parse_int),
        mem_peak_bytes=peak,
        mem_rss_bytes=stat.get("anon"),
        mem_file_bytes=stat.get("file"),
        mem_limit_bytes=_parsed(d / "memory.max", parse_max),
        processes=_count_processes(d),
        epoch=epoch,
    )


def read_job(job: JobCgroup, now: float | None = None) -> Reading:
    """Read one job's cgroup: its sample, or that it is gone, or why it cannot be read."""
    sampled_at = time.time() if now is None else now
    try:
        read = _read_v1 if job.source == "cgroup-v1" else _read_v2
        return read(job, sampled_at)
    except _BadFile as e:
        return SampleError(job.scheduler, job.job_id, job.source, str(e.path), e.reason)
    except OSError as e:
        path = str(e.filename or job.cpu_dir)
        if e.errno in _VANISHED:
            if not (job.cpu_dir.exists() and job.memory_dir.exists()):
                return JobGone(job.scheduler, job.job_id, job.source, sampled_at,
                               f"cgroup removed while read ({path})")
            return SampleError(job.scheduler, job.job_id, job.source, path,
                               f"{Path(path).name} is missing from a cgroup still there "
                               "(its controller is not enabled there?)")
        return SampleError(job.scheduler, job.job_id, job.source, path,
                           f"cannot read: {e.strerror or e}")


# --- discovery -------------------------------------------------------------------------

def _slurm_job(name: str, source: CgroupSource, cpu: Path, mem: Path
               ) -> JobCgroup | SampleError:
    raw = name.removeprefix("job_")
    if not _SLURM_ID.fullmatch(raw):
        return SampleError("slurm", raw, source, str(cpu),
                           f"directory {name!r} does not name a Slurm job id")
    return JobCgroup("slurm", raw, source, cpu, mem)


def _flux_job(unit: Path, source: CgroupSource, mem: Path) -> JobCgroup | SampleError:
    match = _FLUX_UNIT.fullmatch(unit.name)
    raw = match.group(1) if match else unit.name
    try:
        job_id = f58_encode(decode_jobid(raw))
    except ValueError as e:
        return SampleError("flux", raw, source, str(unit), f"unit {unit.name!r}: {e}")
    return JobCgroup("flux", job_id, source, unit, mem)


def _flux_units(top: Path) -> Iterator[Path]:
    """Unit directories named as job-exec names job shells, under ``top``, descending only
    into slices and user managers (where systemd nests units)."""
    stack = [top]
    while stack:
        for d in _subdirs(stack.pop()):
            if _FLUX_UNIT.fullmatch(d.name):
                yield d
            elif d.name.endswith(".slice") or _USER_MANAGER.fullmatch(d.name):
                stack.append(d)


def discover(roots: CgroupRoots | None = None) -> list[JobCgroup | SampleError]:
    """The jobs whose cgroups exist under ``roots`` now, and the directories that look like
    a job's but do not name one. A v1 job is listed once both its ``cpuacct`` and its
    ``memory`` directories exist (not while Slurm is still making or removing them)."""
    roots = roots or CgroupRoots()
    found: list[JobCgroup | SampleError] = []
    cpuacct, memory = roots.mount / roots.v1_cpuacct, roots.mount / roots.v1_memory
    prefixes = [cpuacct / roots.slurm_prefix] if roots.slurm_prefix is not None else [
        d for d in _subdirs(cpuacct) if d.name == "slurm" or d.name.startswith("slurm_")]
    for uid_dir in (u for prefix in prefixes for u in _subdirs(prefix)):
        if uid_dir.name.startswith("uid_"):
            for job_dir in _subdirs(uid_dir):
                mem = memory / job_dir.relative_to(cpuacct)
                if job_dir.name.startswith("job_") and mem.is_dir():
                    found.append(_slurm_job(job_dir.name, "cgroup-v1", job_dir, mem))
    for slice_ in roots.flux_slices:
        for unit in _flux_units(cpuacct / slice_):
            mem = memory / unit.relative_to(cpuacct)
            if mem.is_dir():
                found.append(_flux_job(unit, "cgroup-v1", mem))
    v2 = roots.v2_root()
    if v2 is not None:
        slice_dir = v2 / "system.slice"
        scopes = [v2 / roots.slurm_scope] if roots.slurm_scope is not None else [
            d for d in _subdirs(slice_dir)
            if d.name == "slurmstepd.scope" or d.name.endswith("_slurmstepd.scope")]
        for job_dir in (j for scope in scopes for j in _subdirs(scope)):
            if job_dir.name.startswith("job_"):
                found.append(_slurm_job(job_dir.name, "cgroup-v2", job_dir, job_dir))
        for slice_ in roots.flux_slices:
            found.extend(_flux_job(unit, "cgroup-v2", unit) for unit in _flux_units(v2 / slice_))
    return found


class CgroupReader:
    """Discovery and reading each interval, remembering the jobs of the previous one so
    that a job whose cgroup went away between two samples is reported gone once."""

    def __init__(self, roots: CgroupRoots | None = None,
                 clock: Callable[[], float] = time.time) -> None:
        self.roots = roots or CgroupRoots()
        self._clock = clock
        self._seen: dict[tuple[str, str, Path], JobCgroup] = {}

    def sample(self) -> list[Reading]:
        now = self._clock()
        readings: list[Reading] = []
        present: dict[tuple[str, str, Path], JobCgroup] = {}
        reported_gone: set[tuple[str, str, Path]] = set()
        for item in discover(self.roots):
            if isinstance(item, SampleError):
                readings.append(item)
                continue
            key = (item.scheduler, item.job_id, item.cpu_dir)
            reading = read_job(item, now)
            readings.append(reading)
            if isinstance(reading, JobGone):
                reported_gone.add(key)
            else:
                present[key] = item
        for key, job in self._seen.items():
            if key not in present and key not in reported_gone:
                readings.append(JobGone(job.scheduler, job.job_id, job.source, now,
                                        "cgroup removed since the last sample"))
        self._seen = present
        return readings
