"""Contract of agents.faust_patches.delivery: mode's ``wait_first`` makes a task of every
hand-over of Faust's fetch loop; the patched one runs a hand-over at once when it does not
wait, and as Faust ran it when it does (a full queue, a suspended flow, a stopped
consumer)."""

from __future__ import annotations

import asyncio
import inspect
import warnings
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from mode import Service

from agents.faust_patches import delivery


class Fetching(Service):
    """The parts of Faust's consumer the hand-over reads: a mode service (its ``stopped``
    and ``crashed`` events) with the ``suspend_flow`` event a rebalance sets."""

    def __init__(self) -> None:
        super().__init__()
        self.suspend_flow = asyncio.Event()

    async def hand_over(self, delivery_: Awaitable[Any]) -> Any:
        """As ``Consumer._drain_messages`` calls it."""
        return await delivery._wait_first(self, delivery_, self.suspend_flow.wait())


def run(body: Callable[[Fetching], Awaitable[Any]]) -> Any:
    async def main() -> Any:
        return await body(Fetching())
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a coroutine never awaited nor closed
        return asyncio.run(main())


def test_fausts_fetch_loop_hands_over_through_wait_first_with_the_suspension() -> None:
    """The one call the patch recognizes: ``wait_first(callback(message),
    self.suspend_flow.wait())`` in ``Consumer._drain_messages``."""
    from faust.transport.consumer import Consumer
    source = inspect.getsource(Consumer._drain_messages)
    assert "await self.wait_first(\n" in source
    assert "callback(message), self.suspend_flow.wait()" in source
    assert delivery._SUSPEND_WAIT is asyncio.Event.wait.__code__


def test_modes_wait_first_makes_a_task_of_a_delivery_that_does_not_wait() -> None:
    """What the patch replaces: a task for the delivery, the suspension, the consumer's
    ``stopped`` and ``crashed`` events, even when the delivery never waits."""
    async def body(c: Fetching) -> tuple[Any, int]:
        made = []
        loop = asyncio.get_running_loop()
        factory = loop.get_task_factory()

        def counting(loop: Any, coro: Any, **kw: Any) -> Any:
            made.append(coro)
            return asyncio.Task(coro, loop=loop, **kw) if factory is None else factory(
                loop, coro, **kw)

        async def deliver() -> str:
            return "put"

        loop.set_task_factory(counting)
        try:
            result = await delivery.FAUST_WAIT_FIRST(c, deliver(), c.suspend_flow.wait())
        finally:
            loop.set_task_factory(factory)
        return result, len(made)

    result, tasks = run(body)
    assert result.results == ["put"] and tasks == 4


def test_a_delivery_that_does_not_wait_runs_at_once_without_tasks() -> None:
    async def body(c: Fetching) -> tuple[Any, int, list[str]]:
        queue: asyncio.Queue[str] = asyncio.Queue()

        async def deliver() -> str:
            queue.put_nowait("m1")
            return "put"

        before = len(asyncio.all_tasks())
        result = await c.hand_over(deliver())
        return result, len(asyncio.all_tasks()) - before, [queue.get_nowait()]

    result, new_tasks, got = run(body)
    assert result.results == ["put"] and not result.stopped
    assert new_tasks == 0
    assert got == ["m1"]


def test_a_delivery_that_waits_ends_when_its_queue_has_room() -> None:
    async def body(c: Fetching) -> tuple[Any, list[str]]:
        queue: asyncio.Queue[str] = asyncio.Queue(maxsize=1)
        queue.put_nowait("m1")

        async def deliver() -> str:
            await asyncio.sleep(0)  # a bare yield first, then a future
            await queue.put("m2")
            return "put"

        async def agent() -> list[str]:
            await asyncio.sleep(0.05)
            return [queue.get_nowait(), await queue.get()]

        reading = asyncio.ensure_future(agent())
        result = await c.hand_over(deliver())
        return result, await reading

    result, got = run(body)
    assert result.results == ["put"]
    assert got == ["m1", "m2"]


def test_a_suspended_flow_abandons_a_waiting_delivery_and_cancels_it() -> None:
    cancelled = []

    async def body(c: Fetching) -> Any:
        queue: asyncio.Queue[str] = asyncio.Queue(maxsize=1)
        queue.put_nowait("m1")

        async def deliver() -> None:
            try:
                await queue.put("m2")
            except asyncio.CancelledError:
                cancelled.append(True)
                raise

        asyncio.get_running_loop().call_later(0.05, c.suspend_flow.set)
        result = await c.hand_over(deliver())
        await asyncio.sleep(0.01)  # the cancellation reaches the delivery
        return result, queue.qsize()

    (result, size) = run(body)
    assert result.results == [True] and len(result.done) == 1  # the suspension won
    assert cancelled == [True]
    assert size == 1  # m2 never went in


def test_an_error_of_the_delivery_is_raised() -> None:
    async def body(c: Fetching) -> None:
        async def deliver() -> None:
            raise ValueError("bad message")
        await c.hand_over(deliver())

    with pytest.raises(ValueError, match="bad message"):
        run(body)


def test_an_error_after_waiting_is_raised() -> None:
    async def body(c: Fetching) -> None:
        async def deliver() -> None:
            await asyncio.sleep(0.01)
            raise ValueError("late")
        await c.hand_over(deliver())

    with pytest.raises(ValueError, match="late"):
        run(body)


@pytest.mark.parametrize("event", ["suspend_flow", "_stopped"])
def test_with_the_flow_suspended_or_the_consumer_stopped_faust_hands_over(event: str) -> None:
    async def body(c: Fetching) -> Any:
        getattr(c, event).set()
        delivered = []

        async def deliver() -> None:
            delivered.append(True)

        result = await c.hand_over(deliver())
        return result, delivered

    result, delivered = run(body)
    # Faust's own: a task per awaitable, and with the consumer stopped a result that says so
    assert result.stopped == (event == "_stopped")
    assert delivered == [True]


def test_apply_puts_it_in_place_of_fausts() -> None:
    from faust.transport.consumer import Consumer
    from mode import Service as ModeService
    assert delivery.FAUST_WAIT_FIRST is ModeService.wait_first
    delivery.apply()
    delivery.apply()
    assert Consumer.wait_first is delivery._wait_first
