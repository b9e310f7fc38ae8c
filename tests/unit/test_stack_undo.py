"""``ensure_up`` that fails part-way stops what it had started, and says so.

The stack's life cycle (``pipeline.tooling.stack.service.Service``) runs here on stand-in
services: a sleeping Python process that is ready once it runs, and one whose port is
taken, so the second start fails after the first succeeded, as when Elasticsearch's port
is taken after Kafka came up. No Kafka or Elasticsearch is started, nor replaced by a mock:
the start, the failure, the pid files and the stop are the stack's own code.
"""

from __future__ import annotations

import socket
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from pipeline.runtime.config import Config
from pipeline.runtime.errors import ServiceError
from pipeline.tooling import stack
from pipeline.tooling.stack.service import Service
from pipeline.tooling.stack.ui import Reporter


class Sleeper(Service):
    """A service that is a sleeping Python process, ready as soon as it runs."""

    name = "sleeper"
    title = "Sleeper"
    ready_timeout = 10.0
    stop_timeout = 5.0
    version = "1"
    address = "nowhere"
    #: the port it claims (0: none)
    port = 0

    @property
    def ports(self) -> tuple[int, ...]:
        return (self.port,) if self.port else ()

    @property
    def marker(self) -> str:
        return f"jobstream-test-service={self.run_dir}"

    def installed(self) -> bool:
        return True

    def fetch(self, progress: Callable[[str], None]) -> None:
        raise AssertionError("never fetched: installed() is True")

    def prepare(self) -> None:
        self.run_dir.mkdir(parents=True, exist_ok=True)

    def launch(self) -> subprocess.Popen[bytes]:
        proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)",
                                 self.marker], start_new_session=True)
        self.pidfile.write_text(f"{proc.pid}\n")
        return proc

    def probe(self, timeout: float) -> bool:
        return self.process() is not None

    def log_files(self) -> list[Path]:
        return []


class Blocked(Sleeper):
    """Started after Sleeper; its port is taken (set per test)."""

    name = "blocked"
    title = "Blocked"


@pytest.fixture
def cfg(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Config]:
    """The stack made of Sleeper then Blocked, whose port another process holds."""
    monkeypatch.setattr(stack, "SERVICES", ("sleeper", "blocked"))
    monkeypatch.setitem(stack._CLASSES, "sleeper", Sleeper)
    monkeypatch.setitem(stack._CLASSES, "blocked", Blocked)
    config = Config().replace(stack={"cache_dir": str(tmp_path / "cache")})
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        monkeypatch.setattr(Blocked, "port", holder.getsockname()[1])
        yield config
    sleeper = Sleeper(config, [])
    sleeper.stop(Reporter())  # whatever a failing test left running


def test_a_failed_start_stops_the_services_this_call_started(cfg: Config) -> None:
    with pytest.raises(ServiceError) as err:
        stack.ensure_up(cfg)
    message = str(err.value)
    assert message.startswith(f"Blocked cannot start: port {Blocked.port} is taken")
    assert message.endswith("; stopped again Sleeper, which this call had started")
    assert Sleeper(cfg, []).process() is None


def test_a_failed_start_leaves_a_service_that_was_up_before_running(cfg: Config) -> None:
    sleeper = Sleeper(cfg, [])
    assert sleeper.start(Reporter())
    pid = sleeper.process().pid  # type: ignore[union-attr]
    with pytest.raises(ServiceError) as err:
        stack.ensure_up(cfg)
    assert "stopped" not in str(err.value)
    running = sleeper.process()
    assert running is not None and running.pid == pid
