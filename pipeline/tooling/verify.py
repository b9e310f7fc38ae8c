"""Job documents against a workload's ground truth (pure).

:class:`~pipeline.tooling.workload.Workload` says what every generated job's document must end up
as; :func:`compare` checks a set of documents (read back from Elasticsearch, or folded
offline) against it, field by field, and counts what matches. The demo prints the
result, the end-to-end tests assert on it.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from pipeline.core.nodes import node_key
from pipeline.fold import doc_id

__all__ = ["CHECKED_FIELDS", "KEY_FIELDS", "NODE_FIELDS", "TOLERANCES", "Comparison", "compare",
           "compare_nodes"]

#: What a job's outcome is judged by: the demo's "matches the truth".
KEY_FIELDS: tuple[str, ...] = ("state", "result", "exit_code")

#: Every truth field compared (when the truth of that job has it). Not ``ngpus``: the
#: truth says 0 for a job given no GPU, the fold leaves it unknown (null).
#: ``pending_reason`` is checkable on final documents: the reason a job cancelled while
#: pending waited for, None for a job that ran. The usage percentages: sacct's figures of a
#: Slurm job that ran, a Flux job's from its node samples, None where there is no usage
#: (within ``TOLERANCES``); ``usage_source`` says which ("sacct", "node", None) and
#: ``usage_nodes`` how many nodes sent samples of the run.
CHECKED_FIELDS: tuple[str, ...] = (
    "cluster", "scheduler", "job_id", "job_id_f58", "job_name", "user", "uid", "bank",
    "queue", "qos", "state", "result", "exit_code", "cancelled_before_start", "nnodes",
    "ncores", "nodelist", "pending_reason", "cpu_eff_pct", "mem_max_pct", "gpu_util_pct",
    "usage_source", "usage_nodes",
)

#: Fields compared within this absolute difference (percentage points). The truth computes
#: them from the very numbers the records carry (sacct's integers; the node samples'
#: counters as sent, run_s from the millisecond times the documents hold), so what is left
#: is floating point summing in another order: under 1e-12 relative on values up to ~100.
#: 1e-6 keeps six orders of margin over that and stays far below what a real fault moves:
#: a lost final sample (the CPU of the job's last interval) moves every Flux job's
#: cpu_eff_pct by 0.05 points or more (measured on seed 1 at time scales 0.05 and 1).
#: What a node document is checked for (``Workload.node_truth``): its state now, since when
#: (epoch ms), and the reason and who set it (drains and downs)
NODE_FIELDS: tuple[str, ...] = ("cluster", "scheduler", "node", "state", "drained", "reason",
                                "reason_by", "since")

TOLERANCES: Mapping[str, float] = {"cpu_eff_pct": 1e-6, "mem_max_pct": 1e-6,
                                   "gpu_util_pct": 1e-6}


@dataclass
class Comparison:
    """How a set of job (or node) documents compares with the truth."""

    #: jobs in the truth
    expected: int = 0
    #: documents seen (duplicates included)
    documents: int = 0
    #: truth jobs with no document
    missing: list[str] = field(default_factory=list)
    #: documents of no truth job
    unexpected: list[str] = field(default_factory=list)
    #: document ids seen more than once
    duplicated: list[str] = field(default_factory=list)
    #: jobs whose KEY_FIELDS all match
    key_matches: int = 0
    #: jobs whose CHECKED_FIELDS all match
    full_matches: int = 0
    #: field -> number of jobs where it differs
    field_errors: Counter[str] = field(default_factory=Counter)
    #: a few differences, for people: (job, field, document value, truth value)
    examples: list[tuple[str, str, Any, Any]] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """One document per generated job, none else, every checked field as the truth."""
        return (not self.missing and not self.unexpected and not self.duplicated
                and self.full_matches == self.expected)


def compare(truth: Mapping[str, Mapping[str, Any]], docs: Iterable[Mapping[str, Any]],
            *, max_examples: int = 10, key_of: Callable[[Mapping[str, Any]], str] = doc_id,
            checked: tuple[str, ...] = CHECKED_FIELDS,
            key_fields: tuple[str, ...] = KEY_FIELDS) -> Comparison:
    """Compare ``docs`` (job documents) with ``truth`` (document id -> expected fields)."""
    out = Comparison(expected=len(truth))
    seen: dict[str, Mapping[str, Any]] = {}
    for doc in docs:
        out.documents += 1
        key = key_of(doc)
        if key in seen:
            out.duplicated.append(key)
        seen[key] = doc
    out.unexpected = sorted(k for k in seen if k not in truth)
    for key, want in truth.items():
        doc = seen.get(key)
        if doc is None:
            out.missing.append(key)
            continue
        wrong = [f for f in checked if f in want and _differs(f, doc.get(f), want[f])]
        for name in wrong:
            out.field_errors[name] += 1
            if len(out.examples) < max_examples:
                out.examples.append((key, name, doc.get(name), want[name]))
        if not wrong:
            out.full_matches += 1
        if not any(f in wrong for f in key_fields):
            out.key_matches += 1
    return out


def compare_nodes(truth: Mapping[str, Mapping[str, Any]], docs: Iterable[Mapping[str, Any]],
                  *, max_examples: int = 10) -> Comparison:
    """Compare node documents with ``Workload.node_truth`` (``cluster:node`` -> fields):
    one document per node, none else, :data:`NODE_FIELDS` as the truth; a key match is a
    right ``state``."""
    return compare(truth, docs, max_examples=max_examples,
                   key_of=lambda doc: node_key(doc["cluster"], doc["node"]),
                   checked=NODE_FIELDS, key_fields=("state",))


def _differs(name: str, got: Any, want: Any) -> bool:
    tolerance = TOLERANCES.get(name)
    if tolerance is not None and isinstance(got, int | float) and isinstance(want, int | float):
        return abs(got - want) > tolerance
    return bool(got != want)
