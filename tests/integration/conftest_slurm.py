"""pytest plugin: a real single-host Slurm 22.05 cluster for the session.

Use it from a test module with ``pytest_plugins = ["conftest_slurm"]`` and the fixture
``slurm_cluster``; every test that uses the fixture is marked ``slurm`` automatically, so
``-m "not slurm"`` leaves them out. Where the cluster cannot run (not root, not Debian, a
daemon fails) the tests are skipped with the reason, except under ``CI=true``, where that
is a failure: CI must never pass by skipping the real thing.

The jobcomp endpoint and the hook script come from the fixtures ``slurm_jobcomp_receiver``
and ``slurm_hooks`` (stand-ins for now); override them to point the cluster at the edge.
The figures measured (install, start, stop seconds) are printed in the terminal summary.
"""

from __future__ import annotations

import os
import platform
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from slurm_cluster import ClusterSpec, SlurmCluster, SlurmClusterError, default_root, describe
from slurm_standins import HookCapture, JobcompReceiver

_TIMINGS = pytest.StashKey[dict[str, float]]()


def in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() in {"true", "1", "yes"}


def _unavailable(reason: str) -> None:
    if in_ci():
        pytest.fail(f"Slurm test cluster unavailable under CI: {reason}", pytrace=False)
    pytest.skip(f"Slurm test cluster unavailable: {reason}")


@pytest.fixture(scope="session")
def slurm_root() -> Path:
    return default_root()


@pytest.fixture(scope="session")
def slurm_jobcomp_receiver() -> Iterator[JobcompReceiver]:
    receiver = JobcompReceiver().start()
    yield receiver
    receiver.stop()


@pytest.fixture(scope="session")
def slurm_hooks(slurm_root: Path) -> HookCapture:
    if os.geteuid() != 0:
        _unavailable("needs root (it installs packages and starts daemons as slurm, munge "
                     "and mysql)")
    return HookCapture(slurm_root).install()


@pytest.fixture(scope="session")
def slurm_cluster(
    request: pytest.FixtureRequest,
    slurm_root: Path,
    slurm_jobcomp_receiver: JobcompReceiver,
    slurm_hooks: HookCapture,
) -> Iterator[SlurmCluster]:
    if platform.system() != "Linux":
        _unavailable(f"needs Debian Linux, this is {platform.system()}")
    spec = ClusterSpec(jobcomp_url=slurm_jobcomp_receiver.url, prolog=slurm_hooks.script,
                       epilog=slurm_hooks.script, root=slurm_root)
    cluster = SlurmCluster(spec)
    try:
        cluster.start()
    except SlurmClusterError as exc:
        _unavailable(str(exc))
    # The cluster's own dict: tests add their figures to it (e.g. a scenario's duration).
    request.config.stash[_TIMINGS] = cluster.timings
    yield cluster
    t0 = time.monotonic()
    cluster.stop()
    cluster.timings["stop_s"] = time.monotonic() - t0


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "slurm_cluster" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.slurm)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter,
                            config: pytest.Config) -> None:
    timings = config.stash.get(_TIMINGS, None)
    if timings:
        terminalreporter.write_line(f"slurm test cluster: {describe(timings)} (seconds)")
