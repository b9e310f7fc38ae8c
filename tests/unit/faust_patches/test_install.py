"""agents.faust_patches.install: every patch applied, once however often it is called, and
only on the faust-streaming (and aiokafka) pyproject.toml pins."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import faust
import pytest
from faust.transport.consumer import Consumer
from faust.transport.drivers.aiokafka import AIOKafkaConsumerThread

from agents import faust_patches
from agents.faust_patches import delivery, fetch, gaps, version
from pipeline.runtime.errors import ConfigError, JobstreamError

PYPROJECT = Path(__file__).resolve().parents[3] / "pyproject.toml"


def _app(name: str) -> faust.App:
    return faust.App(name, autodiscover=False)


def _install(app: faust.App) -> None:
    faust_patches.install(app, fetch_min_bytes=100, fetch_max_wait_ms=20)


def test_the_pinned_versions_are_pyprojects() -> None:
    text = PYPROJECT.read_text()
    for distribution, pinned in version.PINNED.items():
        assert re.search(rf'"{re.escape(distribution)}=={re.escape(pinned)}"', text), distribution
        assert version.installed(distribution) == pinned


@pytest.mark.parametrize("distribution", sorted(version.PINNED))
def test_another_version_is_refused_before_anything_is_patched(
        monkeypatch: pytest.MonkeyPatch, distribution: str) -> None:
    found = {**version.PINNED, distribution: "9.9.9"}
    monkeypatch.setattr(version, "installed", lambda name: found[name])
    app = _app(f"install-refused-{distribution}")
    with pytest.raises(ConfigError) as refused:
        _install(app)
    assert isinstance(refused.value, JobstreamError)
    message = str(refused.value)
    assert f"{distribution} 9.9.9 is installed" in message
    assert f"{distribution} {version.PINNED[distribution]}" in message
    assert not hasattr(app, "jobstream_fetch")
    assert getattr(app.topics, "jobstream_handlers", None) is None


def test_a_missing_distribution_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(version, "installed", lambda name: None)
    with pytest.raises(ConfigError, match="faust-streaming is not installed"):
        _install(_app("install-missing"))


def test_install_applies_every_patch_once() -> None:
    app = _app("install-applied")
    _install(app)
    handlers: Any = app.topics.jobstream_handlers
    build = app.topics._build_handler
    _install(app)
    assert Consumer._add_gap is gaps._refuse_gap
    assert Consumer._new_offset is gaps._new_offset
    assert Consumer.perform_seek is gaps._perform_seek
    assert Consumer.wait_first is delivery._wait_first
    assert AIOKafkaConsumerThread._create_worker_consumer is fetch._create_worker_consumer
    assert app.jobstream_fetch == (100, 20)
    assert app.topics.jobstream_handlers is handlers and app.topics._build_handler is build
    # the originals the patches wrap are Faust's, not a patch of a patch
    assert gaps.FAUST_NEW_OFFSET is not gaps._new_offset
    assert fetch.FAUST_CREATE_WORKER_CONSUMER is not fetch._create_worker_consumer
