"""Finding the JDKs and the ``mvn`` the local stack needs.

Kafka 4.x runs on Java 17 or newer; Elasticsearch 9.x needs 21 or newer, and Elasticsearch
8.x cannot run on 24 or newer (it asks for a Security Manager, which those JDKs removed). So
the stack looks at every JDK it can find and picks one per service.
"""

from __future__ import annotations

import re
import shutil
from dataclasses import dataclass
from pathlib import Path

from pipeline.runtime.errors import ServiceError

__all__ = ["Jdk", "find_jdks", "inspect_jdk", "pick_jdk", "require_mvn"]

#: where Debian packages and most vendors' packages put their JDKs
JVM_ROOT = Path("/usr/lib/jvm")

_VERSION_RE = re.compile(r'^JAVA_VERSION="(?P<v>[^"]+)"', re.MULTILINE)


@dataclass(frozen=True, order=True)
class Jdk:
    major: int
    home: Path

    @property
    def java(self) -> Path:
        return self.home / "bin" / "java"


def _major(version: str) -> int:
    # "1.8.0_392" is Java 8; from 9 on the major comes first ("17.0.15", "25").
    match = re.match(r"(\d+)(?:\.(\d+))?", version)
    if not match:
        raise ValueError(version)
    first = int(match.group(1))
    return int(match.group(2)) if first == 1 and match.group(2) else first


def inspect_jdk(home: Path) -> Jdk | None:
    """The JDK at ``home``, from its ``release`` file (no JVM start); None if it is not one."""
    release = home / "release"
    if not (home / "bin" / "java").is_file() or not release.is_file():
        return None
    match = _VERSION_RE.search(release.read_text(errors="replace"))
    if not match:
        return None
    try:
        return Jdk(_major(match.group("v")), home.resolve())
    except ValueError:
        return None


def find_jdks(root: Path = JVM_ROOT) -> list[Jdk]:
    """Every distinct JDK under ``root`` and behind ``java`` on PATH, oldest first."""
    homes: list[Path] = sorted(root.iterdir()) if root.is_dir() else []
    on_path = shutil.which("java")
    if on_path:
        # .../bin/java through the alternatives symlinks -> the JDK home
        homes.append(Path(on_path).resolve().parent.parent)
    found = {jdk.home: jdk for h in homes if (jdk := inspect_jdk(h)) is not None}
    return sorted(found.values())


def pick_jdk(jdks: list[Jdk], lo: int, hi: int | None = None, *, newest: bool,
             purpose: str) -> Jdk:
    """The newest (or oldest) JDK with ``lo <= major <= hi``; ServiceError when there is none."""
    fits = [j for j in jdks if j.major >= lo and (hi is None or j.major <= hi)]
    if not fits:
        have = ", ".join(f"{j.major} ({j.home})" for j in jdks) or "none"
        want = f"{lo}+" if hi is None else f"{lo} to {hi}"
        # Debian 12 packages Java 17 only; a newer one comes from elsewhere
        how = ("Debian: apt-get install openjdk-17-jdk-headless" if lo <= 17 <= (hi or 17)
               else f"a JDK {lo}+ under {JVM_ROOT}, or set stack.java_home")
        raise ServiceError(f"{purpose} needs Java {want}; JDKs found: {have}. "
                           f"Install one ({how})")
    return fits[-1] if newest else fits[0]


def require_mvn() -> str:
    """Path of ``mvn``; ServiceError when Maven is not installed."""
    mvn = shutil.which("mvn")
    if not mvn:
        raise ServiceError("mvn not found: the stack fetches Kafka and Elasticsearch with Maven "
                           "(Debian: apt-get install maven)")
    return mvn
