"""The faults suite's final check (``tests/faults/harness.py``: ``reference``, ``judge``,
``Kill``), offline: a flow whose documents differ from the offline fold in any field (a
record processed twice moves ``revision``, which the truth alone never looks at) is wrong,
and an event the generator made but the indices lack is lost."""

from __future__ import annotations

import importlib
import sys
from collections import Counter
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from pipeline.runtime.config import Config
from pipeline.tooling.verify import compare
from pipeline.tooling.workload import Workload, WorkloadSpec

FAULTS = Path(__file__).resolve().parents[1] / "faults"


@pytest.fixture(scope="module")
def harness() -> ModuleType:
    # the faults suite imports it by its basename, as pytest puts tests/faults on the path
    if str(FAULTS) not in sys.path:
        sys.path.insert(0, str(FAULTS))
    return importlib.import_module("harness")


@pytest.fixture(scope="module")
def ref(harness: ModuleType) -> Any:
    w = Workload(WorkloadSpec(seed=4, jobs=40, start=1_790_000_000.0, time_scale=0.05))
    return harness.reference(Config(), w, list(w.records()))


def _judge(harness: ModuleType, ref: Any, docs: list[dict[str, Any]],
           seen: Counter[str] | None = None) -> Any:
    return harness.judge("t", ref, docs, Counter(list(ref.events)) if seen is None else seen,
                         records=0, recovery_s=0.0, wall_s=0.0)


def _docs(ref: Any) -> list[dict[str, Any]]:
    return [dict(d) for d in ref.documents.values()]


def test_the_offline_fold_itself_is_clean(harness: ModuleType, ref: Any) -> None:
    result = _judge(harness, ref, _docs(ref))
    assert result.ok, result.details
    assert (result.jobs, result.events) == (len(ref.truth), len(ref.events))


def test_a_job_processed_twice_is_wrong_though_its_truth_fields_match(
        harness: ModuleType, ref: Any) -> None:
    docs = _docs(ref)
    docs[0]["revision"] += 1
    assert compare(ref.truth, docs).ok  # what the suite checked alone before: blind to it
    result = _judge(harness, ref, docs)
    assert not result.ok
    assert (result.wrong_jobs, result.wrong_fields) == (1, {"revision": 1})
    assert (result.lost, result.duplicated) == (0, 0)
    assert "wrong=1 (revision 1)" in result.line()
    assert any("revision=" in d and "offline fold" in d for d in result.details)


def test_an_exception_folded_twice_is_wrong(harness: ModuleType, ref: Any) -> None:
    docs = _docs(ref)
    job = next(d for d in docs if d.get("exceptions"))
    job["exceptions"] = [*job["exceptions"], job["exceptions"][-1]]
    result = _judge(harness, ref, docs)
    assert (result.wrong_jobs, result.wrong_fields) == (1, {"exceptions": 1})


def test_lost_doubled_and_stray_events_and_a_lost_job(harness: ModuleType, ref: Any) -> None:
    ids = sorted(ref.events)
    seen = Counter(ids[1:] + [ids[2], "no-such-event"])
    docs = _docs(ref)[1:]
    result = _judge(harness, ref, docs, seen)
    assert (result.lost_events, result.duplicated_events, result.unexpected_events,
            result.lost_jobs) == (1, 1, 1, 1)
    # the lost event is named with what it is made of: its job, name and time
    assert any(d.startswith(f"missing event {ids[0]} ('") for d in result.details)


def test_the_table_names_the_wrong_fields(harness: ModuleType, ref: Any,
                                          tmp_path: Path) -> None:
    docs = _docs(ref)
    for doc in docs[:3]:
        doc["revision"] += 1
    docs[0]["t_end"] = 1
    result = _judge(harness, ref, docs)
    table = harness.write_table([result.as_dict()], tmp_path / "faults.md")
    assert "| 3 (revision 3, t_end 1) |" in table
    assert '"wrong_fields": {' in (tmp_path / "faults.json").read_text()


def test_a_kill_counts_what_its_victim_had_not_committed(harness: ModuleType) -> None:
    kill = harness.Kill("worker", 120, {("raw", 0): 3, ("raw", 2): 4})
    assert kill.lag == 7
    assert kill.on([("raw", 2), ("raw", 3)]) == 4
