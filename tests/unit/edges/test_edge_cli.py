"""``jobstream edge status`` and ``edge install-hook`` through the click entry point, and
the Slurm edge as a process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from pipeline.cli import main
from pipeline.edges.spool import Spool
from pipeline.runtime.children import config_env
from pipeline.runtime.config import Config


def test_edge_status_shows_depth_and_age(tmp_path: Path) -> None:
    with Spool(tmp_path / "slurm.db", topic="t") as spool:
        spool.append(b"k", b"v")
        spool.append(b"k", b"w")
        spool.set_meta("slurm.sacct.hwm", "1800000000.0")
    env = {"JOBSTREAM_EDGE__SPOOL_DIR": str(tmp_path), "JOBSTREAM_CONFIG": "/dev/null"}
    result = CliRunner().invoke(main, ["edge", "status", "--json"], env=env)
    assert result.exit_code == 0, result.output
    [row] = json.loads(result.output)
    assert row["spool"] == "slurm" and row["depth"] == 2 and row["oldest_age_s"] >= 0
    assert row["meta"] == {"slurm.sacct.hwm": "1800000000.0"}
    table = CliRunner().invoke(main, ["edge", "status"], env=env)
    assert table.exit_code == 0 and "slurm" in table.output


def test_edge_status_without_spools(tmp_path: Path) -> None:
    env = {"JOBSTREAM_EDGE__SPOOL_DIR": str(tmp_path / "none"), "JOBSTREAM_CONFIG": "/dev/null"}
    result = CliRunner().invoke(main, ["edge", "status"], env=env)
    assert result.exit_code == 0 and "no edge spools" in result.output


def test_install_hook_writes_the_configured_paths(tmp_path: Path) -> None:
    env = {"JOBSTREAM_EDGE__SPOOL_DIR": str(tmp_path / "spool"),
           "JOBSTREAM_CONFIG": "/dev/null"}
    dest = tmp_path / "hook"
    result = CliRunner().invoke(main, ["edge", "install-hook", str(dest)], env=env)
    assert result.exit_code == 0, result.output
    text = dest.read_text()
    assert f"SOCKET = {str(tmp_path / 'spool' / 'hook.sock')!r}" in text
    assert f"DROP_DIR = {str(tmp_path / 'spool' / 'hook-drop')!r}" in text
    assert text.startswith("#!/") and text.splitlines()[0].endswith(" -IS")
    assert dest.stat().st_mode & 0o111


def thread_heaps(pid: int) -> int:
    """glibc's malloc arenas of threads in the process: anonymous mappings of 64 MiB
    aligned on 64 MiB, the part in use readable and writable, the rest reserved."""
    size = 64 << 20
    maps = []
    for line in Path(f"/proc/{pid}/maps").read_text().splitlines():
        fields = line.split()
        start, end = (int(x, 16) for x in fields[0].split("-"))
        maps.append((start, end, fields[1], len(fields) > 5))
    heaps = 0
    for i, (start, end, perms, named) in enumerate(maps):
        if named or start % size or not perms.startswith("rw"):
            continue
        rest = maps[i + 1] if i + 1 < len(maps) else None
        if end - start == size or (rest is not None and rest[0] == end
                                   and rest[2].startswith("---") and rest[1] == start + size):
            heaps += 1
    return heaps


@pytest.mark.skipif(not (os.confstr("CS_GNU_LIBC_VERSION") or "").startswith("glibc"),
                    reason="malloc arenas are glibc's")
@pytest.mark.parametrize(("arena_max", "one_arena"), [(None, True), ("8", False)])
def test_the_slurm_edge_runs_its_threads_on_one_malloc_arena(
        edge_cfg: Config, tmp_path: Path, arena_max: str | None, one_arena: bool) -> None:
    # glibc keeps what a thread frees for that thread's arena, which the edge's other
    # threads cannot reuse; the site's MALLOC_ARENA_MAX is left alone
    doc = tmp_path / "squeue.json"
    jobs = [{"job_id": n, "job_state": "PENDING", "name": "x" * 2000} for n in range(2000)]
    doc.write_text(json.dumps({"meta": {}, "errors": [], "jobs": jobs}))
    cfg = edge_cfg.replace(edge={"slurm": {
        "receiver": False, "hooks": False, "poller": True, "poll_interval_s": 0.2,
        "squeue_command": f"cat {doc}", "sacct_command": f"sh -c 'cat {doc}' sacct"}})
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("JOBSTREAM_") and k != "MALLOC_ARENA_MAX"}
    env.update(config_env(cfg))
    if arena_max is not None:
        env["MALLOC_ARENA_MAX"] = arena_max
    proc = subprocess.Popen([sys.executable, "-m", "pipeline.edges", "-v", "slurm"], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        assert proc.stderr is not None
        polls = 0
        for line in proc.stderr:  # the poller and the drainer have both run, and allocated
            polls += b"slurm poll: " in line
            if polls == 3:
                break
        assert polls == 3
        assert (thread_heaps(proc.pid) == 0) == one_arena
    finally:
        proc.terminate()
        proc.wait(30)
