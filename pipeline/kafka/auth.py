"""Kafka security for the clients that are not librdkafka (the Faust worker's aiokafka).

A site secures Kafka once, in the librdkafka properties file (``kafka.properties_file``,
passed untouched to every confluent-kafka client). :func:`kafka_auth` reads the security
keys of those properties, and :func:`faust_credentials` turns them into the
``broker_credentials`` Faust hands to aiokafka, so the worker connects exactly as the
edges and the sink do:

==================================  =========================================================
librdkafka                          aiokafka (through Faust)
==================================  =========================================================
``security.protocol``               PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL
``sasl.mechanism(s)``               PLAIN, SCRAM-SHA-256, SCRAM-SHA-512
``sasl.username`` / ``.password``   the SASL user and password
``ssl.ca.location``                 CA file (or directory) that signed the brokers' certificates;
                                    empty = the system's trust store
``ssl.certificate.location``,       client certificate and key (mutual TLS), the key's
``ssl.key.location``,               password
``ssl.key.password``
``ssl.endpoint.identification``     ``none`` skips the host name check (librdkafka's default
``.algorithm``                      is ``https``: checked)
==================================  =========================================================

Other security settings (GSSAPI, OAUTHBEARER, PKCS#12 keystores, inline PEM) work for
librdkafka but have no aiokafka counterpart here: the worker refuses to start with a
:class:`ConfigError` naming the key, rather than connecting without them. Passwords are
held as :class:`~pipeline.runtime.config.Secret`, which never shows itself in logs.
"""

from __future__ import annotations

import ssl
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pipeline.runtime.config import Config, Secret
from pipeline.runtime.errors import ConfigError

__all__ = ["KafkaAuth", "faust_credentials", "kafka_auth", "ssl_context"]

PROTOCOLS = frozenset({"PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"})
MECHANISMS = frozenset({"PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"})
#: librdkafka security keys with no mapping (anything ``ssl.*``/``sasl.*`` not read below)
_READ = frozenset({
    "security.protocol", "sasl.mechanism", "sasl.mechanisms", "sasl.username",
    "sasl.password", "ssl.ca.location", "ssl.certificate.location", "ssl.key.location",
    "ssl.key.password", "ssl.endpoint.identification.algorithm",
})


@dataclass(frozen=True)
class KafkaAuth:
    """How to reach the brokers: protocol, SASL user, TLS files."""

    protocol: str = "PLAINTEXT"
    mechanism: str = "PLAIN"
    username: str = ""
    password: Secret = Secret("")
    ca_location: str = ""
    certificate_location: str = ""
    key_location: str = ""
    key_password: Secret = Secret("")
    check_hostname: bool = True

    @property
    def tls(self) -> bool:
        return self.protocol in ("SSL", "SASL_SSL")

    @property
    def sasl(self) -> bool:
        return self.protocol.startswith("SASL_")


def kafka_auth(props: Mapping[str, Any]) -> KafkaAuth:
    """The security settings of librdkafka properties; ConfigError for what cannot map."""
    protocol = str(props.get("security.protocol", "PLAINTEXT")).upper()
    if protocol not in PROTOCOLS:
        raise ConfigError(f"kafka.properties_file: security.protocol={protocol} is not one of "
                          f"{', '.join(sorted(PROTOCOLS))}")
    mechanism = str(props.get("sasl.mechanism", props.get("sasl.mechanisms", "PLAIN"))).upper()
    auth = KafkaAuth(
        protocol=protocol, mechanism=mechanism,
        username=str(props.get("sasl.username", "")),
        password=Secret(str(props.get("sasl.password", ""))),
        ca_location=str(props.get("ssl.ca.location", "")),
        certificate_location=str(props.get("ssl.certificate.location", "")),
        key_location=str(props.get("ssl.key.location", "")),
        key_password=Secret(str(props.get("ssl.key.password", ""))),
        check_hostname=str(props.get("ssl.endpoint.identification.algorithm", "https"))
        .lower() != "none")
    if auth.sasl:
        if mechanism not in MECHANISMS:
            raise ConfigError(f"kafka.properties_file: sasl.mechanism={mechanism} is not "
                              f"supported by the worker (only {', '.join(sorted(MECHANISMS))})")
        if not auth.username or not auth.password:
            raise ConfigError("kafka.properties_file: security.protocol="
                              f"{protocol} needs sasl.username and sasl.password")
    unmapped = sorted(k for k in props if k.startswith(("ssl.", "sasl.")) and k not in _READ
                      and (auth.sasl or auth.tls))
    if unmapped:
        raise ConfigError(f"kafka.properties_file: {', '.join(unmapped)} cannot be passed to "
                          "the worker's Kafka client; use ssl.ca.location, "
                          "ssl.certificate.location and ssl.key.location (PEM files)")
    return auth


def ssl_context(auth: KafkaAuth) -> ssl.SSLContext | None:
    """A TLS client context for ``auth`` (None without TLS)."""
    if not auth.tls:
        return None
    ca = auth.ca_location
    ca_dir = bool(ca) and Path(ca).is_dir()
    try:
        ctx = ssl.create_default_context(cafile=ca if ca and not ca_dir else None,
                                         capath=ca if ca_dir else None)
        if auth.certificate_location:
            ctx.load_cert_chain(auth.certificate_location, auth.key_location or None,
                                auth.key_password.reveal() or None)
    except (OSError, ssl.SSLError) as exc:
        raise ConfigError(f"kafka.properties_file: cannot load the TLS files: {exc}") from exc
    ctx.check_hostname = auth.check_hostname
    return ctx


def faust_credentials(cfg: Config) -> Any:
    """Faust ``broker_credentials`` equivalent to the properties file (None: plaintext)."""
    if not cfg.kafka.properties_file:
        return None
    auth = kafka_auth(cfg.librdkafka())
    if auth.protocol == "PLAINTEXT":
        return None
    import faust

    context = ssl_context(auth)
    if auth.sasl:
        return faust.SASLCredentials(username=auth.username, password=auth.password.reveal(),
                                     ssl_context=context, mechanism=auth.mechanism)
    return faust.SSLCredentials(context)
