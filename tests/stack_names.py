"""A test's own names on a shared stack: topics, index prefix, consumer group and state
directories made unique, and everything made under them deleted afterwards (every topic
whose name contains the suffix, every index and index template under the prefix)."""

from __future__ import annotations

import dataclasses
import uuid
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from confluent_kafka.admin import AdminClient

from pipeline.replay.readback import client
from pipeline.runtime.config import Config

__all__ = ["isolate", "isolated"]


def isolate(cfg: Config, suffix: str, state_dir: Path) -> Config:
    """``cfg`` with every shared name made unique by ``suffix``, state under ``state_dir``."""
    topics = {f.name: f"{getattr(cfg.topics, f.name)}.{suffix}"
              for f in dataclasses.fields(cfg.topics)}
    return cfg.replace(
        topics=topics,
        elasticsearch={"index_prefix": f"test-{suffix}-"},
        worker={"app_id": f"jobstream-{suffix}", "store_dir": str(state_dir / "worker-store")},
        edge={"spool_dir": str(state_dir / "spool")},
        sink={"state_dir": str(state_dir / "sink-state")},
    )


@contextmanager
def isolated(cfg: Config, state_dir: Path) -> Iterator[Config]:
    """:func:`isolate` under a new suffix; its topics and indices are deleted on exit."""
    suffix = uuid.uuid4().hex[:10]
    own = isolate(cfg, suffix, state_dir)
    try:
        yield own
    finally:
        _drop_topics(own, suffix)
        _drop_indices(own)


def _drop_topics(cfg: Config, suffix: str) -> None:
    try:
        admin = AdminClient(cfg.librdkafka())
        names = [t for t in admin.list_topics(timeout=10).topics if suffix in t]
        if names:
            for future in admin.delete_topics(names, operation_timeout=30).values():
                future.result(timeout=60)
    except Exception as exc:  # clean-up must not hide the outcome of the test
        warnings.warn(f"could not delete the test's topics: {exc}", stacklevel=1)


def _drop_indices(cfg: Config) -> None:
    prefix = cfg.elasticsearch.index_prefix
    try:
        with client(cfg) as es:
            es.options(ignore_status=404).indices.delete(
                index=f"{prefix}*", expand_wildcards="all", allow_no_indices=True)
            es.options(ignore_status=404).indices.delete_index_template(name=f"{prefix}*")
    except Exception as exc:  # clean-up must not hide the outcome of the test
        warnings.warn(f"could not delete the test's indices: {exc}", stacklevel=1)
