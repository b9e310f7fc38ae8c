"""Start, check and stop the private daemons of the Slurm test cluster, each by its PID.

Every daemon writes a pid file under the cluster's root. A daemon is "ours" only when that
pid file names a live process running the expected program with the cluster root in its
command line or environment; only such processes are ever signalled, so a system Slurm,
munged or MariaDB on the same host is never touched.
"""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from waiting import wait_until

__all__ = ["Daemon", "DaemonError", "log_tail"]


class DaemonError(RuntimeError):
    """A daemon did not start, did not become ready, or would not stop."""


def log_tail(path: Path, lines: int = 40) -> str:
    """The last lines of a log file, or a note that there is none, for error messages."""
    try:
        text = path.read_text(errors="replace")
    except OSError as exc:
        return f"(no log at {path}: {exc.strerror})"
    tail = text.splitlines()[-lines:]
    return f"--- last {len(tail)} lines of {path} ---\n" + "\n".join(tail)


@dataclass(frozen=True)
class Daemon:
    """One daemon: how to start it, where its pid file and log are, how to tell it is ours.

    ``foreground`` daemons (mariadbd) do not fork; they are started in a new session with
    their output appended to the log. The others fork and write their own pid file.
    """

    name: str
    program: str  # basename of the executable, checked against /proc/<pid>/exe
    argv: Sequence[str]
    pidfile: Path
    log: Path
    marker: str  # the cluster root: found in the command line or environment of ours
    env: Mapping[str, str]
    cwd: Path
    foreground: bool = False

    def pid(self) -> int | None:
        """The PID of our running instance, or None."""
        try:
            pid = int(self.pidfile.read_text().split()[0])
        except (OSError, ValueError, IndexError):
            return None
        return pid if self._is_ours(pid) else None

    def _is_ours(self, pid: int) -> bool:
        proc = Path("/proc") / str(pid)
        try:
            exe = os.readlink(proc / "exe")
            cmdline = (proc / "cmdline").read_bytes()
            environ = (proc / "environ").read_bytes()
        except OSError:
            return False
        name = Path(exe.removesuffix(" (deleted)")).name
        # Debian installs some daemons through alternatives: slurmctld -> slurmctld-wlm.
        if name != self.program and not name.startswith(self.program + "-"):
            return False
        marker = self.marker.encode()
        return marker in cmdline or marker in environ

    def start(self, *, timeout: float = 30.0) -> int:
        """Start the daemon and return its PID once its pid file names a live process."""
        self.pidfile.unlink(missing_ok=True)
        if self.foreground:
            with self.log.open("ab") as out:
                subprocess.Popen(  # noqa: S603 - fixed argv built by the harness
                    list(self.argv),
                    env=dict(self.env),
                    cwd=self.cwd,
                    stdin=subprocess.DEVNULL,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
        else:
            done = subprocess.run(
                list(self.argv),
                env=dict(self.env),
                cwd=self.cwd,
                stdin=subprocess.DEVNULL,
                capture_output=True,
                text=True,
                check=False,
                timeout=timeout,
            )
            if done.returncode != 0:
                raise DaemonError(
                    f"{self.name} exited with {done.returncode} at start: "
                    f"{(done.stdout + done.stderr).strip()}\n{log_tail(self.log)}"
                )
        try:
            wait_until(lambda: self.pid() is not None, timeout=timeout,
                       what=f"{self.name} pid file {self.pidfile}")
        except TimeoutError as exc:
            raise DaemonError(f"{self.name} did not start: {exc}\n{log_tail(self.log)}") from None
        pid = self.pid()
        assert pid is not None
        return pid

    def fail(self, problem: str) -> DaemonError:
        """An error about this daemon with its log tail, for the caller to raise."""
        state = "running" if self.pid() is not None else "not running"
        return DaemonError(f"{self.name} ({state}): {problem}\n{log_tail(self.log)}")

    def stop(self, *, timeout: float = 30.0) -> bool:
        """Stop our instance (SIGTERM, then SIGKILL after ``timeout``); True if one ran."""
        pid = self.pid()
        if pid is None:
            return False
        _signal(pid, signal.SIGTERM)
        try:
            wait_until(lambda: not _alive(pid), timeout=timeout, what=f"{self.name} exit")
        except TimeoutError:
            _signal(pid, signal.SIGKILL)
            wait_until(lambda: not _alive(pid), timeout=10, what=f"{self.name} exit after KILL")
        return True


def _signal(pid: int, sig: signal.Signals) -> None:
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        pass


def _alive(pid: int) -> bool:
    """True while ``pid`` exists and is not a zombie (a zombie of ours has exited)."""
    try:
        stat = (Path("/proc") / str(pid) / "stat").read_text()
    except OSError:
        return False
    # The state letter follows the parenthesised command name, which may contain spaces.
    return stat.rsplit(")", 1)[1].split()[0] != "Z"
