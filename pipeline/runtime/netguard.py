"""What guards jobstream's listeners: loopback by default, credentials beyond it.

Shared by the worker's web endpoint (a bearer token), the Slurm edge's jobcomp receiver
(HTTP basic auth and/or an allow-list of source networks) and the edge's local sockets and
directories (owner-only modes). A bearer token is only as good as the channel it crosses,
so the listeners that take one (the worker's web endpoint, the metrics ports) serve TLS
beyond loopback, unless the operator states that a proxy in front terminates it
(:func:`server_tls`, :func:`require_tls`). Standard library only: the edge imports it.
"""

from __future__ import annotations

import base64
import binascii
import hmac
import ipaddress
import logging
import os
import ssl
import stat
import threading
from collections.abc import Iterable
from pathlib import Path

from pipeline.runtime.config import Secret
from pipeline.runtime.errors import ConfigError, ServiceError

logger = logging.getLogger(__name__)

__all__ = [
    "AllowList",
    "BasicAuth",
    "RefusalLog",
    "bearer_ok",
    "ensure_private_dir",
    "is_loopback",
    "read_secret_file",
    "require_tls",
    "server_tls",
]

_WILDCARDS = frozenset({"", "0.0.0.0", "::", "*"})  # noqa: S104 - names, not a bind


def is_loopback(host: str) -> bool:
    """Whether a bind address stays on this machine (``localhost`` included; a wildcard or
    a host name that is not ``localhost`` faces the network)."""
    if host in _WILDCARDS:
        return False
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def read_secret_file(path: str, key: str) -> Secret:
    """The secret in the file ``path`` (surrounding white space dropped), refused when the
    file is readable by group or others: a secret anyone on the host can read guards
    nothing. ``key`` names the setting in errors."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError as exc:
        raise ConfigError(f"{key}: cannot read {path}: {exc.strerror}") from exc
    try:
        mode = os.fstat(fd).st_mode
        if mode & 0o077:
            raise ConfigError(f"{key}: {path} has mode {stat.S_IMODE(mode):04o}: group and "
                              f"others must have no access to a secret (chmod 600 {path})")
        with os.fdopen(fd, "rb", closefd=False) as fh:
            data = fh.read()
    finally:
        os.close(fd)
    try:
        secret = data.decode().strip()
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{key}: {path} is not UTF-8 text") from exc
    if len(secret) < 16:
        raise ConfigError(f"{key}: the secret in {path} must be at least 16 characters")
    return Secret(secret)


def server_tls(cert_file: str, key_file: str, prefix: str) -> ssl.SSLContext | None:
    """The TLS context a listener serves with, from the PEM certificate (chain) and private
    key files of the settings ``<prefix>_cert`` and ``<prefix>_key``; None when neither is
    set. The key file must be owner-only, as a token file must."""
    if bool(cert_file) != bool(key_file):
        raise ConfigError(f"{prefix}_cert and {prefix}_key go together: set both, or neither")
    if not cert_file:
        return None
    read_secret_file(key_file, f"{prefix}_key")  # for its checks: readable, owner-only
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        context.load_cert_chain(cert_file, key_file)
    except (OSError, ssl.SSLError) as exc:
        raise ConfigError(f"{prefix}_cert / {prefix}_key: cannot load {cert_file} with "
                          f"{key_file}: {exc}") from exc
    return context


def require_tls(bind: str, tls: ssl.SSLContext | None, *, terminated_by_proxy: bool,
                bind_key: str, prefix: str) -> None:
    """Refuse a listener that would take a bearer token in clear text from the network:
    one beyond loopback needs TLS, or the operator's ``<prefix>_terminated_by_proxy``
    saying that a TLS proxy in front of it terminates TLS."""
    if tls is None and not terminated_by_proxy and not is_loopback(bind):
        raise ConfigError(
            f"{bind_key} = {bind!r} is not loopback: set {prefix}_cert and {prefix}_key "
            "(TLS: the bearer token must not cross the network in clear text), or "
            f"{prefix}_terminated_by_proxy = true when a TLS proxy in front of it "
            "terminates TLS, or keep it on loopback")


def bearer_ok(header: str | None, token: Secret) -> bool:
    """Whether an ``Authorization`` header carries ``token`` (constant-time compare)."""
    scheme, _, value = (header or "").partition(" ")
    if scheme.lower() != "bearer":
        return False
    return hmac.compare_digest(value.strip().encode(), token.reveal().encode())


class BasicAuth:
    """HTTP basic authentication against one user and its password."""

    def __init__(self, user: str, password: Secret) -> None:
        self.user = user
        self._expected = f"{user}:{password.reveal()}".encode()

    def check(self, header: str | None) -> bool:
        scheme, _, value = (header or "").partition(" ")
        if scheme.lower() != "basic":
            return False
        try:
            given = base64.b64decode(value.strip(), validate=True)
        except (binascii.Error, ValueError):
            return False
        return hmac.compare_digest(given, self._expected)


class AllowList:
    """Source networks (CIDRs) allowed to connect; empty allows every source."""

    def __init__(self, networks: Iterable[str], key: str) -> None:
        nets = []
        for text in networks:
            if not text.strip():
                continue
            try:
                nets.append(ipaddress.ip_network(text.strip(), strict=False))
            except ValueError as exc:
                raise ConfigError(f"{key}: {text.strip()!r} is not an address or CIDR "
                                  "network") from exc
        self.networks = tuple(nets)

    def __bool__(self) -> bool:
        return bool(self.networks)

    def allows(self, address: str) -> bool:
        if not self.networks:
            return True
        try:
            ip = ipaddress.ip_address(address)
        except ValueError:
            return False
        if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
            ip = ip.ipv4_mapped  # a dual-stack socket's view of an IPv4 client
        return any(ip in net for net in self.networks)


class RefusalLog:
    """Logs a refused request once per source address, not once per request: a scanner
    or a misconfigured client retrying every second must not flood the log. Past
    ``max_sources`` distinct sources, only their count grows."""

    def __init__(self, logger: logging.Logger, what: str, max_sources: int = 1024) -> None:
        self.logger = logger
        self.what = what
        self.max_sources = max_sources
        self.refused: dict[str, int] = {}
        self.unlisted = 0
        self._lock = threading.Lock()

    def refused_from(self, source: str, reason: str) -> None:
        with self._lock:
            if source in self.refused:
                self.refused[source] += 1
                return
            if len(self.refused) >= self.max_sources:
                self.unlisted += 1
                return
            self.refused[source] = 1
        self.logger.warning("%s: refused a request from %s (%s); further refusals from "
                            "there are not logged", self.what, source, reason)


def ensure_private_dir(path: Path, what: str, key: str, *, ours: bool = False) -> None:
    """``path`` as a directory only its owner can enter: created with mode 0700 when
    missing; when it exists with group or other access, made 0700 if ``ours`` (a default
    location jobstream made, before it made it private), else refused: someone set it up
    so and may rely on it. Its parents are created as usual."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.mkdir(mode=0o700)
        path.chmod(0o700)  # mkdir's mode passes through the umask; this does not
        return
    except FileExistsError:
        pass
    except OSError as exc:
        raise ServiceError(f"{what} {path}: cannot create: {exc.strerror}") from exc
    st = path.lstat()
    if not stat.S_ISDIR(st.st_mode):
        raise ServiceError(f"{what} {path} exists and is not a directory; set {key}")
    if not st.st_mode & 0o077:
        return
    if ours and st.st_uid == os.geteuid():
        path.chmod(0o700)
        logger.warning("%s %s had mode %04o; made it 0700 (owner only)", what, path,
                       stat.S_IMODE(st.st_mode))
        return
    raise ServiceError(f"{what} {path} has mode {stat.S_IMODE(st.st_mode):04o}: group "
                       f"and others must have no access (chmod 700 {path}, or set {key})")
