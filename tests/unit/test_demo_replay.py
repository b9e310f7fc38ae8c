"""Pure parts of ``jobstream demo`` and ``jobstream replay``: options, offsets arithmetic,
configuration handed to children, what the summary shows."""

from __future__ import annotations

import click
import pytest
from rich.console import Console

from pipeline.kafka.positions import group_lag
from pipeline.replay.readback import JobCounts
from pipeline.replay.reprocess import advanced, reached, replay_config
from pipeline.runtime.children import config_env
from pipeline.runtime.config import Config, load_config
from pipeline.tooling.demo import DemoOptions, parse_clusters
from pipeline.tooling.demo_view import LiveFigures, final_report, live_view
from pipeline.tooling.verify import Comparison


def test_parse_clusters() -> None:
    assert parse_clusters("flux:tioga, slurm:quartz,slurm:ruby") == (("tioga",),
                                                                     ("quartz", "ruby"))
    for bad in ("tioga", "pbs:x", "flux:", "flux:a,slurm:a"):
        with pytest.raises(click.BadParameter):
            parse_clusters(bad)


def test_demo_options_build_the_workload_spec() -> None:
    spec = DemoOptions(seed=3, jobs=10, start=1_795_000_000.0,
                       flux_clusters=("a",), slurm_clusters=()).spec()
    assert (spec.seed, spec.jobs, spec.start, spec.flux_clusters, spec.slurm_clusters) == \
        (3, 10, 1_795_000_000.0, ("a",), ())


def test_config_env_gives_a_child_the_same_config() -> None:
    cfg = Config().replace(kafka={"bootstrap": "k:1", "partitions": 7},
                           topics={"raw": "r.x"}, edge={"slurm": {"poller": False}},
                           anonymize={"fields": {"user": "pseudonymize"}},
                           elasticsearch={"password": "s3cret"})
    again = load_config(environ=config_env(cfg))
    assert again == cfg


def test_group_lag() -> None:
    ends = {("t", 0): 10, ("t", 1): 5, ("t", 2): 0}
    assert group_lag(ends, {("t", 0): 4, ("t", 1): -1001}) == 6 + 5
    assert group_lag(ends, {("t", 0): 4}, starts={("t", 1): 3}) == 6 + 2


def test_replay_progress_and_catch_up() -> None:
    starts = {("r", 0): 2, ("r", 1): 0, ("r", 2): 0}
    targets = {("r", 0): 10, ("r", 1): 5, ("r", 2): 0}
    assert advanced(starts, targets, {}) == 0
    # past the target (records that came after the start) counts only up to it
    assert advanced(starts, targets, {("r", 0): 6, ("r", 1): 9}) == 4 + 5
    assert not reached(targets, {("r", 0): 10}, starts)
    assert reached(targets, {("r", 0): 10, ("r", 1): 5}, starts)
    # an empty partition needs no commit; one never committed counts from its start
    assert reached({("r", 0): 3}, {}, {("r", 0): 3})


def test_replay_config_is_separate_from_the_live_one() -> None:
    cfg = Config().replace(worker={"app_id": "js", "store_dir": "/s/store"})
    r = replay_config(cfg, "v2")
    assert r.worker.app_id == "js-replay-v2"
    assert r.worker.store_dir == "/s/store-replay-v2"
    assert r.worker.web_port != cfg.worker.web_port
    assert r.topics.raw == cfg.topics.raw
    for name in ("events", "state", "nodes", "snapshots", "dlq"):
        assert getattr(r.topics, name) == f"{getattr(cfg.topics, name)}.replay-v2"
    with pytest.raises(ValueError):
        replay_config(cfg, "v2-x")


def _text(renderable: object) -> str:
    console = Console(width=120, record=True)
    console.print(renderable)
    return console.export_text()


def test_live_view_shows_the_figures() -> None:
    f = LiveFigures(elapsed_s=75, published=40, records=100, rate=12.5, jobs=20,
                    counts=JobCounts(12, {"state": {"done": 9, "running": 3},
                                          "result": {"completed": 8, "oom": 1}}),
                    lag={"worker": 4, "sink": None}, dead_letters=2, error="boom")
    text = _text(live_view(f, "seed 1"))
    for part in ("elapsed 1:15", "40 / 100 raw records", "12.5 records/s", "12 / 20 jobs",
                 "running 3 · done 9", "completed 8 · oom 1", "worker 4 · sink ?",
                 "dead letters  2", "boom"):
        assert part in text, part


def test_final_report_compares_counts_with_the_truth() -> None:
    truth = {"c:1": {"result": "completed", "cluster": "c"},
             "c:2": {"result": "failed", "cluster": "c"}}
    counts = JobCounts(1, {"result": {"completed": 1}, "cluster": {"c": 1}})
    result = Comparison(expected=2, documents=1, missing=["c:2"], key_matches=1,
                        full_matches=1)
    text = _text(final_report(counts, truth, result, 12.0))
    assert "✗ 1/2 documents match" in text
    assert "1 missing: c:2" in text
    lines = {line.split()[0]: line.split()[1:] for line in text.splitlines()
             if line.strip() and line.split()[0] in ("completed", "failed")}
    assert lines["completed"][:2] == ["1", "1"] and lines["failed"][:2] == ["0", "1"]


def test_the_demo_waits_for_the_records_after_the_jobs_are_done() -> None:
    # sacct's usage comes after the end: all jobs done is not yet the final index
    from pipeline.tooling.demo import Monitor

    monitor = object.__new__(Monitor)
    monitor.ids = ["c:1", "c:2"]
    monitor._groups = {"worker": ("app", ["raw"]), "sink": ("app-sink", ["state"])}
    done = JobCounts(total=2, by={"state": {"done": 2}})

    def figures(published: int, lag: dict[str, int | None]) -> LiveFigures:
        return LiveFigures(records=10, published=published, jobs=2, counts=done, lag=lag)

    monitor.figures = figures(10, {"worker": 0, "sink": 3})
    assert not monitor.finished
    monitor.figures = figures(9, {"worker": 0, "sink": 0})
    assert not monitor.finished
    monitor.figures = figures(10, {"worker": None, "sink": 0})
    assert not monitor.finished
    monitor.figures = figures(10, {})
    assert not monitor.finished
    monitor.figures = figures(10, {"worker": 0, "sink": 0})
    assert monitor.finished


def test_the_demo_waits_for_its_long_jobs_to_be_running_not_done() -> None:
    # the long jobs (DemoOptions.long_jobs) still run at the end: the demo is finished
    # when the others are done and they run, not after its timeout
    from pipeline.tooling.demo import Monitor

    monitor = object.__new__(Monitor)
    monitor.ids = ["c:1", "c:2", "c:3"]
    monitor.running = 1
    monitor._groups = {"worker": ("app", ["raw"])}

    def figures(**states: int) -> LiveFigures:
        return LiveFigures(records=10, published=10, jobs=3, lag={"worker": 0},
                           counts=JobCounts(total=3, by={"state": states}))

    monitor.figures = figures(done=2, running=1)
    assert monitor.finished
    monitor.figures = figures(done=1, running=2)
    assert not monitor.finished
    monitor.figures = figures(done=2, pending=1)
    assert not monitor.finished
    assert DemoOptions().long_jobs == 6 and DemoOptions(long_jobs=0).spec().long_jobs == 0


def test_final_report_counts_no_result_for_a_running_job() -> None:
    truth = {"c:1": {"result": "completed", "cluster": "c"},
             "c:2": {"result": None, "cluster": "c", "state": "running"}}
    counts = JobCounts(2, {"result": {"completed": 1}, "cluster": {"c": 2}})
    text = _text(final_report(counts, truth, Comparison(expected=2, documents=2,
                                                        key_matches=2, full_matches=2), 1.0))
    assert "None" not in text
