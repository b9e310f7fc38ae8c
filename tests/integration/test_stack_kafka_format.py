"""Formatting a fresh Kafka data directory works whatever the random cluster id looks like:
an id starting with "-" once made the storage tool take it for an option (the fault suite's
private stack failed to start about one time in 64)."""

from __future__ import annotations

import shutil
import tempfile
import uuid
from pathlib import Path

import pytest

from pipeline.runtime.config import Config
from pipeline.tooling.stack import service


def test_format_with_a_cluster_id_starting_with_a_dash(
        base_config: Config, stack_base_cfg: Config, monkeypatch: pytest.MonkeyPatch) -> None:
    shared = service(base_config, "kafka")
    cache = Path(tempfile.mkdtemp(prefix="js-kfmt-", dir="/tmp"))
    try:
        cfg = base_config.replace(stack={"cache_dir": str(cache)})
        kafka = service(cfg, "kafka")
        kafka.home.parent.mkdir(parents=True, exist_ok=True)  # type: ignore[attr-defined]
        kafka.home.symlink_to(shared.home)  # type: ignore[attr-defined]
        # 0xf8 -> the first base64url character is "-"
        monkeypatch.setattr(uuid, "uuid4", lambda: uuid.UUID(bytes=b"\xf8" + bytes(15)))
        kafka.prepare()
        meta = (kafka.data_dir / "meta.properties").read_text()
        assert "cluster.id=-" in meta
    finally:
        shutil.rmtree(cache, ignore_errors=True)
