"""Files that others load (systemd units, Slurm hooks and lua scripts): written whole or
not at all, so that a reader never sees half of one."""

from __future__ import annotations

from pathlib import Path

__all__ = ["write_whole"]


def write_whole(path: Path, text: str, mode: int) -> None:
    """Write ``text`` to ``path`` with ``mode`` through a hidden temporary file beside it,
    renamed over ``path``; the temporary file is removed on failure (OSError raised)."""
    partial = path.with_name(f".{path.name}.partial")
    try:
        partial.write_text(text)
        partial.chmod(mode)
        partial.replace(path)
    except OSError:
        partial.unlink(missing_ok=True)
        raise
