"""The edge's side of the Slurm hook scripts: a unix socket listener and the drop directory.

The hook (``pipeline/edges/hooks/jobstream-hook``) writes one JSON object of the job's
``SLURM_*`` environment to the socket, shuts its side down and waits for ``ok``; the
listener answers only once the record is in the spool. When the edge is down the hook
renames a file into the drop directory instead; :class:`DropDirIngester` spools those
files at start and every ``hook_scan_s`` seconds, deleting each only after it is spooled
(a crash in between gives a duplicate, never a loss).

Both are the hooks' user's alone: the socket mode 0600, the directory 0700, owned by the
edge's user, or by ``edge.slurm.hook_user`` (SlurmUser) when the edge runs as another (root).
"""

from __future__ import annotations

import json
import logging
import os
import pwd
import socketserver
import stat
import sys
import time
from importlib import resources
from pathlib import Path

from pipeline.core.model import RawRecord
from pipeline.edges.base import EdgeRuntime, record_key
from pipeline.edges.slurm.directory import DirectoryIngester
from pipeline.edges.spool import spool_dir
from pipeline.runtime.config import Config
from pipeline.runtime.errors import ConfigError, JobstreamError, ServiceError
from pipeline.runtime.files import write_whole
from pipeline.runtime.netguard import ensure_private_dir
from pipeline.runtime.servers import ServerThread

__all__ = ["LUA_MODULES", "LUA_SCRIPTS", "DropDirIngester", "HookListener", "default_interpreter",
           "hook_paths", "hook_script", "install_hook", "install_lua"]

logger = logging.getLogger(__name__)

FORMAT = "slurm-hook"
MAX_RECORD = 1 << 20


def hook_paths(cfg: Config) -> tuple[Path, Path]:
    """(socket, drop directory) of the configuration."""
    base = spool_dir(cfg)
    s = cfg.edge.slurm
    return (Path(s.hook_socket or base / "hook.sock"),
            Path(s.hook_drop_dir or base / "hook-drop"))


def give_to_hook_user(path: Path, user: str) -> None:
    """Make ``path`` the hooks' user's (``edge.slurm.hook_user``; nothing when empty)."""
    if not user:
        return
    try:
        entry = pwd.getpwnam(user)
    except KeyError:
        raise ConfigError(f"edge.slurm.hook_user: no user {user!r} on this host") from None
    try:
        os.chown(path, entry.pw_uid, entry.pw_gid)
    except OSError as exc:
        raise ServiceError(f"cannot give {path} to edge.slurm.hook_user {user}: "
                           f"{exc.strerror}; run the edge as {user} and leave hook_user "
                           "empty") from exc


def hook_script() -> str:
    """The shipped hook script's text."""
    return (resources.files("pipeline") / "edges" / "hooks" / "jobstream-hook").read_text()


def default_interpreter() -> str:
    """The system Python 3 if there is one (fast start, no wrapper), else ours."""
    for candidate in ("/usr/bin/python3", "/usr/local/bin/python3"):
        if os.access(candidate, os.X_OK):
            return candidate
    return sys.executable


def install_hook(cfg: Config, dest: str | Path, *, timeout: float = 0.5,
                 python: str | None = None) -> Path:
    """Write the hook script to ``dest`` (mode 0755) with this configuration's socket and
    drop directory, for slurm.conf's PrologSlurmctld / EpilogSlurmctld. ``python`` is the
    interpreter of its ``#!`` line (an absolute path: a wrapper such as a pyenv shim would
    cost the job tens of milliseconds)."""
    sock, drop = hook_paths(cfg)
    lines = []
    for n, line in enumerate(hook_script().splitlines(keepends=True)):
        if n == 0:
            line = f"#!{python or default_interpreter()} -IS\n"
        elif line.endswith("# jobstream:socket\n"):
            line = f"SOCKET = {str(sock)!r}  # jobstream:socket\n"
        elif line.endswith("# jobstream:drop_dir\n"):
            line = f"DROP_DIR = {str(drop)!r}  # jobstream:drop_dir\n"
        elif line.endswith("# jobstream:timeout\n"):
            line = f"TIMEOUT = {float(timeout)!r}  # jobstream:timeout\n"
        lines.append(line)
    path = Path(dest)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_whole(path, "".join(lines), 0o755)
    except OSError as exc:
        raise ConfigError(f"cannot install the hook at {path}: {exc.strerror}") from exc
    return path


#: the lua plugins and the slurm.conf line that loads each (from slurm.conf's directory)
LUA_SCRIPTS = {"job_submit.lua": "JobSubmitPlugins=lua", "cli_filter.lua": "CliFilterPlugins=lua"}
#: what the plugins require from their own directory (the JSON encoder both use)
LUA_MODULES = ("jobstream_json.lua",)


def install_lua(spool: str | Path, dest_dir: str | Path, *,
                site_policy: str | Path | None = None) -> list[Path]:
    """Write job_submit.lua and cli_filter.lua (mode 0644) into ``dest_dir`` (slurm.conf's
    directory: Slurm loads them from there) with the submit spool ``spool`` and the site's
    own job_submit policy ``site_policy`` (default ``<dest_dir>/job_submit.site.lua``), and
    beside them the module they require (:data:`LUA_MODULES`), first."""
    dest = Path(dest_dir)
    policy = Path(site_policy) if site_policy else dest / "job_submit.site.lua"
    written = []
    for name in (*LUA_MODULES, *LUA_SCRIPTS):  # a plugin reloaded at once finds its module
        text = (resources.files("pipeline") / "edges" / "hooks" / name).read_text()
        lines = []
        for line in text.splitlines(keepends=True):
            if line.endswith("-- jobstream:submit_spool_dir\n"):
                line = f"local SPOOL_DIR = {_lua_str(spool)} -- jobstream:submit_spool_dir\n"
            elif line.endswith("-- jobstream:site_policy\n"):
                line = f"local SITE_POLICY = {_lua_str(policy)} -- jobstream:site_policy\n"
            lines.append(line)
        path = dest / name
        try:
            dest.mkdir(parents=True, exist_ok=True)
            write_whole(path, "".join(lines), 0o644)
        except OSError as exc:
            raise ConfigError(f"cannot install {path}: {exc.strerror}") from exc
        written.append(path)
    return written


def _lua_str(value: str | Path) -> str:
    """A Lua string literal of a path."""
    text = str(value)
    if any(ord(c) < 32 or c == "\x7f" for c in text):
        raise ConfigError(f"path {text!r} holds a control character")
    # without control characters JSON's escapes (quote, backslash) are Lua's too
    return json.dumps(text, ensure_ascii=False)


def _hook_record(runtime: EdgeRuntime, data: bytes) -> RawRecord:
    now = time.time()
    cluster = runtime.cfg.cluster
    return RawRecord(cluster=cluster, scheduler="slurm", format=FORMAT, received_at=now,
                     payload=data, key=record_key(FORMAT, data, cluster, now))


class _Handler(socketserver.StreamRequestHandler):
    server: _Server

    def handle(self) -> None:
        self.request.settimeout(5.0)
        try:
            data = self.rfile.read(MAX_RECORD + 1)
        except OSError as exc:
            logger.warning("hook connection failed: %s", exc)
            return
        if not data.strip():
            return
        if len(data) > MAX_RECORD:
            logger.error("hook record over %d bytes refused", MAX_RECORD)
            return
        try:
            self.server.runtime.publish(_hook_record(self.server.runtime, data))
        except JobstreamError as exc:
            # no "ok": the hook writes the drop file itself
            logger.error("hook record not spooled (%s); the hook falls back to the drop "
                         "directory", exc)
            return
        self.server.received += 1
        try:
            self.wfile.write(b"ok\n")
        except OSError:
            pass  # the hook gave up waiting and dropped a file: a duplicate, fine


class _Server(socketserver.ThreadingUnixStreamServer):
    daemon_threads = True

    def __init__(self, path: str, runtime: EdgeRuntime) -> None:
        self.runtime = runtime
        self.received = 0
        super().__init__(path, _Handler)


class HookListener:
    """Listens on the hook socket, mode 0600: the hooks run as SlurmUser, the edge's user
    or ``hook_user``."""

    def __init__(self, runtime: EdgeRuntime, path: str | Path, hook_user: str = "") -> None:
        self.runtime = runtime
        self.path = Path(path)
        self.hook_user = hook_user
        self._server: _Server | None = None
        self._served: ServerThread | None = None

    @property
    def received(self) -> int:
        return self._server.received if self._server else 0

    def start(self) -> None:
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            if self.path.exists() or self.path.is_symlink():
                if not stat.S_ISSOCK(self.path.lstat().st_mode):
                    raise ServiceError(f"hook socket path {self.path} exists and is not a "
                                       "socket; set edge.slurm.hook_socket")
                self.path.unlink()  # a stale socket of an edge that died
            self._server = _Server(str(self.path), self.runtime)
            self.path.chmod(0o600)
            give_to_hook_user(self.path, self.hook_user)
        except OSError as exc:
            raise ServiceError(f"hook socket {self.path}: {exc.strerror}") from exc
        self._served = ServerThread(self._server, "hook-listener").start()
        logger.info("hook listener on %s", self.path)

    def stop(self) -> None:
        if self._served is not None:
            self._served.stop()
            try:
                self.path.unlink()
            except OSError:
                pass


class DropDirIngester(DirectoryIngester):
    """Spools the files the hooks dropped while the edge was down, oldest first."""

    name = "hook drop directory"

    def prepare(self) -> None:
        # the default one was sticky and writable by all (0o1733) before: ours to fix
        ensure_private_dir(self.directory, "hook drop directory", "edge.slurm.hook_drop_dir",
                           ours=not self.runtime.cfg.edge.slurm.hook_drop_dir)
        give_to_hook_user(self.directory, self.hook_user)

    def scan(self) -> int:
        """Spool and delete every complete drop file; how many."""
        try:
            names = sorted(n for n in os.listdir(self.directory)
                           if n.endswith(".json") and not n.startswith("."))
        except OSError as exc:
            logger.error("cannot list hook drop directory %s: %s", self.directory, exc)
            return 0
        done = 0
        for name in names:
            path = self.directory / name
            try:
                data = path.read_bytes()
            except OSError as exc:
                logger.warning("cannot read hook drop file %s: %s", path, exc)
                continue
            self.runtime.publish(_hook_record(self.runtime, data))
            path.unlink(missing_ok=True)
            done += 1
        self.ingested += done
        if done:
            logger.info("ingested %d hook records from %s", done, self.directory)
        return done
