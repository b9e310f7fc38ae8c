"""Every change the worker makes to Faust (faust-streaming, and the aiokafka and mode it
drives), in one place: what each replaces, and why.

Faust is the worker's frame (the group, the assignment, the commits, the table and its
recovery); where its own code loses records or costs the worker most of its time, the
worker replaces that code, here and nowhere else. :func:`install` applies every patch and
refuses any faust-streaming (or aiokafka) but the one pinned in pyproject.toml
(:mod:`.version`): the patches are written against that release's code. Each has a
contract test in ``tests/unit/faust_patches`` that shows, on Faust's own code, the
behaviour it replaces: after an upgrade, the tests that fail name the patches to revisit.

The patches (the notes in docs/benchmarks-history.md give the figures):

* :mod:`.gaps` -- ``Consumer._add_gap``, ``_new_offset``, ``perform_seek``: Faust commits
  past records it never processed after a rebalance (a fetch-loop gap, a run starting one
  past the commit, a partition never committed); here such a commit stands still and the
  watchdog reads the partition again. :func:`seek` is the worker's one way to seek.
* :mod:`.delivery` -- ``Consumer.wait_first``: mode makes four tasks to hand over every
  fetched message; here a hand-over that does not wait runs at once, without tasks.
* :mod:`.fetch` -- ``AIOKafkaConsumerThread._create_worker_consumer``: Faust fixes the
  consumer's fetch at one byte / 1.5 s; here ``worker.fetch_min_bytes`` and
  ``worker.fetch_max_wait_ms`` are set on the aiokafka consumer before it starts.
* :mod:`.conductor` -- the app's ``Conductor._build_handler``: the jobs topics' messages
  go to the jobs stage's own handler (:func:`hand_over`, :mod:`agents.intake`), without a
  Faust event, channel and stream per record.
* :mod:`.changelog` -- ``Table.send_changelog``, by subclassing (:class:`ChangelogTable`):
  the table's changelog records go through the worker's outputs, not Faust's producer.
* :mod:`.worker_name` -- ``Service._repr_name``, by subclassing (:class:`Worker`): the
  worker's log lines say ``Worker``, as Faust's own.

Private names read, not replaced, each behind a function of its own:

* :mod:`.current_event` -- ``faust.streams._current_event``: the jobs stage makes its
  records Faust's current event, which the table reads (:func:`set_current_event`).
* :mod:`.clients` -- ``Consumer._thread._ensure_consumer()``, ``Producer._producer``:
  the aiokafka clients, for the metadata and commits Faust keeps to itself
  (:func:`kafka_consumer`, :func:`committed_offsets`, :func:`kafka_producer`).

Nothing outside this package uses a private name of Faust, mode or aiokafka.
"""

from __future__ import annotations

from typing import Any

from agents.faust_patches import conductor, delivery, fetch, gaps
from agents.faust_patches.changelog import ChangelogTable
from agents.faust_patches.clients import committed_offsets, kafka_consumer, kafka_producer
from agents.faust_patches.conductor import hand_over
from agents.faust_patches.current_event import reset_current_event, set_current_event
from agents.faust_patches.gaps import seek
from agents.faust_patches.version import require_pinned
from agents.faust_patches.worker_name import Worker

__all__ = ["ChangelogTable", "Worker", "committed_offsets", "hand_over", "install",
           "kafka_consumer", "kafka_producer", "reset_current_event", "seek",
           "set_current_event"]


def install(app: Any, *, fetch_min_bytes: int, fetch_max_wait_ms: int) -> None:
    """Apply every patch for ``app`` (idempotent): the process-wide ones to Faust's
    classes, the app's own to its conductor and consumer. Raises
    :class:`pipeline.runtime.errors.ConfigError` on a Faust other than the pinned one, before
    changing anything."""
    require_pinned()
    gaps.apply()
    delivery.apply()
    fetch.apply()
    fetch.configure(app, fetch_min_bytes, fetch_max_wait_ms)
    conductor.apply(app)
