"""``jobstream demo`` end to end on the real stack, checked against the generator's truth."""

from __future__ import annotations

from pathlib import Path

from demo_cli import demo_config, run_demo
from elasticsearch import Elasticsearch

from pipeline.config import Config
from pipeline.fold import doc_id
from pipeline.readback import job_documents, jobs_alias, refresh
from pipeline.verify import compare

#: what the issue asks the index to get right for every job
OUTCOME_FIELDS = ("state", "result", "exit_code", "user", "bank", "queue")


def test_the_index_holds_one_document_per_generated_job_as_generated(
        stack_cfg: Config, es: Elasticsearch, tmp_path: Path) -> None:
    cfg = demo_config(stack_cfg, tmp_path)
    workload, output = run_demo(cfg, tmp_path, jobs=150, seed=7)
    truth = workload.truth

    refresh(es, jobs_alias(cfg))
    docs = list(job_documents(es, jobs_alias(cfg)))
    by_id = {doc_id(d): d for d in docs}
    assert len(docs) == len(truth) == 150
    assert set(by_id) == set(truth)
    for key, want in truth.items():
        got = by_id[key]
        for name in OUTCOME_FIELDS:
            if name in want:
                assert got.get(name) == want[name], (key, name, got.get(name), want[name])
    result = compare(truth, docs)
    assert result.ok, (result.field_errors, result.examples)
    # every outcome occurred, so the check above covered each of them
    assert {t["result"] for t in truth.values()} >= {"completed", "failed", "cancelled",
                                                     "timeout"}
    assert "150/150 documents match" in output
