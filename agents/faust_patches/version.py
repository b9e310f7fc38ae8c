"""The Faust the patches were written against, and the check that it is the one installed.

Every patch of this package replaces or reads code of one faust-streaming release (and of
the aiokafka it drives); on another release they may apply cleanly and be wrong. So the
worker refuses to start on any other: an upgrade bumps ``PINNED`` with the pin in
pyproject.toml, after the contract tests (tests/unit/faust_patches) pass on the new one.
"""

from __future__ import annotations

from importlib import metadata

from pipeline.runtime.errors import ConfigError

__all__ = ["PINNED", "installed", "require_pinned"]

#: distribution -> the version pyproject.toml pins and the patches were checked against
PINNED = {"faust-streaming": "0.15.3", "aiokafka": "0.14.0"}


def installed(distribution: str) -> str | None:
    """The version of ``distribution`` installed (None: not installed)."""
    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return None


def require_pinned() -> None:
    """Raise :class:`ConfigError` unless every pinned distribution is installed at its pin."""
    for distribution, pinned in PINNED.items():
        found = installed(distribution)
        if found != pinned:
            raise ConfigError(
                f"{distribution} {found or 'is not installed'}{' is installed' if found else ''}"
                f", but the worker's Faust patches (agents.faust_patches) are written for "
                f"{distribution} {pinned}, the version pyproject.toml pins: install that one")
