"""The stack's decisions that need no running service: JDK choice, versions, errors."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest
from click.testing import CliRunner

from pipeline.cli import main
from pipeline.runtime.config import Config
from pipeline.runtime.errors import ServiceError
from pipeline.tooling.stack import status
from pipeline.tooling.stack.elasticsearch import ES8_DEFAULT, ES9_DEFAULT, ElasticsearchService
from pipeline.tooling.stack.java import Jdk, find_jdks, inspect_jdk, pick_jdk, require_mvn
from pipeline.tooling.stack.kafka import KafkaService
from pipeline.tooling.stack.procs import owned_process, port_taken, tail, wait_gone
from pipeline.tooling.stack.ui import Reporter


def fake_jdk(root: Path, name: str, version: str) -> Path:
    home = root / name
    (home / "bin").mkdir(parents=True)
    (home / "bin" / "java").write_text("#!/bin/sh\n")
    (home / "release").write_text(f'IMPLEMENTOR="x"\nJAVA_VERSION="{version}"\n')
    return home


@pytest.fixture
def listening() -> Iterator[int]:
    """A port on loopback held by this test."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield sock.getsockname()[1]


def cfg_in(tmp_path: Path, **stack: object) -> Config:
    return Config().replace(stack={"cache_dir": str(tmp_path / "cache"), **stack})


@pytest.mark.parametrize("version, major", [("17.0.15", 17), ("25", 25), ("1.8.0_392", 8),
                                            ("21.0.8+9", 21)])
def test_inspect_jdk_reads_the_release_file(tmp_path: Path, version: str, major: int) -> None:
    home = fake_jdk(tmp_path, "jdk", version)
    assert inspect_jdk(home) == Jdk(major, home.resolve())


def test_inspect_jdk_rejects_a_directory_without_java(tmp_path: Path) -> None:
    (tmp_path / "jre").mkdir()
    assert inspect_jdk(tmp_path / "jre") is None


def test_find_jdks_sorts_and_deduplicates(tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                                          ) -> None:
    monkeypatch.setenv("PATH", str(tmp_path / "nothing"))
    new = fake_jdk(tmp_path, "temurin-25", "25.0.1")
    old = fake_jdk(tmp_path, "openjdk-17", "17.0.15")
    (tmp_path / "java-17-link").symlink_to(old)
    assert find_jdks(tmp_path) == [Jdk(17, old.resolve()), Jdk(25, new.resolve())]


def test_pick_jdk_in_range_and_missing() -> None:
    jdks = [Jdk(17, Path("/j17")), Jdk(21, Path("/j21")), Jdk(25, Path("/j25"))]
    assert pick_jdk(jdks, 17, newest=False, purpose="Kafka").major == 17
    assert pick_jdk(jdks, 17, 23, newest=True, purpose="ES 8").major == 21
    with pytest.raises(ServiceError, match=r"Kafka needs Java 17\+; JDKs found: none"):
        pick_jdk([], 17, newest=False, purpose="Kafka")


def test_missing_mvn_is_a_service_error(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(ServiceError, match="mvn not found"):
        require_mvn()


@pytest.mark.parametrize("majors, wanted, expect", [
    ([17, 25], "", (ES9_DEFAULT, 25)),
    ([17, 21, 25], "", (ES9_DEFAULT, 25)),
    ([17], "", (ES8_DEFAULT, 17)),
    ([17, 25], "8.19.5", ("8.19.5", 17)),
])
def test_elasticsearch_version_follows_the_jdks(tmp_path: Path, majors: list[int], wanted: str,
                                                expect: tuple[str, int]) -> None:
    jdks = [Jdk(m, Path(f"/j{m}")) for m in majors]
    svc = ElasticsearchService(cfg_in(tmp_path, elasticsearch_version=wanted), jdks)
    version, jdk = svc.plan
    assert (version, jdk.major) == expect


@pytest.mark.parametrize("majors, wanted, message", [
    ([25], "8.19.21", r"Elasticsearch 8\.19\.21 needs Java 17 to 23"),
    ([17], "9.5.3", r"needs Java 21\+"),
    ([], "", "JDKs found: none"),
    ([25], "7.17.29", "only 8.x and 9.x"),
])
def test_elasticsearch_without_a_fitting_jdk(tmp_path: Path, majors: list[int], wanted: str,
                                             message: str) -> None:
    jdks = [Jdk(m, Path(f"/j{m}")) for m in majors]
    svc = ElasticsearchService(cfg_in(tmp_path, elasticsearch_version=wanted), jdks)
    with pytest.raises(ServiceError, match=message):
        _ = svc.plan


def test_configured_java_home_must_be_a_jdk(tmp_path: Path) -> None:
    svc = ElasticsearchService(cfg_in(tmp_path, java_home=str(tmp_path)), [])
    with pytest.raises(ServiceError, match="is not a JDK"):
        _ = svc.plan


def test_port_taken(listening: int) -> None:
    assert port_taken(listening)


# the main thread ends (as a JVM's leader can before its other threads have finished
# exiting): the process is a zombie, yet a thread still holds the port
_LEADER_GONE_FIRST = """
import ctypes, socket, sys, threading, time
def hold():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0)); s.listen()
        print(s.getsockname()[1], flush=True)
        time.sleep(1.5)
threading.Thread(target=hold).start()
time.sleep(0.3)
ctypes.CDLL(None).pthread_exit(None)
"""


def test_a_zombie_leader_is_not_gone_while_its_threads_hold_a_port(tmp_path: Path) -> None:
    child = subprocess.Popen([sys.executable, "-c", _LEADER_GONE_FIRST, "_LEADER_GONE_FIRST"],
                             stdout=subprocess.PIPE)
    pidfile = tmp_path / "child.pid"
    pidfile.write_text(f"{child.pid}\n")
    try:
        assert child.stdout is not None
        port = int(child.stdout.readline())
        proc = psutil.Process(child.pid)
        assert not wait_gone(proc, 0.5)
        assert proc.status() == psutil.STATUS_ZOMBIE
        assert port_taken(port)
        # still ours by its pid file: a stop that finds it waits for it
        assert owned_process(pidfile, "_LEADER_GONE_FIRST") == proc
        assert wait_gone(proc, 10.0)
        assert not port_taken(port)
        assert owned_process(pidfile, "_LEADER_GONE_FIRST") is None
    finally:
        child.kill()
        child.communicate()  # waits, and closes the pipe


def test_start_refuses_a_taken_port_before_fetching(tmp_path: Path, listening: int) -> None:
    cfg = cfg_in(tmp_path, kafka_port=listening)
    svc = KafkaService(cfg, [Jdk(17, Path("/j17"))])
    with pytest.raises(ServiceError, match=f"port {listening} is taken by another process"):
        svc.start(Reporter())
    assert not (tmp_path / "cache" / f"kafka-{cfg.stack.kafka_version}").exists()


def test_stack_up_reports_a_taken_port_in_one_line(tmp_path: Path, listening: int) -> None:
    env = {"JOBSTREAM_STACK__CACHE_DIR": str(tmp_path / "cache"),
           "JOBSTREAM_STACK__KAFKA_PORT": str(listening)}
    result = CliRunner().invoke(main, ["stack", "up", "kafka"], env=env)
    assert result.exit_code == ServiceError.exit_code
    assert f"jobstream: error: Kafka cannot start: port {listening} is taken" in result.output
    assert "Traceback" not in result.output


def test_status_of_a_stack_never_started(tmp_path: Path) -> None:
    states = status(cfg_in(tmp_path))
    assert [(s.name, s.running, s.ready, s.pid) for s in states] == [
        ("kafka", False, False, None), ("elasticsearch", False, False, None)]


def test_status_ignores_a_pid_file_naming_a_stranger(tmp_path: Path) -> None:
    # pid 1 is alive but is not our broker: it must not count as running (nor be stopped)
    cfg = cfg_in(tmp_path)
    run = tmp_path / "cache" / "run" / "kafka"
    run.mkdir(parents=True)
    (run / "kafka.pid").write_text("1\n")
    assert KafkaService(cfg, []).process() is None


def test_tail_shows_the_last_lines(tmp_path: Path) -> None:
    log = tmp_path / "server.out"
    log.write_text("".join(f"line {n}\n" for n in range(100)))
    text = tail([log, tmp_path / "absent.log"], lines=3)
    assert text.splitlines() == [f"--- {log} (last 3 lines)", "line 97", "line 98", "line 99"]


def test_tail_shows_the_first_error_above_the_last_lines(tmp_path: Path) -> None:
    # a node that fails at start logs its cause once, then pages of shutdown
    log = tmp_path / "server.out"
    lines = [f"INFO line {n}" for n in range(50)]
    lines[10] = "ERROR [SharedServer id=1] Got exception while starting SharedServer"
    lines[11] = "java.net.BindException: Address already in use"
    log.write_text("\n".join(lines) + "\n")
    text = tail([log], lines=3).splitlines()
    assert text[:3] == [f"--- {log} (its first error, line 11)", lines[10], lines[11]]
    assert text[-4:] == [f"--- {log} (last 3 lines)", *lines[-3:]]


def test_tail_skips_logs_of_earlier_runs(tmp_path: Path) -> None:
    old, new = tmp_path / "old.log", tmp_path / "new.log"
    old.write_text("from the last run\n")
    new.write_text("from this run\n")
    os.utime(old, (1_000_000, 1_000_000))
    assert tail([old, new], since=2_000_000).splitlines() == [
        f"--- {new} (last 1 lines)", "from this run"]
