"""``jobstream edge status`` and ``edge install-hook`` through the click entry point."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from pipeline.cli import main
from pipeline.spool import Spool


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
