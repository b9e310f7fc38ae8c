"""A real single-host Slurm 22.05 cluster for integration tests (Debian bookworm, as root).

``SlurmCluster(spec).start()`` installs Debian's slurm-wlm, slurmdbd, munge and MariaDB when
they are missing, writes slurm.conf, slurmdbd.conf and cgroup.conf from the templates in
``tests/integration/slurm/`` into a private directory (``spec.root/etc``, found by every
daemon and client through ``SLURM_CONF``), and starts private instances of munged, mariadbd,
slurmdbd, slurmctld and slurmd on loopback ports of their own. Accounting goes through
slurmdbd and MariaDB: cluster, accounts ``research`` > ``physics``, users ``root`` and
``alice`` (a Unix user created when missing) and qos ``high`` are set up with sacctmgr.
Partitions ``debug`` (default, unlimited) and ``short`` (60 min) come from slurm.conf.

Everything is idempotent across reruns on one machine: state (MariaDB data, slurmctld state
and job ids) is kept under the root, daemons left over from a crashed run are recognised by
their pid files and stopped, jobs left over are cancelled. ``stop()`` stops exactly the
daemons this object started. A daemon that fails raises ``SlurmClusterError`` with the tail
of its log.
"""

from __future__ import annotations

import fcntl
import json
import os
import pwd
import re
import secrets
import shutil
import socket
import string
import subprocess
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from slurm_daemons import Daemon, DaemonError, log_tail
from slurm_install import SlurmInstallError, ensure_installed
from waiting import wait_until

__all__ = [
    "TERMINAL_STATES",
    "ClusterSpec",
    "SlurmCluster",
    "SlurmClusterError",
    "default_root",
    "describe",
]

TEMPLATES = Path(__file__).resolve().parent / "slurm"
DEFAULT_ROOT = Path("/var/lib/jobstream/slurm")
TERMINAL_STATES = frozenset(
    {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY",
     "PREEMPTED", "BOOT_FAIL", "DEADLINE"}
)
_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
_CLIENT_TIMEOUT = 60.0
# Another test session may hold the cluster (one root, one cluster): wait this long for it.
_LOCK_WAIT_S = float(os.environ.get("JOBSTREAM_SLURM_LOCK_WAIT", "900"))


#: slurm.conf's lua plugins when no test installs jobstream's
PASS_THROUGH_LUA = {
    "job_submit.lua": "function slurm_job_submit(job_desc, part_list, submit_uid)\n"
                      "    return slurm.SUCCESS\nend\n"
                      "function slurm_job_modify(job_desc, job_rec, part_list, modify_uid)\n"
                      "    return slurm.SUCCESS\nend\nreturn slurm.SUCCESS\n",
    "cli_filter.lua": "function slurm_cli_setup_defaults(options, early_pass)\n"
                      "    return slurm.SUCCESS\nend\n"
                      "function slurm_cli_pre_submit(options, offset)\n"
                      "    return slurm.SUCCESS\nend\n"
                      "function slurm_cli_post_submit(offset, job_id, step_id)\n"
                      "    return slurm.SUCCESS\nend\n",
}


class SlurmClusterError(RuntimeError):
    """The test cluster cannot be installed, started or used; the message says why."""


def default_root() -> Path:
    """Where the cluster keeps config, state and logs (``JOBSTREAM_SLURM_ROOT`` overrides)."""
    return Path(os.environ.get("JOBSTREAM_SLURM_ROOT", str(DEFAULT_ROOT)))


def _short_hostname() -> str:
    return socket.gethostname().split(".")[0]


@dataclass(frozen=True)
class ClusterSpec:
    """What the test decides: where the jobcomp records go and which hooks slurmctld runs.

    ``prolog`` and ``epilog`` must be executable by the ``slurm`` user (so not under a
    private temporary directory of root); ``root/hooks`` is a good place.
    """

    jobcomp_url: str
    prolog: Path
    epilog: Path
    root: Path = field(default_factory=default_root)
    cluster: str = "testcluster"
    host: str = field(default_factory=_short_hostname)
    cpus: int = 8
    slurmctld_port: int = 16817
    slurmd_port: int = 16818
    slurmdbd_port: int = 16819
    mariadb_port: int = 16306


class SlurmCluster:
    """The running cluster: start/stop, job submission and state queries."""

    def __init__(self, spec: ClusterSpec) -> None:
        self.spec = spec
        self.root = spec.root
        self.etc = self.root / "etc"
        self.logs = self.root / "log"
        self.jobs_dir = self.root / "jobs"
        self.munge_socket = self.root / "munge" / "munge.socket"
        self.mariadb_socket = self.root / "mysql" / "mysqld.sock"
        self.timings: dict[str, float] = {}
        self._db_password = secrets.token_hex(12)
        self._started: list[Daemon] = []
        self._lock: IO[str] | None = None
        self._submitted: list[str] = []
        self._daemons = self._define_daemons()

    # -- environment ---------------------------------------------------------------

    @property
    def conf(self) -> Path:
        return self.etc / "slurm.conf"

    @property
    def env(self) -> dict[str, str]:
        """A minimal environment for daemons and clients: nothing of the caller leaks in."""
        return {"PATH": _PATH, "LANG": "C.UTF-8", "SLURM_CONF": str(self.conf)}

    def _define_daemons(self) -> dict[str, Daemon]:
        root, run, logs = self.root, self.root / "run", self.logs
        munge = self.root / "munge"
        mysql = self.root / "mysql"
        # The trailing slash keeps /x/slurm from claiming the daemons of /x/slurm2.
        common = {"marker": f"{root}/", "env": self.env, "cwd": logs}
        return {
            "munged": Daemon(
                name="munged", program="munged", pidfile=munge / "munged.pid",
                # munged insists on a log directory owned by munge or root.
                log=munge / "munged.log",
                argv=["runuser", "-u", "munge", "--", "munged",
                      f"--socket={self.munge_socket}", f"--key-file={munge / 'munge.key'}",
                      f"--pid-file={munge / 'munged.pid'}", f"--log-file={munge / 'munged.log'}",
                      f"--seed-file={munge / 'munged.seed'}"],
                **common),
            "mariadbd": Daemon(
                name="mariadbd", program="mariadbd", pidfile=mysql / "mariadbd.pid",
                log=logs / "mariadb.log", foreground=True,
                argv=["mariadbd", "--no-defaults", "--user=mysql", f"--datadir={mysql / 'data'}",
                      f"--socket={self.mariadb_socket}", f"--pid-file={mysql / 'mariadbd.pid'}",
                      f"--port={self.spec.mariadb_port}", "--bind-address=127.0.0.1",
                      "--skip-log-bin", "--innodb-buffer-pool-size=128M",
                      # Test data: losing the last second on a crash is fine, speed is not.
                      "--innodb-flush-log-at-trx-commit=2"],
                **common),
            "slurmdbd": Daemon(
                name="slurmdbd", program="slurmdbd", pidfile=run / "slurmdbd.pid",
                log=logs / "slurmdbd.log", argv=["slurmdbd"], **common),
            "slurmctld": Daemon(
                name="slurmctld", program="slurmctld", pidfile=run / "slurmctld.pid",
                log=logs / "slurmctld.log", argv=["slurmctld", "-i"], **common),
            "slurmd": Daemon(
                name="slurmd", program="slurmd", pidfile=run / "slurmd.pid",
                log=logs / "slurmd.log", argv=["slurmd", "-N", self.spec.host], **common),
        }

    # -- start / stop --------------------------------------------------------------

    def start(self) -> SlurmCluster:
        """Install if needed, configure, start every daemon and wait for an idle node."""
        if os.geteuid() != 0:
            raise SlurmClusterError("the Slurm test cluster must be started as root")
        self._acquire()  # before apt-get too: two sessions must not install at once
        t0 = time.monotonic()
        try:
            if ensure_installed():
                self.timings["install_s"] = time.monotonic() - t0
        except SlurmInstallError as exc:
            self._release()
            raise SlurmClusterError(str(exc)) from exc
        t1 = time.monotonic()
        try:
            self._stop_leftovers()
            self._prepare_tree()
            self._write_configs()
            self._start_munged()
            self._start_mariadb()
            self._start_slurmdbd()
            self._setup_accounting()
            self._start("slurmctld")
            self._wait_ctld()
            self._start("slurmd")
            self._cancel_leftover_jobs()
            self._wait_node_idle()
        except SlurmClusterError:
            self.stop()
            raise
        except (DaemonError, TimeoutError, subprocess.SubprocessError, OSError) as exc:
            self.stop()
            raise SlurmClusterError(str(exc)) from exc
        self.timings["start_s"] = time.monotonic() - t1
        return self

    def stop(self) -> None:
        """Cancel the jobs submitted here, then stop the daemons this object started."""
        if self._submitted and any(d.name == "slurmctld" for d in self._started):
            self.run(["scancel", *self._submitted], check=False)
        for daemon in reversed(self._started):
            daemon.stop()
        self._started.clear()
        self._release()

    def _acquire(self) -> None:
        """Hold the root's lock while the cluster runs: a second session waits its turn
        instead of taking the first one's daemons for leftovers and stopping them."""
        self.root.mkdir(parents=True, exist_ok=True)
        lock = (self.root / ".lock").open("a+")
        deadline = time.monotonic() + _LOCK_WAIT_S
        while True:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    lock.seek(0)
                    holder = lock.read().strip() or "unknown"
                    lock.close()
                    raise SlurmClusterError(
                        f"another session (pid {holder}) holds the Slurm test cluster in "
                        f"{self.root}; waited {_LOCK_WAIT_S:.0f} s") from None
                time.sleep(1.0)
        lock.seek(0)
        lock.truncate()
        lock.write(str(os.getpid()))
        lock.flush()
        self._lock = lock

    def _release(self) -> None:
        if self._lock is not None:
            fcntl.flock(self._lock, fcntl.LOCK_UN)
            self._lock.close()
            self._lock = None

    def _stop_leftovers(self) -> None:
        # Daemons of a previous run that crashed before its stop(): ours by pid file.
        for name in ("slurmd", "slurmctld", "slurmdbd", "mariadbd", "munged"):
            self._daemons[name].stop()

    def _start(self, name: str) -> None:
        daemon = self._daemons[name]
        # Listed first: if the start fails half-way, stop() still finds it by its pid file.
        self._started.append(daemon)
        daemon.start()

    def _prepare_tree(self) -> None:
        slurm = pwd.getpwnam("slurm")
        _ensure_user("alice")
        alice = pwd.getpwnam("alice")
        self.root.mkdir(parents=True, exist_ok=True)
        self.root.chmod(0o755)
        for parent in self.root.parents:
            # slurm, munge and alice must reach their files; say so rather than chmod /.
            if not parent.stat().st_mode & 0o001:
                raise SlurmClusterError(f"{parent} is not searchable by other users; "
                                        "choose another JOBSTREAM_SLURM_ROOT")
        (self.root / "etc").mkdir(exist_ok=True)
        for sub in ("log", "run", "state", "spool"):
            _owned_dir(self.root / sub, slurm.pw_uid, slurm.pw_gid, 0o755)
        _owned_dir(self.jobs_dir, alice.pw_uid, alice.pw_gid, 0o755)

    def _write_configs(self) -> None:
        slurm = pwd.getpwnam("slurm")
        values = {
            "cluster": self.spec.cluster, "host": self.spec.host, "root": str(self.root),
            "cpus": str(self.spec.cpus), "munge_socket": str(self.munge_socket),
            "slurmctld_port": str(self.spec.slurmctld_port),
            "slurmd_port": str(self.spec.slurmd_port),
            "slurmdbd_port": str(self.spec.slurmdbd_port),
            "mariadb_port": str(self.spec.mariadb_port),
            "jobcomp_url": self.spec.jobcomp_url, "prolog": str(self.spec.prolog),
            "epilog": str(self.spec.epilog), "db_password": self._db_password,
        }
        for name in ("slurm.conf", "cgroup.conf", "slurmdbd.conf"):
            template = string.Template((TEMPLATES / f"{name}.in").read_text())
            target = self.etc / name
            target.write_text(template.substitute(values))
            target.chmod(0o644)
        self.write_pass_through_lua()
        dbd = self.etc / "slurmdbd.conf"
        # slurmdbd refuses a config readable by others: it holds the database password.
        dbd.chmod(0o600)
        os.chown(dbd, slurm.pw_uid, slurm.pw_gid)

    def write_pass_through_lua(self) -> None:
        """job_submit.lua and cli_filter.lua that accept everything and record nothing:
        slurm.conf loads the lua plugins, a test installs jobstream's for its run and puts
        these back after it. job_submit/lua reloads its script when the file's mtime passes
        its last load, in whole seconds: written a second after any load, it is read."""
        for name, text in PASS_THROUGH_LUA.items():
            target = self.etc / name
            target.write_text(text)
            target.chmod(0o644)

    def _start_munged(self) -> None:
        munge = pwd.getpwnam("munge")
        mdir = self.root / "munge"
        _owned_dir(mdir, munge.pw_uid, munge.pw_gid, 0o755)
        key = mdir / "munge.key"
        if not key.exists():
            key.write_bytes(os.urandom(1024))
        os.chown(key, munge.pw_uid, munge.pw_gid)
        key.chmod(0o400)
        self._start("munged")
        sock = self.munge_socket
        probe = f"munge -n --socket={sock} | unmunge --socket={sock} >/dev/null"
        done = subprocess.run(["sh", "-c", probe], env=self.env, capture_output=True,
                              text=True, check=False)
        if done.returncode != 0:
            raise self._daemons["munged"].fail(f"munge round trip failed: {done.stderr}")

    def _start_mariadb(self) -> None:
        mysql = pwd.getpwnam("mysql")
        mdir = self.root / "mysql"
        _owned_dir(mdir, mysql.pw_uid, mysql.pw_gid, 0o755)
        if not (mdir / "data" / "mysql").is_dir():
            shutil.rmtree(mdir / "data", ignore_errors=True)
            done = subprocess.run(
                ["mariadb-install-db", "--no-defaults", "--user=mysql",
                 f"--datadir={mdir / 'data'}", "--auth-root-authentication-method=socket",
                 "--skip-test-db"],
                env=self.env, capture_output=True, text=True, check=False)
            if done.returncode != 0:
                raise DaemonError(f"mariadb-install-db failed:\n{done.stdout}{done.stderr}")
        self._start("mariadbd")
        daemon = self._daemons["mariadbd"]
        try:
            wait_until(lambda: self._sql("SELECT 1", check=False).returncode == 0,
                       timeout=60, what="MariaDB accepting connections")
        except TimeoutError as exc:
            raise daemon.fail(str(exc)) from None
        pw = self._db_password
        for host in ("127.0.0.1", "localhost"):
            self._sql(
                f"CREATE USER IF NOT EXISTS 'slurm'@'{host}' IDENTIFIED BY '{pw}';"
                f"ALTER USER 'slurm'@'{host}' IDENTIFIED BY '{pw}';"
                f"GRANT ALL ON slurm_acct_db.* TO 'slurm'@'{host}';")

    def _sql(self, statement: str, *, check: bool = True) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(
            ["mariadb", "--no-defaults", f"--socket={self.mariadb_socket}", "-u", "root",
             "-e", statement],
            env=self.env, capture_output=True, text=True, check=False, timeout=30)
        if check and done.returncode != 0:
            raise self._daemons["mariadbd"].fail(f"SQL failed: {done.stderr.strip()}")
        return done

    def _start_slurmdbd(self) -> None:
        self._start("slurmdbd")
        try:
            wait_until(lambda: self.run(["sacctmgr", "-n", "-P", "show", "cluster"],
                                        check=False, timeout=10).returncode == 0,
                       timeout=60, what="slurmdbd answering sacctmgr", interval=0.3)
        except TimeoutError as exc:
            raise self._daemons["slurmdbd"].fail(str(exc)) from None

    def _setup_accounting(self) -> None:
        """Cluster, accounts, users and qos; each added only when missing (idempotent)."""
        def names(entity: str, fmt: str) -> set[str]:
            out = self.run(["sacctmgr", "-n", "-P", "show", entity, f"format={fmt}"]).stdout
            return {line.strip() for line in out.splitlines() if line.strip()}

        def add(*args: str) -> None:
            self.run(["sacctmgr", "-i", "add", *args])

        if self.spec.cluster not in names("cluster", "cluster"):
            add("cluster", self.spec.cluster)
        accounts = names("account", "account")
        if "research" not in accounts:
            add("account", "research", "description=research", "organization=jobstream")
        if "physics" not in accounts:
            add("account", "physics", "parent=research", "description=physics",
                "organization=jobstream")
        if "high" not in names("qos", "name"):
            add("qos", "high", "priority=10")
        users = names("user", "user")
        if "root" not in users:
            add("user", "root", "account=research", "defaultaccount=research")
        if "alice" not in users:
            add("user", "alice", "account=physics", "defaultaccount=physics")
        qos = self.run(["sacctmgr", "-n", "-P", "show", "assoc", "user=alice",
                        "format=qos"]).stdout
        if "high" not in qos:
            self.run(["sacctmgr", "-i", "modify", "user", "alice", "set", "qos+=high"])

    def _wait_ctld(self) -> None:
        try:
            wait_until(lambda: "UP" in self.run(["scontrol", "ping"], check=False,
                                                timeout=10).stdout,
                       timeout=60, what="slurmctld answering scontrol ping", interval=0.2)
        except TimeoutError as exc:
            raise self._daemons["slurmctld"].fail(str(exc)) from None

    def _cancel_leftover_jobs(self) -> None:
        out = self.run(["squeue", "-h", "-o", "%i"]).stdout.split()
        if out:
            self.run(["scancel", *out], check=False)

    def node_state(self) -> str:
        """The node's state in sinfo (one line per partition; they agree once settled)."""
        out = self.run(["sinfo", "-h", "-N", "-n", self.spec.host, "-o", "%T"], check=False)
        return ",".join(sorted(set(out.stdout.split())))

    def _wait_node_idle(self) -> None:
        try:
            wait_until(lambda: self.node_state() == "idle", timeout=60,
                       what=f"node {self.spec.host} idle in sinfo", interval=0.2)
        except TimeoutError as exc:
            detail = self.run(["scontrol", "show", "node", self.spec.host], check=False).stdout
            raise self._daemons["slurmd"].fail(
                f"{exc} (state {self.node_state()!r})\n{detail}\n"
                f"{log_tail(self._daemons['slurmctld'].log, 20)}") from None

    # -- clients -------------------------------------------------------------------

    def run(
        self,
        argv: Sequence[str],
        *,
        user: str | None = None,
        check: bool = True,
        timeout: float = _CLIENT_TIMEOUT,
    ) -> subprocess.CompletedProcess[str]:
        """Run a Slurm client with the cluster's environment, as root or as ``user``."""
        cmd = list(argv)
        if user is not None and user != "root":
            # runuser keeps the environment given here (no login shell), SLURM_CONF included.
            cmd = ["runuser", "-u", user, "--", *cmd]
        done = subprocess.run(cmd, env=self.env, cwd=self.jobs_dir, capture_output=True,
                              text=True, check=False, timeout=timeout)
        if check and done.returncode != 0:
            raise SlurmClusterError(
                f"{' '.join(cmd)} failed ({done.returncode}): {done.stderr.strip()}")
        return done

    def submit(
        self,
        wrap: str,
        *,
        user: str = "alice",
        name: str | None = None,
        partition: str | None = None,
        account: str | None = None,
        qos: str | None = None,
        time_limit: str | None = None,
        array: str | None = None,
        dependency: str | None = None,
        hold: bool = False,
        extra: Iterable[str] = (),
    ) -> str:
        """``sbatch --wrap`` as ``user``; returns the job id (of an array: the array id)."""
        argv = ["sbatch", "--parsable", f"--chdir={self.jobs_dir}",
                f"--output={self.jobs_dir}/%x-%j.out"]
        options = {"--job-name": name, "--partition": partition, "--account": account,
                   "--qos": qos, "--time": time_limit, "--array": array,
                   "--dependency": dependency}
        argv += [f"{opt}={val}" for opt, val in options.items() if val is not None]
        if hold:
            argv.append("--hold")
        argv += [*extra, f"--wrap={wrap}"]
        job_id = self.run(argv, user=user).stdout.strip().split(";")[0]
        if not job_id.isdigit():
            raise SlurmClusterError(f"sbatch printed no job id: {job_id!r}")
        self._submitted.append(job_id)
        return job_id

    def cancel(self, job_id: str) -> None:
        self.run(["scancel", job_id])

    def release(self, job_id: str) -> None:
        self.run(["scontrol", "release", job_id])

    def job_records(self, job_id: str) -> list[dict[str, str]]:
        """``scontrol show job -o``: one dict per record (array tasks separately).

        Keys used by the harness: JobId, ArrayJobId, ArrayTaskId, JobState, Reason.
        """
        done = self.run(["scontrol", "show", "job", "-o", job_id], check=False)
        if done.returncode != 0:
            return []
        return [_scontrol_fields(line) for line in done.stdout.splitlines() if line.strip()]

    def job_states(self, job_id: str) -> dict[str, str]:
        """State per job or array task: keys ``"12"``, ``"11_2"``, pending rest ``"11_2-3"``."""
        states: dict[str, str] = {}
        for rec in self.job_records(job_id):
            task = rec.get("ArrayTaskId")
            key = f"{rec['ArrayJobId']}_{task}" if task else rec.get("JobId", "?")
            states[key] = rec.get("JobState", "?")
        if not states:
            # Gone from slurmctld (MinJobAge): ask the accounting database.
            out = self.run(["sacct", "-n", "-P", "-X", "-j", job_id, "-o", "JobID,State"],
                           check=False).stdout
            for line in out.splitlines():
                jid, _, state = line.partition("|")
                states[jid] = state.split()[0] if state else "?"
        return states

    def wait_for(
        self, job_id: str, states: Iterable[str], *, timeout: float = 180.0
    ) -> dict[str, str]:
        """Wait until every record of the job (all array tasks) is in one of ``states``."""
        wanted = frozenset(states)
        seen: dict[str, str] = {}

        def reached() -> bool:
            nonlocal seen
            seen = self.job_states(job_id)
            return bool(seen) and all(s in wanted for s in seen.values())

        try:
            wait_until(reached, timeout=timeout, what=f"job {job_id} in {sorted(wanted)}",
                       interval=0.25)
        except TimeoutError as exc:
            raise SlurmClusterError(
                f"{exc}; last seen {seen}\n{log_tail(self._daemons['slurmctld'].log, 20)}"
            ) from None
        return seen

    def squeue_json(self) -> dict[str, Any]:
        return json.loads(self.run(["squeue", "--json"]).stdout)

    def sacct_json(self, job_ids: Iterable[str]) -> dict[str, Any]:
        ids = ",".join(job_ids)
        return json.loads(self.run(["sacct", "--json", "-a", "-j", ids]).stdout)

    def sacct_parsable(self, job_ids: Iterable[str], fields: Sequence[str]) -> str:
        """``sacct --parsable2`` text (22.05's JSON loses exit codes; this keeps them)."""
        ids = ",".join(job_ids)
        return self.run(["sacct", "-a", "-j", ids, "--parsable2", "-o", ",".join(fields)]).stdout

    def version(self) -> str:
        return self.run(["sinfo", "--version"]).stdout.strip()

    def log(self, daemon: str) -> Path:
        return self._daemons[daemon].log


def _scontrol_fields(line: str) -> dict[str, str]:
    # Values may contain spaces (Command=, Comment=); the harness only needs the
    # space-free ones, so a token scan is enough.
    return dict(m.groups() for m in re.finditer(r"(?:^|\s)([A-Za-z:/]+)=(\S*)", line))


def _owned_dir(path: Path, uid: int, gid: int, mode: int) -> None:
    """Create ``path`` for a service user, re-owning its whole tree if the user's id changed
    (purging and reinstalling a package can recreate its user under another uid)."""
    path.mkdir(parents=True, exist_ok=True)
    st = path.stat()
    if (st.st_uid, st.st_gid) != (uid, gid):
        for dirpath, dirnames, filenames in os.walk(path):
            for name in (*dirnames, *filenames):
                os.chown(Path(dirpath) / name, uid, gid, follow_symlinks=False)
        os.chown(path, uid, gid)
    path.chmod(mode)


def _ensure_user(name: str) -> None:
    try:
        pwd.getpwnam(name)
    except KeyError:
        subprocess.run(["useradd", "--create-home", "--shell", "/bin/bash", name],
                       check=True, capture_output=True)


def describe(timings: Mapping[str, float]) -> str:
    """One line of the measured figures, for test reports."""
    return ", ".join(f"{k}={v:.1f}" for k, v in sorted(timings.items()))
