"""Waiting for a condition in a test: one helper for every test that polls (the faults
harness has its own, which also watches its processes)."""

from __future__ import annotations

import time
from collections.abc import Callable

__all__ = ["wait_until"]


def wait_until(
    probe: Callable[[], bool], *, timeout: float, what: str, interval: float = 0.1
) -> None:
    """Poll ``probe`` until it returns True; raise TimeoutError naming ``what`` otherwise."""
    deadline = time.monotonic() + timeout
    while True:
        if probe():
            return
        if time.monotonic() >= deadline:
            raise TimeoutError(f"{what} not reached within {timeout:.0f} s")
        time.sleep(interval)
