"""The burst phase's bookkeeping (pipeline.tooling.bench.burst): what each array must
reach, when Elasticsearch's answer says it has, which live samples fall in the window,
and that a fast run with wrong documents does not meet the target."""

from __future__ import annotations

from pipeline.tooling.bench.burst import (
    BURST_CLUSTERS,
    array_targets,
    arrays_final,
    burst_feed,
    in_window,
)
from pipeline.tooling.bench.cli import _phases
from pipeline.tooling.bench.run import BenchOptions, _figures

T0 = 1_790_000_000.0


def _bucket(cluster: str, docs: int, revisions: int) -> dict[str, object]:
    # the shape of a terms bucket with a sum sub-aggregation (sums come back as floats)
    return {"key": cluster, "doc_count": docs, "rev": {"value": float(revisions)}}


def test_each_array_must_reach_its_documents_and_their_final_revisions() -> None:
    feed = burst_feed(9, "both", T0)
    want = array_targets(feed)
    assert set(want) == set(BURST_CLUSTERS)
    assert want["burst-flux"] == (5, 5 * 6)  # 5 Flux jobs of six events
    docs, revisions = want["burst-slurm"]
    # 4 tasks of four events, the last (the array's own id) also the meta record's three
    assert (docs, revisions) == (4, 4 * 4 + 3)
    assert sum(n for n, _ in want.values()) == feed.jobs
    assert sum(r for _, r in want.values()) == feed.revision_sum


def test_an_array_is_final_only_at_its_count_and_revision_sum() -> None:
    want = {"burst-flux": (5, 30), "burst-slurm": (4, 19)}
    assert arrays_final([], want) == set()
    # every document there but one short of its last event: not yet
    assert arrays_final([_bucket("burst-flux", 5, 29), _bucket("burst-slurm", 4, 19)],
                        want) == {"burst-slurm"}
    # a document missing, whatever the sum
    assert arrays_final([_bucket("burst-flux", 4, 30)], want) == set()
    assert arrays_final([_bucket("burst-flux", 5, 30), _bucket("burst-slurm", 4, 19),
                         _bucket("bench-flux", 100, 600)], want) == set(want)


def test_the_window_keeps_the_records_published_in_it() -> None:
    samples = [(9.9, 5.0), (10.0, 0.3), (12.5, 2.0), (15.0, 0.1), (15.1, 9.0)]
    assert in_window(samples, 10.0, 15.0) == [0.1, 0.3, 2.0]
    assert in_window(samples, 20.0, 30.0) == []


def test_a_burst_in_time_with_wrong_documents_misses_its_target() -> None:
    def burst_ok(**values: object) -> bool | None:
        figures = {f.name: f for f in _figures(values, BenchOptions())}
        return figures["burst_all_searchable_s"].ok

    assert burst_ok(burst_all_searchable_s=9.0, burst_documents_ok=True) is True
    assert burst_ok(burst_all_searchable_s=16.0, burst_documents_ok=True) is False
    assert burst_ok(burst_all_searchable_s=9.0, burst_documents_ok=False) is False
    figures = {f.name: f for f in _figures({"burst_live_p99_s": 3.5}, BenchOptions())}
    assert figures["burst_live_p99_s"].ok is False


def test_the_phase_is_named_on_the_command_line() -> None:
    assert _phases(None, None, "burst") == ("burst",)  # type: ignore[arg-type]
    assert BenchOptions().burst_tasks == 10_000 and BenchOptions().burst_scheduler == "both"
