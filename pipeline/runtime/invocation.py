"""The configuration of one command invocation, for the command modules of every area.

``jobstream`` (:mod:`pipeline.cli`) puts a :class:`LazyConfig` on its root click context;
each area's command reads it with :func:`get_config`. It lives in the runtime, below every
area, so that an area's commands need nothing of the root command line: the arrow runs
from ``pipeline.cli`` down to the areas, never back.
"""

from __future__ import annotations

import click

from pipeline.runtime.config import Config, load_config

__all__ = ["LazyConfig", "get_config"]


class LazyConfig:
    """Loads the config on first use, so ``--help`` works with a broken config file."""

    def __init__(self, path: str | None) -> None:
        self.path = path
        self._cfg: Config | None = None

    def get(self) -> Config:
        if self._cfg is None:
            self._cfg = load_config(self.path)
        return self._cfg


def get_config(ctx: click.Context) -> Config:
    """The invocation's config: the root's lazy loader (``jobstream`` or ``python -m
    pipeline.edges``), else the default lookup (a group invoked on its own, as in tests)."""
    obj = ctx.find_root().obj
    return obj.get() if obj is not None else load_config()
