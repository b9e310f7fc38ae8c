"""Fetching artifacts from Maven Central with the ``mvn`` client.

Everything lands in a Maven repository inside the stack's cache (``<cache>/m2``), so the
cache directory is the whole state: delete it and the next ``up`` starts from nothing. The
plugin version is pinned so that nothing resolves from "latest".
"""

from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Callable
from pathlib import Path

from pipeline.runtime.errors import ServiceError
from pipeline.tooling.stack.java import require_mvn
from pipeline.tooling.stack.procs import tail

__all__ = ["DEPENDENCY_PLUGIN", "run_mvn"]

DEPENDENCY_PLUGIN = "org.apache.maven.plugins:maven-dependency-plugin:3.8.1"

_DOWNLOADED = re.compile(r"Downloaded from \S+: \S*/([^/\s]+) \(([^)]*?)(?: at [^)]*)?\)")


def run_mvn(args: list[str], *, repo: Path, log: Path, java_home: Path, what: str,
            progress: Callable[[str], None]) -> None:
    """Run ``mvn -B <args>`` against the cache's repository, reporting each download.

    The full output goes to ``log``; a failure raises ServiceError with its tail.
    """
    mvn = require_mvn()
    log.parent.mkdir(parents=True, exist_ok=True)
    cmd = [mvn, "-B", f"-Dmaven.repo.local={repo}", *args]
    # Maven runs on the JDK the stack chose, whatever JAVA_HOME the caller has.
    env = {**os.environ, "JAVA_HOME": str(java_home), "LC_ALL": "C"}
    files = 0
    with log.open("w") as out:
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                text=True, env=env)
        assert proc.stdout is not None
        for line in proc.stdout:
            out.write(line)
            match = _DOWNLOADED.search(line)
            if match:
                files += 1
                progress(f"{files} files downloaded, last {match.group(1)} ({match.group(2)})")
        code = proc.wait()
    if code != 0:
        errors = [ln for ln in log.read_text(errors="replace").splitlines() if "[ERROR]" in ln]
        first = errors[0].replace("[ERROR]", "").strip() if errors else f"exit {code}"
        raise ServiceError(f"mvn could not fetch {what}: {first}\n"
                           f"{tail([log], 15)}\n(Maven Central must be reachable on first use)")

