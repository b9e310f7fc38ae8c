"""Contract of agents.faust_patches.conductor: Faust's conductor builds every partition's
handler in ``_build_handler`` (its own, for every topic); with the patch, the topics handed
over get the worker's handler, and every other keeps Faust's."""

from __future__ import annotations

from typing import Any

import faust
from faust.types import TP

from agents.faust_patches import conductor

RAW, CHANGELOG = TP("raw", 0), TP("app-jobs-changelog", 1)


def _handlers(app: faust.App) -> dict[TP, Any]:
    """The handlers the app's conductor builds for its partitions, as after an assignment
    (``Conductor._update_callback_map``, no broker asked)."""
    topics = app.topics
    topics._tp_index[RAW].add(app.topic("raw"))
    topics._tp_index[CHANGELOG].add(app.topic("app-jobs-changelog"))
    topics._update_callback_map()
    return dict(topics._tp_to_callback)


def test_faust_builds_its_own_handler_for_every_partition() -> None:
    handlers = _handlers(faust.App("conductor-contract", autodiscover=False))
    assert {type(h).__name__ for h in handlers.values()} == {"ConductorHandler"}


def test_the_topics_handed_over_get_the_workers_handler() -> None:
    app = faust.App("conductor-patched", autodiscover=False)

    async def on_message(message: Any) -> None:
        return None

    conductor.hand_over(app, {"raw"}, on_message)
    handlers = _handlers(app)
    assert handlers[RAW] is on_message
    assert type(handlers[CHANGELOG]).__name__ == "ConductorHandler"


def test_apply_is_idempotent() -> None:
    app = faust.App("conductor-twice", autodiscover=False)
    assert conductor.apply(app) is conductor.apply(app)
