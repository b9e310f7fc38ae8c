"""The whole node daemon's resident memory and CPU per interval (issue 33, section 5: at
most 40 MiB and 20 ms at 64 jobs and 2,000 processes), as docs/node.md "Cost" measures it.

``python benchmarks/2026-12-04/node_daemon_hwm.py [--rounds N] [--tree DIR ...]``

Starts the processes once, as :func:`pipeline.edges.node.bench.measure` does, then for each
round and each source tree in turn (alternating, so that the load of a shared machine falls
on each tree alike) ``jobstream edge node --interval 1`` of that tree with
``JOBSTREAM_CONFIG=/dev/null``, a spool of its own, a Kafka bootstrap nothing listens on
and a metrics port, all from ``JOBSTREAM_*`` variables. It scrapes the metrics port until
the daemon has sampled 6 intervals (Prometheus scrapes a real daemon all the same), then
reads the daemon's ``/proc/<pid>/status`` (VmHWM, VmRSS, threads) and its own figure of
CPU per interval (``jobstream_node_interval_cpu_seconds``: sampling, encoding and spooling;
the mean of the intervals after the first scraped, which reads every environment),
and stops it with SIGTERM. Prints one JSON line per run and the medians per tree.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

from pipeline.edges.node.bench import reap, spawn_jobs
from pipeline.runtime.children import free_port

INTERVALS = 6
DAEMON = "import sys; from pipeline.cli import main; sys.argv[0] = 'jobstream'; main()"


def status(pid: int) -> dict[str, int]:
    out = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmHWM", "VmRSS", "RssAnon", "RssFile", "Threads"):
            out[key] = int(value.split()[0])
    return out


def mappings(pid: int, top: int = 25) -> dict[str, int]:
    """KiB resident by mapping (a file's, or [heap], [stack], anonymous), the largest."""
    kib: dict[str, int] = {}
    name = ""
    for line in Path(f"/proc/{pid}/smaps").read_text().splitlines():
        first = line.split(maxsplit=5)
        if "-" in first[0] and not first[0].endswith(":"):
            name = first[5] if len(first) > 5 else "[anon]"
        elif first[0] == "Rss:":
            kib[name] = kib.get(name, 0) + int(first[1])
    return dict(sorted(kib.items(), key=lambda kv: -kv[1])[:top])


def scrape(port: int) -> dict[str, float]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as answer:
        text = answer.read().decode()
    return {name: float(value) for name, _, value in
            (line.rpartition(" ") for line in text.splitlines() if not line.startswith("#"))}


def run(tree: str, spool: Path, timeout: float, smaps: bool = False) -> dict[str, Any]:
    port = free_port()
    env = {"PATH": os.environ.get("PATH", ""), "PYTHONPATH": tree,
           "JOBSTREAM_CONFIG": "/dev/null", "JOBSTREAM_CLUSTER": "bench",
           "JOBSTREAM_EDGE__SPOOL_DIR": str(spool),
           "JOBSTREAM_KAFKA__BOOTSTRAP": f"127.0.0.1:{free_port()}",
           "JOBSTREAM_EDGE__NODE__METRICS_PORT": str(port)}
    env.update({k: v for k, v in os.environ.items() if k.startswith("MALLOC_")})
    daemon = subprocess.Popen([sys.executable, "-c", DAEMON, "edge", "node", "--interval", "1"],
                              env=env, cwd=tree, stdout=subprocess.DEVNULL,
                              stderr=subprocess.PIPE)
    deadline = time.monotonic() + timeout
    figures: dict[str, float] = {}
    first: dict[str, float] = {}
    try:
        while time.monotonic() < deadline:
            time.sleep(0.25)
            if daemon.poll() is not None:
                raise RuntimeError(f"{tree}: daemon exited: {daemon.stderr.read().decode()}")
            try:
                figures = scrape(port)
            except OSError:
                continue
            done = figures.get("jobstream_node_interval_cpu_seconds_count", 0)
            if done >= 1 and not first:
                first = figures
            if done >= INTERVALS:
                break
        else:
            raise RuntimeError(f"{tree}: {INTERVALS} intervals not sampled in {timeout} s")
        mem = status(daemon.pid)
        by_mapping = mappings(daemon.pid) if smaps else None
    finally:
        daemon.send_signal(signal.SIGTERM)
        try:
            daemon.wait(20)
        except subprocess.TimeoutExpired:
            daemon.kill()
            daemon.wait()
    count, first_count = (f["jobstream_node_interval_cpu_seconds_count"] for f in (figures, first))
    cpu, first_cpu = (f["jobstream_node_interval_cpu_seconds_sum"] for f in (figures, first))
    return {"tree": tree, "vmhwm_mib": round(mem["VmHWM"] / 1024, 1),
            "vmrss_mib": round(mem["VmRSS"] / 1024, 1),
            "anon_mib": round(mem["RssAnon"] / 1024, 1),
            "file_mib": round(mem["RssFile"] / 1024, 1), "threads": mem["Threads"],
            "intervals": int(count),
            # the intervals after the first seen (which read every environment)
            "cpu_ms_per_interval": round(1000 * (cpu - first_cpu) / (count - first_count), 2),
            **({"rss_kib_by_mapping": by_mapping} if by_mapping else {})}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tree", action="append", help="source tree (default: this one)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--jobs", type=int, default=64)
    parser.add_argument("--processes", type=int, default=2000)
    parser.add_argument("--timeout", type=float, default=120.0)
    parser.add_argument("--smaps", action="store_true",
                        help="also the resident KiB of the largest mappings")
    opts = parser.parse_args()
    trees = [str(Path(t).resolve()) for t in (opts.tree or [Path(__file__).parents[2]])]
    runs: dict[str, list[dict[str, Any]]] = {t: [] for t in trees}
    _, pids = spawn_jobs(opts.jobs, opts.processes)
    try:
        time.sleep(0.5)
        with tempfile.TemporaryDirectory() as tmp:
            for r in range(opts.rounds):
                for i, tree in enumerate(trees):
                    one = run(tree, Path(tmp) / f"spool-{r}-{i}", opts.timeout, opts.smaps)
                    runs[tree].append(one)
                    print(json.dumps(one), flush=True)
    finally:
        reap(pids)
    for tree, done in runs.items():
        print(json.dumps({"tree": tree, "runs": len(done), **{
            f"median_{k}": round(statistics.median(d[k] for d in done), 2)
            for k in ("vmhwm_mib", "vmrss_mib", "anon_mib", "file_mib", "threads",
                      "cpu_ms_per_interval")}}))


if __name__ == "__main__":
    main()
