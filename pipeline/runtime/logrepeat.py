"""A logging filter that holds back the repeats of one message.

With the broker away, aiokafka logs "Unable connect to node" and "Unable to update
metadata" on every attempt: thousands of lines a second, a worker's log of 20 s outage
grew by 190,000 lines. An operator needs the first line and a count, not the flood.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

__all__ = ["RepeatFilter"]


class RepeatFilter(logging.Filter):
    """Lets the first record of a message through (per logger, level and format string,
    whatever its arguments) and drops the same message for ``window_s`` after it; the next
    one let through says how many were dropped.

    :param prefixes: loggers it applies to (their names start so); others pass untouched
    """

    #: distinct messages remembered; more are rare (format strings, not texts), and then
    #: the memory starts afresh rather than grow
    MAX_KEYS = 1000

    def __init__(self, window_s: float = 30.0, prefixes: tuple[str, ...] = ("aiokafka",),
                 clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__()
        self.window_s = window_s
        self.prefixes = prefixes
        self.clock = clock
        self._seen: dict[tuple[str, int, str], tuple[float, int]] = {}

    def filter(self, record: logging.LogRecord) -> bool:
        if not record.name.startswith(self.prefixes):
            return True
        key = (record.name, record.levelno, str(record.msg))
        now = self.clock()
        shown_at, held = self._seen.get(key, (None, 0))
        if shown_at is not None and now - shown_at < self.window_s:
            self._seen[key] = (shown_at, held + 1)
            return False
        if len(self._seen) >= self.MAX_KEYS:
            self._seen.clear()
        self._seen[key] = (now, 0)
        if held:
            record.msg = f"{record.msg} [{held} more like this in {now - shown_at:.0f} s]"
        return True
