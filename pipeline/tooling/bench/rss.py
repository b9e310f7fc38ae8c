"""The flow's processes during a benchmark phase, and their resident memory.

:class:`Flow` starts ``jobstream worker`` (one or more, one consumer group) and ``jobstream
sink`` as children (:class:`~pipeline.runtime.children.Child`: configuration through ``JOBSTREAM_*``
variables, logs to files) and stops them with SIGTERM at the end. :class:`RssSampler`
reads their resident set size every ``interval`` seconds in a thread (psutil), keeping the
peak and the latest value of each, and their CPU time; it watches the local stack's Kafka
and Elasticsearch and the bench process too, which share the machine's cores with them.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from pipeline.runtime.children import Child, free_port
from pipeline.runtime.config import Config

__all__ = ["BENCH", "CLOCK_TICK_S", "Flow", "RssSampler", "flow"]

#: the bench process itself in the CPU and RSS figures
BENCH = "bench"

MIB = 1024 * 1024


class RssSampler:
    """Peak and last RSS (bytes) and CPU time of some processes, sampled in a thread."""

    def __init__(self, interval: float = 0.25) -> None:
        self.interval = interval
        self.peak: dict[str, int] = {}
        self.last: dict[str, int] = {}
        #: CPU seconds (user + system) used so far, as last sampled
        self.cpu_s: dict[str, float] = {}
        self._procs: dict[str, psutil.Process] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="bench-rss", daemon=True)

    def watch(self, name: str, pid: int) -> None:
        with self._lock:
            self._procs[name] = psutil.Process(pid)
        self.sample()

    def start(self) -> RssSampler:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=5)

    def sample(self) -> None:
        with self._lock:
            procs = dict(self._procs)
        for name, proc in procs.items():
            try:
                rss = int(proc.memory_info().rss)
                cpu = proc.cpu_times()
            except psutil.Error:
                continue  # exited; its figures stay
            if rss == 0:
                continue  # a zombie: exited, not reaped yet
            self.cpu_s[name] = cpu.user + cpu.system
            self.last[name] = rss
            self.peak[name] = max(self.peak.get(name, 0), rss)

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            self.sample()

    def cpu_now(self) -> dict[str, float]:
        """CPU seconds (user + system) each watched process has used so far, read now and
        returned rather than kept (the sampling thread may write :attr:`cpu_s` meanwhile);
        a process that exited is left out."""
        with self._lock:
            procs = dict(self._procs)
        out = {}
        for name, proc in procs.items():
            try:
                cpu = proc.cpu_times()
            except psutil.Error:
                continue
            out[name] = cpu.user + cpu.system
        return out

    def jit_cpu_s(self) -> dict[str, float]:
        """CPU seconds the JIT compiler threads of each watched JVM used so far (Kafka,
        Elasticsearch): a JVM compiles its hot code for a long while after it starts, and
        that CPU is taken from the flow on a small machine, once, not per event."""
        with self._lock:
            procs = dict(self._procs)
        out = {}
        for name, proc in procs.items():
            seconds = jit_threads_cpu_s(proc.pid)
            if seconds is not None:
                out[name] = seconds
        return out


@dataclass
class Flow:
    """The children of one phase."""

    cfg: Config
    workers: list[Child] = field(default_factory=list)
    sink: Child | None = None
    rss: RssSampler = field(default_factory=RssSampler)

    @property
    def children(self) -> list[Child]:
        return [*self.workers, *([self.sink] if self.sink else [])]

    def check(self) -> None:
        """Raise ServiceError (with the log tail) if a child died."""
        for child in self.children:
            child.check()

    @property
    def groups(self) -> list[str]:
        app = self.cfg.worker.app_id
        return [app, *([f"{app}-sink"] if self.sink else [])]


@contextmanager
def flow(cfg: Config, logs: Path, *, workers: int = 1, sink: bool = True,
         worker_args: Sequence[str] = ()) -> Iterator[Flow]:
    """Start ``workers`` workers (own web port and store each) and a sink; stop them after."""
    # metrics off: several workers, or a bench beside the live flow, would clash on its ports
    cfg = cfg.replace(metrics={"worker_port": 0, "sink_port": 0})
    f = Flow(cfg)
    try:
        for n in range(workers):
            store = f"{cfg.worker.store_dir}-{n}" if workers > 1 else cfg.worker.store_dir
            wcfg = cfg.replace(worker={"web_port": free_port(), "store_dir": store})
            child = Child(f"worker-{n}", wcfg, ["worker", "--name", f"bench-worker-{n}",
                                                *worker_args],
                          logs / f"worker-{n}.log").start()
            f.workers.append(child)
        if sink:
            f.sink = Child("sink", cfg, ["sink"], logs / "sink.log").start()
        for child in f.children:
            assert child.pid is not None
            f.rss.watch(child.name, child.pid)
        _watch_the_rest(f.rss, cfg)
        f.rss.start()
        yield f
    finally:
        f.rss.stop()
        for child in f.children:
            child.stop()


def _watch_the_rest(rss: RssSampler, cfg: Config) -> None:
    """The other processes on the machine's cores: the local stack's Kafka and
    Elasticsearch (when the stack runs them) and this one, which publishes and polls. A
    flow's rate is bounded by all of them together on a small machine."""
    from pipeline.tooling.stack import status

    for svc in status(cfg):
        if svc.running and svc.pid is not None:
            try:
                rss.watch(svc.name, svc.pid)
            except psutil.Error:
                continue  # stopped since status() read its pid file
    rss.watch(BENCH, os.getpid())


#: HotSpot's compiler threads, as /proc shows their names (cut at 15 characters)
_JIT_THREADS = ("C1 CompilerThre", "C2 CompilerThre")
_CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
#: the unit of a process's CPU time in /proc (psutil reads it there): a reading is short of
#: the truth by less than this
CLOCK_TICK_S = 1 / _CLOCK_TICKS


def jit_threads_cpu_s(pid: int) -> float | None:
    """CPU seconds of a process's HotSpot JIT compiler threads (None: no such thread, not
    a JVM, or no /proc). A lower bound: on a machine of more cores HotSpot starts more
    compiler threads and ends them when idle, and an ended thread's time is not counted
    (on two cores it keeps one of each kind)."""
    total, found = 0.0, False
    tasks = Path(f"/proc/{pid}/task")
    try:
        tids = [t.name for t in tasks.iterdir()]
    except OSError:
        return None
    for tid in tids:
        try:
            if not (tasks / tid / "comm").read_text().startswith(_JIT_THREADS):
                continue
            stat = (tasks / tid / "stat").read_text()
        except OSError:
            continue  # the thread ended
        # utime and stime, the 14th and 15th fields; the name in parentheses may hold spaces
        fields = stat[stat.rindex(")") + 2:].split()
        total += (int(fields[11]) + int(fields[12])) / _CLOCK_TICKS
        found = True
    return total if found else None


def mib(value: int | None) -> float | None:
    return None if value is None else round(value / MIB, 1)
