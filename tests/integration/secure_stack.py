"""A secured Kafka and Elasticsearch for the security tests, with generated certificates.

The local stack's services with security on, on free ports and a run directory of their
own (the shared stack's fetched distributions, symlinked):

* Kafka: a ``SASL_SSL`` listener (SCRAM-SHA-256, a PEM server certificate signed by a test
  CA) for the clients, beside the PLAINTEXT listener on loopback the broker and the stack's
  readiness probe use; the SCRAM user is created through that listener once it runs;
* Elasticsearch: x-pack security with TLS on HTTP and a file-realm superuser.

Certificates are made with ``cryptography``: a CA, and a server certificate for
``127.0.0.1`` / ``localhost`` signed by it.
"""

from __future__ import annotations

import datetime
import ipaddress
import json
import os
import pwd
import shutil
import ssl
import subprocess
import urllib.request
from base64 import b64encode
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from pipeline.runtime.errors import ServiceError
from pipeline.tooling.stack.elasticsearch import ElasticsearchService
from pipeline.tooling.stack.kafka import KafkaService

__all__ = ["Certs", "SecureElasticsearch", "SecureKafka", "make_certs"]


@dataclass(frozen=True)
class Certs:
    ca: Path
    #: server certificate and key (PEM, the key unencrypted PKCS#8)
    cert: Path
    key: Path
    #: key then certificate chain in one file (Kafka's PEM keystore)
    keystore: Path


def make_certs(directory: Path) -> Certs:
    directory.mkdir(parents=True, exist_ok=True)
    now = datetime.datetime.now(datetime.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "jobstream test CA")])
    ca = (x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name)
          .public_key(ca_key.public_key()).serial_number(x509.random_serial_number())
          .not_valid_before(now - datetime.timedelta(minutes=5))
          .not_valid_after(now + datetime.timedelta(days=2))
          .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
          .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                       content_commitment=False, key_encipherment=False,
                                       data_encipherment=False, key_agreement=False,
                                       encipher_only=False, decipher_only=False), critical=True)
          .sign(ca_key, hashes.SHA256()))
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")]))
            .issuer_name(ca_name).public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=2))
            .add_extension(x509.SubjectAlternativeName([
                x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
                critical=False)
            .add_extension(x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.SERVER_AUTH]),
                           critical=False)
            .sign(ca_key, hashes.SHA256()))
    pem = serialization.Encoding.PEM
    key_pem = key.private_bytes(pem, serialization.PrivateFormat.PKCS8,
                                serialization.NoEncryption())
    out = Certs(ca=directory / "ca.pem", cert=directory / "server.crt",
                key=directory / "server.key", keystore=directory / "server-keystore.pem")
    out.ca.write_bytes(ca.public_bytes(pem))
    out.cert.write_bytes(cert.public_bytes(pem))
    out.key.write_bytes(key_pem)
    out.keystore.write_bytes(key_pem + cert.public_bytes(pem))
    for path in (out.ca, out.cert, out.key, out.keystore):
        path.chmod(0o644)  # the Elasticsearch system user reads them (a test's throwaway key)
    return out


class SecureKafka(KafkaService):
    """The stack's Kafka with a SASL_SSL (SCRAM-SHA-256) listener on ``sasl_port``."""

    def __init__(self, *args: object, certs: Certs, sasl_port: int) -> None:
        super().__init__(*args)  # type: ignore[arg-type]
        self.certs = certs
        self.sasl_port = sasl_port

    @property
    def ports(self) -> tuple[int, ...]:
        return (*super().ports, self.sasl_port)

    @property
    def secure_address(self) -> str:
        return f"127.0.0.1:{self.sasl_port}"

    def prepare(self) -> None:
        super().prepare()
        plain, ctl = self.cfg.stack.kafka_port, self.cfg.stack.kafka_controller_port
        lines = [ln for ln in self.properties.read_text().splitlines()
                 if not ln.startswith(("listeners=", "advertised.listeners=",
                                       "listener.security.protocol.map="))]
        lines += [
            f"listeners=PLAINTEXT://127.0.0.1:{plain},SASL_SSL://127.0.0.1:{self.sasl_port},"
            f"CONTROLLER://127.0.0.1:{ctl}",
            f"advertised.listeners=PLAINTEXT://127.0.0.1:{plain},"
            f"SASL_SSL://127.0.0.1:{self.sasl_port}",
            "listener.security.protocol.map=PLAINTEXT:PLAINTEXT,SASL_SSL:SASL_SSL,"
            "CONTROLLER:PLAINTEXT",
            "sasl.enabled.mechanisms=SCRAM-SHA-256",
            "listener.name.sasl_ssl.scram-sha-256.sasl.jaas.config="
            "org.apache.kafka.common.security.scram.ScramLoginModule required;",
            "ssl.keystore.type=PEM",
            f"ssl.keystore.location={self.certs.keystore}",
        ]
        self.properties.write_text("\n".join(lines) + "\n")

    def add_user(self, username: str, password: str) -> None:
        """Create a SCRAM-SHA-256 user (through the loopback PLAINTEXT listener)."""
        from confluent_kafka.admin import (
            AdminClient,
            ScramCredentialInfo,
            ScramMechanism,
            UserScramCredentialUpsertion,
        )

        admin = AdminClient({"bootstrap.servers": self.address})
        upsert = UserScramCredentialUpsertion(
            username, ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 4096), password.encode())
        for future in admin.alter_user_scram_credentials([upsert]).values():
            future.result(timeout=30)


class SecureElasticsearch(ElasticsearchService):
    """The stack's Elasticsearch with x-pack security: TLS on HTTP, a file-realm user."""

    def __init__(self, *args: object, certs: Certs, username: str, password: str) -> None:
        super().__init__(*args)  # type: ignore[arg-type]
        self.certs = certs
        self.username = username
        self.password = password

    @property
    def address(self) -> str:
        return f"https://127.0.0.1:{self.cfg.stack.elasticsearch_port}"

    def prepare(self) -> None:
        super().prepare()
        certs = self.conf_dir / "certs"
        certs.mkdir(exist_ok=True)
        for src in (self.certs.ca, self.certs.cert, self.certs.key):
            shutil.copy(src, certs / src.name)
        yml = self.conf_dir / "elasticsearch.yml"
        text = yml.read_text().replace("xpack.security.enabled: false",
                                       "xpack.security.enabled: true")
        text += ("xpack.security.http.ssl.enabled: true\n"
                 f"xpack.security.http.ssl.key: certs/{self.certs.key.name}\n"
                 f"xpack.security.http.ssl.certificate: certs/{self.certs.cert.name}\n"
                 f"xpack.security.http.ssl.certificate_authorities: [certs/{self.certs.ca.name}]\n"
                 "xpack.security.transport.ssl.enabled: false\n")
        yml.write_text(text)
        env = {**os.environ, "ES_JAVA_HOME": str(self.plan[1].home),
               "ES_PATH_CONF": str(self.conf_dir)}
        env.pop("JAVA_HOME", None)
        made = subprocess.run(
            [str(self.home / "bin" / "elasticsearch-users"), "useradd", self.username, "-p",
             self.password, "-r", "superuser"], env=env, capture_output=True, text=True,
            check=False)
        if made.returncode != 0:
            raise ServiceError(f"elasticsearch-users failed: {made.stdout}{made.stderr}")
        user = self.as_user
        if user is not None:
            pw = pwd.getpwnam(user)
            for root, dirs, names in os.walk(self.conf_dir):
                for name in [root, *(os.path.join(root, n) for n in dirs + names)]:
                    os.chown(name, pw.pw_uid, pw.pw_gid)

    def probe(self, timeout: float) -> bool:
        ctx = ssl.create_default_context(cafile=str(self.certs.ca))
        auth = b64encode(f"{self.username}:{self.password}".encode()).decode()
        req = urllib.request.Request(f"{self.address}/_cluster/health",
                                     headers={"Authorization": f"Basic {auth}"})
        try:
            with urllib.request.urlopen(req, timeout=timeout, context=ctx) as resp:  # noqa: S310
                health = json.load(resp)
        except (OSError, ValueError):
            return False
        return health.get("status") in ("yellow", "green")
