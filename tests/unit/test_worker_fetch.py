"""The worker's consumer fetches with the configured minimum and wait (agents.fetch)."""

from __future__ import annotations

import asyncio
from pathlib import Path

from agents.app import create_app
from pipeline.runtime.config import Config


def test_the_worker_consumer_fetches_as_configured(tmp_path: Path) -> None:
    cfg = Config().replace(kafka={"replication_factor": 1},
                           worker={"store_dir": str(tmp_path / "store"), "app_id": "fetch-test",
                                   "fetch_min_bytes": 12345, "fetch_max_wait_ms": 67})
    worker = create_app(cfg)

    async def made() -> tuple[int, int, int]:
        thread = worker.app.consumer._thread  # noqa: SLF001 -- the consumer Faust makes
        consumer = thread._create_worker_consumer(worker.app.transport)  # noqa: SLF001
        try:
            # what aiokafka builds its fetcher from when the consumer starts
            return (consumer._fetch_min_bytes, consumer._fetch_max_wait_ms,  # noqa: SLF001
                    consumer._max_partition_fetch_bytes)  # noqa: SLF001
        finally:
            await consumer.stop()

    assert asyncio.run(made()) == (12345, 67, worker.app.conf.consumer_max_fetch_size)
