"""``jobstream worker`` creates its internal canonical topic before Faust starts.

Faust creates the topic itself, then at once joins the group; the join may not see the
brand-new topic yet (metadata lag), and assigns the jobs stage no partition. A rebalance
normally mends that within seconds, but if the broker restarts in between it waits for the
next metadata refresh: five minutes with the jobs stage idle (the fault suite hit it).
The test stops the worker before Faust gets anywhere (its web port is taken) and finds the
topic there all the same, with the configured partitions.
"""

from __future__ import annotations

import socket
from pathlib import Path

from confluent_kafka.admin import AdminClient

from pipeline.kafka.topics import canonical_topic
from pipeline.runtime.children import Child, log_tail
from pipeline.runtime.config import Config


def test_the_canonical_topic_exists_before_faust_starts(stack_cfg: Config,
                                                        tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("0.0.0.0", 0))  # noqa: S104 -- where the worker's web server binds
        taken.listen()
        port = taken.getsockname()[1]
        cfg = stack_cfg.replace(worker={"web_port": port})
        worker = Child("worker", cfg, ["worker", "--loglevel", "info"],
                       tmp_path / "worker.log").start()
        assert worker.proc is not None
        code = worker.proc.wait(120)
    assert code != 0, "the worker started although its port was taken"
    canonical = canonical_topic(cfg.worker.app_id)
    meta = AdminClient(cfg.librdkafka()).list_topics(timeout=10).topics
    assert canonical in meta, log_tail(worker.log, 30)
    assert len(meta[canonical].partitions) == cfg.kafka.partitions
