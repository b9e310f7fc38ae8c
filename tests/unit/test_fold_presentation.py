"""The presentation-only fields of a job document are derived in one step, from the
document's other fields alone (pipeline.fold.presentation)."""

from __future__ import annotations

from typing import Any

import pytest
from test_fold import T0, ev, exc, flux_life

from pipeline.fold import DOC_FIELDS, fold
from pipeline.fold.presentation import PRESENTATION_FIELDS, present


def _slurm_requeued() -> list[Any]:
    return [
        ev("submit", T0, job="7", sched="slurm", facts={"t_submit": T0, "ncores": 4}),
        ev("end", T0 + 50, job="7", sched="slurm",
           facts={"result": "node_fail", "t_start": T0 + 5, "nnodes": 1, "ncores": 4}),
        ev("submit", T0 + 60, job="7", sched="slurm", facts={"t_submit": T0 + 60}),
        ev("end", T0 + 200, job="7", sched="slurm",
           facts={"result": "completed", "t_start": T0 + 70, "nnodes": 1, "ncores": 4,
                  "timelimit_s": 600, "cpu_eff_pct": 50.0, "mem_max_pct": 20.0}),
    ]


CASES = {
    "flux done": flux_life(),
    "flux running": flux_life(finish=None, until="start"),
    "flux cancelled pending": [e for e in flux_life(finish=None) if e.event in (
        "submit", "validate")] + [exc(T0 + 5, "cancel")],
    "slurm requeued": _slurm_requeued(),
}


def test_presentation_fields_are_document_fields() -> None:
    assert set(PRESENTATION_FIELDS) <= set(DOC_FIELDS)


@pytest.mark.parametrize("case", sorted(CASES))
def test_present_reads_only_the_other_fields(case: str) -> None:
    for doc in fold(CASES[case]):
        bare = {k: (None if k in PRESENTATION_FIELDS else v) for k, v in doc.items()}
        present(bare)
        assert bare == doc
        assert list(bare) == list(DOC_FIELDS)


def test_a_slurm_job_gets_its_ratios_buckets_weights_and_ranges() -> None:
    doc = fold(_slurm_requeued())[0]
    assert doc["run_interval"] == {"gte": round((T0 + 70) * 1000),
                                   "lt": round((T0 + 200) * 1000)}
    assert doc["timelimit_used_pct"] == pytest.approx(130 / 600 * 100)
    assert doc["size_bucket"] is not None and doc["runtime_bucket"] is not None
    assert doc["cpu_eff_x_nh"] == pytest.approx(50.0 * doc["node_hours"])
