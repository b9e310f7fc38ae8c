"""Stand-ins for the Slurm edge while it does not exist yet: what the test cluster talks to.

``JobcompReceiver`` answers Slurm's jobcomp/elasticsearch plugin as Elasticsearch would (201
with a small index response) and keeps every POST body exactly as received. ``HookCapture``
is a PrologSlurmctld/EpilogSlurmctld script that writes the hook's environment to one file
per (context, job) and always exits 0. The edge's own receiver and hook scripts replace
them; the fixtures in ``conftest_slurm`` are the seam.
"""

from __future__ import annotations

import json
import os
import pwd
import shutil
import threading
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

__all__ = ["HookCapture", "JobcompPost", "JobcompReceiver", "read_env_file"]


@dataclass(frozen=True)
class JobcompPost:
    """One POST from the jobcomp plugin: where it went and the bytes it carried."""

    path: str
    content_type: str
    body: bytes

    def record(self) -> dict[str, Any]:
        return json.loads(self.body)


class JobcompReceiver:
    """A loopback HTTP server that stores jobcomp/elasticsearch POSTs and answers 201."""

    index = "slurm"

    def __init__(self) -> None:
        self._posts: list[JobcompPost] = []
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever,
                                        name="jobcomp-receiver", daemon=True)

    @property
    def url(self) -> str:
        """The ``JobCompLoc`` to configure: ``http://127.0.0.1:<port>/slurm/_doc``."""
        return f"http://127.0.0.1:{self._server.server_port}/{self.index}/_doc"

    def start(self) -> JobcompReceiver:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def posts(self) -> list[JobcompPost]:
        with self._lock:
            return list(self._posts)

    def records_by_job(self) -> dict[str, dict[str, Any]]:
        """The last record received per job id (a retried POST may deliver one twice)."""
        return {str(post.record()["jobid"]): post.record() for post in self.posts()}

    def _store(self, post: JobcompPost) -> int:
        with self._lock:
            self._posts.append(post)
            return len(self._posts)

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's naming
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length)
                n = receiver._store(JobcompPost(self.path, self.headers.get("Content-Type", ""),
                                                body))
                self._answer(201, {"_index": receiver.index, "_id": str(n), "_version": 1,
                                   "result": "created", "_seq_no": n - 1, "_primary_term": 1})

            def do_GET(self) -> None:  # noqa: N802
                self._answer(200, {})

            def do_HEAD(self) -> None:  # noqa: N802
                self._answer(200, None)

            def _answer(self, status: int, doc: dict[str, Any] | None) -> None:
                payload = json.dumps(doc).encode() if doc is not None else b""
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(payload)

            def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
                pass  # the test reads the posts, not a log

        return Handler


class HookCapture:
    """A PrologSlurmctld/EpilogSlurmctld script writing ``<context>_<job id>.env`` files.

    The script runs as the ``slurm`` user, so it and its output directory live under the
    cluster root, not under a private temporary directory of root.
    """

    def __init__(self, root: Path) -> None:
        self.script = root / "hooks" / "capture_env.sh"
        self.directory = root / "capture" / "hooks"

    def install(self) -> HookCapture:
        """Write the script and an empty output directory (old captures removed)."""
        slurm = pwd.getpwnam("slurm")
        self.script.parent.mkdir(parents=True, exist_ok=True)
        self.script.parent.chmod(0o755)
        shutil.rmtree(self.directory, ignore_errors=True)
        self.directory.mkdir(parents=True)
        self.directory.parent.chmod(0o755)
        os.chown(self.directory, slurm.pw_uid, slurm.pw_gid)
        self.script.write_text(
            "#!/bin/sh\n"
            "# Stand-in hook of jobstream's Slurm tests: record this hook's environment.\n"
            "# Never fail or delay the job: slurmctld waits for PrologSlurmctld.\n"
            f'out="{self.directory}/${{SLURM_SCRIPT_CONTEXT:-unknown}}_${{SLURM_JOB_ID:-0}}"\n'
            'env | sort > "$out.tmp" && mv -f "$out.tmp" "$out.env"\n'
            "exit 0\n"
        )
        self.script.chmod(0o755)
        return self

    def path(self, context: str, job_id: str) -> Path:
        return self.directory / f"{context}_{job_id}.env"

    def env(self, context: str, job_id: str) -> dict[str, str] | None:
        """The environment the hook saw, or None if it did not run (yet)."""
        path = self.path(context, job_id)
        return read_env_file(path) if path.exists() else None

    def files(self) -> list[Path]:
        return sorted(self.directory.glob("*.env"))


def read_env_file(path: Path) -> dict[str, str]:
    """``env | sort`` output as a dict (a value may itself contain ``=``)."""
    env: dict[str, str] = {}
    for line in path.read_text().splitlines():
        key, sep, value = line.partition("=")
        if sep:
            env[key] = value
    return env
