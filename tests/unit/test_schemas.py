"""The schema files themselves: documented, evolvable, kept in history, shipped in the wheel."""

from __future__ import annotations

import fnmatch
import io
import json
import re
import struct
import tomllib
from pathlib import Path
from typing import Any

import pytest
from fastavro import schemaless_writer
from fastavro.schema import parse_schema, to_parsing_canonical_form

from pipeline.codecs.codec import AvroCodec
from pipeline.codecs.schemas import (
    FINGERPRINTS_FILE,
    SCHEMA_NAMES,
    fingerprint,
    fingerprints,
    load_schema,
    schema_dir,
)
from pipeline.runtime.errors import JobstreamError

ROOT = Path(__file__).resolve().parents[2]

#: The job document's fields (docs/design.md, section 5); dashboards depend on these names.
JOB_DOCUMENT_FIELDS = """
    cluster scheduler job_id job_name array_id array_task user uid group bank queue qos
    state result exit_code signal cancelled_before_start exceptions requeue_count
    t_submit t_eligible t_alloc t_start t_end t_clean wait_s eligible_wait_s run_s
    prolog_s epilog_s timelimit_s nodes_req cores_req gpus_req nnodes ncores ngpus
    nodelist node_hours core_hours gpu_hours revision updated_at
""".split()


def _records(schema: Any) -> list[dict[str, Any]]:
    """Every record schema inside ``schema`` (as written in the file), outermost first."""
    found: list[dict[str, Any]] = []
    if isinstance(schema, list):
        for s in schema:
            found += _records(s)
    elif isinstance(schema, dict):
        if schema.get("type") == "record":
            found.append(schema)
            for f in schema["fields"]:
                found += _records(f["type"])
        elif schema.get("type") == "array":
            found += _records(schema["items"])
    return found


def _raw(name: str) -> dict[str, Any]:
    return json.loads((ROOT / "schemas" / f"{name}.avsc").read_text())


def test_crc64_avro_fingerprint_matches_the_avro_reference_vector() -> None:
    # Avro's own test vector: the fingerprint of "null" is 7195948357588979594.
    assert fingerprint("null") == struct.pack("<q", 7195948357588979594)


def test_the_shipped_fingerprints_are_fastavro_s_of_the_current_schemas() -> None:
    """schemas/fingerprints.json is what the writers without fastavro put in the header
    (pipeline.codecs.single_object): a schema changed without it would be written under
    its old fingerprint, and read as the old version."""
    shipped = (ROOT / "schemas" / FINGERPRINTS_FILE).read_text()
    assert shipped == fingerprints(), (
        "schemas/fingerprints.json is stale: python -m pipeline.codecs.schemas > "
        "schemas/fingerprints.json")
    assert set(json.loads(shipped)) == set(SCHEMA_NAMES)
    for name in SCHEMA_NAMES:
        assert bytes.fromhex(json.loads(shipped)[name]) == load_schema(name).fingerprint


def test_the_package_reads_the_repository_schemas() -> None:
    assert schema_dir().resolve() == (ROOT / "schemas").resolve()


@pytest.mark.parametrize("name", SCHEMA_NAMES)
def test_every_record_and_field_is_documented(name: str) -> None:
    for record in _records(_raw(name)):
        assert record.get("doc"), record["name"]
        for f in record["fields"]:
            assert f.get("doc"), f"{record['name']}.{f['name']} has no doc"


@pytest.mark.parametrize("name", SCHEMA_NAMES)
def test_optional_fields_are_null_first_unions_defaulting_to_null(name: str) -> None:
    for record in _records(_raw(name)):
        for f in record["fields"]:
            if isinstance(f["type"], list) and "null" in f["type"]:
                assert f["type"][0] == "null", f["name"]
                assert "default" in f and f["default"] is None, f["name"]


@pytest.mark.parametrize("name", SCHEMA_NAMES)
def test_schemas_share_the_namespace(name: str) -> None:
    assert load_schema(name).current["name"] == f"org.jobstream.v1.{name}"


def test_job_state_has_every_field_of_the_job_document() -> None:
    fields = {f["name"] for f in load_schema("JobState").current["fields"]}
    assert set(JOB_DOCUMENT_FIELDS) <= fields, set(JOB_DOCUMENT_FIELDS) - fields


@pytest.mark.parametrize("name", SCHEMA_NAMES)
def test_history_is_numbered_from_one_and_ends_with_the_current_schema(name: str) -> None:
    """Whoever changes a schema adds it as the next history version: data written with it
    must stay readable after the next change."""
    schemas = load_schema(name)
    assert list(schemas.history) == list(range(1, len(schemas.history) + 1))
    newest = schemas.history[max(schemas.history)]
    assert to_parsing_canonical_form(newest) == to_parsing_canonical_form(schemas.current)


def test_history_files_are_all_named_after_a_schema() -> None:
    names = "|".join(SCHEMA_NAMES)
    pattern = re.compile(rf"^({names})\.v[1-9][0-9]*\.avsc$")
    for path in (ROOT / "schemas" / "history").iterdir():
        assert pattern.match(path.name), path.name


def test_wheel_package_data_covers_every_schema_file() -> None:
    globs = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"][
        "package-data"]["pipeline"]
    base = ROOT / "pipeline" / "_schemas"
    files = [p.relative_to(ROOT / "pipeline").as_posix()
             for p in [*base.rglob("*.avsc"), base / FINGERPRINTS_FILE]]
    assert len(files) >= 2 * len(SCHEMA_NAMES)
    for rel in files:
        assert any(fnmatch.fnmatch(rel, g) and rel.count("/") == g.count("/")
                   for g in globs), rel


def test_missing_or_broken_schema_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(JobstreamError, match="cannot be read"):
        load_schema("RawRecord", tmp_path)
    (tmp_path / "RawRecord.avsc").write_text("{")
    with pytest.raises(JobstreamError, match="not valid JSON"):
        load_schema("RawRecord", tmp_path)
    (tmp_path / "RawRecord.avsc").write_text('{"type": "record", "name": "R", "fields": '
                                             '[{"name": "a", "type": "nope"}]}')
    with pytest.raises(JobstreamError, match="invalid"):
        load_schema("RawRecord", tmp_path)
    (tmp_path / "RawRecord.avsc").write_text('"string"')
    with pytest.raises(JobstreamError, match="record"):
        load_schema("RawRecord", tmp_path)


# Elasticsearch mapping type -> the Avro type of the same field (unions and arrays unwrapped).
_ES_TO_AVRO = {"keyword": "string", "text": "string", "long": "long", "double": "double",
               "date": "long", "boolean": "boolean", "date_range": "record",
               "record": "record", "flattened": "map"}


def _avro_base(t: Any) -> Any:
    if isinstance(t, list):
        (t,) = [x for x in t if x != "null"]
    if isinstance(t, dict) and t["type"] == "array":
        return _avro_base(t["items"])
    if isinstance(t, dict):
        return t["type"]
    return "record" if "." in t else t  # a named record referenced by its full name


# Fields the template does not have yet (a known gap, listed until the template adds the
# field; the test then fails until the entry is removed here). None at present.
_MISSING_IN_TEMPLATE: dict[str, set[str]] = {}


@pytest.mark.parametrize(("template", "name"), [
    ("hpc-jobs", "JobState"),
    ("hpc-queue-snapshots", "QueueSnapshot"),
    ("hpc-nodes", "NodeState"),
])
def test_avro_fields_match_the_elasticsearch_template(template: str, name: str) -> None:
    """The sink indexes these values as they are; the index is strict about field names."""
    path = ROOT / "schemas" / "elasticsearch" / f"{template}.json"
    doc = json.loads(path.read_text())
    props = doc.get("template", doc)["mappings"]["properties"]
    fields = {f["name"]: f["type"] for f in load_schema(name).current["fields"]}
    missing = _MISSING_IN_TEMPLATE.get(template, set())
    assert set(fields) - set(props) == missing
    assert set(props) == set(fields) - missing
    for field, avro_type in fields.items():
        if field in missing:
            continue
        es_type = props[field].get("type", "record")  # object with properties
        assert _ES_TO_AVRO[es_type] == _avro_base(avro_type), field


def test_job_state_v7_user_annotations_read_older_data_as_none() -> None:
    """JobState v7 added user_annotations (a map of text, flattened in Elasticsearch, so
    users' keys never grow the mapping) and user_annotations_dropped: a v6 state reads
    with both null, a v7 one keeps them, and the codec still writes and reads JobState
    with its own compiled code (a union of null and a map, which it covers)."""
    schemas = load_schema("JobState")
    v6, v7 = schemas.history[6], schemas.history[7]
    added = {f["name"] for f in v7["fields"]} - {f["name"] for f in v6["fields"]}
    assert added == {"user_annotations", "user_annotations_dropped"}
    codec = AvroCodec("JobState")
    assert codec._write is not None and codec._read_current is not None  # noqa: SLF001
    doc = {f["name"]: None for f in schemas.current["fields"]}
    doc.update(cluster="c", scheduler="flux", job_id="1", incarnation=0, exceptions=[],
               requeue_count=0, revision=3, updated_at=1_700_000_000_000,
               user_annotations={"progress": "50", "stage": "mesh", "mesh.dims": "[2,3]"},
               user_annotations_dropped=2)
    assert codec.decode(codec.encode(doc)) == doc
    body = io.BytesIO()
    schemaless_writer(body, parse_schema(v6), {k: v for k, v in doc.items() if k not in added})
    old = codec.decode(b"\xc3\x01" + fingerprint(v6) + body.getvalue())
    assert old == {**doc, "user_annotations": None, "user_annotations_dropped": None}


def test_node_event_fields_match_their_template_context_as_flattened() -> None:
    """NodeEvent v1 (hpc.nodes.events) and hpc-node-events: the same fields (strict), times
    as epoch-millisecond dates, context JSON text in Avro and a flattened object indexed,
    as a job event's."""
    path = ROOT / "schemas" / "elasticsearch" / "hpc-node-events.json"
    props = json.loads(path.read_text())["mappings"]["properties"]
    schema = load_schema("NodeEvent")
    fields = {f["name"]: f["type"] for f in schema.current["fields"]}
    assert set(props) == set(fields)
    assert props["timestamp"] == {"type": "date", "format": "epoch_millis"}
    assert fields["timestamp"] == "long" and fields["context"] == "string"
    assert props["context"]["type"] == "flattened"
    for name, avro_type in fields.items():
        if name != "context":
            assert _ES_TO_AVRO[props[name]["type"]] == _avro_base(avro_type), name
    assert list(schema.history) == [1]
    from pipeline.fold.nodes import EVENT_FIELDS
    assert tuple(fields) == EVENT_FIELDS  # the worker's documents, in the schema's order


def test_node_state_v2_events_dropped_reads_older_data_as_zero() -> None:
    """NodeState v2 added events_dropped (the events the worker's bounded node fold could
    not fold in order): a v1 document reads with 0, none dropped, and a v2 one keeps it."""
    schemas = load_schema("NodeState")
    v1, v2 = schemas.history[1], schemas.history[2]
    added = {f["name"] for f in v2["fields"]} - {f["name"] for f in v1["fields"]}
    assert added == {"events_dropped"}
    codec = AvroCodec("NodeState")
    doc = {"cluster": "c", "scheduler": "slurm", "node": "n1", "state": "drained",
           "scheduler_state": "IDLE+DRAIN", "drained": True, "responding": True,
           "allocated": False, "reason": "bad DIMM", "reason_by": "root",
           "reason_at": 1_700_000_000_000, "since": 1_700_000_000_000,
           "state_s": dict.fromkeys(("up", "unresponsive", "draining", "drained", "down",
                                     "off", "unknown"), 0.0),
           "partitions": ["p"], "events_dropped": 3, "revision": 9,
           "updated_at": 1_700_000_000_000}
    assert codec.decode(codec.encode(doc)) == doc
    body = io.BytesIO()
    schemaless_writer(body, parse_schema(v1), {k: v for k, v in doc.items() if k not in added})
    old = codec.decode(b"\xc3\x01" + fingerprint(v1) + body.getvalue())
    assert old == {**doc, "events_dropped": 0}
