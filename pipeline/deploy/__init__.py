"""systemd units for the long-running processes, shipped in the package.

``pipeline/deploy/systemd/`` holds one template unit per process (``jobstream-worker@.service``
and so on; the instance name selects ``/etc/jobstream/<instance>.toml``). They are valid
units as shipped; :func:`render` points ``ExecStart`` at the ``jobstream`` executable of
this installation and sets the user each one runs as, :func:`write_units` writes them.

May import: ``pipeline.runtime``. It knows the processes by their command lines only.
"""

from __future__ import annotations

import os
import re
import shutil
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from pipeline.runtime.errors import ConfigError, JobstreamError
from pipeline.runtime.files import write_whole

__all__ = [
    "UNITS",
    "UnitFile",
    "find_executable",
        "render",
    "shipped_units",
    "write_units",
]

#: unit file name -> the role whose user runs it (the keys of ``users`` in :func:`render`;
#: a role no ``users`` names keeps the shipped ``User=``)
UNITS: dict[str, str] = {
    "jobstream-edge-flux@.service": "flux",
    # root, its capabilities bounded to reading every process (the unit says which)
    "jobstream-edge-node@.service": "root",
    "jobstream-edge-slurm@.service": "slurm",
    "jobstream-sink@.service": "jobstream",
    "jobstream-worker@.service": "jobstream",
}

#: what systemd and useradd accept as a user name (a stricter set than POSIX's portable one
#: would refuse site names such as ``svc.jobstream``)
_USER_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_.-]{0,31}$")


@dataclass(frozen=True)
class UnitFile:
    name: str
    text: str


def shipped_units() -> list[UnitFile]:
    """The unit files as shipped in the package, in name order."""
    base = resources.files("pipeline") / "deploy" / "systemd"
    return [UnitFile(name, (base / name).read_text()) for name in sorted(UNITS)]


def find_executable(argv0: str | None = None) -> str:
    """The ``jobstream`` executable of this installation, as an absolute path.

    The command being run first (a venv's ``bin/jobstream`` need not be on ``PATH``), then
    the one beside this interpreter (``python -m`` or an embedding), then ``PATH``.
    """
    argv0 = sys.argv[0] if argv0 is None else argv0
    candidates = []
    if Path(argv0).name == "jobstream":
        candidates.append(os.path.abspath(argv0))
    # not resolved: a venv's python is a symlink to the system one, its bin/ is ours
    candidates.append(str(Path(sys.executable).parent / "jobstream"))
    for path in candidates:
        if os.path.isfile(path) and os.access(path, os.X_OK):
            return path
    found = shutil.which("jobstream")
    if found:
        return os.path.abspath(found)
    raise ConfigError("cannot find the jobstream executable of this installation; "
                      "name it with --exec")


def _exec_word(path: str) -> str:
    """``path`` as the first word of an ``ExecStart=`` line."""
    if not os.path.isabs(path):
        raise ConfigError(f"--exec {path}: systemd needs an absolute path")
    if any(c in path for c in "\"'\\\n"):
        raise ConfigError(f"--exec {path}: quotes, backslashes and newlines are not supported")
    # '%' starts a unit specifier (%i); whitespace would split the command line
    word = path.replace("%", "%%")
    return f'"{word}"' if any(c.isspace() for c in word) else word


def render(unit: UnitFile, *, executable: str, users: Mapping[str, str]) -> UnitFile:
    """``unit`` with its ``ExecStart`` running ``executable`` and ``User=`` its role's user
    from ``users`` (role -> user name; a role absent keeps the shipped user)."""
    word = _exec_word(executable)
    user = users.get(UNITS[unit.name])
    if user is not None and not _USER_NAME.match(user):
        raise ConfigError(f"user {user!r} is not a valid user name")
    lines = []
    for line in unit.text.splitlines():
        if line.startswith("ExecStart="):
            _, _, args = line[len("ExecStart="):].partition(" ")
            line = f"ExecStart={word} {args}".rstrip()
        elif line.startswith("User=") and user is not None:
            line = f"User={user}"
        lines.append(line)
    return UnitFile(unit.name, "\n".join(lines) + "\n")


def write_units(dest: Path, *, executable: str, users: Mapping[str, str],
                  dry_run: bool = False) -> list[tuple[Path, UnitFile]]:
    """Render every shipped unit into ``dest``; with ``dry_run`` write nothing.

    Returns (path, rendered unit) per unit. Each file is written whole or not at all (a
    half-written unit would be loaded by the next ``daemon-reload``).
    """
    out = [(dest / unit.name, render(unit, executable=executable, users=users))
           for unit in shipped_units()]
    if dry_run:
        return out
    if not dest.is_dir():
        raise JobstreamError(f"--dest {dest}: not a directory")
    for path, unit in out:
        try:
            write_whole(path, unit.text, 0o644)
        except OSError as exc:
            raise JobstreamError(f"cannot write {path}: {exc.strerror}") from exc
    return out
