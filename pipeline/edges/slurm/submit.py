"""The edge's side of jobstream's lua plugins: the submit spool directory.

``job_submit.lua`` (in slurmctld, as SlurmUser) appends its lines to ``slurmctld.log``,
``cli_filter.lua`` (in sbatch/salloc/srun, as the submitting user) to ``<uid>.log``, both
in one directory, sticky and writable by all (mode 1733: users create their own files and
cannot list, rename or delete anyone else's). Every ``submit_scan_s`` seconds
:class:`SubmitSpoolIngester` takes each file by renaming it to ``<name>.<ns>.taken``
(writers open, append one line and close, so a writer that opened the file before the
rename finishes within microseconds), waits ``settle_s``, spools every line as a
``slurm-submit-plugin`` record keyed by job, and deletes the file. A crash in between
leaves the taken file, spooled again at the next start: a duplicate, never a loss.

Trust: a line of ``<uid>.log`` counts only if the file belongs to that uid and the line
states the same uid (a user could otherwise report jobs as someone else);
``slurmctld.log`` only if it belongs to the directory's owner or root. Anything else is
logged and deleted.

cli_filter runs on the submit hosts: a login node without the edge keeps its lines in its
own spool until an edge runs there (``jobstream edge slurm`` with only this source, see
the README); a single-host cluster needs nothing more.
"""

from __future__ import annotations

import json
import logging
import os
import re
import time
from pathlib import Path

from pipeline.core.model import RawRecord
from pipeline.edges.base import EdgeRuntime, record_key
from pipeline.edges.slurm.directory import DirectoryIngester
from pipeline.edges.slurm.hooks import give_to_hook_user
from pipeline.edges.spool import spool_dir
from pipeline.runtime.config import Config
from pipeline.runtime.errors import ServiceError

__all__ = ["CTLD_FILE", "SubmitSpoolIngester", "submit_spool_path"]

logger = logging.getLogger(__name__)

FORMAT = "slurm-submit-plugin"
CTLD_FILE = "slurmctld.log"
_USER_FILE = re.compile(r"(\d{1,10})\.log")
_TAKEN = re.compile(r"(.+\.log)\.(\d{1,20})\.taken")
MAX_FILE = 64 << 20


def submit_spool_path(cfg: Config) -> Path:
    """The submit spool directory of the configuration."""
    s = cfg.edge.slurm
    return Path(s.submit_spool_dir or spool_dir(cfg) / "submit-spool")


class SubmitSpoolIngester(DirectoryIngester):
    """Spools the lua plugins' lines, oldest file first."""

    name = "submit spool"

    def __init__(self, runtime: EdgeRuntime, directory: str | Path, interval: float,
                 hook_user: str = "", settle_s: float = 0.2) -> None:
        super().__init__(runtime, directory, interval, hook_user)
        self.settle_s = settle_s
        self.untrusted = 0

    def prepare(self) -> None:
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            # users write their own files here; the sticky bit keeps them off the others'
            self.directory.chmod(0o1733)
        except OSError as exc:
            raise ServiceError(f"submit spool {self.directory}: {exc.strerror}") from exc
        give_to_hook_user(self.directory, self.hook_user)

    def _take(self) -> None:
        try:
            names = os.listdir(self.directory)
        except OSError as exc:
            logger.error("cannot list submit spool %s: %s", self.directory, exc)
            return
        for name in names:
            if name == CTLD_FILE or _USER_FILE.fullmatch(name):
                try:
                    os.rename(self.directory / name,
                              self.directory / f"{name}.{time.time_ns()}.taken")
                except OSError as exc:
                    logger.warning("cannot take submit spool file %s: %s", name, exc)

    def scan(self) -> int:
        """Take the files, then spool and delete every taken file; how many lines."""
        self._take()
        try:
            taken = sorted((int(m[2]), n) for n in os.listdir(self.directory)
                           if (m := _TAKEN.fullmatch(n)))
        except OSError as exc:
            logger.error("cannot list submit spool %s: %s", self.directory, exc)
            return 0
        if taken:
            # a writer that opened the file just before the rename still appends to it
            time.sleep(self.settle_s)
        done = 0
        for _, name in taken:
            done += self._ingest(self.directory / name)
        self.ingested += done
        return done

    def _ingest(self, path: Path) -> int:
        m = _TAKEN.fullmatch(path.name)
        assert m is not None
        try:
            st = path.lstat()
            if not path.is_file() or path.is_symlink() or st.st_size > MAX_FILE:
                raise OSError(0, "not a regular file or too large")
            data = path.read_bytes()
        except OSError as exc:
            logger.warning("submit spool file %s not read: %s", path, exc.strerror or exc)
            path.unlink(missing_ok=True)
            return 0
        owner_uid = self._allowed_uid(m[1], st.st_uid)
        if owner_uid is False:
            logger.warning("submit spool file %s belongs to uid %d, not its writer: ignored",
                           path.name, st.st_uid)
            self.untrusted += 1
            path.unlink(missing_ok=True)
            return 0
        done = 0
        for line in data.split(b"\n"):
            if not line.strip():
                continue
            if owner_uid is not None and _stated_uid(line) not in (owner_uid, None):
                logger.warning("line of %s states another uid: ignored", path.name)
                self.untrusted += 1
                continue
            self.runtime.publish(_record(self.runtime, line))
            done += 1
        path.unlink(missing_ok=True)
        if done:
            logger.info("ingested %d submit plugin records from %s", done, path.name)
        return done

    def _allowed_uid(self, name: str, file_uid: int) -> int | None | bool:
        """The uid every line must state (a user's file), None (slurmctld's, any), or
        False: the file is not its writer's."""
        if name == CTLD_FILE:
            owner = self.directory.stat().st_uid
            return None if file_uid in (0, owner) else False
        m = _USER_FILE.fullmatch(name)
        uid = int(m[1]) if m else -1
        return uid if file_uid == uid else False


def _stated_uid(line: bytes) -> int | None:
    """The uid a line states; None for a line that is no JSON object, which the parser
    refuses anyway (and sends to the DLQ with the reason). Users write these lines: one
    nested past the recursion limit raises RecursionError, which must not stop the
    ingester."""
    try:
        value = json.loads(line).get("uid")
    except (ValueError, AttributeError, RecursionError):
        return None
    return value if isinstance(value, int) and not isinstance(value, bool) else -1


def _record(runtime: EdgeRuntime, data: bytes) -> RawRecord:
    now = time.time()
    cluster = runtime.cfg.cluster
    return RawRecord(cluster=cluster, scheduler="slurm", format=FORMAT, received_at=now,
                     payload=data, key=record_key(FORMAT, data, cluster, now))
