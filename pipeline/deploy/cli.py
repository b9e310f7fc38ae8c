"""``jobstream install-units``: the systemd units of this installation, and what to run next."""

from __future__ import annotations

import subprocess
from pathlib import Path

import click

from pipeline.deploy import find_executable, write_units
from pipeline.runtime.errors import ServiceError

__all__ = ["install_units"]


def next_steps(dest: Path, instance: str, executable: str) -> str:
    """The commands an operator runs after the units are in place."""
    conf = f"/etc/jobstream/{instance}.toml"
    lines = [
        f"next (each unit reads {conf}):",
        "  systemctl daemon-reload",
        "  # gateway nodes: one worker per core, each instance with its own",
        f"  # worker.store_dir (/var/cache/jobstream/worker-{instance}) and worker.web_port",
        "  useradd --system --no-create-home --shell /usr/sbin/nologin jobstream",
        f"  systemctl enable --now jobstream-worker@{instance}.service "
        f"jobstream-sink@{instance}.service",
        "  # the slurmctld host, with edge.spool_dir = "
        f"\"/var/lib/jobstream/edge-slurm-{instance}\":",
        f"  systemctl enable --now jobstream-edge-slurm@{instance}.service",
        f"  JOBSTREAM_CONFIG={conf} {executable} edge install-hook "
        "<PrologSlurmctld/EpilogSlurmctld path>",
        "  # a host of the Flux system instance, with edge.spool_dir = "
        f"\"/var/lib/jobstream/edge-flux-{instance}\":",
        f"  systemctl enable --now jobstream-edge-flux@{instance}.service",
        "  # every compute node (root, bounded to reading /proc and the cgroups; its spool is"
        f" /var/lib/jobstream/edge-node-{instance}):",
        f"  systemctl enable --now jobstream-edge-node@{instance}.service",
        f"  journalctl -f -u 'jobstream-*@{instance}.service'",
    ]
    if dest != Path("/etc/systemd/system"):
        lines.append(f"({dest} is not /etc/systemd/system: systemd loads units only from "
                     "its unit paths)")
    return "\n".join(lines)


@click.command("install-units")
@click.option("--dest", type=click.Path(file_okay=False, path_type=Path),
              default=Path("/etc/systemd/system"), show_default=True,
              help="Directory to write the unit files to.")
@click.option("--user", default="jobstream", show_default=True,
              help="User of jobstream-worker@ and jobstream-sink@.")
@click.option("--slurm-user", default="slurm", show_default=True,
              help="User of jobstream-edge-slurm@: slurm.conf's SlurmUser.")
@click.option("--flux-user", default="flux", show_default=True,
              help="User of jobstream-edge-flux@: the Flux system instance owner.")
@click.option("--exec", "executable", default=None,
              help="jobstream executable for ExecStart [default: this installation's].")
@click.option("--instance", default="<instance>",
              help="Instance name to show in the next steps (its config: "
                   "/etc/jobstream/<instance>.toml).")
@click.option("--dry-run", is_flag=True, help="Print the units instead of writing them.")
@click.option("--daemon-reload", "daemon_reload", is_flag=True,
              help="Run `systemctl daemon-reload` after writing.")
def install_units(dest: Path, user: str, slurm_user: str, flux_user: str,
                      executable: str | None, instance: str, dry_run: bool,
                      daemon_reload: bool) -> None:
    """Write the systemd template units of the worker, the sink and the edges.

    ExecStart runs the jobstream executable of this installation; nothing is enabled or
    started: the commands to run next are printed.
    """
    exe = executable or find_executable()
    written = write_units(dest, executable=exe,
                            users={"jobstream": user, "slurm": slurm_user, "flux": flux_user},
                            dry_run=dry_run)
    for path, unit in written:
        if dry_run:
            click.echo(f"# {path}\n{unit.text}")
        else:
            click.echo(f"wrote {path}")
    if daemon_reload and not dry_run:
        try:
            subprocess.run(["systemctl", "daemon-reload"], check=True)
        except (OSError, subprocess.CalledProcessError) as exc:
            raise ServiceError(f"systemctl daemon-reload failed: {exc}") from exc
    click.echo(next_steps(dest, instance, exe))
