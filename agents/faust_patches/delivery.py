"""How the consumer hands a fetched message to the agents: at once, when nothing waits.

Faust's fetch loop (``Consumer._drain_messages``) hands each message over as
``await self.wait_first(callback(message), self.suspend_flow.wait())``, so that a
rebalance suspending the flow need not wait for a callback stuck on a full buffer. mode's
``wait_first`` makes a task of each of the two, and of the consumer's ``stopped`` and
``crashed`` events, waits on the four with ``asyncio.wait`` and cancels the three that
lost: about 8 % of the worker's main thread (docs/benchmarks-history.md), though the callback almost
never waits (it hands the message to the jobs stage, :mod:`agents.intake`, which waits
only for a full batch's flush).

Here the callback is first run as far as it goes: when it ends without waiting, which is
the usual case, that is its whole delivery, as it would have been the first of the four to
end. When it waits (a full queue, flow control), what is left of it runs as a task in
Faust's own ``wait_first``, as before. When the flow is already suspended, or the
consumer stopped or crashed, Faust's ``wait_first`` is called as it was. Python 3.12's
eager tasks would give the first part for free; 3.11 has none, so it is written here.

Patched, process-wide: ``Consumer.wait_first`` (mode's ``Service.wait_first``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any

from faust.transport.consumer import Consumer
from mode.services import WaitResults

__all__ = ["FAUST_WAIT_FIRST", "apply"]

#: mode's own, used whenever the fast path does not apply
FAUST_WAIT_FIRST = Consumer.wait_first

_SUSPEND_WAIT = asyncio.Event.wait.__code__


async def _wait_first(self: Any, *coros: Any, timeout: Any = None) -> WaitResults:
    """In place of ``Consumer.wait_first`` (module docstring)."""
    if (timeout is not None or len(coros) != 2
            or getattr(coros[1], "cr_code", None) is not _SUSPEND_WAIT
            or not asyncio.iscoroutine(coros[0])
            or self.suspend_flow.is_set() or self._stopped.is_set()
            or self._crashed.is_set()):
        return await FAUST_WAIT_FIRST(self, *coros, timeout=timeout)
    delivery, suspended = coros
    try:
        waiting = delivery.send(None)
    except StopIteration as done:
        suspended.close()
        return WaitResults([delivery], [done.value], False)
    except BaseException:
        suspended.close()
        raise
    rest = asyncio.ensure_future(_resume(delivery, waiting))
    return await FAUST_WAIT_FIRST(self, rest, suspended)


async def _resume(coro: Coroutine[Any, Any, Any], waiting: Any) -> Any:
    """Run ``coro`` to its end, as a task would, from where it yielded ``waiting`` (the
    future it waits on, or None to let the loop run once)."""
    while True:
        thrown: BaseException | None = None
        try:
            if waiting is None:
                await asyncio.sleep(0)
            else:
                waiting._asyncio_future_blocking = False  # as a task takes it
                await asyncio.wait((waiting,))
        except asyncio.CancelledError as exc:
            if waiting is not None:
                waiting.cancel()
            thrown = exc
        try:
            waiting = coro.send(None) if thrown is None else coro.throw(thrown)
        except StopIteration as done:
            return done.value


def apply() -> None:
    """Hand messages over at once in this process (idempotent)."""
    Consumer.wait_first = _wait_first  # type: ignore[method-assign]
