"""The sink under faults: SIGKILL mid-run, and Elasticsearch down for 30 s mid-run.

Offsets are committed only after Elasticsearch acknowledged: after a SIGKILL every record
below a committed offset is in Elasticsearch, and a restart completes the rest without a
duplicate. The outage test runs a private Elasticsearch (the stack's distribution on a free
port and its own data), so stopping it disturbs no other test.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from elasticsearch import Elasticsearch
from sink_feed import (
    Feed,
    all_docs,
    committed,
    create_topics,
    event_doc,
    job_doc,
    read_range,
    run_sink,
    uncommitted,
)

from pipeline.replay.readback import NOT_YET, refresh
from pipeline.runtime.children import config_env, free_port
from pipeline.runtime.config import Config
from pipeline.sink.names import Family, alias_name
from pipeline.sink.runner import SinkRunner
from pipeline.tooling.stack import service, start_service, stop_service

OUTAGE_S = 30.0


def feed_jobs(feed: Feed, jobs: range, revisions: tuple[int, ...] = (1, 2, 3)) -> None:
    """States (revisions interleaved across jobs) and three events per job."""
    for rev in revisions:
        for n in jobs:
            feed.state(job_doc(n, rev))
            if rev == revisions[-1]:
                for k in range(3):
                    feed.event(event_doc(n, k))
    feed.flush()


def check_final(feed: Feed, es: Elasticsearch, cfg: Config, jobs: range) -> None:
    p = cfg.elasticsearch.index_prefix
    docs = all_docs(es, alias_name(p, Family.JOBS))
    assert set(docs) == {f"c1:{n}" for n in jobs}
    bad = [d["job_id"] for d in docs.values() if d != feed.indexed(job_doc(int(d["job_id"]), 3))]
    assert bad == []
    events = all_docs(es, alias_name(p, Family.EVENTS))
    assert set(events) == {f"c1-{n}-{k}" for n in jobs for k in range(3)}


def sink_env(cfg: Config) -> dict[str, str]:
    """The environment of a ``jobstream sink`` child with exactly ``cfg`` (all its topics,
    the node topics too, and its sink settings)."""
    return {**os.environ, **config_env(cfg), "JOBSTREAM_CONFIG": "/dev/null"}


def jobstream() -> list[str]:
    return [str(Path(sys.executable).with_name("jobstream"))]


def count(es: Elasticsearch, index: str) -> int:
    """Documents in ``index``; 0 while the sink has not created it or its shard is starting."""
    refresh(es, index)
    resp = es.options(ignore_status=NOT_YET).count(index=index)
    return int(resp.get("count", 0))


def test_sigkill_mid_run_commits_only_what_elasticsearch_has(
        stack_cfg: Config, es: Elasticsearch, tmp_path: Path) -> None:
    # A killed member stays in the group until its session times out (45 s by default):
    # a short session lets the restarted sink get the partitions soon.
    props = tmp_path / "librdkafka.properties"
    props.write_text("session.timeout.ms=6000\nheartbeat.interval.ms=500\n")
    cfg = stack_cfg.replace(sink={"max_batch": 100, "flush_interval_s": 0.2},
                            kafka={"properties_file": str(props)})
    create_topics(cfg)
    jobs = range(2000)
    feed = Feed(cfg)
    feed_jobs(feed, jobs)
    events_alias = alias_name(cfg.elasticsearch.index_prefix, Family.EVENTS)
    jobs_alias = alias_name(cfg.elasticsearch.index_prefix, Family.JOBS)

    log = (tmp_path / "sink.log").open("wb")
    proc = subprocess.Popen([*jobstream(), "-v", "sink"], env=sink_env(cfg), cwd=tmp_path,
                            stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 120
        while count(es, events_alias) == 0:
            assert proc.poll() is None, (tmp_path / "sink.log").read_text()[-3000:]
            assert time.monotonic() < deadline, "the sink wrote nothing in 120 s"
            time.sleep(0.05)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    left = uncommitted(cfg)
    assert left > 0, "the sink finished before the kill: the test proves nothing"

    # Everything below a committed offset is in Elasticsearch.
    codecs = feed.codecs
    for topic, codec in ((cfg.topics.events, codecs["events"]),
                         (cfg.topics.state, codecs["state"])):
        for partition, offset in committed(cfg, topic).items():
            records = [codec.decode(m.value()) for m in read_range(cfg, topic, partition, offset)]
            if topic == cfg.topics.events:
                ids = [r["event_id"] for r in records]
                # A search, not an mget: the alias spans one index per month, and the sink
                # makes the current month's index at start, so from the month after the
                # feed's times on it names two.
                es.indices.refresh(index=events_alias)
                hits = es.search(index=events_alias, query={"ids": {"values": ids}},
                                 size=max(len(ids), 1), source=False)["hits"]["hits"]
                missing = sorted(set(ids) - {h["_id"] for h in hits})
                assert missing == [], f"{topic}[{partition}] below {offset}: {missing[:5]}"
            else:
                newest: dict[str, int] = {}
                for r in records:
                    key = f"c1:{r['job_id']}"
                    newest[key] = max(newest.get(key, 0), r["revision"])
                es.indices.refresh(index=jobs_alias)
                hits = es.search(index=jobs_alias, query={"ids": {"values": list(newest)}},
                                 size=max(len(newest), 1), source=["revision"])["hits"]["hits"]
                have = {h["_id"]: h["_source"]["revision"] for h in hits}
                assert all(have.get(k, 0) >= v for k, v in newest.items()), \
                    f"{topic}[{partition}] below {offset}"

    # A restart completes the rest; nothing is duplicated.
    runner = SinkRunner(cfg)
    run_sink(runner, lambda s: s.records >= left and uncommitted(cfg) == 0)
    check_final(feed, es, cfg, jobs)


@pytest.fixture
def private_es(stack_cfg: Config) -> Iterator[Config]:
    """An Elasticsearch of this test alone: the stack's distribution (symlinked, not fetched
    again), a free port, its own data."""
    cache = Path(tempfile.mkdtemp(prefix="js-es-", dir="/tmp"))
    cache.chmod(0o755)  # the Elasticsearch system user must traverse it
    own = stack_cfg.replace(stack={"cache_dir": str(cache),
                                   "elasticsearch_port": free_port()})
    shared_home = service(stack_cfg, "elasticsearch").home  # type: ignore[attr-defined]
    own_home = service(own, "elasticsearch").home  # type: ignore[attr-defined]
    own_home.symlink_to(shared_home)
    try:
        start_service(own, "elasticsearch")
        yield own.replace(elasticsearch={"url": f"http://127.0.0.1:{own.stack.elasticsearch_port}"})
    finally:
        stop_service(own, "elasticsearch")
        shutil.rmtree(cache, ignore_errors=True)


def test_elasticsearch_down_30s_mid_run_loses_nothing(private_es: Config) -> None:
    cfg = private_es.replace(sink={"max_batch": 200, "flush_interval_s": 0.2})
    create_topics(cfg)
    es = Elasticsearch(cfg.elasticsearch.url, request_timeout=30)
    events_alias = alias_name(cfg.elasticsearch.index_prefix, Family.EVENTS)
    jobs = range(1500)
    feed = Feed(cfg)
    feed_jobs(feed, jobs[:500])

    runner = SinkRunner(cfg)
    done = threading.Event()
    box: dict[str, object] = {}

    def run() -> None:
        try:
            box["stats"] = run_sink(runner, lambda s: done.is_set()
                                    and s.records >= feed.count and uncommitted(cfg) == 0)
        except BaseException as exc:
            box["error"] = exc

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 120
    while count(es, events_alias) == 0:
        assert "error" not in box, box
        assert time.monotonic() < deadline, "the sink wrote nothing in 120 s"
        time.sleep(0.05)

    stop_service(cfg, "elasticsearch")
    down_at = time.monotonic()
    # Records keep arriving while Elasticsearch is down: the sink must hold them.
    feed_jobs(feed, jobs[500:])
    feed_jobs(feed, jobs[:500], revisions=(3,))  # and redeliveries of finished jobs
    time.sleep(max(0.0, OUTAGE_S - (time.monotonic() - down_at)))
    pending = uncommitted(cfg)
    start_service(cfg, "elasticsearch")
    done.set()
    thread.join()
    if "error" in box:
        raise box["error"]  # type: ignore[misc]

    assert pending > 0, "nothing was left to write when Elasticsearch went down"
    assert runner.stats.retries > 0  # it did see the outage
    check_final(feed, es, cfg, jobs)
    es.close()


def _log_has(path: Path, proc: subprocess.Popen[bytes], pattern: str,
             ok: Callable[[re.Match[str]], bool] = lambda _: True) -> None:
    """Wait until a line of the process's log matches ``pattern`` and ``ok(match)``."""
    deadline = time.monotonic() + 120
    rx = re.compile(pattern)
    while True:
        text = path.read_text(errors="replace")
        if any(ok(m) for m in rx.finditer(text)):
            return
        assert proc.poll() is None, f"the sink exited early:\n{text[-3000:]}"
        assert time.monotonic() < deadline, f"no {pattern!r} in the log:\n{text[-3000:]}"
        time.sleep(0.05)


def test_sigterm_flushes_and_commits_what_was_read(stack_cfg: Config, es: Elasticsearch,
                                                   tmp_path: Path) -> None:
    # A flush interval and batch size the test never reaches, and no flush when the
    # topics go quiet: only the stop flushes.
    cfg = stack_cfg.replace(sink={"max_batch": 1_000_000, "flush_interval_s": 3600.0,
                                  "quiet_s": 0.0})
    create_topics(cfg)
    feed = Feed(cfg)
    feed_jobs(feed, range(100), revisions=(3,))
    log = tmp_path / "sink.log"
    with log.open("wb") as out:
        proc = subprocess.Popen([*jobstream(), "-vv", "sink"], env=sink_env(cfg), cwd=tmp_path,
                                stdout=out, stderr=subprocess.STDOUT)
    try:
        _log_has(log, proc, r"batch holds (\d+)", lambda m: int(m[1]) == feed.count)
        events_alias = alias_name(cfg.elasticsearch.index_prefix, Family.EVENTS)
        assert count(es, events_alias) == 0  # read, not written yet
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(120) == 0, log.read_text()[-3000:]
    finally:
        if proc.poll() is None:
            proc.kill()
    assert count(es, events_alias) == 300
    assert uncommitted(cfg) == 0


def test_sigterm_while_elasticsearch_is_unreachable_exits_unavailable(
        stack_cfg: Config, tmp_path: Path) -> None:
    cfg = stack_cfg.replace(elasticsearch={"url": f"http://127.0.0.1:{free_port()}"})
    create_topics(cfg)
    log = tmp_path / "sink.log"
    with log.open("wb") as out:
        proc = subprocess.Popen([*jobstream(), "-v", "sink"], env=sink_env(cfg), cwd=tmp_path,
                                stdout=out, stderr=subprocess.STDOUT)
    try:
        _log_has(log, proc, r"elasticsearch retry=2 ")  # it waits, and says so
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(120) == 69
    finally:
        if proc.poll() is None:
            proc.kill()
    assert "stopped while Elasticsearch or Kafka was unavailable" in log.read_text()
