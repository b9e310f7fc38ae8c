"""The worker's RocksDB directory may be configured anywhere, missing parents included."""

from __future__ import annotations

from pathlib import Path

from agents.app import create_app
from pipeline.runtime.config import Config


def test_create_app_makes_the_parents_of_a_new_store_dir(tmp_path: Path) -> None:
    store = tmp_path / "fresh" / "deeper" / "worker-store"
    cfg = Config().replace(kafka={"replication_factor": 1},
                           worker={"store_dir": str(store), "app_id": "store-dir-test"})
    worker = create_app(cfg)
    assert store.parent.is_dir()
    assert Path(worker.app.conf.datadir) == store


def test_the_jobs_table_store_has_small_buffers(tmp_path: Path) -> None:
    cfg = Config().replace(kafka={"replication_factor": 1},
                           worker={"store_dir": str(tmp_path / "store"), "app_id": "buffers"})
    options = create_app(cfg).jobs.data.rocksdb_options
    assert (options.block_cache_size, options.write_buffer_size,
            options.max_write_buffer_number) == (1 * 2**20, 4 * 2**20, 2)
