"""Exponential backoff between attempts, for every loop that retries (edges, sink).

Written here rather than taken from a library: the retrying libraries (tenacity, backoff)
own the loop and call the function themselves, while our loops must wait their own way
(``Event.wait`` to stop at once, the sink's wait that keeps its Kafka consumer alive). Only
the sequence of waits is shared.
"""

from __future__ import annotations

import random

__all__ = ["Backoff"]


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
