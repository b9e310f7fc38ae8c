"""A record that kills the sink cannot kill it for good (issue 31).

Every error while handling one record already goes to the DLQ; a process that dies anyway
(an uncaught exception from a bug, MemoryError, the OOM killer) restarts on the same
records. The crash guard remembers what the sink was handling when it died: a record whose
conversion killed two runs, or a flush that killed two runs and was then retried record by
record until one record killed a third, is dead-lettered (``crashed-sink``) on the next
start instead of handled. A death is emulated by an exception nothing in the sink catches
(:class:`sink_fakes.Died`); the next run reads the guard file the dead one left, as a new
process would. ``tests/unit/test_crashguard.py`` kills real processes.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from elastic_transport import ApiResponseMeta, HttpHeaders, NodeConfig
from elasticsearch import AuthenticationException
from sink_fakes import Died, Elasticsearch, Stack, job_doc

from pipeline.runtime.errors import SinkError
from pipeline.sink.stats import SinkStats

POISON = "2"


def kills_when_converted(record: dict[str, Any]) -> None:
    if record.get("job_id") == POISON:
        raise Died


def kills_when_written(ids: list[str]) -> None:
    if f"c1:{POISON}" in ids:
        raise Died


def feed(stack: Stack, n: int = 5) -> None:
    for k in range(n):
        stack.state(job_doc(k))


def test_a_record_whose_conversion_killed_two_runs_is_dead_lettered_on_the_third(
        tmp_path: Path) -> None:
    stack = Stack(tmp_path)
    feed(stack)
    assert isinstance(stack.run(kills_when_converted), Died)
    assert isinstance(stack.run(kills_when_converted), Died)
    assert stack.log.committed == {}
    stats = stack.run(kills_when_converted)
    assert isinstance(stats, SinkStats), stats
    (dead,) = stack.dlq()
    assert dead["headers"]["reason"] == "crashed-sink"
    assert dead["headers"]["origin"] == f"{stack.cfg.topics.state}[0]@2"
    assert dead["value"] == stack.log.messages[2].value()  # the record as it came
    assert set(stack.es.docs) == {"c1:0", "c1:1", "c1:3", "c1:4"}
    assert stack.log.committed == {(stack.cfg.topics.state, 0): 5}


def test_one_death_is_not_enough(tmp_path: Path) -> None:
    # one death may be an innocent kill: the record is handled again
    stack = Stack(tmp_path)
    feed(stack)
    assert isinstance(stack.run(kills_when_converted), Died)
    stats = stack.run()  # the record no longer kills (say, the OOM killer had another reason)
    assert isinstance(stats, SinkStats)
    assert stack.dlq() == [] and len(stack.es.docs) == 5


def test_a_flush_that_killed_two_runs_is_retried_record_by_record(tmp_path: Path) -> None:
    stack = Stack(tmp_path, es=Elasticsearch(hook=kills_when_written))
    feed(stack)
    assert isinstance(stack.run(), Died)  # the flush dies
    assert isinstance(stack.run(), Died)  # the same flush dies again
    assert stack.dlq() == []
    # the third run writes one record at a time, and dies at the record that kills; so
    # does the fourth (one death there may be a kill of an innocent sink)
    assert isinstance(stack.run(), Died)
    assert {"c1:0", "c1:1"} <= set(stack.es.docs)
    assert isinstance(stack.run(), Died)
    assert stack.dlq() == []
    stats = stack.run()
    assert isinstance(stats, SinkStats), stats
    (dead,) = stack.dlq()
    assert dead["headers"]["reason"] == "crashed-sink"
    assert dead["headers"]["origin"] == f"{stack.cfg.topics.state}[0]@2"
    assert set(stack.es.docs) == {"c1:0", "c1:1", "c1:3", "c1:4"}
    assert stack.log.committed == {(stack.cfg.topics.state, 0): 5}


def test_a_clean_stop_forgets_the_deaths(tmp_path: Path) -> None:
    stack = Stack(tmp_path)
    feed(stack, 3)
    assert isinstance(stack.run(kills_when_converted), Died)
    guard = stack.guard()
    assert guard.last_death is not None and guard.last_death.deaths == 1
    guard.close(clean=False)
    assert isinstance(stack.run(), SinkStats)
    guard = stack.guard()
    assert guard.last_death is None
    guard.close(clean=False)


def test_an_elasticsearch_refusal_is_not_a_death_of_the_records(tmp_path: Path) -> None:
    # A sticky failure (bad credentials) stops the sink as before, but it says nothing
    # about the records: they must never be dead-lettered as having crashed it.
    meta = ApiResponseMeta(status=401, http_version="1.1", headers=HttpHeaders(),
                           duration=0.0, node=NodeConfig("http", "localhost", 9200))

    def refuse(_: list[str]) -> None:
        raise AuthenticationException("security_exception", meta=meta, body={})

    stack = Stack(tmp_path, es=Elasticsearch(hook=refuse))
    feed(stack)
    for _ in range(4):
        assert isinstance(stack.run(), SinkError)
    guard = stack.guard()
    assert guard.last_death is None
    guard.close(clean=False)
    assert stack.dlq() == []


def test_an_unexpected_error_converting_one_record_dead_letters_it(tmp_path: Path) -> None:
    def bug(record: dict[str, Any]) -> None:
        if record.get("job_id") == POISON:
            raise ZeroDivisionError("a bug in the converter")

    stack = Stack(tmp_path)
    feed(stack)
    assert isinstance(stack.run(bug), SinkStats)
    (dead,) = stack.dlq()
    assert dead["headers"]["reason"] == "internal-error"
    assert "ZeroDivisionError" in dead["headers"]["error"]
    assert len(stack.es.docs) == 4
    assert stack.log.committed == {(stack.cfg.topics.state, 0): 5}


def test_a_time_no_index_can_be_named_after_goes_to_the_dlq(tmp_path: Path) -> None:
    stack = Stack(tmp_path)
    stack.state(job_doc(0, t_submit=2**62))  # year ~146 million
    stack.state(job_doc(1))
    assert isinstance(stack.run(), SinkStats)
    (dead,) = stack.dlq()
    assert dead["headers"]["reason"] == "bad_time"
    assert set(stack.es.docs) == {"c1:1"}


def test_a_later_batch_of_other_bounds_that_overlaps_the_flush_counts_as_the_same(
        tmp_path: Path) -> None:
    # After a restart the batches need not fall as before (polls bring what they bring):
    # overlapping the flush that died is what makes it the same flush.
    stack = Stack(tmp_path, es=Elasticsearch(hook=kills_when_written))
    feed(stack, 8)
    stack.cfg = stack.cfg.replace(sink={"max_batch": 3})  # [0..2]: dies
    assert isinstance(stack.run(), Died)
    stack.cfg = stack.cfg.replace(sink={"max_batch": 100})  # [0..7]: overlaps, dies
    assert isinstance(stack.run(), Died)
    assert isinstance(stack.run(), Died)  # one by one: dies at record 2
    assert isinstance(stack.run(), Died)  # and again
    assert isinstance(stack.run(), SinkStats)
    (dead,) = stack.dlq()
    assert dead["headers"]["origin"].endswith("[0]@2")
    assert len(stack.es.docs) == 7


def test_flush_coordinates_read_back_and_overlap() -> None:
    from pipeline.sink.crashes import flush_coord, overlap, parse_flush

    ranges = {("hpc.jobs.state", 3): (100, 250), ("hpc.jobs.events", 0): (7, 7)}
    coord = flush_coord(ranges, 8000)
    assert coord == "flush hpc.jobs.events[0]@7-7 hpc.jobs.state[3]@100-250"
    assert parse_flush(coord) == ranges
    assert overlap({("hpc.jobs.state", 3): (250, 300)}, ranges)
    assert not overlap({("hpc.jobs.state", 3): (251, 300)}, ranges)
    assert not overlap({("hpc.jobs.state", 2): (100, 250)}, ranges)
    many = {("t", p): (p, p + 1) for p in range(1000)}
    short = flush_coord(many, 200)
    assert len(short.encode()) <= 200 and parse_flush(short)
