"""The Avro codec: both wire formats, detection, schema resolution, errors, compatibility."""

from __future__ import annotations

import io
import json
import random
import socket
import struct
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka.schema_registry import Schema
from fastavro import schemaless_reader, schemaless_writer
from fastavro.schema import parse_schema
from fastavro.utils import generate_many

from pipeline.codecs.codec import (
    AvroCodec,
    codecs_from_config,
    event_from_avro,
    event_to_avro,
    raw_from_avro,
    raw_to_avro,
    registry_client,
)
from pipeline.codecs.schemas import SCHEMA_NAMES, fingerprint, load_schema, schema_dir
from pipeline.core.model import JobEvent, RawRecord
from pipeline.runtime.config import Config
from pipeline.runtime.errors import ParseError, ServiceError

SAMPLES: dict[str, dict[str, Any]] = {
    "RawRecord": {
        "cluster": "tioga", "scheduler": "slurm", "format": "slurm-jobcomp",
        "received_at": 1700000000.123456,
        "payload": b'{"jobid":42,"state":"COMPLETED"}\x00', "key": "tioga:42",
    },
    "JobEvent": {
        "cluster": "fluke", "scheduler": "flux", "job_id": "4217319424", "event": "exception",
        "timestamp": 1699999999.5, "source": "flux-journal", "event_id": "ab" * 12, "seq": 7,
        "context": '{"type":"timeout","severity":0,"note":"résumé"}',
        "facts": "{}", "job_id_f58": "ƒ2nDw1", "jobspec": None, "R": '{"version":1}',
        "record": None,
    },
    "JobState": {
        "cluster": "tioga", "scheduler": "slurm", "job_id": "42_3", "job_name": "sim",
        "array_id": "42", "array_task": 3, "user": "alice", "uid": 1001, "bank": "phys",
        "queue": "pbatch", "qos": "normal", "state": "done", "result": "timeout",
        "exit_code": 0, "signal": 9, "cancelled_before_start": False,
        "exceptions": [{"type": "timeout", "severity": 0, "note": None,
                        "timestamp": 1700000100000}],
        "requeue_count": 1, "t_submit": 1700000000000, "t_start": 1700000010000,
        "t_end": 1700000100000, "wait_s": 10.0, "run_s": 90.0, "timelimit_s": 90.0,
        "nodes_req": 2, "nnodes": 2, "ncores": 128, "ngpus": 0,
        "nodelist": ["tioga12", "tioga13"], "node_hours": 0.05, "core_hours": 3.2,
        "gpu_hours": 0.0, "revision": 5, "updated_at": 1700000100500,
    },
    "QueueSnapshot": {
        "cluster": "tioga", "queue": "pbatch", "worker": "w1", "partitions": [0, 2],
        "timestamp": 1700000010000, "pending_jobs": 3, "running_jobs": 2,
        "pending_cores": 64, "running_cores": 128, "pending_gpus": 0, "running_gpus": 4,
        "pending_nodes": 3, "running_nodes": 2, "pending_node_hours": 1.5,
        "oldest_pending_age_s": 42.0,
    },
    "NodeState": {
        "cluster": "tioga", "scheduler": "slurm", "node": "tioga12", "state": "draining",
        "scheduler_state": "MIXED+DRAIN", "drained": True, "responding": True,
        "allocated": True, "reason": "bad DIMM", "reason_by": "root",
        "reason_at": 1700000050000, "since": 1700000050000,
        "state_s": {"up": 50.0, "unresponsive": 0.0, "draining": 50.5, "drained": 0.0,
                    "down": 0.0, "off": 0.0, "unknown": 0.0},
        "partitions": ["pbatch", "pdebug"], "revision": 3, "updated_at": 1700000100500,
    },
    "NodeEvent": {
        "cluster": "tioga", "scheduler": "slurm", "node": "tioga12", "event": "state",
        "timestamp": 1700000050000, "source": "slurm-nodes", "event_id": "n1",
        "reason": "bad DIMM", "reason_by": "root", "state": "draining",
        "episode": "tioga:tioga12:drain@1700000045",
        "context": '{"partitions":["pbatch"],"state":["MIXED","DRAIN"]}',
    },
}


def full(name: str, obj: dict[str, Any]) -> dict[str, Any]:
    """``obj`` with every absent field at its schema default (what a reader returns)."""
    out = {}
    for f in load_schema(name).current["fields"]:
        out[f["name"]] = obj[f["name"]] if f["name"] in obj else f["default"]
    return out


def avro_body(schema: Any, obj: dict[str, Any]) -> bytes:
    buf = io.BytesIO()
    schemaless_writer(buf, schema, obj)
    return buf.getvalue()


@pytest.fixture
def registry() -> Any:
    return registry_client("mock://test-codec")


# -- round trips ----------------------------------------------------------------------


@pytest.mark.parametrize("name", SCHEMA_NAMES)
def test_single_object_round_trip(name: str) -> None:
    codec = AvroCodec(name)
    data = codec.encode(SAMPLES[name])
    assert codec.wire_format == "single-object"
    assert data[:2] == b"\xc3\x01"
    assert data[2:10] == load_schema(name).fingerprint
    assert codec.decode(data) == full(name, SAMPLES[name])


@pytest.mark.parametrize("name", SCHEMA_NAMES)
def test_confluent_round_trip_registers_under_topic_value(name: str, registry: Any) -> None:
    codec = AvroCodec(name, registry=registry, subject=f"topic.{name}-value")
    data = codec.encode(SAMPLES[name])
    assert codec.wire_format == "confluent"
    latest = registry.get_latest_version(f"topic.{name}-value")
    assert data[:5] == b"\x00" + struct.pack(">I", latest.schema_id)
    assert json.loads(latest.schema.schema_str)["name"] == name
    assert codec.decode(data) == full(name, SAMPLES[name])
    # a second reader, knowing nothing but the registry, reads it too
    reader = AvroCodec(name, registry=registry, subject=f"topic.{name}-value")
    assert reader.decode(data) == full(name, SAMPLES[name])


@pytest.mark.parametrize("name", SCHEMA_NAMES)
def test_generated_records_round_trip_in_both_formats(name: str, registry: Any) -> None:
    random.seed(name)  # generate_many draws from the random module
    single = AvroCodec(name)
    confluent = AvroCodec(name, registry=registry, subject=f"t-{name}-value")
    for rec in generate_many(load_schema(name).current, 50):
        assert single.decode(single.encode(rec)) == rec
        assert confluent.decode(confluent.encode(rec)) == rec


def test_codecs_from_config_without_registry_use_single_object() -> None:
    codecs = codecs_from_config(Config())
    assert {k: c.name for k, c in codecs.items()} == {
        "raw": "RawRecord", "events": "JobEvent", "state": "JobState",
        "snapshots": "QueueSnapshot", "nodes": "NodeState", "node_events": "NodeEvent"}
    assert all(c.wire_format == "single-object" for c in codecs.values())


def test_codecs_from_config_with_registry_url_register_per_topic() -> None:
    cfg = Config().replace(kafka={"schema_registry_url": "mock://cfg"},
                           topics={"events": "site.events"})
    codecs = codecs_from_config(cfg)
    assert codecs["events"].wire_format == "confluent"
    assert codecs["events"].subject == "site.events-value"
    assert codecs["raw"].subject == "hpc.jobs.raw-value"
    data = codecs["events"].encode(SAMPLES["JobEvent"])
    assert data[0] == 0
    assert codecs["events"].decode(data)["event_id"] == SAMPLES["JobEvent"]["event_id"]


# -- detection ------------------------------------------------------------------------


def test_registry_codec_still_reads_single_object_data(registry: Any) -> None:
    old = AvroCodec("JobState").encode(SAMPLES["JobState"])
    codec = AvroCodec("JobState", registry=registry, subject="s-value")
    assert codec.decode(old) == full("JobState", SAMPLES["JobState"])


def test_confluent_data_without_registry_is_unknown_schema(registry: Any) -> None:
    data = AvroCodec("RawRecord", registry=registry, subject="r-value").encode(
        SAMPLES["RawRecord"])
    with pytest.raises(ParseError) as err:
        AvroCodec("RawRecord").decode(data)
    assert err.value.reason == "unknown-schema"
    assert "schema_registry_url" in err.value.message


@pytest.mark.parametrize("data", [b"", b'{"jobid": 1}', b"\xc3\x02" + bytes(20), b"\x01abcd"])
def test_foreign_bytes_are_not_avro(data: bytes) -> None:
    with pytest.raises(ParseError) as err:
        AvroCodec("RawRecord").decode(data)
    assert err.value.reason == "not-avro"


# -- errors ---------------------------------------------------------------------------


def test_unknown_fingerprint_is_unknown_schema() -> None:
    data = bytearray(AvroCodec("JobEvent").encode(SAMPLES["JobEvent"]))
    data[2] ^= 0xFF
    with pytest.raises(ParseError) as err:
        AvroCodec("JobEvent").decode(bytes(data))
    assert err.value.reason == "unknown-schema"


def test_another_schemas_data_is_unknown_schema(registry: Any) -> None:
    single = AvroCodec("JobEvent").encode(SAMPLES["JobEvent"])
    with pytest.raises(ParseError) as err:
        AvroCodec("RawRecord").decode(single)
    assert err.value.reason == "unknown-schema"
    confluent = AvroCodec("JobEvent", registry=registry, subject="e-value").encode(
        SAMPLES["JobEvent"])
    with pytest.raises(ParseError) as err:
        AvroCodec("RawRecord", registry=registry, subject="r-value").decode(confluent)
    assert err.value.reason == "unknown-schema"
    assert "JobEvent" in err.value.message


def test_unknown_schema_id_is_unknown_schema(registry: Any) -> None:
    codec = AvroCodec("JobEvent", registry=registry, subject="e-value")
    data = b"\x00" + struct.pack(">I", 9999) + avro_body(
        load_schema("JobEvent").current, SAMPLES["JobEvent"])
    with pytest.raises(ParseError) as err:
        codec.decode(data)
    assert err.value.reason == "unknown-schema"


def test_non_avro_registered_schema_is_unknown_schema(registry: Any) -> None:
    sid = registry.register_schema("j-value", Schema('{"type":"object"}', "JSON"))
    with pytest.raises(ParseError) as err:
        AvroCodec("JobEvent", registry=registry, subject="e-value").decode(
            b"\x00" + struct.pack(">I", sid) + b"\x02")
    assert err.value.reason == "unknown-schema"


@pytest.mark.parametrize("name", SCHEMA_NAMES)
def test_every_truncation_is_bad_avro(name: str, registry: Any) -> None:
    for codec in (AvroCodec(name), AvroCodec(name, registry=registry, subject="x-value")):
        data = codec.encode(SAMPLES[name])
        for end in range(2, len(data)):
            with pytest.raises(ParseError) as err:
                codec.decode(data[:end])
            assert err.value.reason == "bad-avro", (end, err.value)


def test_trailing_bytes_are_bad_avro() -> None:
    codec = AvroCodec("RawRecord")
    with pytest.raises(ParseError) as err:
        codec.decode(codec.encode(SAMPLES["RawRecord"]) + b"\x00")
    assert err.value.reason == "bad-avro"


def test_invalid_utf8_is_bad_avro() -> None:
    schema = load_schema("RawRecord").current
    body = avro_body(schema, SAMPLES["RawRecord"])
    # the first field is the cluster string: length 5, then "tioga"; make it invalid UTF-8
    bad = body[:1] + b"\xff" + body[2:]
    with pytest.raises(ParseError) as err:
        AvroCodec("RawRecord").decode(b"\xc3\x01" + fingerprint(schema) + bad)
    assert err.value.reason == "bad-avro"


@pytest.mark.parametrize("change", [
    {"surprise": 1},                  # a field the schema lacks must not vanish silently
    {"uid": "alice"},                 # wrong type
    {"nodelist": "tioga12"},          # not an array
    {"revision": None},               # required
])
def test_records_that_do_not_fit_are_invalid_record(change: dict[str, Any]) -> None:
    with pytest.raises(ParseError) as err:
        AvroCodec("JobState").encode({**SAMPLES["JobState"], **change})
    assert err.value.reason == "invalid-record"


def test_missing_required_field_is_invalid_record() -> None:
    rec = dict(SAMPLES["JobState"])
    del rec["job_id"]
    with pytest.raises(ParseError) as err:
        AvroCodec("JobState").encode(rec)
    assert err.value.reason == "invalid-record"


def test_unreachable_registry_is_a_service_error_not_bad_input() -> None:
    with socket.socket() as sock:  # a port nothing listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    reg = registry_client(f"http://127.0.0.1:{port}", {"max.retries": 0})
    codec = AvroCodec("RawRecord", registry=reg, subject="r-value")
    with pytest.raises(ServiceError):
        codec.encode(SAMPLES["RawRecord"])
    with pytest.raises(ServiceError):
        codec.decode(b"\x00" + struct.pack(">I", 7) + b"\x02")


def test_registry_codec_needs_a_subject(registry: Any) -> None:
    with pytest.raises(ValueError):
        AvroCodec("JobState", registry=registry)


# -- old writers, current reader ------------------------------------------------------

OLD_RAW = {
    "type": "record", "name": "RawRecord", "namespace": "org.jobstream.v1",
    "fields": [
        {"name": "cluster", "type": "string"},
        {"name": "scheduler", "type": "string"},
        {"name": "format", "type": "string"},
        {"name": "received_at", "type": "float"},
        {"name": "payload", "type": "bytes"},
    ],
}


@pytest.fixture
def evolved(tmp_path: Path) -> Path:
    """A schema directory where RawRecord v1 lacked ``key`` and had a float ``received_at``."""
    (tmp_path / "history").mkdir()
    current = (schema_dir() / "RawRecord.avsc").read_text()
    (tmp_path / "RawRecord.avsc").write_text(current)
    (tmp_path / "history" / "RawRecord.v1.avsc").write_text(json.dumps(OLD_RAW))
    (tmp_path / "history" / "RawRecord.v2.avsc").write_text(current)
    return tmp_path


OLD_REC = {"cluster": "c", "scheduler": "flux", "format": "flux-journal",
           "received_at": 1.5, "payload": b"{}"}


def test_single_object_data_of_an_older_version_resolves_to_current(evolved: Path) -> None:
    codec = AvroCodec("RawRecord", versions=load_schema("RawRecord", evolved))
    old = parse_schema(OLD_RAW)
    data = b"\xc3\x01" + fingerprint(old) + avro_body(old, OLD_REC)
    assert codec.decode(data) == {**OLD_REC, "key": None}


def test_registry_data_of_an_older_version_resolves_to_current(
        evolved: Path, registry: Any) -> None:
    sid = registry.register_schema("raw-value", Schema(json.dumps(OLD_RAW), "AVRO"))
    data = b"\x00" + struct.pack(">I", sid) + avro_body(parse_schema(OLD_RAW), OLD_REC)
    codec = AvroCodec("RawRecord", registry=registry, subject="raw-value")
    assert codec.decode(data) == {**OLD_REC, "key": None}


def test_registered_schema_that_does_not_resolve_is_unknown_schema(registry: Any) -> None:
    broken = {**OLD_RAW, "fields": [*OLD_RAW["fields"], {"name": "key", "type": "long"}]}
    sid = registry.register_schema("raw-value", Schema(json.dumps(broken), "AVRO"))
    data = b"\x00" + struct.pack(">I", sid) + avro_body(parse_schema(broken),
                                                         {**OLD_REC, "key": 3})
    with pytest.raises(ParseError) as err:
        AvroCodec("RawRecord", registry=registry, subject="raw-value").decode(data)
    assert err.value.reason == "unknown-schema"


def _history() -> list[tuple[str, int]]:
    return [(n, v) for n in SCHEMA_NAMES for v in load_schema(n).history]


@pytest.mark.parametrize(("name", "version"), _history())
def test_current_schema_reads_data_of_every_previous_version(name: str, version: int) -> None:
    """Backward compatibility: replay reads the oldest data with the newest reader."""
    schemas = load_schema(name)
    old, current = schemas.history[version], schemas.current
    codec = AvroCodec(name)
    current_fields = {f["name"]: f for f in current["fields"]}
    random.seed(f"{name}.v{version}")
    for rec in [SAMPLES[name], *generate_many(old, 100)]:
        body = avro_body(old, rec)
        via_fastavro = schemaless_reader(io.BytesIO(body), old, current)
        via_codec = codec.decode(b"\xc3\x01" + fingerprint(old) + body)
        assert via_codec == via_fastavro
        for field, spec in current_fields.items():
            expected = rec[field] if field in rec else spec["default"]
            if isinstance(expected, dict) and isinstance(via_codec[field], dict):
                continue  # nested records resolve field by field, checked by fastavro
            assert via_codec[field] == expected, field


# -- the model --------------------------------------------------------------------------


def test_job_event_round_trip_through_avro() -> None:
    ev = JobEvent(
        cluster="fluke", scheduler="flux", job_id="4217319424", event="alloc",
        timestamp=1699999999.25, source="flux-journal", event_id="e1", seq=3,
        context={"annotations": {"sched": {"resource_summary": "rank0/core[0-3]"}}},
        facts={"nnodes": 1, "nodelist": ["fluke1"], "queue": "débug"},
        job_id_f58="ƒ2nDw1",
        jobspec={"version": 1, "resources": [{"type": "node", "count": 1}]},
        R={"version": 1, "execution": {"R_lite": []}}, record=None,
    )
    codec = AvroCodec("JobEvent")
    assert event_from_avro(codec.decode(codec.encode(event_to_avro(ev)))) == ev


def test_job_event_without_extras_round_trips() -> None:
    ev = JobEvent(cluster="c", scheduler="slurm", job_id="7", event="end", timestamp=5,
                  source="slurm-jobcomp", event_id="x")
    codec = AvroCodec("JobEvent")
    assert event_from_avro(codec.decode(codec.encode(event_to_avro(ev)))) == ev


def test_job_event_context_that_is_not_json_is_invalid_record() -> None:
    ev = JobEvent(cluster="c", scheduler="slurm", job_id="7", event="end", timestamp=5,
                  source="slurm-jobcomp", event_id="x", context={"raw": b"\x00"})
    with pytest.raises(ParseError) as err:
        event_to_avro(ev)
    assert err.value.reason == "invalid-record"


def test_job_event_with_broken_json_text_is_bad_avro() -> None:
    d = event_to_avro(JobEvent(cluster="c", scheduler="slurm", job_id="7", event="end",
                               timestamp=5, source="slurm-jobcomp", event_id="x"))
    with pytest.raises(ParseError) as err:
        event_from_avro({**d, "facts": "{nope"})
    assert err.value.reason == "bad-avro"


def test_raw_record_round_trip_keeps_bytes_exactly() -> None:
    rec = RawRecord(cluster="tioga", scheduler="slurm", format="slurm-jobcomp",
                    received_at=1700000000.000001, payload=b'{"a":1}\x00\xff', key=None)
    codec = AvroCodec("RawRecord")
    assert raw_from_avro(codec.decode(codec.encode(raw_to_avro(rec)))) == rec


@pytest.mark.parametrize(("name", "cls"), [("JobEvent", JobEvent), ("RawRecord", RawRecord)])
def test_schema_fields_are_the_model_fields(name: str, cls: type) -> None:
    fields = [f["name"] for f in load_schema(name).current["fields"]]
    assert set(fields) == set(cls.__dataclass_fields__)  # type: ignore[attr-defined]
