"""The edge's local paths are its own: the spool directory 0700, the hook socket 0600, the
hook drop directory 0700 (given to ``edge.slurm.hook_user`` when the edge runs as another
user). A directory someone else set up with group or other access is refused with the
setting to change; the default ones an older jobstream made open are made private."""

from __future__ import annotations

import os
import pwd
import shutil
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from datafiles import unavailable

from pipeline.edges.base import EdgeRuntime
from pipeline.edges.slurm import SlurmEdge
from pipeline.runtime.config import Config
from pipeline.runtime.errors import ServiceError


@pytest.fixture
def short_dir() -> Iterator[Path]:
    # unix socket paths must stay under 108 bytes; pytest's tmp_path can be longer
    d = Path(tempfile.mkdtemp(prefix="js-", dir="/tmp"))
    yield d
    shutil.rmtree(d, ignore_errors=True)


def mode(path: Path) -> int:
    return stat.S_IMODE(path.lstat().st_mode)


def hooks_cfg(edge_cfg: Config, where: Path, **slurm: object) -> Config:
    return edge_cfg.replace(edge={"slurm": {"receiver": False,
                                            "hook_socket": str(where / "hook.sock"),
                                            "hook_drop_dir": str(where / "drop"), **slurm}})


def test_socket_and_directories_are_owner_only(edge_cfg: Config, short_dir: Path) -> None:
    e = SlurmEdge(hooks_cfg(edge_cfg, short_dir)).start()
    try:
        assert stat.S_ISSOCK(e.hook_socket.lstat().st_mode) and mode(e.hook_socket) == 0o600
        assert mode(e.hook_drop_dir) == 0o700
        assert mode(Path(edge_cfg.edge.spool_dir)) == 0o700
    finally:
        e.stop(timeout=0)


def test_a_configured_directory_open_to_others_is_refused(edge_cfg: Config,
                                                          short_dir: Path) -> None:
    spool = Path(edge_cfg.edge.spool_dir)
    spool.mkdir(mode=0o755)
    spool.chmod(0o755)
    with pytest.raises(ServiceError, match=r"spool directory .* mode 0755.*edge.spool_dir"):
        EdgeRuntime(edge_cfg, "slurm")
    assert mode(spool) == 0o755
    spool.chmod(0o700)
    drop = short_dir / "drop"
    drop.mkdir()
    drop.chmod(0o1733)  # what the edge made before: writable by all
    e = SlurmEdge(hooks_cfg(edge_cfg, short_dir))
    with pytest.raises(ServiceError, match=r"hook drop directory .* mode 1733.*hook_drop_dir"):
        e.start()


def test_the_default_spool_directory_made_open_before_is_made_private(
        edge_cfg: Config, tmp_path: Path) -> None:
    cfg = edge_cfg.replace(edge={"spool_dir": ""}, stack={"cache_dir": str(tmp_path / "c")})
    default = tmp_path / "c" / "spool"
    default.mkdir(parents=True)
    default.chmod(0o755)
    rt = EdgeRuntime(cfg, "slurm")
    rt.spool.close()
    assert mode(default) == 0o700


def test_hook_user_gets_the_socket_and_drop_directory(edge_cfg: Config,
                                                      short_dir: Path) -> None:
    if os.geteuid() != 0:
        # CI runs as root: there this is a broken run, not a skip
        unavailable("giving paths to another user needs root",
                    "giving paths to another user needs root, and CI runs as root")
    nobody = pwd.getpwnam("nobody")
    e = SlurmEdge(hooks_cfg(edge_cfg, short_dir, hook_user="nobody")).start()
    try:
        for path, m in ((e.hook_socket, 0o600), (e.hook_drop_dir, 0o700)):
            assert path.lstat().st_uid == nobody.pw_uid and mode(path) == m
    finally:
        e.stop(timeout=0)
