"""The systemd units shipped in the package and ``jobstream install-units``."""

from __future__ import annotations

import configparser
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner
from datafiles import unavailable

from pipeline.cli import main
from pipeline.deploy import UNITS, UnitFile, find_executable, render, shipped_units, write_units
from pipeline.runtime.errors import ConfigError, SpoolError

USERS = {"jobstream": "svc-js", "slurm": "slurmadm", "flux": "fluxown"}


def _service(unit: UnitFile) -> dict[str, str]:
    parser = configparser.ConfigParser(interpolation=None, strict=False)
    parser.optionxform = str  # type: ignore[assignment,method-assign]
    parser.read_string(unit.text)
    return dict(parser["Service"])


def test_ships_the_five_template_units() -> None:
    names = [u.name for u in shipped_units()]
    assert names == sorted(UNITS)
    assert {n.split("@")[0] for n in names} == {
        "jobstream-edge-flux", "jobstream-edge-node", "jobstream-edge-slurm", "jobstream-sink",
        "jobstream-worker"}


@pytest.mark.parametrize("unit", shipped_units(), ids=lambda u: u.name)
def test_unit_restarts_on_failure_but_not_on_a_config_error(unit: UnitFile) -> None:
    svc = _service(unit)
    assert svc["Restart"] == "on-failure"
    prevented = svc["RestartPreventExitStatus"].split()
    # a configuration or usage error stays one until a person fixes it
    assert str(ConfigError.exit_code) in prevented and "2" in prevented
    # a full disk (spool) may clear: restart
    assert str(SpoolError.exit_code) not in prevented
    assert svc["Environment"].startswith("JOBSTREAM_CONFIG=/etc/jobstream/%i.toml")
    assert svc["ProtectSystem"] == "strict" and svc["NoNewPrivileges"] == "yes"
    assert svc["StandardOutput"] == "journal"


def test_units_keep_state_where_it_survives() -> None:
    svc = {u.name: _service(u) for u in shipped_units()}
    # spools hold records Kafka has not acknowledged: state, never a cache
    assert svc["jobstream-edge-slurm@.service"]["StateDirectory"] == "jobstream/edge-slurm-%i"
    assert svc["jobstream-edge-flux@.service"]["StateDirectory"] == "jobstream/edge-flux-%i"
    node = svc["jobstream-edge-node@.service"]
    assert node["StateDirectory"] == "jobstream/edge-node-%i"
    assert "JOBSTREAM_EDGE__SPOOL_DIR=/var/lib/jobstream/edge-node-%i" in node["Environment"]
    assert svc["jobstream-worker@.service"]["CacheDirectory"] == "jobstream/worker-%i"
    # the sink's crash guard, where the unit may write
    sink = svc["jobstream-sink@.service"]
    assert sink["StateDirectory"] == "jobstream/sink-%i"
    assert "JOBSTREAM_SINK__STATE_DIR=/var/lib/jobstream/sink-%i" in sink["Environment"]
    # the worker's graceful stop includes mode's 60 s per-service shutdown timeout
    assert int(svc["jobstream-worker@.service"]["TimeoutStopSec"].rstrip("s")) > 60


def test_the_node_edge_is_root_bounded_to_reading_processes_and_writes_its_spool_only(
        ) -> None:
    """Root for every user's /proc and cgroup files, with only the two capabilities that
    reading needs: no capability to write what it does not own, change owners, kill."""
    unit = next(u for u in shipped_units() if u.name == "jobstream-edge-node@.service")
    svc = _service(unit)
    assert svc["User"] == "root"
    wanted = {"CAP_DAC_READ_SEARCH", "CAP_SYS_PTRACE"}
    assert set(svc["CapabilityBoundingSet"].split()) == wanted
    assert set(svc["AmbientCapabilities"].split()) == wanted
    assert svc["ProtectSystem"] == "strict" and svc["ProtectHome"] == "read-only"
    # the only place it may write: its StateDirectory (no ReadWritePaths of its own)
    assert "ReadWritePaths" not in svc and svc["StateDirectory"] == "jobstream/edge-node-%i"
    # NVML's devices only, and a file per process read each interval
    assert svc["DevicePolicy"] == "closed" and svc["DeviceAllow"] == "char-nvidia* rw"
    assert int(svc["LimitNOFILE"]) >= 20_000
    # render leaves root alone: no --user names it
    rendered = _service(render(unit, executable="/opt/js/bin/jobstream", users=USERS))
    assert rendered["User"] == "root"
    assert rendered["ExecStart"] == "/opt/js/bin/jobstream edge node"


def test_render_sets_exec_start_and_users() -> None:
    rendered = {u.name: render(u, executable="/opt/js/bin/jobstream", users=USERS)
                for u in shipped_units()}
    expect = {"jobstream-edge-flux@.service": ("fluxown", "edge flux"),
              "jobstream-edge-node@.service": ("root", "edge node"),
              "jobstream-edge-slurm@.service": ("slurmadm", "edge slurm"),
              "jobstream-sink@.service": ("svc-js", "sink"),
              "jobstream-worker@.service": ("svc-js", "worker")}
    for name, (user, args) in expect.items():
        svc = _service(rendered[name])
        assert svc["User"] == user
        assert svc["ExecStart"] == f"/opt/js/bin/jobstream {args}"


def test_render_escapes_specifiers_and_quotes_spaces() -> None:
    unit = shipped_units()[0]
    svc = _service(render(unit, executable="/opt/50%/my env/jobstream", users={}))
    assert svc["ExecStart"].startswith('"/opt/50%%/my env/jobstream" ')


@pytest.mark.parametrize("exe", ["jobstream", "/opt/a\"b/jobstream"])
def test_render_refuses_what_systemd_would_misread(exe: str) -> None:
    with pytest.raises(ConfigError):
        render(shipped_units()[0], executable=exe, users={})


def test_render_refuses_a_bad_user_name() -> None:
    with pytest.raises(ConfigError):
        render(shipped_units()[-1], executable="/bin/true", users={"jobstream": "a b\nX=1"})


def test_find_executable_prefers_the_command_being_run(tmp_path: Path) -> None:
    exe = tmp_path / "jobstream"
    exe.write_text("#!/bin/sh\n")
    exe.chmod(0o755)
    assert find_executable(str(exe)) == str(exe)
    # run some other way (python -m, pytest): this interpreter's bin/jobstream
    beside = Path(sys.executable).parent / "jobstream"
    if beside.is_file():
        assert find_executable("/usr/lib/python3/pytest") == str(beside)


def test_write_units_writes_files_and_dry_run_writes_nothing(tmp_path: Path) -> None:
    planned = write_units(tmp_path, executable="/bin/true", users=USERS, dry_run=True)
    assert [p.name for p, _ in planned] == sorted(UNITS) and not list(tmp_path.iterdir())
    written = write_units(tmp_path, executable="/bin/true", users=USERS)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(UNITS)
    for path, unit in written:
        assert path.read_text() == unit.text
        assert path.stat().st_mode & 0o777 == 0o644


def test_cli_install_units_prints_next_steps(tmp_path: Path) -> None:
    result = CliRunner().invoke(main, ["install-units", "--dest", str(tmp_path),
                                       "--exec", "/bin/true", "--user", "svc-js",
                                       "--instance", "tioga"])
    assert result.exit_code == 0, result.output
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(UNITS)
    assert "User=svc-js" in (tmp_path / "jobstream-worker@.service").read_text()
    assert "systemctl daemon-reload" in result.output
    assert "systemctl enable --now jobstream-worker@tioga.service" in result.output
    assert "systemctl enable --now jobstream-edge-node@tioga.service" in result.output


def test_cli_dry_run_lists_every_unit(tmp_path: Path) -> None:
    dest = tmp_path / "absent"
    result = CliRunner().invoke(main, ["install-units", "--dest", str(dest), "--dry-run",
                                       "--exec", "/bin/true"])
    assert result.exit_code == 0, result.output
    for name in UNITS:
        assert f"# {dest / name}\n" in result.output
    assert not dest.exists()


def test_cli_missing_dest_is_an_error(tmp_path: Path) -> None:
    result = CliRunner().invoke(main, ["install-units", "--dest", str(tmp_path / "nope"),
                                       "--exec", "/bin/true"])
    assert result.exit_code == 1 and "not a directory" in result.output


def test_systemd_analyze_verify_accepts_the_rendered_units(tmp_path: Path) -> None:
    tool = shutil.which("systemd-analyze")
    if tool is None:
        unavailable("systemd-analyze not installed (apt package systemd)",
                    "systemd-analyze must be installed under CI (apt package systemd)")
    # verify checks that ExecStart's program exists and is executable
    written = write_units(tmp_path, executable=sys.executable, users=USERS)
    out = subprocess.run([tool, "verify", *(str(p) for p, _ in written)],
                         capture_output=True, text=True, timeout=60)
    # an unknown or misspelt key is only a warning: the output must be empty too
    assert out.returncode == 0 and out.stdout.strip() == "" and out.stderr.strip() == "", (
        out.stdout + out.stderr)


def test_cli_runs_systemctl_only_when_asked(tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    calls = tmp_path / "calls"
    fake = bin_dir / "systemctl"
    fake.write_text(f"#!/bin/sh\necho \"$@\" >> {calls}\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    dest = tmp_path / "units"
    dest.mkdir()
    args = ["install-units", "--dest", str(dest), "--exec", "/bin/true"]
    assert CliRunner().invoke(main, args).exit_code == 0
    assert CliRunner().invoke(main, [*args, "--dry-run", "--daemon-reload"]).exit_code == 0
    assert not calls.exists()
    result = CliRunner().invoke(main, [*args, "--daemon-reload"])
    assert result.exit_code == 0, result.output
    assert calls.read_text() == "daemon-reload\n"
