"""Prometheus for the local stack: built once with ``go install``, scraping jobstream.

The Go module proxy serves Prometheus's source as a module, so the binaries are built here
rather than downloaded: ``go install .../cmd/prometheus@VERSION .../cmd/promtool@VERSION``
with GOBIN, GOCACHE and GOMODCACHE inside the stack's cache (so, like Kafka's and
Elasticsearch's downloads, the cache directory is the whole state). It is built with the
``remove_all_sd`` tag (Prometheus's own, ``plugins/``): the stack scrapes static targets,
and the cloud and Kubernetes discoveries' SDKs were most of the build (with them, 15
minutes on 2 busy cores and 11 of CPU, 270 MB of binaries, 1.9 GB of modules; without, 6
minutes and 6 of CPU, 146 MB, 1.1 GB). It runs once, at the lowest CPU priority. No web UI
assets are built in (the ``builtinassets`` tag): the HTTP API, which the checks and
Grafana use, is all there.

Each start writes ``run/prometheus/prometheus.yml`` from the config: one scrape job per
process whose metrics port is set (``[metrics]``: ``jobstream-worker``, ``jobstream-sink``,
``jobstream-edge-flux``, ``jobstream-edge-slurm``), and the shipped alert rules
(``pipeline/deploy/prometheus/jobstream-rules.yml``). promtool checks the file before the
server starts on it, so a bad one fails the start with promtool's reason.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping
from importlib.resources import files
from pathlib import Path
from typing import Any

from pipeline.runtime.config import Config
from pipeline.runtime.errors import ServiceError
from pipeline.runtime.metrics import PROCESSES
from pipeline.tooling.stack import procs
from pipeline.tooling.stack.service import Service

__all__ = ["MODULE", "RULES", "VERSION", "PrometheusService", "build_env", "scrape_config",
           "targets"]

MODULE = "github.com/prometheus/prometheus"
#: the module version ``go install`` builds (Prometheus 3.16's source)
VERSION = "v0.316.0"
#: the alert rules shipped with jobstream, loaded by the stack's Prometheus
RULES = files("pipeline.deploy") / "prometheus" / "jobstream-rules.yml"
SCRAPE_INTERVAL = "15s"
#: metrics binds that mean "every address": scraped on loopback
_WILDCARDS = frozenset({"", "0.0.0.0", "::", "[::]", "*"})  # noqa: S104 - names, not a bind


def targets(cfg: Config) -> list[tuple[str, str]]:
    """(scrape job, host:port) of each jobstream process whose metrics port is set."""
    m = cfg.metrics
    host = "127.0.0.1" if m.bind in _WILDCARDS else m.bind
    if ":" in host and not host.startswith("["):
        host = f"[{host}]"
    return [("jobstream-" + process.replace(" ", "-"), f"{host}:{getattr(m, key)}")
            for process, key in PROCESSES.items() if getattr(m, key)]


def scrape_config(cfg: Config, rules: Path, *, interval: str = SCRAPE_INTERVAL
                  ) -> dict[str, Any]:
    """The ``prometheus.yml`` of the stack (YAML is a superset of JSON: written as JSON):
    a scrape job per jobstream process with a metrics port, and ``rules`` loaded; scraped
    and evaluated every ``interval`` (a test's is shorter)."""
    m = cfg.metrics
    jobs: list[dict[str, Any]] = []
    for name, target in targets(cfg):
        job: dict[str, Any] = {"job_name": name, "static_configs": [{"targets": [target]}]}
        if m.token_file:
            job["authorization"] = {"credentials_file": str(Path(m.token_file).absolute())}
        if m.tls_cert:
            # the ports' own certificate as the CA: the local stack scrapes this host
            job["scheme"] = "https"
            job["tls_config"] = {"ca_file": str(Path(m.tls_cert).absolute())}
        jobs.append(job)
    return {"global": {"scrape_interval": interval, "evaluation_interval": interval},
            "rule_files": [str(rules)],
            "scrape_configs": jobs}


def build_env(cache: Path, bin_dir: Path, base: Mapping[str, str]) -> dict[str, str]:
    """``base`` with the Go settings that keep the build inside the stack's cache."""
    env = dict(base)
    env.update({
        "GOBIN": str(bin_dir),
        "GOCACHE": str(cache / "go" / "cache"),
        "GOMODCACHE": str(cache / "go" / "mod"),
        # -mod=mod: resolve from the module's own go.mod, whatever directory this runs in;
        # -modcacherw: a cache whose files can be deleted like the rest of stack.cache_dir
        "GOFLAGS": "-mod=mod -modcacherw",
    })
    return env


class PrometheusService(Service):
    name = "prometheus"
    title = "Prometheus"
    fetch_tool = "go install (minutes, once)"
    ready_timeout = 60.0
    stop_timeout = 30.0

    @property
    def version(self) -> str:
        return VERSION

    @property
    def ports(self) -> tuple[int, ...]:
        return (self.cfg.stack.prometheus_port,)

    @property
    def address(self) -> str:
        return f"http://127.0.0.1:{self.cfg.stack.prometheus_port}"

    @property
    def bin_dir(self) -> Path:
        return self.cache / "prometheus" / VERSION / "bin"

    @property
    def prometheus(self) -> Path:
        return self.bin_dir / "prometheus"

    @property
    def promtool(self) -> Path:
        return self.bin_dir / "promtool"

    @property
    def conf(self) -> Path:
        return self.run_dir / "prometheus.yml"

    @property
    def marker(self) -> str:
        return f"--config.file={self.conf}"

    def installed(self) -> bool:
        # go install moves each binary into GOBIN whole: present means complete
        return self.prometheus.is_file() and self.promtool.is_file()

    def fetch(self, progress: Callable[[str], None]) -> None:
        go = shutil.which("go")
        if go is None:
            raise ServiceError("Prometheus is built with the Go toolchain, and 'go' is not on "
                               "PATH (./run installs it)")
        log = self.cache / "logs" / f"go-install-prometheus-{VERSION}.log"
        log.parent.mkdir(parents=True, exist_ok=True)
        self.bin_dir.mkdir(parents=True, exist_ok=True)
        cmd = ["nice", "-n", "19", go, "install", "-tags", "remove_all_sd",
               f"{MODULE}/cmd/prometheus@{VERSION}",
               f"{MODULE}/cmd/promtool@{VERSION}"]
        env = build_env(self.cache, self.bin_dir, os.environ)
        with log.open("w") as out:
            proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                    text=True, env=env, cwd=self.cache)
            assert proc.stdout is not None
            modules = 0
            for line in proc.stdout:
                out.write(line)
                if line.startswith("go: downloading "):
                    modules += 1
                    progress(f"{modules} modules downloaded, last {line.split()[2]}")
                else:
                    progress("compiling")
            code = proc.wait()
        if code != 0:
            raise ServiceError(f"go install of Prometheus {VERSION} failed (exit {code}):\n"
                               f"{procs.tail([log], 15)}\n(the Go module proxy must be "
                               "reachable on first use)")
        # the compiled packages (2 GB) only speed up a rebuild of this version; the modules
        # (GOMODCACHE, 2 GB) stay, so a rebuild needs no network
        shutil.rmtree(env["GOCACHE"], ignore_errors=True)

    def prepare(self) -> None:
        for d in (self.run_dir, self.data_dir, self.logs_dir):
            d.mkdir(parents=True, exist_ok=True)
        rules = self.run_dir / "rules" / "jobstream-rules.yml"
        rules.parent.mkdir(exist_ok=True)
        rules.write_text(RULES.read_text())
        self.conf.write_text(json.dumps(scrape_config(self.cfg, rules), indent=2) + "\n")
        checked = subprocess.run([str(self.promtool), "check", "config", str(self.conf)],
                                 capture_output=True, text=True, check=False)
        if checked.returncode != 0:
            raise ServiceError(f"promtool refused {self.conf}:\n"
                               f"{(checked.stdout + checked.stderr).strip()}")

    def launch(self) -> subprocess.Popen[bytes]:
        out = self.logs_dir / "prometheus.log"
        procs.rotate(out)
        port = self.cfg.stack.prometheus_port
        with out.open("ab") as log:
            proc = subprocess.Popen(
                [str(self.prometheus), self.marker, f"--storage.tsdb.path={self.data_dir}",
                 f"--web.listen-address=127.0.0.1:{port}", "--storage.tsdb.retention.time=7d"],
                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                cwd=self.run_dir, start_new_session=True)
        self.pidfile.write_text(f"{proc.pid}\n")
        return proc

    def probe(self, timeout: float) -> bool:
        try:
            with urllib.request.urlopen(f"{self.address}/-/ready", timeout=timeout) as resp:  # noqa: S310 (http://127.0.0.1)
                return bool(resp.status == 200)
        except (OSError, urllib.error.URLError):
            return False

    def log_files(self) -> list[Path]:
        return [self.logs_dir / "prometheus.log"]
