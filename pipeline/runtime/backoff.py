"""Retrying: exponential backoff between attempts (edges, sink, worker) and :func:`retry`.

Written here rather than taken from a library: the retrying libraries (tenacity, backoff)
own the loop and sleep themselves, while our loops must wait their own way (``Event.wait``
to stop at once, the sink's wait that keeps its Kafka consumer alive, a producer's
``poll`` that lets librdkafka's full queue drain). So :class:`Backoff` is only the sequence
of waits, and :func:`retry` takes the wait as a function.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import TypeVar

__all__ = ["Backoff", "retry"]

T = TypeVar("T")


class Backoff:
    """Waits of ``initial`` s, doubling up to ``maximum``; ``reset`` after a success.

    With ``jitter`` each wait is drawn from ``uniform(0, bound)`` ("full jitter"), so that
    clients failing together do not all retry together.
    """

    def __init__(self, initial: float, maximum: float, *, jitter: bool = False,
                 rng: random.Random | None = None) -> None:
        self.initial = initial
        self.maximum = maximum
        self.failures = 0
        self._rng = (rng or random.Random()) if jitter else None  # noqa: S311 -- not secrets

    def next(self) -> float:
        """The wait before the next attempt (one more failure counted)."""
        bound = min(self.maximum, self.initial * 2.0 ** min(self.failures, 62))
        self.failures += 1
        return self._rng.uniform(0.0, bound) if self._rng is not None else bound

    def reset(self) -> None:
        self.failures = 0


def retry(attempt: Callable[[], T], *, on: type[BaseException] | tuple[type[BaseException], ...],
          wait: Callable[[], object], attempts: int = 0,
          retriable: Callable[[BaseException], bool] | None = None) -> T:
    """``attempt()``'s result, calling it again after ``wait()`` each time it raises ``on``.

    ``retriable(exc)`` False, or ``attempts`` calls made (0: no limit), and the exception
    goes to the caller.
    """
    made = 0
    while True:
        try:
            return attempt()
        except on as exc:
            made += 1
            if made == attempts or (retriable is not None and not retriable(exc)):
                raise
        wait()
