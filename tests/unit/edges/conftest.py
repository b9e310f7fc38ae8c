"""Edge runtimes whose spool is real and whose Kafka is unreachable: what the edges spool
can be read back, and nothing leaves the spool (the drainer is not started)."""

from __future__ import annotations

import socket
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from pipeline.codecs.codec import AvroCodec, raw_from_avro
from pipeline.core.model import RawRecord
from pipeline.edges.base import EdgeRuntime
from pipeline.edges.spool import Spool
from pipeline.runtime.config import Config


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def edge_cfg(tmp_path: Path) -> Config:
    return Config().replace(
        cluster="testcluster",
        kafka={"bootstrap": f"127.0.0.1:{closed_port()}"},
        edge={"spool_dir": str(tmp_path / "spool"),
              "slurm": {"receiver_port": 0, "poller": False, "nodes": False,
                        "hook_scan_s": 0.2}},
    )


@pytest.fixture
def runtime(edge_cfg: Config) -> Iterator[EdgeRuntime]:
    rt = EdgeRuntime(edge_cfg, "test")
    yield rt
    if not rt.stopping.is_set():
        rt.spool.close()


def spooled(spool: Spool) -> list[tuple[bytes | None, RawRecord]]:
    """(Kafka key, decoded RawRecord) of every record in the spool, in order."""
    codec = AvroCodec("RawRecord")
    return [(r.key, raw_from_avro(codec.decode(r.value))) for r in spool.read(0, 100_000)]


@pytest.fixture
def read_spool():  # noqa: ANN201 - returns the helper
    return spooled


@pytest.fixture
def fake_flux(monkeypatch: pytest.MonkeyPatch, flux_responses: Path) -> Iterator[object]:
    """The stand-in of the flux bindings (fakeflux/), imported afresh, answering with the
    file of ``flux_responses`` (a fixture of the test's module)."""
    monkeypatch.syspath_prepend(str(Path(__file__).parent / "fakeflux"))
    monkeypatch.setenv("FAKE_FLUX_RESPONSES", str(flux_responses))
    for name in ("flux", "flux.constants"):
        sys.modules.pop(name, None)
    import flux  # type: ignore[import-not-found]

    yield flux
    for name in ("flux", "flux.constants"):
        sys.modules.pop(name, None)
