"""The worker's Kafka security from the librdkafka properties file (pipeline.kafka.auth)."""

from __future__ import annotations

import ssl
from pathlib import Path

import faust
import pytest

from pipeline.kafka.auth import faust_credentials, kafka_auth, ssl_context
from pipeline.runtime.config import Config
from pipeline.runtime.errors import ConfigError

CA = ssl.get_default_verify_paths().cafile or ""


def props_cfg(tmp_path: Path, text: str) -> Config:
    path = tmp_path / "client.properties"
    path.write_text(text)
    return Config().replace(kafka={"properties_file": str(path)})


def test_no_properties_file_is_plaintext() -> None:
    assert faust_credentials(Config()) is None
    assert kafka_auth({}).protocol == "PLAINTEXT"


def test_sasl_ssl_scram_maps_to_faust_sasl_credentials(tmp_path: Path) -> None:
    cfg = props_cfg(tmp_path, "# site settings\nsecurity.protocol=sasl_ssl\n"
                              "sasl.mechanisms=SCRAM-SHA-512\nsasl.username=jobstream\n"
                              "sasl.password=pa55=word\n" + (f"ssl.ca.location={CA}\n" if CA
                                                             else ""))
    creds = faust_credentials(cfg)
    assert isinstance(creds, faust.SASLCredentials)
    assert (creds.username, creds.password, creds.mechanism.value, creds.protocol.value) == \
        ("jobstream", "pa55=word", "SCRAM-SHA-512", "SASL_SSL")
    assert creds.ssl_context is not None and creds.ssl_context.check_hostname
    assert "pa55" not in repr(creds)


def test_sasl_plaintext_has_no_tls(tmp_path: Path) -> None:
    creds = faust_credentials(props_cfg(tmp_path, "security.protocol=SASL_PLAINTEXT\n"
                                                  "sasl.mechanism=PLAIN\nsasl.username=u\n"
                                                  "sasl.password=p\n"))
    assert isinstance(creds, faust.SASLCredentials)
    assert creds.protocol.value == "SASL_PLAINTEXT" and creds.ssl_context is None


def test_ssl_only_maps_to_ssl_credentials_and_may_skip_the_host_check(tmp_path: Path) -> None:
    creds = faust_credentials(props_cfg(
        tmp_path, "security.protocol=SSL\nssl.endpoint.identification.algorithm=none\n"))
    assert isinstance(creds, faust.SSLCredentials)
    assert creds.context is not None and not creds.context.check_hostname


def test_the_password_is_a_secret() -> None:
    auth = kafka_auth({"security.protocol": "SASL_SSL", "sasl.username": "u",
                       "sasl.password": "hunter2"})
    assert "hunter2" not in repr(auth) and auth.password.reveal() == "hunter2"


@pytest.mark.parametrize(("props", "word"), [
    ({"security.protocol": "SASL_SSL", "sasl.mechanism": "GSSAPI", "sasl.username": "u",
      "sasl.password": "p"}, "GSSAPI"),
    ({"security.protocol": "SASL_SSL", "sasl.username": "u"}, "sasl.password"),
    ({"security.protocol": "SSL", "ssl.keystore.location": "/k.p12"}, "ssl.keystore.location"),
    ({"security.protocol": "TLS"}, "security.protocol=TLS"),
])
def test_what_cannot_map_is_a_config_error_naming_it(props: dict[str, str], word: str) -> None:
    with pytest.raises(ConfigError, match=word):
        kafka_auth(props)


def test_a_missing_ca_file_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="TLS files"):
        ssl_context(kafka_auth({"security.protocol": "SSL",
                                "ssl.ca.location": "/nonexistent/ca.pem"}))
