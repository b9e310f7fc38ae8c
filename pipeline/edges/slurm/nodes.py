"""Node state poller: ``scontrol show nodes --json`` (``sinfo --json`` on 22.05) every
``nodes_interval_s``, one ``slurm-nodes`` record per node whose state changed.

Slurm tells no one when a node is drained, resumed or downed: jobcomp and the hooks are
about jobs, and ``strigger`` cannot stand in (docs/slurm.md, "Node state"). So the edge
polls. Each record is the command's document with ``nodes`` cut down to one node (``meta``,
``last_update`` and the other top-level keys kept), which
:func:`pipeline.parsers.slurm_nodes.nodes_parts` reads as that node's ``state`` event, keyed
``cluster:node`` (:func:`pipeline.core.nodes.node_key`, the key of the worker's node
table, so the record is already in its node's partition).

A node is published only when its *state fields* changed (:data:`STATE_FIELDS`: the state
list or v0.0.38's state and flags, reason, reason_set_by_user, reason_changed_at,
partitions); the rest of a node (load, free memory, allocated CPUs, ``last_busy``) changes
at every poll and publishes nothing. What was published is remembered per node in the
spool's meta (:class:`~pipeline.edges.slurm.changes.PublishedViews`), confirmed by Kafka,
so a restart publishes only the nodes that changed meanwhile, and those whose last record
Kafka had not confirmed.

The command: ``nodes_command`` when set, else chosen once from ``scontrol --version``;
newer ``sinfo --json`` groups nodes by state (``sinfo`` records, one reason time per group)
and is not read. The output goes to an unlinked file beside the spool and is read node by
node (:mod:`.documents`), as the job poller reads its jobs.
"""

from __future__ import annotations

import logging
import re
import shlex
import tempfile
import time
from collections.abc import Callable
from typing import IO, Any

from pipeline.core.model import RawRecord
from pipeline.edges.base import EdgeRuntime, record_key
from pipeline.edges.slurm.changes import PublishedViews, digest, dumps
from pipeline.edges.slurm.documents import iter_items, top_level
from pipeline.edges.slurm.polling import Poller, PollError, Runner, run_command

__all__ = ["FORMAT", "NODES_META", "STATE_FIELDS", "NodePoller", "nodes_command",
           "slurm_version", "state_view"]

logger = logging.getLogger(__name__)

FORMAT = "slurm-nodes"
#: the spool meta holding what was published of each node
NODES_META = "slurm.nodes.views"
#: the fields of a node whose change is news (``state_flags``: v0.0.38's flags beside a
#: string ``state``; absent, hence None, from v0.0.39)
STATE_FIELDS = ("state", "state_flags", "reason", "reason_set_by_user",
                "reason_changed_at", "partitions")
#: records per publish_many, as the job poller's CHUNK (a node is 1-3 KB of JSON)
CHUNK = 250
#: the first release whose scontrol prints --json
SCONTROL_JSON_SINCE = (23, 2)


def state_view(node: dict[str, Any]) -> dict[str, Any]:
    """What of a node counts as a change (as printed: the digest needs no parse)."""
    return {name: node.get(name) for name in STATE_FIELDS}


def slurm_version(text: str) -> tuple[int, int]:
    """(major, minor) of ``scontrol --version``'s ``slurm 22.05.8`` (``slurm-wlm`` on
    Debian); PollError when it says no version."""
    found = re.search(r"(\d+)\.(\d+)", text)
    if found is None:
        raise PollError(f"scontrol --version printed no version: {text.strip()[:100]!r}")
    return int(found[1]), int(found[2])


def nodes_command(version: tuple[int, int]) -> list[str]:
    """The command that prints one object per node on that Slurm release."""
    if version >= SCONTROL_JSON_SINCE:
        return ["scontrol", "show", "nodes", "--json"]
    return ["sinfo", "--json"]


class NodePoller(Poller):
    """Runs the node polls in a thread; ``poll_once`` is the unit of work (tests call it).
    Built before the edge's runtime starts, so that it hears every confirmation."""

    def __init__(self, runtime: EdgeRuntime, *, runner: Runner = run_command,
                 clock: Callable[[], float] = time.time,
                 sleep: Callable[[float], bool] | None = None) -> None:
        super().__init__(runtime, what="slurm node poll",
                         interval_s=runtime.cfg.edge.slurm.nodes_interval_s, runner=runner,
                         clock=clock, sleep=sleep)
        self.views = PublishedViews(runtime.spool, NODES_META)
        runtime.on_acked(self.views.acked)
        self._command = shlex.split(self.cfg.nodes_command)

    def command(self) -> list[str]:
        """``nodes_command``, or the one of the Slurm release (asked once it answers)."""
        if not self._command:
            with tempfile.TemporaryFile(dir=self.runtime.spool.path.parent) as out:
                self.runner(["scontrol", "--version"], self.cfg.command_timeout_s, out)
                out.seek(0)
                version = slurm_version(out.read(200).decode(errors="replace"))
            self._command = nodes_command(version)
            logger.info("slurm %d.%02d: nodes polled with %s", *version,
                        " ".join(self._command))
        return self._command

    def poll_once(self) -> int:
        """One poll; the number of records published. Raises PollError."""
        argv = self.command()
        # on disk beside the spool, not in /tmp (often tmpfs, i.e. memory); unlinked at once
        with tempfile.TemporaryFile(dir=self.runtime.spool.path.parent) as out:
            self.runner(argv, self.cfg.command_timeout_s, out)
            rest = top_level(out, "nodes")  # the whole document is checked first
            n = self._publish(out, rest, self.clock())
        self.polls += 1
        self.published += n
        return n

    def _publish(self, f: IO[bytes], rest: dict[str, Any], now: float) -> int:
        cluster = self.runtime.cfg.cluster
        polled: set[str] = set()
        batch: list[tuple[str | None, int, RawRecord]] = []
        n = 0
        for node in iter_items(f, "nodes"):
            name = node.get("name")
            # tracked by its name even when the parser refuses the node (it goes to the
            # DLQ once per change); a node without one is published at every poll
            name = name if isinstance(name, str) and name else None
            value = digest(state_view(node))
            if name is not None:
                polled.add(name)
                if not self.views.changed(name, value):
                    continue
            payload = dumps({**rest, "nodes": [node]})
            batch.append((name, value, RawRecord(
                cluster=cluster, scheduler="slurm", format=FORMAT, received_at=now,
                payload=payload, key=record_key(FORMAT, payload, cluster, now))))
            if len(batch) >= CHUNK:
                n += self._spool(batch)
                batch = []
        if batch:
            n += self._spool(batch)
        if polled:  # an empty list is a failed query's (errors), not a cluster's
            self.views.retain(polled)
        return n

    def _spool(self, batch: list[tuple[str | None, int, RawRecord]]) -> int:
        records = [r for _, _, r in batch]
        self.views.publish([(name, value) for name, value, _ in batch],
                           lambda: self.runtime.publish_many(records))
        return len(records)
