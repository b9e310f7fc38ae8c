"""The package as an operator gets it: a wheel, installed into a fresh venv, runs.

The wheel is built from the committed tree (``git archive HEAD``, what a release is built
from; a copy of the checkout where there is no git) in a directory of its own: setuptools
reuses a checkout's stale ``build/``, which hides a missing package-data pattern. It is
installed with its pinned
dependencies from the package index into a new venv, and its ``jobstream`` runs from
there, with no path into the repository: so every file the code reads at run time
(schemas, stack assets, the Slurm hook, the systemd units) must be inside the wheel.

The stack is a Kafka of this test alone (free ports, its own run directory), started and
stopped by the wheel's ``jobstream stack``, reusing the broker the shared stack fetched:
nothing is downloaded twice and the shared stack is never touched. About 40 s here, most
of it ``pip install`` (deps from pip's cache after the first run) and Kafka's start.
"""

from __future__ import annotations

import io
import os
import shutil
import subprocess
import sys
import tarfile
import time
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer
from datafiles import unavailable

from pipeline.codecs.codec import AvroCodec, raw_from_avro
from pipeline.deploy import UNITS
from pipeline.runtime.children import free_port
from pipeline.runtime.config import Config
from pipeline.runtime.errors import ServiceError
from pipeline.tooling.stack import ensure_up, service

REPO = Path(__file__).resolve().parents[2]
#: what the wheel needs of the tree
SOURCES = ("pyproject.toml", "README.md", "pipeline", "agents", "schemas")


def _run(*args: str | Path, env: dict[str, str] | None = None, timeout: float = 300,
         check: bool = True) -> subprocess.CompletedProcess[str]:
    out = subprocess.run([str(a) for a in args], capture_output=True, text=True,
                         timeout=timeout, env=env, cwd=env.get("HOME") if env else None)
    if check and out.returncode != 0:
        raise AssertionError(f"{' '.join(map(str, args))} exited {out.returncode}:\n"
                             f"{out.stdout}\n{out.stderr}")
    return out


def _source_tree(dest: Path) -> Path:
    if (REPO / ".git").exists() and shutil.which("git"):
        tar = subprocess.run(["git", "archive", "--format=tar", "HEAD", *SOURCES], cwd=REPO,
                             capture_output=True, check=True).stdout
        with tarfile.open(fileobj=io.BytesIO(tar)) as archive:
            archive.extractall(dest, filter="tar")  # keeps pipeline/_schemas a symlink
    else:
        for name in SOURCES:
            src = REPO / name
            if src.is_dir():
                shutil.copytree(src, dest / name, symlinks=True,
                                ignore=shutil.ignore_patterns("__pycache__"))
            else:
                shutil.copy2(src, dest / name)
    return dest


@pytest.fixture(scope="module")
def source(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _source_tree(tmp_path_factory.mktemp("source"))


@pytest.fixture(scope="module")
def wheel(source: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    dist = tmp_path_factory.mktemp("dist")
    _run(sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", dist, source)
    (found,) = dist.glob("jobstream-*.whl")
    return found


@pytest.fixture(scope="module")
def venv(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh venv (no system site-packages, nothing of the project's) with the wheel."""
    where = tmp_path_factory.mktemp("venv") / "venv"
    _run(sys.executable, "-m", "venv", where)
    _run(where / "bin" / "python", "-m", "pip", "install", "-q",
         "--disable-pip-version-check", wheel, timeout=900)
    return where


@pytest.fixture
def run_env(tmp_path: Path) -> dict[str, str]:
    """An environment that finds nothing of the repository: no config file, no
    PYTHONPATH, a working directory (HOME) of its own."""
    home = tmp_path / "home"
    home.mkdir()
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("JOBSTREAM_") and k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env.update(HOME=str(home), JOBSTREAM_CONFIG="/dev/null",
               JOBSTREAM_STACK__CACHE_DIR=str(tmp_path / "cache"))
    return env


def test_wheel_holds_every_package_data_file(source: Path, wheel: Path) -> None:
    names = set(zipfile.ZipFile(wheel).namelist())
    # the tree the wheel came from: the checkout may hold files not committed yet
    pipeline = source / "pipeline"
    expected = {f"pipeline/{p.relative_to(pipeline).as_posix()}" for pattern in (
        "_schemas/*.avsc", "_schemas/history/*.avsc", "_schemas/elasticsearch/*.json",
        "edges/hooks/*", "stack/assets/*", "deploy/systemd/*") for p in pipeline.glob(pattern)}
    assert {f"pipeline/deploy/systemd/{n}" for n in UNITS} <= expected
    assert expected - names == set()


def test_installed_command_runs_and_finds_its_data(venv: Path, run_env: dict[str, str],
                                                   tmp_path: Path) -> None:
    exe = venv / "bin" / "jobstream"
    assert "install-units" in _run(exe, "--help", env=run_env).stdout
    # it is the venv's package that runs, not the repository's
    where = _run(venv / "bin" / "python", "-c", "import pipeline; print(pipeline.__file__)",
                 env=run_env).stdout
    assert where.startswith(str(venv))

    units = _run(exe, "install-units", "--dest", tmp_path / "units", "--dry-run",
                 env=run_env).stdout
    for name in UNITS:
        assert f"# {tmp_path / 'units' / name}\n" in units
    assert f"ExecStart={exe} worker\n" in units
    assert not (tmp_path / "units").exists()

    hook = tmp_path / "hook"
    _run(exe, "edge", "install-hook", hook, env={
        **run_env, "JOBSTREAM_EDGE__SPOOL_DIR": str(tmp_path / "spool")})
    assert hook.read_text().startswith("#!") and os.access(hook, os.X_OK)


@pytest.fixture
def shared_kafka_home(base_config: Config) -> Path:
    """The broker the shared stack fetched (fetched now if it has not been)."""
    shared = service(base_config, "kafka")
    if not shared.installed():
        try:
            ensure_up(base_config, services=["kafka"])
        except ServiceError as exc:
            unavailable(f"Kafka unavailable: {exc}", f"Kafka must run under CI, but: {exc}")
    return shared.home  # type: ignore[attr-defined,no-any-return]


@pytest.fixture
def kafka_env(run_env: dict[str, str], shared_kafka_home: Path, venv: Path
              ) -> Iterator[dict[str, str]]:
    """``run_env`` for a Kafka of this test on free ports; stopped at the end by the
    wheel's ``stack down`` (the test's own run directory: nothing else is stopped)."""
    port = free_port()
    env = {**run_env, "JOBSTREAM_STACK__KAFKA_PORT": str(port),
           "JOBSTREAM_STACK__KAFKA_CONTROLLER_PORT": str(free_port()),
           "JOBSTREAM_KAFKA__BOOTSTRAP": f"127.0.0.1:{port}",
           "JOBSTREAM_CLUSTER": "wheel", "JOBSTREAM_TOPICS__RAW": "hpc.jobs.raw.wheel"}
    cache = Path(env["JOBSTREAM_STACK__CACHE_DIR"])
    cache.mkdir()
    (cache / shared_kafka_home.name).symlink_to(shared_kafka_home)
    try:
        yield env
    finally:
        _run(venv / "bin" / "jobstream", "stack", "down", "kafka", env=env, check=False)


def test_installed_stack_runs_kafka_and_publishes(venv: Path, kafka_env: dict[str, str],
                                                  tmp_path: Path) -> None:
    exe = venv / "bin" / "jobstream"
    started = time.monotonic()
    up = _run(exe, "stack", "up", "kafka", env=kafka_env, timeout=300)
    assert "kafka started" in up.stdout
    # status exits 69 while Elasticsearch is not up (not started here); Kafka is ready
    status = _run(exe, "stack", "status", env=kafka_env, check=False)
    kafka_row = next(ln for ln in status.stdout.splitlines() if ln.split()[:1] == ["kafka"])
    assert kafka_row.split()[-1] == "ready"
    assert f":{kafka_env['JOBSTREAM_STACK__KAFKA_PORT']}" in kafka_row

    # publishing encodes with the wheel's Avro schemas
    record = REPO / "tests" / "data" / "slurm" / "jobcomp_25.05_kafka_finish.json"
    _run(exe, "publish", "--format", "slurm-jobcomp", "--no-progress", record,
         env=kafka_env, timeout=180)
    consumer = Consumer({"bootstrap.servers": kafka_env["JOBSTREAM_KAFKA__BOOTSTRAP"],
                         "group.id": "wheel-check", "auto.offset.reset": "earliest"})
    consumer.subscribe([kafka_env["JOBSTREAM_TOPICS__RAW"]])
    try:
        msg = None
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and (msg is None or msg.error()):
            msg = consumer.poll(1.0)
    finally:
        consumer.close()
    assert msg is not None and not msg.error()
    raw = raw_from_avro(AvroCodec("RawRecord").decode(msg.value()))
    assert raw.cluster == "wheel" and raw.payload == record.read_bytes().strip()

    down = _run(exe, "stack", "down", "kafka", env=kafka_env)
    assert "kafka" in down.stdout
    print(f"wheel's Kafka up, publish, down: {time.monotonic() - started:.0f} s")
