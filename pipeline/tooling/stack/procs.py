"""Processes of the local stack: pid files, ports, stopping, log tails.

A pid file alone is not proof: after a reboot the number may belong to another program. A
process counts as ours only when it is alive and its command line carries a marker (a path
inside the stack's cache directory), so ``down`` never signals a stranger.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import psutil

__all__ = [
    "owned_process",
    "port_answers",
    "port_owner",
    "port_taken",
    "read_pid",
    "remember_child",
    "rotate",
    "stop_process",
    "tail",
    "wait_gone",
]

#: children this Python process started; polled so that stopped ones do not stay zombies
_CHILDREN: dict[int, subprocess.Popen[bytes]] = {}


def remember_child(proc: subprocess.Popen[bytes]) -> None:
    _CHILDREN[proc.pid] = proc


def _reap() -> None:
    for pid, proc in list(_CHILDREN.items()):
        if proc.poll() is not None:
            del _CHILDREN[pid]


def read_pid(pidfile: Path) -> int | None:
    try:
        return int(pidfile.read_text().strip())
    except (OSError, ValueError):
        return None


def owned_process(pidfile: Path, marker: str) -> psutil.Process | None:
    """The live process named by ``pidfile`` whose command line contains ``marker``."""
    _reap()
    pid = read_pid(pidfile)
    if pid is None:
        return None
    try:
        proc = psutil.Process(pid)
        if not _alive(proc):
            return None
        if not any(marker in arg for arg in _cmdline(proc)):
            return None
        return proc
    except (psutil.NoSuchProcess, psutil.AccessDenied, OSError):
        return None


def _threads_left(proc: psutil.Process) -> list[str]:
    """The threads of a zombie leader still in their exit. A leader is a zombie as soon as
    it exits, while the other threads can hold the process's sockets and files until the
    last one is done (a JVM unmapping its heap takes a while)."""
    return [t for t in os.listdir(f"/proc/{proc.pid}/task") if int(t) != proc.pid]


def _cmdline(proc: psutil.Process) -> list[str]:
    """The command line; of a zombie leader, read through a thread still exiting."""
    if proc.status() != psutil.STATUS_ZOMBIE:
        return proc.cmdline()
    for tid in _threads_left(proc):
        data = Path(f"/proc/{proc.pid}/task/{tid}/cmdline").read_bytes()
        if data:
            return data.rstrip(b"\0").decode(errors="replace").split("\0")
    return []


def _alive(proc: psutil.Process) -> bool:
    _reap()
    try:
        if not proc.is_running():
            return False
        return proc.status() != psutil.STATUS_ZOMBIE or bool(_threads_left(proc))
    except (psutil.NoSuchProcess, FileNotFoundError):
        return False


def wait_gone(proc: psutil.Process, timeout: float) -> bool:
    """Wait until ``proc`` has exited (or is a zombie); False on timeout."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not _alive(proc):
            return True
        time.sleep(0.2)
    return not _alive(proc)


def stop_process(proc: psutil.Process, timeout: float, *, kill: bool = False) -> bool:
    """SIGTERM, wait up to ``timeout`` s, then SIGKILL. True if it went on SIGTERM.
    ``kill``: SIGKILL at once (a crash, for fault injection); returns False."""
    if not kill:
        with contextlib.suppress(psutil.NoSuchProcess):
            proc.send_signal(signal.SIGTERM)
        if wait_gone(proc, timeout):
            return True
    with contextlib.suppress(psutil.NoSuchProcess):
        proc.send_signal(signal.SIGKILL)
    wait_gone(proc, 10.0)
    return False


def port_taken(port: int, host: str = "127.0.0.1") -> bool:
    """True when something listens on (or holds) ``host:port``."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        # as the JVM servers do, so a port in TIME_WAIT after our own stop counts as free
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError as exc:
            if exc.errno in (errno.EADDRINUSE, errno.EACCES):
                return True
            raise
    return False


def port_owner(port: int) -> str:
    """``name (pid N)`` of the process listening on ``port``, or "" when it cannot be seen."""
    try:
        conns = psutil.net_connections(kind="tcp")
    except (psutil.AccessDenied, OSError):
        return ""
    for conn in conns:
        if conn.laddr and conn.laddr.port == port and conn.status == psutil.CONN_LISTEN:
            if conn.pid is None:
                return ""
            try:
                return f"{psutil.Process(conn.pid).name()} (pid {conn.pid})"
            except psutil.Error:
                return f"pid {conn.pid}"
    return ""


def port_answers(port: int, host: str = "127.0.0.1", timeout: float = 1.0) -> bool:
    """True when a TCP connection to ``host:port`` is accepted."""
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


_ERROR = re.compile(r"\b(ERROR|FATAL)\b")


def tail(paths: Iterator[Path] | list[Path], lines: int = 20, since: float = 0.0) -> str:
    """The last ``lines`` lines of each existing file modified at or after ``since`` (epoch
    seconds), headed by its path."""
    out: list[str] = []
    for path in paths:
        try:
            if path.stat().st_mtime < since:
                continue  # a log of an earlier run says nothing about this one
            text = path.read_text(errors="replace").splitlines()
        except OSError:
            continue
        first = next((i for i, line in enumerate(text) if _ERROR.search(line)), None)
        if first is not None and first < len(text) - lines:
            # the first error is usually the cause; the last lines, its consequences
            out.append(f"--- {path} (its first error, line {first + 1})")
            out.extend(text[first:first + 8])
        out.append(f"--- {path} (last {min(lines, len(text))} lines)")
        out.extend(text[-lines:])
    return "\n".join(out)


def rotate(path: Path, max_bytes: int = 10 << 20) -> None:
    """Move ``path`` to ``path.1`` when it has grown past ``max_bytes``."""
    with contextlib.suppress(OSError):
        if path.stat().st_size > max_bytes:
            os.replace(path, path.with_name(path.name + ".1"))
