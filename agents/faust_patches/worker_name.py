"""Faust's worker under the name its log lines have always carried.

mode prefixes a service's log lines with its label, ``Service._repr_name()``: the class's
name. A subclass of ``faust.Worker`` would log as ``[^Runner]`` where Faust's logs
``[^Worker]``, which is what operators read and search for.

Patched, by subclassing: ``Service._repr_name``.
"""

from __future__ import annotations

import faust

__all__ = ["Worker"]


class Worker(faust.Worker):
    """``faust.Worker``, named ``Worker`` in its log lines whatever its subclass is called."""

    def _repr_name(self) -> str:
        return "Worker"  # the name its log lines carry, as Faust's own
