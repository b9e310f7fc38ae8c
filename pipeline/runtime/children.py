"""``jobstream`` subcommands run as child processes (the demo's and the replay's workers).

A child gets its configuration entirely through ``JOBSTREAM_*`` variables
(:func:`config_env`), so a parent can hand it a changed tree (the stack's addresses, a
replay's own topics and app id) without writing a file. Its stdout and stderr go to one
log file. :meth:`Child.stop` sends SIGTERM (the worker and the sink flush and commit on
it) and SIGKILLs after a timeout; only the process this object started is ever signalled.
"""

from __future__ import annotations

import os
import random
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import IO, Any

from pipeline.runtime.config import Config, as_dict
from pipeline.runtime.errors import ServiceError

__all__ = ["Child", "config_env", "free_port", "free_port_block", "log_tail", "stop_on_signals"]

_MAIN = "from pipeline.cli import main; main(prog_name='jobstream')"


def config_env(cfg: Config) -> dict[str, str]:
    """``JOBSTREAM_*`` variables that give a process exactly ``cfg``'s values."""
    env: dict[str, str] = {}

    def walk(prefix: str, value: Any) -> None:
        if isinstance(value, Mapping):
            for k, v in value.items():
                walk(f"{prefix}__{k.upper()}" if prefix else k.upper(), v)
        elif isinstance(value, bool):
            env[f"JOBSTREAM_{prefix}"] = "true" if value else "false"
        elif isinstance(value, (list, tuple)):
            # the environment's form of a list key (config._str_tuple)
            env[f"JOBSTREAM_{prefix}"] = ",".join(value)
        elif value is not None:
            env[f"JOBSTREAM_{prefix}"] = str(value)

    tree = as_dict(cfg)
    tree.pop("source", None)
    walk("", tree)
    return env


def free_port() -> int:
    """A TCP port free on loopback now (for a worker's web server)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


#: where the kernel keeps its range of ports for connect() and bind(0), when it does not say
_EPHEMERAL_DEFAULT = (32768, 60999)
#: the lowest port a block is taken from
_BLOCK_LOW = 20000


def _ephemeral_low() -> int:
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return _EPHEMERAL_DEFAULT[0]


def free_port_block(count: int, attempts: int = 100) -> int:
    """A port ``base`` such that ``base`` .. ``base + count - 1`` are all free on loopback
    now (for a local Kafka cluster, whose nodes take consecutive ports).

    The block lies below the kernel's ephemeral range: a port from that range, free when
    checked, can become the local port of any outgoing connection (the nodes' own, to
    each other) in the seconds before its node binds it, and the node then fails to start."""
    high = _ephemeral_low() - count
    if high < _BLOCK_LOW:  # an ephemeral range that starts this low leaves no choice
        high = 65536 - count
    rng = random.Random()
    for _ in range(attempts):
        held: list[socket.socket] = []
        try:
            base = rng.randrange(_BLOCK_LOW, high + 1)
            for port in range(base, base + count):
                sock = socket.socket()
                held.append(sock)
                sock.bind(("127.0.0.1", port))
            return base
        except OSError:
            continue  # one of them taken: try another base
        finally:
            for sock in held:
                sock.close()
    raise ServiceError(f"no {count} consecutive free ports on loopback in {attempts} tries")


def _interrupt(_signum: int, _frame: object) -> None:
    raise KeyboardInterrupt


def stop_on_signals() -> None:
    """SIGINT and SIGTERM raise KeyboardInterrupt, so that a parent's clean-up (stopping its
    children) runs; SIGINT too, since a shell starts background jobs with it ignored."""
    signal.signal(signal.SIGINT, _interrupt)
    signal.signal(signal.SIGTERM, _interrupt)


def log_tail(path: Path, lines: int = 15) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return ""
    return "\n".join(text.splitlines()[-lines:])


class Child:
    """One ``jobstream <args>`` child process with ``cfg`` as its configuration.

    :param name: what to call it in messages (``worker``, ``sink``)
    :param args: the subcommand and its options
    :param log: file that receives its stdout and stderr (appended)
    :param module: run ``python -m module <args>`` instead of ``jobstream`` (an edge alone,
        ``pipeline.edges``, without the command line's imports)
    """

    def __init__(self, name: str, cfg: Config, args: Sequence[str], log: Path, *,
                 module: str | None = None) -> None:
        self.name = name
        self.cfg = cfg
        self.args = list(args)
        self.log = log
        self.command = ["-m", module] if module else ["-c", _MAIN]
        self.proc: subprocess.Popen[bytes] | None = None
        self._log_fh: IO[bytes] | None = None

    def start(self) -> Child:
        self.log.parent.mkdir(parents=True, exist_ok=True)
        env = {k: v for k, v in os.environ.items() if not k.startswith("JOBSTREAM_")}
        env.update(config_env(self.cfg))
        env["PYTHONUNBUFFERED"] = "1"
        self._log_fh = self.log.open("ab")
        self.proc = subprocess.Popen(
            [sys.executable, *self.command, *self.args], env=env,
            stdin=subprocess.DEVNULL, stdout=self._log_fh, stderr=subprocess.STDOUT,
            # its own process group: a Ctrl-C in the terminal reaches the parent only,
            # which stops its children in order (flush, commit) instead of all at once
            start_new_session=True)
        return self

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc else None

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def poll(self) -> int | None:
        """The exit code; None while it runs (or before it started)."""
        return self.proc.poll() if self.proc is not None else None

    def check(self) -> None:
        """Raise ServiceError (with the log's tail) if the child has exited."""
        if self.proc is not None and self.proc.poll() is not None:
            raise ServiceError(f"jobstream {self.name} exited with code {self.proc.returncode} "
                               f"(log {self.log}):\n{log_tail(self.log)}")

    def stop(self, timeout: float = 30.0) -> int | None:
        """SIGTERM, wait up to ``timeout``, then SIGKILL; returns the exit code."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            deadline = time.monotonic() + timeout
            while self.proc.poll() is None and time.monotonic() < deadline:
                time.sleep(0.1)
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait()
        if self._log_fh is not None:
            self._log_fh.close()
            self._log_fh = None
        return self.proc.returncode
