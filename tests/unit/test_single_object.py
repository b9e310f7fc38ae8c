"""The edges' single-object writer without fastavro (pipeline.codecs.single_object): the
bytes and the errors of AvroCodec, header included, read back by it."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from pipeline.codecs.codec import AvroCodec
from pipeline.codecs.raw import raw_to_avro
from pipeline.codecs.schemas import FINGERPRINTS_FILE, schema_dir
from pipeline.codecs.single_object import SingleObjectWriter, Unsupported, shipped_fingerprint
from pipeline.core.model import RawRecord
from pipeline.runtime.errors import JobstreamError, ParseError

RECORDS: list[dict[str, Any]] = [
    raw_to_avro(RawRecord(cluster="c1", scheduler="slurm", format="node-usage",
                          received_at=1764880000.123456, payload=b'{"job_id":"7"}',
                          key="c1:7")),
    raw_to_avro(RawRecord(cluster="c\u00e9", scheduler="flux", format="flux-journal",
                          received_at=0.0, payload=b"\x00" * 70_000, key=None)),
    {"cluster": "c1", "scheduler": "slurm", "format": "slurm-hook", "received_at": -1.5,
     "payload": b""},  # key absent: its default
]


@pytest.mark.parametrize("record", RECORDS)
def test_its_bytes_are_the_codec_s_and_read_back(record: dict[str, Any]) -> None:
    codec = AvroCodec("RawRecord")
    data = SingleObjectWriter("RawRecord").encode(record)
    assert data == codec.encode(record)
    assert codec.decode(data) == {"key": None, **record}


@pytest.mark.parametrize("bad", [{**RECORDS[0], "extra": 1}, {**RECORDS[0], "cluster": 5},
                                 {**RECORDS[0], "received_at": "now"},
                                 {k: v for k, v in RECORDS[0].items() if k != "payload"}])
def test_a_record_that_does_not_fit_is_the_codec_s_error(bad: dict[str, Any]) -> None:
    with pytest.raises(ParseError) as ours:
        SingleObjectWriter("RawRecord").encode(bad)
    with pytest.raises(ParseError) as codec:
        AvroCodec("RawRecord").encode(bad)
    assert (ours.value.reason, str(ours.value)) == (codec.value.reason, str(codec.value))
    assert ours.value.reason == "invalid-record"


def test_the_fingerprint_is_the_shipped_one_and_missing_is_a_clear_error(
        tmp_path: Path) -> None:
    assert SingleObjectWriter("RawRecord").encode(RECORDS[0])[2:10] == \
        shipped_fingerprint("RawRecord") == AvroCodec("RawRecord")._fingerprint
    shutil.copy(schema_dir() / "RawRecord.avsc", tmp_path)
    with pytest.raises(JobstreamError, match=f"{FINGERPRINTS_FILE}: no fingerprint"):
        SingleObjectWriter("RawRecord", tmp_path)
    (tmp_path / FINGERPRINTS_FILE).write_text(json.dumps({"JobEvent": "00"}))
    with pytest.raises(JobstreamError, match="no fingerprint of RawRecord"):
        SingleObjectWriter("RawRecord", tmp_path)


def test_a_schema_it_cannot_compile_as_written_is_unsupported(tmp_path: Path) -> None:
    schema = {"type": "record", "name": "T", "fields": [
        {"name": "a", "type": {"type": "record", "name": "In", "fields": []}},
        {"name": "b", "type": "In"}]}  # a named type referenced by name
    (tmp_path / "T.avsc").write_text(json.dumps(schema))
    (tmp_path / FINGERPRINTS_FILE).write_text(json.dumps({"T": "00" * 8}))
    with pytest.raises(Unsupported):
        SingleObjectWriter("T", tmp_path)
