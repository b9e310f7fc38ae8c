"""Contract of agents.faust_patches.fetch: Faust builds its worker consumer to fetch one
byte or wait 1.5 s, and aiokafka builds its fetcher from the consumer's attributes when it
starts; with the patch, the worker's consumer fetches as configured."""

from __future__ import annotations

import asyncio
import inspect
from pathlib import Path
from typing import Any

import faust
from aiokafka import AIOKafkaConsumer

from agents.app import create_app
from agents.faust_patches import fetch
from pipeline.runtime.config import Config


def _made(app: Any, create: Any) -> tuple[int, int, int]:
    """What the consumer ``create`` makes for ``app`` fetches with (no broker is asked)."""
    async def made() -> tuple[int, int, int]:
        consumer = create(app.consumer._thread, app.transport)
        try:
            return (consumer._fetch_min_bytes, consumer._fetch_max_wait_ms,
                    consumer._max_partition_fetch_bytes)
        finally:
            await consumer.stop()

    return asyncio.run(made())


def test_fausts_worker_consumer_fetches_one_byte_or_waits_one_and_a_half_seconds() -> None:
    app = faust.App("fetch-contract", autodiscover=False)
    assert _made(app, fetch.FAUST_CREATE_WORKER_CONSUMER) == (
        1, 1500, app.conf.consumer_max_fetch_size)


def test_aiokafka_builds_its_fetcher_from_the_consumers_attributes_at_start() -> None:
    """Set before ``start``, the attributes are what the fetcher gets."""
    source = inspect.getsource(AIOKafkaConsumer.start)
    assert "fetch_min_bytes=self._fetch_min_bytes" in source
    assert "fetch_max_wait_ms=self._fetch_max_wait_ms" in source


def test_the_worker_consumer_fetches_as_configured(tmp_path: Path) -> None:
    cfg = Config().replace(kafka={"replication_factor": 1},
                           worker={"store_dir": str(tmp_path / "store"), "app_id": "fetch-test",
                                   "fetch_min_bytes": 12345, "fetch_max_wait_ms": 67})
    worker = create_app(cfg)
    create = type(worker.app.consumer._thread)._create_worker_consumer
    assert _made(worker.app, create) == (12345, 67, worker.app.conf.consumer_max_fetch_size)


def test_an_app_without_a_setting_fetches_as_faust_does() -> None:
    fetch.apply()
    app = faust.App("fetch-unset", autodiscover=False)
    assert _made(app, fetch._create_worker_consumer)[:2] == (1, 1500)
