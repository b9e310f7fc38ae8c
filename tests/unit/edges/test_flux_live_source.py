"""The live journal source against a stand-in of the flux bindings (fakeflux/): the RPC it
sends, exact response bytes, end of stream, and the clear errors."""

from __future__ import annotations

import errno
import threading
from pathlib import Path

import pytest
from datafiles import vector

from pipeline.edges.flux import FluxJournalSource, JournalDisconnected
from pipeline.runtime.errors import ServiceError

LIVE = vector("flux", "real-0.88-journal-live.jsonl")


@pytest.fixture
def flux_responses() -> Path:
    """What the fake flux bindings answer (the conftest's ``fake_flux``)."""
    return LIVE


def test_streams_the_exact_response_bytes_then_ends(fake_flux) -> None:  # noqa: ANN001
    got = list(FluxJournalSource("local:///run/flux/local").stream(threading.Event()))
    assert got == [ln for ln in LIVE.read_bytes().split(b"\n") if ln.strip()]
    [(topic, payload, _, flags)] = fake_flux.requests
    assert topic == "job-manager.events-journal" and payload == {"full": True}
    assert flags == fake_flux.constants.FLUX_RPC_STREAMING


def test_not_the_instance_owner_is_a_clear_error(fake_flux, monkeypatch) -> None:  # noqa: ANN001
    monkeypatch.setenv("FAKE_FLUX_OWNER", "12345")
    with pytest.raises(ServiceError, match="instance owner .*uid 12345"):
        next(FluxJournalSource().stream(threading.Event()))


def test_eperm_from_the_journal_is_the_same_clear_error(fake_flux, monkeypatch) -> None:  # noqa: ANN001
    monkeypatch.setenv("FAKE_FLUX_RESPONSES", "/dev/null")
    monkeypatch.setenv("FAKE_FLUX_ERRNO", str(errno.EPERM))
    with pytest.raises(ServiceError, match="instance owner"):
        list(FluxJournalSource().stream(threading.Event()))


def test_broker_unreachable_or_connection_lost_means_reconnect(fake_flux, monkeypatch
                                                                ) -> None:  # noqa: ANN001
    monkeypatch.setenv("FAKE_FLUX_DOWN", "1")
    with pytest.raises(JournalDisconnected, match="cannot connect"):
        next(FluxJournalSource().stream(threading.Event()))
    monkeypatch.delenv("FAKE_FLUX_DOWN")
    monkeypatch.setenv("FAKE_FLUX_ERRNO", str(errno.ECONNRESET))
    with pytest.raises(JournalDisconnected, match="journal RPC failed"):
        list(FluxJournalSource().stream(threading.Event()))
