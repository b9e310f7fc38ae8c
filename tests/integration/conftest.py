"""Fixtures of the integration tests that run workers as processes."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from topic_reads import close_clients
from workers import WorkerProcess

from pipeline.runtime.config import Config


@pytest.fixture(scope="session", autouse=True)
def _shared_clients_closed() -> Iterator[None]:
    yield
    close_clients()


@pytest.fixture
def spawn(tmp_path: Path) -> Iterator[Callable[..., WorkerProcess]]:
    """``spawn(cfg, **options)`` -> a WorkerProcess (not started) killed after the test."""
    made: list[WorkerProcess] = []

    def make(cfg: Config, **options: Any) -> WorkerProcess:
        made.append(WorkerProcess(cfg, tmp_path, **options))
        return made[-1]

    yield make
    for w in made:
        w.kill()
