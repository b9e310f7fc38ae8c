"""The guards of jobstream's listeners (pipeline.runtime.netguard, agents.web.WebAccess) and the
secrets they read: what counts as loopback, owner-only secret files and directories,
bearer and basic credentials, allow-lists, one log line per refused source; and that
``config show`` names the token file but never shows a secret."""

from __future__ import annotations

import base64
import logging
from pathlib import Path

import pytest
from click.testing import CliRunner

from agents.web import WebAccess, advertised_host, faust_web_settings
from pipeline.cli import main
from pipeline.runtime.config import Config, Secret
from pipeline.runtime.errors import ConfigError, ServiceError
from pipeline.runtime.netguard import (
    AllowList,
    BasicAuth,
    RefusalLog,
    bearer_ok,
    ensure_private_dir,
    is_loopback,
    read_secret_file,
)

TOKEN = "a-token-of-32-characters-0123456"


@pytest.fixture
def token_file(tmp_path: Path) -> Path:
    path = tmp_path / "token"
    path.write_text(TOKEN + "\n")
    path.chmod(0o600)
    return path


@pytest.mark.parametrize(("host", "loopback"), [
    ("127.0.0.1", True), ("127.3.4.5", True), ("::1", True), ("[::1]", True),
    ("localhost", True), ("0.0.0.0", False), ("::", False), ("", False),
    ("10.1.2.3", False), ("gateway1", False)])
def test_is_loopback(host: str, loopback: bool) -> None:
    assert is_loopback(host) is loopback


def test_secret_file_must_be_owner_only_and_long_enough(token_file: Path) -> None:
    assert read_secret_file(str(token_file), "k").reveal() == TOKEN
    token_file.chmod(0o640)
    with pytest.raises(ConfigError, match=r"k: .* mode 0640.*chmod 600"):
        read_secret_file(str(token_file), "k")
    token_file.chmod(0o600)
    token_file.write_text("short")
    with pytest.raises(ConfigError, match="at least 16"):
        read_secret_file(str(token_file), "k")
    with pytest.raises(ConfigError, match="cannot read"):
        read_secret_file(str(token_file.with_name("missing")), "k")


def test_bearer_and_basic_credentials() -> None:
    token = Secret(TOKEN)
    assert bearer_ok(f"Bearer {TOKEN}", token) and bearer_ok(f"bearer  {TOKEN}", token)
    for header in (None, "", TOKEN, f"Basic {TOKEN}", f"Bearer {TOKEN}x", "Bearer "):
        assert not bearer_ok(header, token)
    basic = BasicAuth("slurm", Secret("pw-0123456789abcdef"))
    good = base64.b64encode(b"slurm:pw-0123456789abcdef").decode()
    assert basic.check(f"Basic {good}")
    for header in (None, f"Bearer {good}", "Basic !!!", "Basic " + base64.b64encode(
            b"slurm:other").decode()):
        assert not basic.check(header)


def test_allow_list() -> None:
    allow = AllowList(["10.1.0.0/16", " 192.0.2.7 ", "", "fd00::/8"], "k")
    assert allow.allows("10.1.200.3") and allow.allows("192.0.2.7")
    assert allow.allows("::ffff:10.1.0.9")  # an IPv4 client seen by a dual-stack socket
    assert allow.allows("fd00::1")
    assert not allow.allows("10.2.0.1") and not allow.allows("not-an-address")
    assert AllowList([""], "k").allows("203.0.113.9") and not AllowList([""], "k")
    with pytest.raises(ConfigError, match="k: 'x' is not"):
        AllowList(["x"], "k")


def test_refusals_are_logged_once_per_source(caplog: pytest.LogCaptureFixture) -> None:
    log = RefusalLog(logging.getLogger("t"), "thing", max_sources=2)
    for source in ("10.0.0.1", "10.0.0.1", "10.0.0.2", "10.0.0.1", "10.0.0.3", "10.0.0.4"):
        log.refused_from(source, "why")
    assert [r.message.split(" (")[0] for r in caplog.records] == [
        "thing: refused a request from 10.0.0.1", "thing: refused a request from 10.0.0.2"]
    assert log.refused == {"10.0.0.1": 3, "10.0.0.2": 1} and log.unlisted == 2


def test_private_dir_is_made_owner_only_or_refused(tmp_path: Path) -> None:
    made = tmp_path / "a" / "spool"
    ensure_private_dir(made, "spool directory", "edge.spool_dir")
    assert made.stat().st_mode & 0o777 == 0o700
    ensure_private_dir(made, "spool directory", "edge.spool_dir")  # again: fine
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o755)
    with pytest.raises(ServiceError, match=r"mode 0755.*chmod 700 .*edge.spool_dir"):
        ensure_private_dir(shared, "spool directory", "edge.spool_dir")
    assert shared.stat().st_mode & 0o777 == 0o755  # not ours to change
    ensure_private_dir(shared, "spool directory", "edge.spool_dir", ours=True)
    assert shared.stat().st_mode & 0o777 == 0o700  # the default one, made before: fixed


def test_worker_web_beyond_loopback_needs_a_token(token_file: Path) -> None:
    assert WebAccess.from_config(Config()).token is None
    # TLS aside (test_listener_tls.py): this is about the token
    wild = Config().replace(worker={"web_bind": "0.0.0.0",
                                    "web_tls_terminated_by_proxy": True})
    with pytest.raises(ConfigError, match="worker.web_bind.*worker.web_token_file"):
        WebAccess.from_config(wild)
    access = WebAccess.from_config(wild.replace(worker={"web_token_file": str(token_file)}))
    assert access.headers() == {"Authorization": f"Bearer {TOKEN}"}
    assert TOKEN not in repr(access.token)


def test_worker_web_settings() -> None:
    cfg = Config().replace(worker={"web_port": 7001})
    settings = faust_web_settings(cfg, WebAccess(None))
    assert settings["web_bind"] == "127.0.0.1"
    assert settings["canonical_url"] == "http://127.0.0.1:7001"
    assert not any(settings[f"web_{page}_enabled"]
                   for page in ("router", "tables", "stats", "graph", "metrics"))
    assert advertised_host(cfg.replace(worker={"web_bind": "0.0.0.0"})) != "0.0.0.0"
    assert advertised_host(cfg.replace(worker={"web_bind": "0.0.0.0",
                                               "web_host": "gw1.example"})) == "gw1.example"
    v6 = faust_web_settings(cfg.replace(worker={"web_bind": "::1"}), WebAccess(None))
    assert v6["canonical_url"] == "http://[::1]:7001"


def test_config_show_names_the_token_file_never_a_secret(token_file: Path,
                                                         tmp_path: Path) -> None:
    conf = tmp_path / "jobstream.toml"
    conf.write_text(f'[worker]\nweb_bind = "0.0.0.0"\nweb_token_file = "{token_file}"\n'
                    '[edge.slurm]\nreceiver_user = "slurm"\n'
                    'receiver_password = "receiver-secret-0123456789"\n')
    result = CliRunner().invoke(main, ["--config", str(conf), "config", "show"],
                                catch_exceptions=False)
    assert result.exit_code == 0, result.output
    assert str(token_file) in result.output
    assert TOKEN not in result.output and "receiver-secret" not in result.output
