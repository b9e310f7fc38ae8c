"""Progress output of the stack: rich spinners on a console, or nothing for the Python API."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from rich.console import Console

__all__ = ["Reporter"]


class Reporter:
    """Says what the stack is doing; silent when built without a console (tests, the API)."""

    def __init__(self, console: Console | None = None) -> None:
        self.console = console

    def note(self, text: str) -> None:
        if self.console is not None:
            self.console.print(text, highlight=False)

    @contextmanager
    def step(self, text: str) -> Iterator[Callable[[str], None]]:
        """A spinner with ``text`` and the elapsed seconds; yields a function for details."""
        if self.console is None:
            yield lambda _detail: None
            return
        started = time.monotonic()
        with self.console.status(text) as status:

            def update(detail: str) -> None:
                status.update(f"{text} [dim]{time.monotonic() - started:.0f} s  {detail}[/]")

            yield update
