"""pytest plugin: a real single-host Slurm 22.05 cluster for the session.

Use it from a test module with ``pytest_plugins = ["conftest_slurm"]`` and the fixture
``slurm_cluster``; every test that uses the fixture is marked ``slurm`` automatically, so
``-m "not slurm"`` leaves them out. Where the cluster cannot run (not root, not Debian, a
daemon fails) the tests are skipped with the reason, except under ``CI=true``, where that
is a failure: CI must never pass by skipping the real thing.

Where the cluster sends its records is decided by two fixtures: ``slurm_jobcomp_url`` (the
``JobCompLoc``) and ``slurm_hook_script`` (PrologSlurmctld and EpilogSlurmctld; it must be
executable by the ``slurm`` user). By default they point at the stand-ins
``slurm_jobcomp_receiver`` and ``slurm_hooks``; override them to point the cluster at the
edge's receiver and the packaged hooks.
The figures measured (install, start, stop seconds) are printed in the terminal summary.
"""

from __future__ import annotations

import os
import platform
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from datafiles import unavailable
from slurm_cluster import ClusterSpec, SlurmCluster, SlurmClusterError, default_root, describe
from slurm_install import SlurmInstallError, ensure_installed
from slurm_standins import HookCapture, JobcompReceiver

_TIMINGS = pytest.StashKey[dict[str, float]]()


def _unavailable(reason: str) -> None:
    unavailable(f"Slurm test cluster unavailable: {reason}",
                f"Slurm test cluster unavailable under CI: {reason}")


@pytest.fixture(scope="session")
def slurm_root() -> Path:
    return default_root()


@pytest.fixture(scope="session")
def slurm_jobcomp_receiver() -> Iterator[JobcompReceiver]:
    receiver = JobcompReceiver().start()
    yield receiver
    receiver.stop()


@pytest.fixture(scope="session")
def slurm_installed() -> float | None:
    """Debian's Slurm, munge and MariaDB installed (now, if missing): the seconds it took."""
    if platform.system() != "Linux":
        _unavailable(f"needs Debian Linux, this is {platform.system()}")
    if os.geteuid() != 0:
        _unavailable("needs root (it installs packages and starts daemons as slurm, munge "
                     "and mysql)")
    t0 = time.monotonic()
    try:
        ran = ensure_installed()
    except SlurmInstallError as exc:
        _unavailable(str(exc))
    return time.monotonic() - t0 if ran else None


@pytest.fixture(scope="session")
def slurm_hooks(slurm_installed: float | None, slurm_root: Path) -> HookCapture:
    # After the install: the capture directory belongs to the slurm user it creates.
    return HookCapture(slurm_root).install()


@pytest.fixture(scope="session")
def slurm_jobcomp_url(slurm_jobcomp_receiver: JobcompReceiver) -> str:
    return slurm_jobcomp_receiver.url


@pytest.fixture(scope="session")
def slurm_hook_script(slurm_hooks: HookCapture) -> Path:
    return slurm_hooks.script


@pytest.fixture(scope="session")
def slurm_cluster(
    request: pytest.FixtureRequest,
    slurm_installed: float | None,
    slurm_root: Path,
    slurm_jobcomp_url: str,
    slurm_hook_script: Path,
) -> Iterator[SlurmCluster]:
    spec = ClusterSpec(jobcomp_url=slurm_jobcomp_url, prolog=slurm_hook_script,
                       epilog=slurm_hook_script, root=slurm_root)
    cluster = SlurmCluster(spec)
    try:
        cluster.start()
    except SlurmClusterError as exc:
        _unavailable(str(exc))
    # The cluster's own dict: tests add their figures to it (e.g. a scenario's duration).
    request.config.stash[_TIMINGS] = cluster.timings
    if slurm_installed is not None:
        cluster.timings["install_s"] = slurm_installed
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
