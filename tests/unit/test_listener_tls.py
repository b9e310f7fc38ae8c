"""TLS on the listeners that take a bearer token (the metrics ports, the worker's web
endpoint): over https they answer with the token and refuse without it, plain HTTP to
their port gets nothing, and a bind beyond loopback without TLS refuses to start unless
the operator says a proxy terminates TLS (pipeline.runtime.netguard).

The servers run in-process on 127.0.0.1: the metrics server of pipeline.runtime.metrics,
and Faust's aiohttp web driver alone (no worker, no Kafka), which serves the settings of
agents.web the way ``jobstream worker`` does.
"""

from __future__ import annotations

import asyncio
import datetime
import ipaddress
import ssl
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import faust
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from agents.web import WebAccess, faust_web_settings
from pipeline.runtime import metrics
from pipeline.runtime.children import free_port
from pipeline.runtime.config import Config, load_config
from pipeline.runtime.errors import ConfigError
from pipeline.runtime.netguard import require_tls, server_tls

TOKEN = "a-token-of-32-characters-0123456"


@dataclass(frozen=True)
class Certs:
    cert: Path
    key: Path


@pytest.fixture
def certs(tmp_path: Path) -> Certs:
    """A self-signed server certificate for 127.0.0.1 / localhost; clients trust it as
    their CA."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName([
                x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
                critical=False)
            .sign(key, hashes.SHA256()))
    out = Certs(cert=tmp_path / "server.crt", key=tmp_path / "server.key")
    out.cert.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    out.key.write_bytes(key.private_bytes(serialization.Encoding.PEM,
                                          serialization.PrivateFormat.PKCS8,
                                          serialization.NoEncryption()))
    out.key.chmod(0o600)
    return out


@pytest.fixture
def token_file(tmp_path: Path) -> Path:
    path = tmp_path / "token"
    path.write_text(TOKEN + "\n")
    path.chmod(0o600)
    return path


def trusting(certs: Certs) -> ssl.SSLContext:
    return ssl.create_default_context(cafile=str(certs.cert))


# -- the metrics ports ----------------------------------------------------------------


@pytest.fixture
def metrics_port(certs: Certs, token_file: Path) -> Iterator[int]:
    port = free_port()
    cfg = Config().replace(metrics={"sink_port": port, "token_file": str(token_file),
                                    "tls_cert": str(certs.cert), "tls_key": str(certs.key)})
    server = metrics.start(cfg, "sink")
    assert server is not None
    yield port
    server.shutdown()
    server.server_close()


def scrape(url: str, token: str | None, context: ssl.SSLContext | None = None) -> str:
    req = urllib.request.Request(url)
    if token is not None:
        req.add_header("Authorization", f"Bearer {token}")
    with urllib.request.urlopen(req, timeout=10, context=context) as resp:
        return resp.read().decode()


def test_metrics_over_tls_answer_https_with_the_token_and_refuse_without(
        metrics_port: int, certs: Certs) -> None:
    url = f"https://127.0.0.1:{metrics_port}/metrics"
    assert "jobstream_" in scrape(url, TOKEN, trusting(certs))
    for wrong in (None, "not-the-token-0123456789"):
        with pytest.raises(urllib.error.HTTPError) as exc:
            scrape(url, wrong, trusting(certs))
        assert exc.value.code == 401


def test_plain_http_to_the_metrics_tls_port_gets_no_answer(metrics_port: int) -> None:
    with pytest.raises(OSError) as exc:
        scrape(f"http://127.0.0.1:{metrics_port}/metrics", TOKEN)
    assert not isinstance(exc.value, urllib.error.HTTPError)  # no HTTP answer at all


def test_metrics_beyond_loopback_need_tls_unless_a_proxy_terminates_it(
        tmp_path: Path, certs: Certs, token_file: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def no_listening(*args: object, **kwargs: object) -> None:
        raise AssertionError("the guard let a port beyond loopback listen without TLS")

    monkeypatch.setattr(metrics, "make_server", no_listening)  # nothing binds 0.0.0.0 here
    toml = tmp_path / "jobstream.toml"
    toml.write_text("")
    env = {"JOBSTREAM_METRICS__BIND": "0.0.0.0", "JOBSTREAM_METRICS__SINK_PORT": "9465",  # noqa: S104
           "JOBSTREAM_METRICS__TOKEN_FILE": str(token_file)}
    with pytest.raises(ConfigError, match="metrics.bind.*metrics.tls_cert.*metrics.tls_key"):
        metrics.start(load_config(str(toml), env), "sink")
    # the proxy statement, from the environment like any key, lets the plain port be
    stated = load_config(str(toml), {**env, "JOBSTREAM_METRICS__TLS_TERMINATED_BY_PROXY": "true"})
    assert stated.metrics.tls_terminated_by_proxy is True
    # (make_server is reached, so the guard let the port be: the stub says so)
    with pytest.raises(AssertionError, match="let a port"):
        metrics.start(stated, "sink")
    tls = server_tls(str(certs.cert), str(certs.key), "metrics.tls")
    assert tls is not None
    require_tls("0.0.0.0", tls, terminated_by_proxy=False,  # noqa: S104
                bind_key="metrics.bind", prefix="metrics.tls")


def test_tls_settings_are_checked_before_anything_listens(certs: Certs) -> None:
    with pytest.raises(ConfigError, match="metrics.tls_cert and metrics.tls_key go together"):
        server_tls(str(certs.cert), "", "metrics.tls")
    certs.key.chmod(0o644)
    with pytest.raises(ConfigError, match="metrics.tls_key.*chmod 600"):
        server_tls(str(certs.cert), str(certs.key), "metrics.tls")
    certs.key.chmod(0o600)
    with pytest.raises(ConfigError, match="cannot load"):
        server_tls(str(certs.key), str(certs.key), "metrics.tls")  # a key is no certificate


# -- the worker's web endpoint --------------------------------------------------------


def test_worker_web_over_tls_answers_https_with_the_token_and_refuses_without(
        certs: Certs, token_file: Path) -> None:
    port = free_port()
    cfg = Config().replace(worker={
        "web_port": port, "web_token_file": str(token_file), "web_tls_cert": str(certs.cert),
        "web_tls_key": str(certs.key), "web_tls_ca": str(certs.cert)})
    access = WebAccess.from_config(cfg)
    settings = faust_web_settings(cfg, access)
    assert settings["canonical_url"] == f"https://127.0.0.1:{port}"
    app = faust.App("jobstream-test-web-tls", autodiscover=False, **settings)

    @app.page("/ping")
    async def ping(web: Any, request: Any) -> Any:
        return web.json({"pong": True})

    async def run() -> None:
        await app.web.start_server()
        try:
            async with aiohttp.ClientSession() as session:
                url = f"https://127.0.0.1:{port}/ping"
                # what a routed request from another worker carries and checks
                async with session.get(url, headers=access.headers(),
                                       ssl=access.peer_ssl) as response:
                    assert response.status == 200
                    assert await response.json() == {"pong": True}
                async with session.get(url, ssl=access.peer_ssl) as response:
                    assert response.status == 401
                with pytest.raises(aiohttp.ClientError):
                    async with session.get(f"http://127.0.0.1:{port}/ping",
                                           headers=access.headers()) as response:
                        pass
        finally:
            await app.web.stop_server()

    asyncio.run(run())


def test_worker_web_beyond_loopback_needs_tls_unless_a_proxy_terminates_it(
        tmp_path: Path, certs: Certs, token_file: Path) -> None:
    toml = tmp_path / "jobstream.toml"
    toml.write_text("")
    env = {"JOBSTREAM_WORKER__WEB_BIND": "0.0.0.0",  # noqa: S104
           "JOBSTREAM_WORKER__WEB_TOKEN_FILE": str(token_file)}
    with pytest.raises(ConfigError, match="worker.web_bind.*worker.web_tls_cert"):
        WebAccess.from_config(load_config(str(toml), env))
    with_tls = load_config(str(toml), {**env, "JOBSTREAM_WORKER__WEB_TLS_CERT": str(certs.cert),
                                       "JOBSTREAM_WORKER__WEB_TLS_KEY": str(certs.key)})
    assert WebAccess.from_config(with_tls).tls is not None
    proxied = load_config(str(toml), {**env,
                                      "JOBSTREAM_WORKER__WEB_TLS_TERMINATED_BY_PROXY": "yes"})
    access = WebAccess.from_config(proxied)
    assert access.tls is None
    assert faust_web_settings(proxied, access)["canonical_url"].startswith("http://")
