"""Enrichment: who a uid is, a user's default bank, where a node sits.

Sources, each optional: a passwd-format file and a group file beside it
(``enrich.passwd_file``), a TOML user map (``enrich.users_file``: ``[users.<uid>]`` with
``name``, ``group``, ``bank``), and a topology file (``enrich.topology_file``:
``[nodes.<host>]`` with ``rack`` and ``type``). The host's own user database (what
``getent passwd`` answers) is the last resort for names. Missing data is never an error:
the field stays absent.

The stage runs *before* anonymization: looking a uid up needs the real uid.
"""

from __future__ import annotations

import grp
import pwd
import tomllib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

from pipeline.runtime.errors import ConfigError

__all__ = ["Enricher", "UserInfo"]


@dataclass(frozen=True, slots=True)
class UserInfo:
    name: str | None = None
    group: str | None = None
    bank: str | None = None


@dataclass(frozen=True)
class Enricher:
    users: Mapping[int, UserInfo] = field(default_factory=dict)
    nodes: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    use_host_db: bool = True
    #: the host's answers, remembered for the life of this stage (one worker process):
    #: not for the life of the module, so that a new stage sees users added since
    _host: Callable[[int], UserInfo] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_host", lru_cache(maxsize=65536)(_host_user))

    @classmethod
    def from_config(cls, passwd_file: str = "", users_file: str = "", topology_file: str = "",
                    use_host_db: bool = True) -> Enricher:
        users: dict[int, UserInfo] = {}
        if passwd_file:
            users.update(_read_passwd(passwd_file))
        if users_file:
            for uid, info in _read_toml(users_file, "enrich.users_file").get("users", {}).items():
                base = users.get(int(uid), UserInfo())
                users[int(uid)] = UserInfo(info.get("name", base.name),
                                           info.get("group", base.group), info.get("bank"))
        nodes: dict[str, Mapping[str, str]] = {}
        if topology_file:
            nodes = dict(_read_toml(topology_file, "enrich.topology_file").get("nodes", {}))
        return cls(users, nodes, use_host_db)

    def user(self, uid: int) -> UserInfo:
        known = self.users.get(uid)
        if known is not None or not self.use_host_db:
            return known or UserInfo()
        return self._host(uid)

    def facts(self, values: Mapping[str, Any]) -> dict[str, Any]:
        """``values`` (a document or a ``facts`` map) with the missing names filled in."""
        out = dict(values)
        uid = out.get("uid")
        if isinstance(uid, int) and not isinstance(uid, bool):
            info = self.user(uid)
            for key, value in (("user", info.name), ("group", info.group), ("bank", info.bank)):
                if value and not out.get(key):
                    out[key] = value
        hosts = out.get("nodelist")
        if self.nodes and isinstance(hosts, list) and hosts:
            racks = sorted({self.nodes[h]["rack"] for h in hosts
                            if "rack" in self.nodes.get(h, {})})
            types = sorted({self.nodes[h]["type"] for h in hosts
                            if "type" in self.nodes.get(h, {})})
            if racks:
                out["racks"] = racks
            if types:
                out["node_types"] = types
        return out


def _read_toml(path: str, key: str) -> dict[str, Any]:
    try:
        with open(path, "rb") as fh:
            return tomllib.load(fh)
    except OSError as exc:
        raise ConfigError(f"{key}: cannot read {path}: {exc.strerror}") from exc
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{key}: {path} is not valid TOML: {exc}") from exc


def _read_passwd(path: str) -> dict[int, UserInfo]:
    """passwd lines ``name:x:uid:gid:gecos:home:shell``; group names from ``group`` beside it."""
    try:
        lines = Path(path).read_text().splitlines()
    except OSError as exc:
        raise ConfigError(f"enrich.passwd_file: cannot read {path}: {exc.strerror}") from exc
    groups: dict[int, str] = {}
    group_file = Path(path).with_name("group")
    if group_file.is_file():
        for line in group_file.read_text().splitlines():
            parts = line.split(":")
            if len(parts) >= 3 and parts[2].isdigit():
                groups[int(parts[2])] = parts[0]
    users: dict[int, UserInfo] = {}
    for line in lines:
        parts = line.split(":")
        if len(parts) >= 4 and parts[2].isdigit() and not line.startswith("#"):
            gid = int(parts[3]) if parts[3].isdigit() else None
            users[int(parts[2])] = UserInfo(parts[0], groups.get(gid) if gid is not None else None)
    return users


def _host_user(uid: int) -> UserInfo:
    try:
        entry = pwd.getpwuid(uid)
    except (KeyError, OverflowError):
        return UserInfo()
    try:
        group: str | None = grp.getgrgid(entry.pw_gid).gr_name
    except (KeyError, OverflowError):
        group = None
    return UserInfo(entry.pw_name, group)
