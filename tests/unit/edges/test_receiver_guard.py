"""Who may post to the jobcomp receiver: loopback by default; beyond it an allow-list of
source networks and/or HTTP basic credentials, sent as Slurm's jobcomp/elasticsearch sends
them (libcurl, from the ``user:password@`` of ``JobCompLoc``). A refused request gets
401/403, never reaches the spool (the way to the raw topic), and its source is logged once.
"""

from __future__ import annotations

import http.client
import logging
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from pipeline.edges.slurm import SlurmEdge
from pipeline.runtime.config import Config
from pipeline.runtime.errors import ConfigError

RECORD = b'{"jobid":2,"username":"alice","state":"COMPLETED"}'
PASSWORD = "receiver-secret-0123456789"


def start(cfg: Config, tmp_path: Path, **slurm: object) -> SlurmEdge:
    cfg = cfg.replace(edge={"slurm": {"hooks": False, **slurm}})
    return SlurmEdge(cfg).start()


@pytest.fixture
def edges() -> Iterator[list[SlurmEdge]]:
    made: list[SlurmEdge] = []
    yield made
    for e in made:
        e.stop(timeout=0)


def post(edge: SlurmEdge, body: bytes = RECORD,
         headers: dict[str, str] | None = None, method: str = "POST") -> tuple[int, dict[str, str]]:
    assert edge.receiver is not None
    conn = http.client.HTTPConnection("127.0.0.1", edge.receiver.port, timeout=10)
    try:
        conn.request(method, "/slurm/_doc", body=body if method != "HEAD" else None,
                     headers=headers or {})
        resp = conn.getresponse()
        resp.read()
        return resp.status, dict(resp.getheaders())
    finally:
        conn.close()


def curl(url: str, body: bytes) -> str:
    """POST as jobcomp/elasticsearch does: libcurl, the URL as JobCompLoc gives it."""
    out = subprocess.run(
        ["curl", "-sS", "-o", "/dev/null", "-w", "%{http_code}", "-X", "POST",
         "-H", "Content-Type: application/json", "--data-binary", "@-", url],
        input=body, capture_output=True, timeout=30, check=True)
    return out.stdout.decode()


def test_beyond_loopback_without_a_guard_is_refused_at_start(edge_cfg: Config) -> None:
    cfg = edge_cfg.replace(edge={"slurm": {"receiver_host": "0.0.0.0", "hooks": False}})
    with pytest.raises(ConfigError, match="receiver_allow.*receiver_user"):
        SlurmEdge(cfg)
    half = cfg.replace(edge={"slurm": {"receiver_user": "slurm"}})
    with pytest.raises(ConfigError, match="go together"):
        SlurmEdge(half)
    bad = cfg.replace(edge={"slurm": {"receiver_allow": "10.0.0.0/33"}})
    with pytest.raises(ConfigError, match="receiver_allow"):
        SlurmEdge(bad)


def test_basic_credentials_from_the_jobcomploc_url(edge_cfg: Config, tmp_path: Path,
                                                   edges: list[SlurmEdge], read_spool,
                                                   caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO)
    edge = start(edge_cfg, tmp_path, receiver_user="slurm", receiver_password=PASSWORD)
    edges.append(edge)
    assert edge.receiver is not None
    port = edge.receiver.port

    status, headers = post(edge)
    assert status == 401 and headers["WWW-Authenticate"].startswith("Basic")
    assert post(edge, method="HEAD")[0] == 401
    assert curl(f"http://slurm:wrong-password@127.0.0.1:{port}/slurm/_doc", RECORD) == "401"
    # a large body with Expect: 100-continue is refused before curl sends it
    assert curl(f"http://127.0.0.1:{port}/slurm/_doc", RECORD + b" " * 4096) == "401"
    assert edge.runtime.spool.depth() == 0

    assert curl(f"http://slurm:{PASSWORD}@127.0.0.1:{port}/slurm/_doc", RECORD) == "201"
    [(_, rec)] = read_spool(edge.runtime.spool)
    assert rec.payload == RECORD

    refused = [r for r in caplog.records if "refused a request from 127.0.0.1" in r.message]
    assert len(refused) == 1  # four refused requests, one line
    assert PASSWORD not in caplog.text


def test_allow_list_of_source_networks(edge_cfg: Config, tmp_path: Path,
                                       edges: list[SlurmEdge], read_spool,
                                       caplog: pytest.LogCaptureFixture) -> None:
    elsewhere = start(edge_cfg.replace(edge={"spool_dir": str(tmp_path / "other")}),
                      tmp_path, receiver_allow="10.255.0.0/16, 192.0.2.7")
    edges.append(elsewhere)
    for _ in range(3):
        assert post(elsewhere)[0] == 403
    assert post(elsewhere, method="HEAD")[0] == 403
    assert elsewhere.runtime.spool.depth() == 0
    assert len([r for r in caplog.records if "refused a request" in r.message]) == 1

    here = start(edge_cfg, tmp_path, receiver_allow="10.255.0.0/16,127.0.0.0/8")
    edges.append(here)
    assert post(here)[0] == 201
    assert [r.payload for _, r in read_spool(here.runtime.spool)] == [RECORD]


def test_both_guards_at_once(edge_cfg: Config, tmp_path: Path, edges: list[SlurmEdge]
                             ) -> None:
    edge = start(edge_cfg, tmp_path, receiver_allow="127.0.0.1", receiver_user="slurm",
                 receiver_password=PASSWORD)
    edges.append(edge)
    assert edge.receiver is not None
    assert post(edge)[0] == 401
    url = f"http://slurm:{PASSWORD}@127.0.0.1:{edge.receiver.port}/slurm/_doc"
    assert curl(url, RECORD) == "201"
