"""What the worker's parts share, typed: the context :func:`agents.app.create_app` builds
and hands to the jobs stage's registration (:func:`agents.jobs.register`) and to the job
query (:mod:`agents.web`), and the outputs as the stages send through them.

It sits below the modules that use it, so that none of them imports the app that builds
it: the app imports them, they import this.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

import faust
from faust.types import TopicT

from agents.outputs import Outputs
from agents.table import JobsTable
from pipeline.codecs.wire import Wire
from pipeline.core.anonymize import Anonymizer
from pipeline.core.enrich import Enricher
from pipeline.runtime.config import Config

__all__ = ["Sender", "WorkerContext"]

#: a Kafka record's headers, as the outputs take them
Headers = list[tuple[str, bytes]]


class Sender(Protocol):
    """The outputs as the jobs stage uses them (:class:`agents.outputs.Outputs`, or a
    list of what was sent when the stage runs without Kafka)."""

    def send(self, topic: str, key: bytes | None, value: bytes | None,
             headers: Headers | None = None) -> None:
        """Queue one record for ``topic``."""

    def cut(self) -> Any:
        """End the records' current tally, and return it for :meth:`confirm`."""

    async def confirm(self, tally: Any) -> None:
        """Return once every record of ``tally`` is confirmed."""

    async def flush(self) -> None:
        """Return once every record sent so far is confirmed."""


@dataclass(frozen=True)
class WorkerContext:
    """The app with the topics, table, outputs and codecs its agents share."""

    cfg: Config
    app: faust.App
    #: the worker's name in its snapshots (host:web-port unless given)
    name: str
    raw: TopicT
    canonical: TopicT
    #: the job-state table
    jobs: JobsTable
    #: the node-state table (``cluster:node`` -> a NodeFold's head, and its segments)
    nodes: JobsTable
    outputs: Outputs
    anonymizer: Anonymizer
    enricher: Enricher
    wire: Wire
