"""Helpers of the demo and replay tests: ``jobstream`` subprocesses on a test's own config."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from pipeline.runtime.children import config_env, free_port
from pipeline.runtime.config import Config
from pipeline.tooling.demo import DemoOptions
from pipeline.tooling.workload import Workload

#: Guard against a hang only: a run normally ends long before.
GUARD_S = 600.0


def demo_config(cfg: Config, tmp: Path) -> Config:
    """The test's config with a web port of its own and a store under a fresh, deeper path
    (the worker must create its parents)."""
    return cfg.replace(worker={"web_port": free_port(),
                               "store_dir": str(tmp / "state" / "w" / "worker-store")})


MAIN = "from pipeline.cli import main; main(prog_name='jobstream')"


def child_env(cfg: Config) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("JOBSTREAM_")}
    env.update(config_env(cfg))
    return env


def jobstream(cfg: Config, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", MAIN, *args], env=child_env(cfg),
                          capture_output=True, text=True, timeout=GUARD_S, check=False)


def run_demo(cfg: Config, tmp: Path, *, jobs: int, seed: int) -> tuple[Workload, str]:
    """``jobstream demo`` with small, fast settings; returns the workload it generated
    (rebuilt from the same options) and its output. Fails the test if it exits non-zero."""
    opts = DemoOptions(seed=seed, jobs=jobs, time_scale=0.05, speed=20.0,
                       start=float(int(time.time())))
    proc = jobstream(cfg, "demo", "--jobs", str(jobs), "--seed", str(seed),
                     "--time-scale", str(opts.time_scale), "--speed", str(opts.speed),
                     "--start", str(opts.start), "--logs", str(tmp / "demo-logs"))
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, f"jobstream demo exited {proc.returncode}:\n{output[-6000:]}" \
        + _logs(tmp / "demo-logs")
    return Workload(opts.spec()), output


def _logs(directory: Path) -> str:
    out = ""
    for log in sorted(directory.glob("*.log")):
        out += f"\n---- {log.name}\n{log.read_text(errors='replace')[-4000:]}"
    return out
