"""Real tasks of jobs for the node edge's tests: Python children carrying a job's variable
(``SLURM_JOB_ID``, ``FLUX_JOB_ID``) in their environment, as slurmstepd and flux-shell
start them, killed when the test ends."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

__all__ = ["SLEEP", "Children", "busy", "children", "wait_until_running", "waited_s"]

SLEEP = "import time\ntime.sleep(60)\n"


def busy(seconds: float = 60) -> str:
    """A task that uses ``seconds`` of CPU (not of wall time: on a loaded machine it takes
    longer, and uses as much)."""
    return f"import time\nwhile time.process_time() < {seconds}: pass\n"


class Children:
    """The tasks a test started."""

    def __init__(self) -> None:
        self.procs: list[subprocess.Popen[str]] = []

    def start(self, code: str, **env: str) -> subprocess.Popen[str]:
        base = {k: v for k, v in os.environ.items()
                if k not in ("SLURM_JOB_ID", "FLUX_JOB_ID")}
        child = subprocess.Popen([sys.executable, "-c", code], env={**base, **env},
                                 stdout=subprocess.PIPE, text=True)
        self.procs.append(child)
        return child

    def stop(self, child: subprocess.Popen[str]) -> None:
        child.kill()
        child.wait(timeout=10)


@pytest.fixture
def children() -> Iterator[Children]:
    c = Children()
    try:
        yield c
    finally:
        for child in c.procs:
            if child.poll() is None:
                c.stop(child)


def wait_until_running(*procs: subprocess.Popen[str]) -> None:
    time.sleep(0.3)  # past the interpreter's start, into the child's own code
    assert all(p.poll() is None for p in procs)


def waited_s(pid: int) -> float:
    """Seconds the process has waited on a run queue for a CPU other work held
    (``/proc/<pid>/schedstat``'s second field, in nanoseconds): what a busy task could not
    use of the wall time, on a machine whose two cores the other tests share."""
    return int(Path(f"/proc/{pid}/schedstat").read_text().split()[1]) / 1e9
