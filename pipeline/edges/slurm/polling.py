"""What the Slurm pollers share around their polls: running a Slurm command into a file,
the loop that polls every interval in its own thread, backing off while Slurm fails, and
the base of the pollers that runs their loop.

The pollers (:mod:`.poller`: squeue and sacct; :mod:`.nodes`: scontrol/sinfo), both
:class:`Poller`, give the loop their ``poll_once``; it counts the failures, logs,
and waits with :class:`~pipeline.runtime.backoff.Backoff` while the poll raises what a
Slurm outage or a full disk raises.
"""

from __future__ import annotations

import abc
import logging
import subprocess
import threading
import time
from collections.abc import Callable
from typing import IO, TYPE_CHECKING

from pipeline.runtime.backoff import Backoff
from pipeline.runtime.errors import JobstreamError

if TYPE_CHECKING:
    from pipeline.edges.base import EdgeRuntime

__all__ = ["PollError", "PollLoop", "Poller", "Runner", "run_command"]

logger = logging.getLogger(__name__)

#: runs ``argv`` with its stdout written to the file; raises PollError
Runner = Callable[[list[str], float, IO[bytes]], None]


class PollError(Exception):
    """A Slurm command failed; the poller backs off."""


def run_command(argv: list[str], timeout: float, out: IO[bytes]) -> None:
    try:
        proc = subprocess.run(argv, stdout=out, stderr=subprocess.PIPE, timeout=timeout,
                              check=False)
    except FileNotFoundError as exc:
        raise PollError(f"{argv[0]} not found") from exc
    except subprocess.TimeoutExpired as exc:
        raise PollError(f"{argv[0]} timed out after {timeout:.0f} s") from exc
    if proc.returncode != 0:
        err = proc.stderr.decode(errors="replace").strip().splitlines()
        raise PollError(f"{argv[0]} exited {proc.returncode}: {err[-1] if err else ''}")


class PollLoop:
    """Calls ``poll`` every ``interval_s`` until stopped; after a failure waits from
    ``min(5, interval_s)`` doubling up to ``backoff_max_s``.

    :param poll: one poll; returns the number of records published.
    :param what: names the poll in the log (``"slurm poll"``).
    :param sleep: waits between polls and returns True when the loop should stop (the
        loop's own stop event by default; tests give their own).
    """

    def __init__(self, poll: Callable[[], int], *, what: str, interval_s: float,
                 backoff_max_s: float, join_timeout_s: float,
                 sleep: Callable[[float], bool] | None = None) -> None:
        self.poll = poll
        self.what = what
        self.interval_s = interval_s
        self.backoff_max_s = backoff_max_s
        self.join_timeout_s = join_timeout_s
        self.failures = 0
        self._stop = threading.Event()
        self._sleep = sleep or self._stop.wait
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self.run, name=self.what.replace(" ", "-"),
                                        daemon=True)
        self._thread.start()

    def run(self) -> None:
        backoff = Backoff(min(5.0, self.interval_s), self.backoff_max_s)
        while not self._stop.is_set():
            try:
                n = self.poll()
                backoff.reset()
                delay = self.interval_s
                logger.info("%s: %d records", self.what, n)
            # OSError: the command's output and the pollers' state are files beside the
            # spool, whose disk may be full; the poll is tried again like a Slurm failure
            except (PollError, JobstreamError, OSError) as exc:
                self.failures += 1
                delay = backoff.next()
                logger.warning("%s failed (%s); next attempt in %.0f s", self.what, exc, delay)
            if self._sleep(delay):
                return

    def stop(self) -> bool:
        """Stop the loop; False when its thread is still in a poll after the join timeout
        (the poll's state must then stay open)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(self.join_timeout_s)
            return not self._thread.is_alive()
        return True


class Poller(abc.ABC):
    """A Slurm poller: its ``poll_once`` run by a :class:`PollLoop` in a thread, with the
    edge's Slurm settings (``cfg``), the command runner and the clock it polls with, and
    its counts (``polls``, ``published``: ``poll_once`` keeps them; ``failures``: the
    loop's). Built before the edge's runtime starts.

    :param what: names the poll in the log and its thread (``"slurm poll"``).
    :param interval_s: the time between polls (the poller's own setting).
    """

    def __init__(self, runtime: EdgeRuntime, *, what: str, interval_s: float,
                 runner: Runner = run_command, clock: Callable[[], float] = time.time,
                 sleep: Callable[[float], bool] | None = None) -> None:
        self.runtime = runtime
        self.cfg = runtime.cfg.edge.slurm
        self.runner = runner
        self.clock = clock
        self.published = 0
        self.polls = 0
        self._loop = PollLoop(self.poll_once, what=what, interval_s=interval_s,
                              backoff_max_s=self.cfg.poll_backoff_max_s,
                              join_timeout_s=self.cfg.command_timeout_s + 5.0, sleep=sleep)

    @abc.abstractmethod
    def poll_once(self) -> int:
        """One poll; the number of records published. Raises PollError."""

    @property
    def failures(self) -> int:
        return self._loop.failures

    def start(self) -> None:
        self._loop.start()

    def run(self) -> None:
        """Poll until stopped: every interval, backing off while Slurm fails."""
        self._loop.run()

    def stop(self) -> None:
        self._loop.stop()
