"""Elasticsearch for the local stack: the integ-test zip from Maven Central, one node.

That distribution is the server with only the netty transport and x-pack core/security: no
``GET /`` (readiness is ``/_cluster/health``), no painless, no reindex. It has no bundled
JDK, so the stack picks one: 9.x needs Java 21+, 8.x cannot run on 24+. Elasticsearch
refuses to run as root, so as root the stack runs it as a dedicated system user
(``stack.es_user``), which must be able to reach the cache directory.
"""

from __future__ import annotations

import json
import os
import pwd
import shutil
import subprocess
import urllib.error
import urllib.request
import zipfile
from collections.abc import Callable
from functools import cached_property
from importlib.resources import files
from pathlib import Path
from string import Template

from pipeline.runtime.errors import ServiceError
from pipeline.tooling.stack.java import Jdk, inspect_jdk, pick_jdk
from pipeline.tooling.stack.maven import DEPENDENCY_PLUGIN, run_mvn
from pipeline.tooling.stack.service import Service

__all__ = ["ES8_DEFAULT", "ES9_DEFAULT", "ElasticsearchService", "jdk_range"]

#: newest of each line whose integ-test zip is on Maven Central and starts here
#: (Maven Central's version list for this artifact is stale: many releases lack the zip)
ES9_DEFAULT = "9.5.3"
ES8_DEFAULT = "8.19.21"

GROUP = "org.elasticsearch.distribution.integ-test-zip"
HEAP = "-Xms512m -Xmx512m"

_ASSETS = files("pipeline.tooling.stack") / "assets"


def jdk_range(version: str) -> tuple[int, int | None]:
    """The Java majors an Elasticsearch version runs on."""
    major = version.split(".")[0]
    if major == "9":
        return 21, None
    if major == "8":
        # 8.x asks for a Security Manager, which JDK 24 removed
        return 17, 23
    raise ServiceError(f"stack.elasticsearch_version {version!r}: only 8.x and 9.x are supported")


class ElasticsearchService(Service):
    name = "elasticsearch"
    title = "Elasticsearch"
    ready_timeout = 180.0
    stop_timeout = 30.0

    @cached_property
    def plan(self) -> tuple[str, Jdk]:
        """(version, JDK): the configured ones, else 9.x on the newest JDK 21+, else 8.x."""
        stack = self.cfg.stack
        wanted = stack.elasticsearch_version
        if stack.java_home:
            jdk = inspect_jdk(Path(stack.java_home))
            if jdk is None:
                raise ServiceError(f"stack.java_home {stack.java_home} is not a JDK")
            version = wanted or (ES9_DEFAULT if jdk.major >= 21 else ES8_DEFAULT)
            pick_jdk([jdk], *jdk_range(version), newest=True,
                     purpose=f"Elasticsearch {version}")
            return version, jdk
        if wanted:
            return wanted, pick_jdk(self.jdks, *jdk_range(wanted), newest=True,
                                    purpose=f"Elasticsearch {wanted}")
        if any(j.major >= 21 for j in self.jdks):
            return ES9_DEFAULT, pick_jdk(self.jdks, 21, newest=True, purpose="Elasticsearch 9")
        return ES8_DEFAULT, pick_jdk(self.jdks, *jdk_range(ES8_DEFAULT), newest=True,
                                     purpose=f"Elasticsearch {ES8_DEFAULT}")

    @property
    def version(self) -> str:
        return self.plan[0]

    @property
    def ports(self) -> tuple[int, ...]:
        return (self.cfg.stack.elasticsearch_port,)

    @property
    def address(self) -> str:
        return f"http://127.0.0.1:{self.cfg.stack.elasticsearch_port}"

    @property
    def home(self) -> Path:
        return self.cache / f"elasticsearch-{self.version}"

    @property
    def conf_dir(self) -> Path:
        return self.run_dir / "config"

    @property
    def tmp_dir(self) -> Path:
        return self.run_dir / "tmp"

    @property
    def marker(self) -> str:
        # ES_PATH_CONF reaches the node through its stdin, ES_TMPDIR through the command line
        return f"-Djava.io.tmpdir={self.tmp_dir}"

    @property
    def as_user(self) -> str | None:
        """The system user to run as, or None to run as ourselves (not root)."""
        return self.cfg.stack.es_user if os.geteuid() == 0 else None

    def installed(self) -> bool:
        return (self.home / ".complete").is_file()

    def fetch(self, progress: Callable[[str], None]) -> None:
        repo = self.cache / "m2"
        run_mvn([f"{DEPENDENCY_PLUGIN}:get", f"-Dartifact={GROUP}:elasticsearch:{self.version}:zip",
                 "-Dtransitive=false"],
                repo=repo, log=self.cache / "logs" / f"mvn-elasticsearch-{self.version}.log",
                java_home=self.plan[1].home, what=f"Elasticsearch {self.version}",
                progress=progress)
        archive = repo.joinpath(*GROUP.split("."), "elasticsearch", self.version,
                                f"elasticsearch-{self.version}.zip")
        staging = self.cache / f".elasticsearch-{self.version}.partial"
        shutil.rmtree(staging, ignore_errors=True)
        _extract(archive, staging, progress)
        shutil.rmtree(self.home, ignore_errors=True)
        (staging / f"elasticsearch-{self.version}").rename(self.home)
        staging.rmdir()
        (self.home / ".complete").write_text(self.version + "\n")

    def prepare(self) -> None:
        tmp = self.tmp_dir
        for d in (self.run_dir, self.data_dir, self.logs_dir, tmp):
            d.mkdir(parents=True, exist_ok=True)
        # Our own config directory (ES_PATH_CONF): the distribution stays untouched and the
        # keystore Elasticsearch creates on first start lives with the data.
        shutil.copytree(self.home / "config", self.conf_dir, dirs_exist_ok=True)
        yml = Template(_ASSETS.joinpath("elasticsearch.yml").read_text()).substitute(
            port=self.cfg.stack.elasticsearch_port, data_dir=self.data_dir,
            logs_dir=self.logs_dir)
        (self.conf_dir / "elasticsearch.yml").write_text(yml)
        user = self.as_user
        if user is not None:
            self._hand_over(user, tmp)

    def _hand_over(self, user: str, tmp: Path) -> None:
        """As root: create the system user, give it the run directory, check it can read."""
        try:
            pw = pwd.getpwnam(user)
        except KeyError:
            made = subprocess.run(["useradd", "--system", "--no-create-home", "--shell",
                                   "/usr/sbin/nologin", user], capture_output=True, text=True,
                                  check=False)
            if made.returncode != 0:
                raise ServiceError(f"cannot create system user {user} for Elasticsearch: "
                                   f"{made.stderr.strip()}") from None
            pw = pwd.getpwnam(user)
        for d in (self.cache, self.cache / "run"):
            d.chmod(d.stat().st_mode | 0o055)
        for d in (self.run_dir, self.data_dir, self.logs_dir, tmp):
            os.chown(d, pw.pw_uid, pw.pw_gid)
        for root, dirs, names in os.walk(self.conf_dir):
            for name in [root, *(os.path.join(root, n) for n in dirs + names)]:
                os.chown(name, pw.pw_uid, pw.pw_gid)
        probe = subprocess.run(
            ["runuser", "-u", user, "--", "test", "-r", str(self.home / "bin" / "elasticsearch"),
             "-a", "-w", str(self.data_dir)], capture_output=True, check=False)
        if probe.returncode != 0:
            raise ServiceError(
                f"the Elasticsearch user {user} cannot reach {self.cache} (a parent directory "
                "is private); set stack.cache_dir to a path others may traverse, "
                "e.g. /var/cache/jobstream")

    def launch(self) -> subprocess.Popen[bytes]:
        settings = {"ES_JAVA_HOME": str(self.plan[1].home), "ES_PATH_CONF": str(self.conf_dir),
                    "ES_JAVA_OPTS": HEAP, "ES_TMPDIR": str(self.tmp_dir)}
        # -d: the launcher returns once the node runs (or has failed); -p: the node's pid
        cmd = [str(self.home / "bin" / "elasticsearch"), "-d", "-p", str(self.pidfile)]
        env = {k: v for k, v in os.environ.items() if k not in ("JAVA_HOME", "JAVA_TOOL_OPTIONS")}
        user = self.as_user
        if user is not None:
            cmd = ["runuser", "-u", user, "--", "env", *(f"{k}={v}" for k, v in settings.items()),
                   *cmd]
        else:
            env.update(settings)
        self.pidfile.unlink(missing_ok=True)
        with (self.run_dir / "launcher.out").open("wb") as out:
            return subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=out,
                                    stderr=subprocess.STDOUT, env=env, cwd=self.run_dir,
                                    start_new_session=True)

    def probe(self, timeout: float) -> bool:
        url = f"{self.address}/_cluster/health"
        try:
            with urllib.request.urlopen(url, timeout=timeout) as resp:  # noqa: S310 (http://127.0.0.1)
                health = json.load(resp)
        except (OSError, urllib.error.URLError, ValueError):
            return False
        return health.get("status") in ("yellow", "green")

    def log_files(self) -> list[Path]:
        return [self.run_dir / "launcher.out", self.logs_dir / "jobstream.log"]


def _extract(archive: Path, dest: Path, progress: Callable[[str], None]) -> None:
    """Unzip keeping the Unix permission bits (zipfile drops them; bin/ must stay executable)."""
    with zipfile.ZipFile(archive) as zf:
        members = zf.infolist()
        for n, info in enumerate(members, 1):
            path = Path(zf.extract(info, dest))
            mode = (info.external_attr >> 16) & 0o777
            if mode:
                path.chmod(mode | (0o755 if info.is_dir() else 0o644))
            if n % 200 == 0 or n == len(members):
                progress(f"unpacking {n}/{len(members)} files")
