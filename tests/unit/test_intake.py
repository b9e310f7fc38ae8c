"""The intake (agents/intake.py): what Faust's conductor, channel and stream did for the
jobs stage's records, kept without them. Kafka and Faust themselves are in
tests/integration/test_agents.py and tests/faults."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from types import SimpleNamespace
from typing import Any

from mode.utils.queues import FlowControlEvent

from agents.intake import Intake, acknowledge


class Consumer:
    def __init__(self) -> None:
        self.unacked: set[int] = set()
        self.acked: list[int] = []

    def track_message(self, message: Any) -> None:
        self.unacked.add(message.offset)

    def ack(self, message: Any) -> bool:
        if message.offset not in self.unacked:
            return False
        self.unacked.discard(message.offset)
        self.acked.append(message.offset)
        return True


class Stage:
    """Takes messages; the n-th one hands back a flush that waits for ``release``."""

    def __init__(self, app: Any, flush_at: int | None = None) -> None:
        self.app, self.flush_at = app, flush_at
        self.taken: list[int] = []
        self.messages: list[Any] = []
        self.release = asyncio.Event()
        self.flushed = False

    def take(self, message: Any) -> Awaitable[None] | None:
        self.taken.append(message.offset)
        self.messages.append(message)
        return self._flush() if len(self.taken) == self.flush_at else None

    async def _flush(self) -> None:
        await self.release.wait()
        for message in self.messages:
            acknowledge(self.app, message)
        self.flushed = True


def _intake(flush_at: int | None = None) -> tuple[Intake, Stage, Any]:
    out: list[int] = []
    app = SimpleNamespace(
        flow_control=FlowControlEvent(initially_suspended=False), consumer_generation_id=3,
        consumer=Consumer(), monitor=SimpleNamespace(stream_inbound_time={}),
        sensors=SimpleNamespace(on_message_out=lambda tp, offset, message: out.append(offset)),
        topics=SimpleNamespace(_build_handler=lambda tp, channels: None), out=out)
    stage = Stage(app, flush_at)
    intake = Intake(app, {"raw"}, stage)
    intake.install()
    return intake, stage, app


def _message(offset: int, generation: int = 3) -> Any:
    return SimpleNamespace(topic="raw", partition=0, offset=offset, tp=("raw", 0),
                           generation_id=generation, tracked=False)


def test_a_message_is_tracked_taken_and_acknowledged_with_the_monitor_told() -> None:
    async def run() -> tuple[Stage, Any]:
        intake, stage, app = _intake(flush_at=2)
        await intake.on_message(_message(0))
        assert app.consumer.unacked == {0} and stage.taken == [0]
        stage.release.set()
        await intake.on_message(_message(1))
        return stage, app

    stage, app = asyncio.run(run())
    # Faust's consumer takes a partition without an inbound time for a stalled stream
    assert set(app.monitor.stream_inbound_time) == {("raw", 0)}
    assert stage.flushed and app.consumer.unacked == set()
    assert app.consumer.acked == [0, 1] and app.out == [0, 1]


def test_a_message_of_an_earlier_generation_is_neither_taken_nor_tracked() -> None:
    async def run() -> tuple[Stage, Any]:
        intake, stage, app = _intake()
        await intake.on_message(_message(7, generation=2))
        return stage, app

    stage, app = asyncio.run(run())
    assert stage.taken == [] and app.consumer.unacked == set()


def test_a_message_taken_before_a_rebalance_is_done_but_not_acknowledged() -> None:
    """Its batch was confirmed after the group's generation changed: nothing may wait for
    it, and its offset must not go into the new assignment's commit."""
    async def run() -> tuple[Stage, Any, Any]:
        intake, stage, app = _intake(flush_at=1)
        message = _message(4)
        delivery = asyncio.ensure_future(intake.on_message(message))
        await asyncio.sleep(0.01)
        app.consumer_generation_id = 4
        stage.release.set()
        await delivery
        return stage, app, message

    stage, app, message = asyncio.run(run())
    assert stage.flushed and message.acked
    assert app.consumer.acked == [] and app.out == []


def test_nothing_is_taken_while_the_flow_is_suspended() -> None:
    async def run() -> list[int]:
        intake, stage, app = _intake()
        app.flow_control.suspend()
        delivery = asyncio.ensure_future(intake.on_message(_message(0)))
        await asyncio.sleep(0.01)
        before = list(stage.taken)
        app.flow_control.resume()
        await delivery
        return before + [-1] + stage.taken

    assert asyncio.run(run()) == [-1, 0]


def test_a_flush_goes_on_when_the_fetch_loop_abandons_its_delivery() -> None:
    """Faust's fetch loop cancels a delivery that waits when a rebalance suspends the flow:
    the flush must still end and acknowledge its records, which the rebalance waits for."""
    async def run() -> tuple[Stage, Any]:
        intake, stage, app = _intake(flush_at=1)
        delivery = asyncio.ensure_future(intake.on_message(_message(0)))
        await asyncio.sleep(0.01)
        delivery.cancel()
        await asyncio.gather(delivery, return_exceptions=True)
        assert app.consumer.unacked == {0} and not stage.flushed
        stage.release.set()
        await asyncio.sleep(0.01)
        return stage, app

    stage, app = asyncio.run(run())
    assert stage.flushed and app.consumer.unacked == set() and app.consumer.acked == [0]


def test_only_the_jobs_topics_get_the_intake_as_their_handler() -> None:
    faust_handler = object()
    conductor = SimpleNamespace(_build_handler=lambda tp, channels: faust_handler)
    app = SimpleNamespace(topics=conductor)
    intake = Intake(app, {"raw", "canonical"}, Stage(app))
    intake.install()
    raw = SimpleNamespace(topic="raw", partition=1)
    changelog = SimpleNamespace(topic="app-jobs-changelog", partition=1)
    assert conductor._build_handler(raw, set()) == intake.on_message
    assert conductor._build_handler(changelog, set()) is faust_handler
