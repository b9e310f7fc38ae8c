"""Names of one benchmark run: every phase gets topics, an index prefix, a Faust app id
and state directories of its own, all carrying the run's token, so that nothing of a run
meets the live flow, another run, or a test session on the same stack, and so that
:func:`cleanup` can find and delete all of it afterwards.
"""

from __future__ import annotations

import dataclasses
import logging
import shutil
import uuid
from dataclasses import dataclass
from pathlib import Path

from confluent_kafka.admin import AdminClient

from pipeline.replay.readback import client
from pipeline.runtime.config import Config

__all__ = ["BenchNames", "cleanup"]

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class BenchNames:
    """The run's token and where its state lives."""

    token: str
    state_dir: Path

    @classmethod
    def new(cls, state_root: Path) -> BenchNames:
        token = f"bench-{uuid.uuid4().hex[:8]}"
        return cls(token, state_root / token)

    def phase(self, cfg: Config, phase: str) -> Config:
        """``cfg`` with the names of one phase (``e2e``, ``latency``, ...)."""
        tag = f"{self.token}-{phase}"
        topics = {f.name: f"{getattr(cfg.topics, f.name)}.{tag}"
                  for f in dataclasses.fields(cfg.topics)}
        where = self.state_dir / phase
        return cfg.replace(
            topics=topics,
            elasticsearch={"index_prefix": f"{tag}-"},
            worker={"app_id": f"jobstream-{tag}", "store_dir": str(where / "worker-store")},
            edge={"spool_dir": str(where / "spool")},
        )


def cleanup(cfg: Config, names: BenchNames) -> list[str]:
    """Delete the run's topics, consumer groups, indices, index templates and state
    directory; returns what could not be deleted (the run's outcome stands either way)."""
    problems: list[str] = []
    token = names.token
    try:
        admin = AdminClient(cfg.librdkafka())
        topics = [t for t in admin.list_topics(timeout=15).topics if token in t]
        if topics:
            for future in admin.delete_topics(topics, operation_timeout=30).values():
                future.result(timeout=60)
        groups = [g.group_id for g in admin.list_consumer_groups(request_timeout=15)
                  .result(timeout=30).valid if token in g.group_id]
        if groups:
            for future in admin.delete_consumer_groups(groups, request_timeout=30).values():
                future.result(timeout=60)
    except Exception as exc:  # noqa: BLE001 -- reported, not raised: clean-up comes last
        problems.append(f"kafka: {exc}")
    try:
        es = client(cfg)
        es.options(ignore_status=404).indices.delete(
            index=f"{token}-*", expand_wildcards="all", allow_no_indices=True)
        es.options(ignore_status=404).indices.delete_index_template(name=f"{token}-*")
    except Exception as exc:  # noqa: BLE001
        problems.append(f"elasticsearch: {exc}")
    shutil.rmtree(names.state_dir, ignore_errors=True)
    for problem in problems:
        logger.warning("bench clean-up: %s", problem)
    return problems
