"""Install Debian's Slurm 22.05, munge and MariaDB when they are missing.

Package maintainer scripts must not start the system services: the test cluster runs its own
private daemons, and a second munged or mariadbd would be nobody's to stop. So a temporary
``policy-rc.d`` that forbids starts is put in place for the install when none exists.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

__all__ = ["PACKAGES", "SlurmInstallError", "ensure_installed", "missing"]

# The jobcomp/elasticsearch plugin is a package of its own, only recommended by slurm-wlm.
PACKAGES = (
    "slurm-wlm",
    "slurm-wlm-elasticsearch-plugin",
    "slurmdbd",
    "munge",
    "mariadb-server",
)

_SBIN_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
_POLICY_RC_D = Path("/usr/sbin/policy-rc.d")
_FORBID_STARTS = "#!/bin/sh\n# jobstream's Slurm test harness: no service starts.\nexit 101\n"


class SlurmInstallError(RuntimeError):
    """The packages cannot be installed (not root, no apt-get, apt failed)."""


def missing() -> list[str]:
    """The packages not installed, by dpkg's record (all of them where there is no dpkg)."""
    if shutil.which("dpkg-query", path=_SBIN_PATH) is None:
        return list(PACKAGES)
    done = subprocess.run(
        ["dpkg-query", "-W", "-f=${Package} ${Status}\n", *PACKAGES],
        capture_output=True, text=True, check=False,
    )
    installed = {
        line.split()[0]
        for line in done.stdout.splitlines()
        if line.endswith(" install ok installed")
    }
    return [p for p in PACKAGES if p not in installed]


def ensure_installed() -> bool:
    """Install the packages when any is missing; return True if apt-get ran."""
    if not missing():
        return False
    if os.geteuid() != 0:
        raise SlurmInstallError(f"Slurm is not installed ({', '.join(missing())} missing) "
                                "and installing it needs root")
    if shutil.which("apt-get") is None:
        raise SlurmInstallError("Slurm is not installed and there is no apt-get to install it")
    placed_policy = False
    if not _POLICY_RC_D.exists():
        _POLICY_RC_D.write_text(_FORBID_STARTS)
        _POLICY_RC_D.chmod(0o755)
        placed_policy = True
    try:
        env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive", "PATH": _SBIN_PATH}
        # Wait for another apt-get (another session, another install) instead of failing.
        lock_wait = ["-o", "DPkg::Lock::Timeout=600"]
        _apt(["apt-get", *lock_wait, "update", "-qq"], env)
        _apt(["apt-get", *lock_wait, "install", "-y", "-qq", "--no-install-recommends",
              *PACKAGES], env)
    finally:
        if placed_policy:
            _POLICY_RC_D.unlink(missing_ok=True)
    still = missing()
    if still:
        raise SlurmInstallError(f"apt-get install succeeded but {', '.join(still)} is missing")
    return True


def _apt(argv: list[str], env: dict[str, str]) -> None:
    done = subprocess.run(argv, env=env, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        tail = "\n".join((done.stdout + done.stderr).splitlines()[-30:])
        raise SlurmInstallError(f"{' '.join(argv)} failed ({done.returncode}):\n{tail}")
