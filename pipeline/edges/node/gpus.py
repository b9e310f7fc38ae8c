"""The node's NVIDIA GPUs through NVML (``nvidia-ml-py``'s ``pynvml``), and which job each
one works for.

Each interval reads, per GPU, its utilization (``nvmlDeviceGetUtilizationRates``: the
share of the driver's last sample period, 1/6 s to 1 s, in which a kernel ran), its memory
(``nvmlDeviceGetMemoryInfo``) and the pids of the compute processes on it
(``nvmlDeviceGetComputeRunningProcesses``). A GPU is a job's when one of those processes
is the job's (:mod:`.pids`); a GPU shared by two jobs (time-slicing, MPS) counts whole for
each of them, as NVML does not split its utilization by process here.

No NVML (the package or ``libnvidia-ml.so`` missing, no driver loaded, no GPU) turns GPU
usage off for the life of the process, said once in the log at INFO: every job then has
no GPU (``gpus: []``). A GPU that fails to answer (lost, reset) is left out of that
interval, said once per GPU and reason.

Not covered: AMD and Intel GPUs (ROCm SMI, Level Zero), MIG instances (their processes
and utilization live on MIG device handles, which this reader does not open: a MIG GPU
shows its processes to no job), graphics processes (``nvmlDeviceGetGraphicsRunningProcesses``),
and processes NVML reports from another pid namespace than the edge's.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from pipeline.edges.node.pids import JobKey

__all__ = ["NVML_LIBRARY", "GpuJobs", "GpuReader", "GpuReading", "NoNvmlLibrary", "Nvml",
           "gpus_by_job", "load_pynvml"]

logger = logging.getLogger(__name__)


class _Utilization(Protocol):
    gpu: int


class _Memory(Protocol):
    used: int
    total: int


class _Process(Protocol):
    pid: int


class Nvml(Protocol):
    """The part of ``pynvml`` the reader calls (the module itself is one; a test passes a
    fake)."""

    NVMLError: type[Exception]

    def nvmlInit(self) -> None: ...
    def nvmlShutdown(self) -> None: ...
    def nvmlDeviceGetCount(self) -> int: ...
    def nvmlDeviceGetHandleByIndex(self, index: int) -> Any: ...
    def nvmlDeviceGetUUID(self, handle: Any) -> str | bytes: ...
    def nvmlDeviceGetUtilizationRates(self, handle: Any) -> _Utilization: ...
    def nvmlDeviceGetMemoryInfo(self, handle: Any) -> _Memory: ...
    def nvmlDeviceGetComputeRunningProcesses(self, handle: Any) -> Sequence[_Process]: ...


@dataclass(frozen=True)
class GpuReading:
    """One GPU at one moment. ``util_pct`` is None where the GPU does not report it."""

    index: int
    uuid: str
    util_pct: float | None
    mem_bytes: int
    mem_total_bytes: int
    pids: tuple[int, ...]

    def payload(self) -> dict[str, Any]:
        """The GPU as the ``node-usage`` payload lists it."""
        return {"index": self.index, "uuid": self.uuid, "util_pct": self.util_pct,
                "mem_bytes": self.mem_bytes, "mem_total_bytes": self.mem_total_bytes}


#: the driver's library, which ``pynvml`` loads on Linux (``CDLL`` in its ``nvmlInit``)
NVML_LIBRARY = "libnvidia-ml.so.1"


class NoNvmlLibrary(ImportError):
    """The driver's NVML library cannot be loaded: the bindings were not imported."""


def load_pynvml() -> Nvml:
    """The real NVML bindings; ImportError when ``nvidia-ml-py`` is not installed, and
    :class:`NoNvmlLibrary` on Linux when :data:`NVML_LIBRARY` cannot be loaded (a node
    without an NVIDIA driver): the bindings, a megabyte of Python objects, would find no
    library there either, and are then not imported at all (docs/node.md, "Cost")."""
    if sys.platform.startswith("linux"):
        import ctypes

        try:
            ctypes.CDLL(NVML_LIBRARY)
        except OSError as e:
            raise NoNvmlLibrary(f"NVML: {e}") from None
    import pynvml

    return pynvml  # type: ignore[return-value]


def _text(value: str | bytes) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else value


class GpuReader:
    """The GPUs of this node, or none when NVML is not there (:attr:`enabled` False)."""

    def __init__(self, nvml: Nvml | None = None,
                 load: Callable[[], Nvml] = load_pynvml) -> None:
        self.enabled = False
        self.off_reason = ""
        self._nvml: Nvml | None = None
        self._devices: list[tuple[int, Any, str]] = []
        self._failing: set[tuple[int, str]] = set()
        try:
            lib = nvml if nvml is not None else load()
        except NoNvmlLibrary as e:
            self._off(str(e))
            return
        except ImportError as e:
            self._off(f"nvidia-ml-py is not installed ({e})")
            return
        try:
            lib.nvmlInit()
            count = lib.nvmlDeviceGetCount()
            for index in range(count):
                handle = lib.nvmlDeviceGetHandleByIndex(index)
                self._devices.append((index, handle, _text(lib.nvmlDeviceGetUUID(handle))))
        except (lib.NVMLError, OSError) as e:
            self._off(f"NVML: {e}")
            return
        if not self._devices:
            self._off("NVML sees no GPU")
            return
        self._nvml = lib
        self.enabled = True
        logger.info("GPU usage on: %d GPU(s) through NVML", len(self._devices))

    def _off(self, reason: str) -> None:
        self.off_reason = reason
        logger.info("GPU usage off: %s", reason)

    def read(self) -> list[GpuReading]:
        """Every GPU that answers now; [] when GPU usage is off."""
        lib = self._nvml
        if lib is None:
            return []
        out: list[GpuReading] = []
        failing: set[tuple[int, str]] = set()
        for index, handle, uuid in self._devices:
            try:
                memory = lib.nvmlDeviceGetMemoryInfo(handle)
                procs = lib.nvmlDeviceGetComputeRunningProcesses(handle)
            except lib.NVMLError as e:
                key = (index, str(e))
                failing.add(key)
                if key not in self._failing:
                    logger.warning("GPU %d (%s) left out: NVML: %s", index, uuid, e)
                continue
            try:
                util: float | None = float(lib.nvmlDeviceGetUtilizationRates(handle).gpu)
            except lib.NVMLError:  # Not Supported (a MIG parent): no utilization to tell
                util = None
            out.append(GpuReading(index=index, uuid=uuid, util_pct=util,
                                  mem_bytes=int(memory.used),
                                  mem_total_bytes=int(memory.total),
                                  pids=tuple(sorted({int(p.pid) for p in procs}))))
        self._failing = failing
        return out

    def close(self) -> None:
        if self._nvml is not None:
            try:
                self._nvml.nvmlShutdown()
            except self._nvml.NVMLError:
                pass
            self._nvml = None


def gpus_by_job(readings: Sequence[GpuReading],
                job_of: Callable[[int], JobKey | None]) -> dict[JobKey, list[GpuReading]]:
    """Each job's GPUs: those with a process of the job on them, each GPU once per job,
    in GPU order."""
    jobs: dict[JobKey, list[GpuReading]] = {}
    for gpu in readings:
        owners = {job for job in map(job_of, gpu.pids) if job is not None}
        for job in owners:
            jobs.setdefault(job, []).append(gpu)
    return jobs


class GpuJobs:
    """The GPUs of each job now: what the sampler asks once per interval, after the
    readers (the process reader's scan is what ``job_of`` knows)."""

    def __init__(self, reader: GpuReader, job_of: Callable[[int], JobKey | None]) -> None:
        self.reader = reader
        self.job_of = job_of

    def __call__(self) -> Mapping[JobKey, Sequence[GpuReading]]:
        if not self.reader.enabled:
            return {}
        return gpus_by_job(self.reader.read(), self.job_of)
