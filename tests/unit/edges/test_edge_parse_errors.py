"""Every edge takes a record its parsing fails on as a record for the DLQ, never as an
exception that ends it (issue 31, class 4): JSON nested past Python's recursion limit
(RecursionError, not ValueError), integers of more digits than ``int()`` reads, a parser
bug. The record is spooled, unkeyed when its key cannot be read; the worker gives it its
DLQ reason."""

from __future__ import annotations

import io
import json
import os
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from pipeline.edges.base import EdgeRuntime, record_key

DEEP = b"[" * 5000 + b"]" * 5000
DEEP_OBJECT = b'{"id": 5, "events": [], "memo": ' + b'{"a":' * 5000 + b"1" + b"}" * 5000 + b"}"


def test_the_flux_edge_publishes_a_deeply_nested_response_unkeyed(
        runtime: EdgeRuntime, read_spool: Any) -> None:
    from pipeline.edges.flux import FluxEdge, RecordedJournalSource

    edge = FluxEdge(runtime.cfg, RecordedJournalSource([]), runtime=runtime)
    edge.handle(DEEP_OBJECT)
    [(key, rec)] = read_spool(runtime.spool)
    assert key is None and rec.payload == DEEP_OBJECT


def test_only_times_move_the_flux_edges_watermark() -> None:
    from pipeline.edges.flux import _max_timestamp

    events = [{"timestamp": t} for t in (1e300, float("nan"), float("inf"), 10**400, -5.0,
                                         True, 1_780_000_000.0)]
    assert _max_timestamp({"events": events}) == 1_780_000_000.0
    assert _max_timestamp({"events": events[:-1]}) is None


def test_the_jobcomp_receiver_spools_a_deeply_nested_body(
        runtime: EdgeRuntime, read_spool: Any) -> None:
    from pipeline.edges.slurm.receiver import ReceiverGuard, _Server

    server = _Server(("127.0.0.1", 0), runtime, ReceiverGuard.from_config(
        runtime.cfg.edge.slurm))
    try:
        server.accept(DEEP)
    finally:
        server.server_close()
    [(key, rec)] = read_spool(runtime.spool)
    assert key is None and rec.payload == DEEP


def test_a_users_deeply_nested_submit_spool_line_does_not_stop_the_ingester(
        runtime: EdgeRuntime, read_spool: Any, tmp_path: Path) -> None:
    from pipeline.edges.slurm.submit import SubmitSpoolIngester

    spool = tmp_path / "submit-spool"
    ingester = SubmitSpoolIngester(runtime, spool, interval=60.0, settle_s=0.0)
    ingester.prepare()
    good = json.dumps({"kind": "submit", "time": 1_795_312_702, "job_id": 17,
                       "uid": os.getuid()}).encode()
    (spool / f"{os.getuid()}.log").write_bytes(DEEP + b"\n" + good + b"\n")
    assert ingester.scan() == 2
    assert [rec.payload for _, rec in read_spool(runtime.spool)] == [DEEP, good]


def test_a_poll_whose_output_holds_an_integer_past_int_is_a_poll_error() -> None:
    """yajl2_c's ``items`` crashes the process on one (its ``basic_parse`` raises a
    SystemError): the first pass refuses the document before the second could read it."""
    from pipeline.edges.slurm.documents import top_level
    from pipeline.edges.slurm.polling import PollError

    for doc in (b'{"meta": {}, "jobs": [{"job_id": 1}, {"job_id": ' + b"9" * 5000 + b"}]}",
                b'{"meta": {"x": ' + b"9" * 4301 + b'}, "jobs": []}'):
        with pytest.raises(PollError, match="cannot read"):
            top_level(io.BytesIO(doc), "jobs")


def test_record_key_is_none_whatever_the_parser_raises(monkeypatch: pytest.MonkeyPatch
                                                       ) -> None:
    from pipeline import parsers

    def broken(payload: bytes, **kwargs: Any) -> list[Any]:
        raise RecursionError("a parser bug")

    monkeypatch.setitem(parsers._PARSERS, "slurm-jobcomp", broken)
    assert record_key("slurm-jobcomp", b"{}", "c") is None
    assert record_key("slurm-squeue", DEEP, "c") is None
    assert record_key("flux-journal", b'{"id": 1, "events": [{"timestamp": '
                      + b"1" * 5000 + b"}]}", "c") is None


def test_a_directory_ingester_survives_a_scan_that_raises(runtime: EdgeRuntime,
                                                          tmp_path: Path) -> None:
    from pipeline.edges.slurm.directory import DirectoryIngester

    class Flaky(DirectoryIngester):
        name = "flaky"
        scans = 0

        def prepare(self) -> None:
            pass

        def scan(self) -> int:
            self.scans += 1
            if self.scans == 2:  # the first periodic scan
                raise RuntimeError("a bug in one scan")
            return 0

    ingester = Flaky(runtime, tmp_path, interval=0.01)
    ingester.start()
    try:
        deadline = time.monotonic() + 5.0
        while ingester.scans < 4 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert ingester.scans >= 4
        assert ingester._thread is not None and ingester._thread.is_alive()
    finally:
        ingester.stop()
    assert not any(t.name == "flaky" and t.is_alive() for t in threading.enumerate())


def test_edge_status_shows_a_mark_that_is_no_time_as_it_is() -> None:
    from pipeline.edges.cli import _mark

    assert [_mark(v) for v in ("inf", "nan", "1e300", "-5", "soon")] == [
        "inf", "nan", "1e300", "-5", "soon"]
