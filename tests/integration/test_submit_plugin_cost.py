"""What jobstream's lua plugins cost a submission on the real Slurm 22.05 (BENCHMARKS.md):
the wall time of ``sbatch`` as alice, ``ROUNDS`` held jobs each, without and with them,
alternating in blocks so that drift of the host hits both alike.

* without: no cli_filter (the clients read a copy of slurm.conf without
  ``CliFilterPlugins``), slurmctld's job_submit/lua running the pass-through script
  (slurmctld cannot drop a plugin without a restart; the pass-through is the floor of
  any site that already runs job_submit/lua);
* with: jobstream's cli_filter.lua and job_submit.lua (``install-lua``), chaining the
  test's site policy, writing to a submit spool nobody drains (appends cost the same).

Opt-in (it submits 2 x 500 jobs): ``JOBSTREAM_BENCH_SUBMIT=1``; the figures go to the
terminal and ``<slurm root>/submit-plugin-cost.json``.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from slurm_cluster import SlurmCluster

from pipeline.runtime.children import config_env
from pipeline.runtime.config import Config

pytest_plugins = ["conftest_slurm"]

ROUNDS = int(os.environ.get("JOBSTREAM_BENCH_SUBMIT_N", "500"))
BLOCK = 50

pytestmark = pytest.mark.skipif(os.environ.get("JOBSTREAM_BENCH_SUBMIT") != "1",
                                reason="a benchmark: JOBSTREAM_BENCH_SUBMIT=1 runs it")


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q / 100 * (len(ordered) - 1)))]


def sbatch_times(cluster: SlurmCluster, conf: Path, n: int, ids: list[str]) -> list[float]:
    env = {**cluster.env, "SLURM_CONF": str(conf)}
    argv = ["runuser", "-u", "alice", "--", "sbatch", "--parsable", "--hold",
            f"--chdir={cluster.jobs_dir}", "--output=/dev/null", "--job-name=bench",
            "--time=5", "--wrap=true"]
    out = []
    for _ in range(n):
        t0 = time.perf_counter()
        done = subprocess.run(argv, env=env, capture_output=True, text=True, check=False,
                              cwd=cluster.jobs_dir, timeout=60)
        out.append(time.perf_counter() - t0)
        assert done.returncode == 0, done.stderr
        ids.append(done.stdout.strip().split(";")[0])
    return out


def test_sbatch_wall_time_without_and_with_the_lua_plugins(slurm_cluster: SlurmCluster,
                                                            slurm_root: Path) -> None:
    work = slurm_root / f"bench-{uuid.uuid4().hex[:8]}"
    work.mkdir(mode=0o755)
    work.chmod(0o755)
    spool = work / "submit-spool"
    spool.mkdir()
    spool.chmod(0o1733)
    os.chown(spool, 0, 0)
    policy = work / "job_submit.site.lua"
    policy.write_text("function slurm_job_submit(d, p, u) return slurm.SUCCESS end\n")
    policy.chmod(0o644)
    bare_conf = work / "slurm-no-cli-filter.conf"
    bare_conf.write_text("".join(
        ln for ln in slurm_cluster.conf.read_text().splitlines(keepends=True)
        if not ln.startswith("CliFilterPlugins=")))
    bare_conf.chmod(0o644)
    cfg = Config().replace(edge={"slurm": {"submit_plugins": True,
                                                 "submit_spool_dir": str(spool)}})
    def install(ours: bool) -> None:
        time.sleep(1.1)  # job_submit/lua reloads on an mtime after its last load
        if not ours:
            slurm_cluster.write_pass_through_lua()
            return
        env = {"PATH": "/usr/bin:/bin", **config_env(cfg)}
        subprocess.run([sys.executable, "-m", "pipeline.edges", "install-lua",
                        str(slurm_cluster.etc), "--site-policy", str(policy)], env=env,
                       check=True, capture_output=True, timeout=60)

    times: dict[str, list[float]] = {"without": [], "with": []}
    ids: list[str] = []
    try:
        for _ in range(ROUNDS // BLOCK):
            install(False)
            times["without"] += sbatch_times(slurm_cluster, bare_conf, BLOCK, ids)
            install(True)
            times["with"] += sbatch_times(slurm_cluster, slurm_cluster.conf, BLOCK, ids)
    finally:
        install(False)
        for i in range(0, len(ids), 200):
            slurm_cluster.run(["scancel", *ids[i:i + 200]], check=False)
    lines = sum(1 for f in spool.iterdir() for _ in f.open())
    figures = {
        f"{k}_{stat}_ms": round(fn(v) * 1000, 2) for k, v in times.items()
        for stat, fn in (("median", statistics.median), ("p99", lambda x: percentile(x, 99)),
                         ("mean", statistics.fmean))}
    figures.update(n_each=ROUNDS, cli_filter_lines=lines)
    (slurm_root / "submit-plugin-cost.json").write_text(json.dumps(figures, indent=1))
    print("\nsubmit plugin cost:", json.dumps(figures))
    # every submission with the plugins left its line (cli_filter, with the job id)
    assert lines == ROUNDS
