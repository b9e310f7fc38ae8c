"""Flux's own view at the end of the recorded resource journal (``tests/data/vectors/flux``,
README): ``flux resource status`` and ``flux resource drain`` read back, and the
allocation of the job that ran meanwhile, for the tests that fold the recording (the
parser's and the edge's)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from datafiles import vector

from pipeline.core.nodes import NodeEvent
from pipeline.parsers import parse_record
from pipeline.parsers.flux_resource import allocation_events

__all__ = ["recording_allocations", "resource_drains", "resource_status"]


def resource_status(path: Path) -> Counter[tuple[str, bool]]:
    """``flux resource status``: nodes per (STATE, UP)."""
    lines = path.read_text().splitlines()
    assert lines[0].split() == ["STATEUP", "NNODES", "NODELIST"]  # Flux's own header
    counts: Counter[tuple[str, bool]] = Counter()
    for line in lines[1:]:
        state, up, nnodes, _nodelist = line.split()
        assert up in ("✔", "✗")
        counts[(state, up == "✔")] += int(nnodes)
    return counts


def resource_drains(path: Path) -> list[dict[str, Any]]:
    """``flux resource drain -o '{ranks} {nodelist} {reason} {timestamp} {state}'``."""
    lines = path.read_text().splitlines()
    assert lines[0].split() == ["RANKS", "NODELIST", "REASON", "TIME", "STATE"]
    rows = []
    for line in lines[1:]:
        words = line.split()
        rows.append({"ranks": words[0], "nodelist": words[1], "reason": " ".join(words[2:-2]),
                     "time": float(words[-2]), "state": words[-1]})
    return rows


def recording_allocations(cluster: str, hosts: Mapping[int, str],
                          until: float | None = None) -> list[NodeEvent]:
    """The node events (``alloc``, ``free``) of the ``memos`` job, which ran on rank 0 of
    the same instance during the recording; with ``until``, those up to that time."""
    job_events = []
    for line in vector("flux", "real-0.88-memo-journal.jsonl").read_bytes().split(b"\n"):
        if line.strip():
            job_events += parse_record("flux-journal", line, cluster=cluster)
    return [ev for ev in allocation_events(job_events, hosts)
            if until is None or ev.timestamp <= until]
