"""``jobstream replay --swap`` on the real stack, while a live worker and sink run."""

from __future__ import annotations

import time
from datetime import UTC, datetime
from pathlib import Path

from demo_cli import GUARD_S, demo_config, jobstream, run_demo
from elasticsearch import Elasticsearch

from pipeline.fold import doc_id
from pipeline.replay.readback import job_counts, job_documents, jobs_alias, jobs_pattern, refresh
from pipeline.runtime.children import Child
from pipeline.runtime.config import Config
from pipeline.sink.names import Family, alias_name, index_pattern
from pipeline.sink.templates import live_generation
from pipeline.tooling.demo import RawPublisher
from pipeline.tooling.workload import Workload, WorkloadSpec


def _docs(es: Elasticsearch, index: str) -> dict[str, dict]:
    refresh(es, index)
    return {doc_id(d): dict(d) for d in job_documents(es, index)}


def _event_ids(es: Elasticsearch, index: str) -> list[str]:
    refresh(es, index)
    resp = es.search(index=index, size=10000, source=False, query={"match_all": {}})
    return sorted(hit["_id"] for hit in resp["hits"]["hits"])


def test_replay_into_v2_gives_the_live_documents_and_moves_the_aliases(
        stack_cfg: Config, es: Elasticsearch, tmp_path: Path) -> None:
    cfg = demo_config(stack_cfg, tmp_path)
    prefix = cfg.elasticsearch.index_prefix
    workload, _ = run_demo(cfg, tmp_path, jobs=80, seed=11)
    live_docs = _docs(es, jobs_pattern(cfg, "v1"))
    assert set(live_docs) == set(workload.truth)
    live_events = _event_ids(es, index_pattern(prefix, Family.EVENTS, "v1"))

    # the live flow goes on during the replay
    live = [Child("worker", cfg, ["worker", "--name", "live"], tmp_path / "live-worker.log"),
            Child("sink", cfg, ["sink"], tmp_path / "live-sink.log")]
    for child in live:
        child.start()
    try:
        proc = jobstream(cfg, "replay", "--generation", "v2", "--swap",
                         "--logs", str(tmp_path / "replay-logs"))
        assert proc.returncode == 0, proc.stdout + proc.stderr
        for child in live:
            child.check()

        assert live_generation(es, prefix) == "v2"
        for family in Family:
            indices = set(es.indices.get_alias(name=alias_name(prefix, family)))
            assert indices and all(i.startswith(f"{prefix}{family.value}-v2-")
                                   for i in indices), (family, indices)
        replayed = _docs(es, jobs_pattern(cfg, "v2"))
        assert replayed == live_docs
        assert _event_ids(es, index_pattern(prefix, Family.EVENTS, "v2")) == live_events

        # the live sink has followed the aliases: new jobs land in v2
        more = Workload(WorkloadSpec(seed=12, jobs=4, time_scale=0.01,
                                     flux_clusters=("tioga",), slurm_clusters=("quartz",)))
        publisher = RawPublisher(cfg)
        for rec in more.records():
            publisher.send(rec)
        publisher.flush()
        ids = list(more.truth)
        deadline = time.monotonic() + GUARD_S
        while job_counts(es, jobs_alias(cfg), ids).of("state", "done") < len(ids):
            assert time.monotonic() < deadline, "the live flow did not index the new jobs"
            for child in live:
                child.check()
            time.sleep(0.5)
        assert set(_docs(es, jobs_pattern(cfg, "v2"))) == set(live_docs) | set(ids)
    finally:
        for child in live:
            child.stop()


def test_replay_since_a_time_takes_only_the_raw_records_from_then(
        stack_cfg: Config, es: Elasticsearch, tmp_path: Path) -> None:
    cfg = demo_config(stack_cfg, tmp_path)
    prefix = cfg.elasticsearch.index_prefix
    before, _ = run_demo(cfg, tmp_path / "first", jobs=30, seed=21)
    since = datetime.now(UTC)
    time.sleep(1.0)  # Kafka record times have milliseconds: keep the runs apart
    after, _ = run_demo(cfg, tmp_path / "second", jobs=30, seed=22)
    live_docs = _docs(es, jobs_pattern(cfg, "v1"))
    assert set(live_docs) == set(before.truth) | set(after.truth)

    proc = jobstream(cfg, "replay", "--generation", "v3", "--since", since.isoformat(),
                     "--logs", str(tmp_path / "replay-logs"))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    replayed = _docs(es, jobs_pattern(cfg, "v3"))
    assert replayed == {k: v for k, v in live_docs.items() if k in after.truth}
    assert live_generation(es, prefix) == "v1"  # no --swap

    # the same generation again: resumes, and --since cannot apply any more
    again = jobstream(cfg, "replay", "--generation", "v3", "--since", since.isoformat())
    assert again.returncode == 78 and "without --since to resume" in again.stderr
