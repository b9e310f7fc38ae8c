"""Writes the bad-input corpus of this directory (run from the repository root:
``.venv/bin/python tests/data/bad/make_corpus.py``). The files are committed; this script
says how each was made and makes them again byte for byte. README.md says what each one is
and what the stream does with it.

Payload files are source records, published wrapped in a RawRecord of the format their
README row names; ``raw-*.bin`` files are whole raw-topic values. The two 10 MB jobspecs
are stored gzipped (the test unpacks them)."""

from __future__ import annotations

import gzip
import json
import struct
from pathlib import Path
from typing import Any

HERE = Path(__file__).parent
#: received_at of every corpus record (tests/integration/test_bad_inputs.py); event times
#: sit just before it
RECEIVED = 1_780_000_000.0
T = RECEIVED - 1000.0

SUBMIT_CONTEXT = {"userid": 1001, "urgency": 16, "flags": 0, "version": 1}
JOBCOMP: dict[str, Any] = {
    "jobid": 4242, "username": "alice", "user_id": 1001, "groupname": "alice",
    "group_id": 1001, "@start": "2026-05-28T20:00:00", "@end": "2026-05-28T20:10:00",
    "elapsed": 600, "partition": "short", "alloc_node": "login1", "nodes": "c[001-002]",
    "total_cpus": 64, "total_nodes": 2, "derived_ec": "0:0", "exit_code": "0:0",
    "state": "COMPLETED", "cpu_hours": 10.67, "@submit": "2026-05-28T19:55:00",
    "@eligible": "2026-05-28T19:55:00", "@queue_wait": 300, "work_dir": "/home/alice",
    "cluster": "bad", "qos": "normal", "time_limit": 3600, "job_name": "sim",
    "tres_req": "cpu=64,node=2", "account": "physics", "script": "#!/bin/sh\nsrun sim\n",
}
HOOK = {
    "SLURM_CLUSTER_NAME": "bad", "SLURM_JOB_ID": "4243", "SLURM_JOB_ACCOUNT": "physics",
    "SLURM_JOB_USER": "alice", "SLURM_JOB_UID": "1001", "SLURM_JOB_GID": "1001",
    "SLURM_JOB_NAME": "sim", "SLURM_JOB_PARTITION": "short", "SLURM_JOB_NODELIST": "c001",
    "SLURM_JOB_NUM_NODES": "1", "SLURM_SCRIPT_CONTEXT": "prolog_slurmctld",
    "JOBSTREAM_HOOK_TIME": f"{T:.3f}",
}


def dumps(obj: Any) -> bytes:
    return json.dumps(obj, separators=(",", ":")).encode()


def journal(job: int, *events: dict[str, Any], **extra: Any) -> bytes:
    return dumps({"id": job, "events": list(events), **extra})


def submit(ts: float = T, **context: Any) -> dict[str, Any]:
    return {"timestamp": ts, "name": "submit", "context": {**SUBMIT_CONTEXT, **context}}


def jobspec(attributes: dict[str, Any]) -> dict[str, Any]:
    return {"version": 1, "resources": [{"type": "slot", "count": 1, "label": "task",
                                          "with": [{"type": "core", "count": 1}]}],
            "tasks": [{"command": ["sim"], "slot": "task", "count": {"per_slot": 1}}],
            "attributes": {"system": {"duration": 60, "queue": "batch"}, **attributes}}


def nested(levels: int) -> dict[str, Any]:
    value: dict[str, Any] = {"leaf": 1}
    for _ in range(levels - 1):
        value = {"n": value}
    return value


def env(values: dict[str, str]) -> bytes:
    return "".join(f"{k}={v}\n" for k, v in sorted(values.items())).encode()


def raw_value(cluster: str, scheduler: str, fmt: str, payload: bytes) -> bytes:
    """An Avro RawRecord body (no framing)."""
    from io import BytesIO

    from fastavro import parse_schema, schemaless_writer

    schema = parse_schema(json.loads((HERE.parents[2] / "schemas" / "RawRecord.avsc")
                                     .read_text()))
    buf = BytesIO()
    schemaless_writer(buf, schema, {"cluster": cluster, "scheduler": scheduler,
                                    "format": fmt, "received_at": RECEIVED,
                                    "payload": payload, "key": None})
    return buf.getvalue()


def single_object(body: bytes) -> bytes:
    from pipeline.codecs.codec import AvroCodec
    return AvroCodec("RawRecord").encode({"cluster": "bad", "scheduler": "flux",
                                          "format": "flux-journal", "received_at": RECEIVED,
                                          "payload": b"{}", "key": None})[:10] + body


def usage_sample(**fields: object) -> bytes:
    """A node-usage payload (pipeline.parsers.node_usage), ``fields`` changed."""
    sample: dict[str, object] = {
        "v": 1, "scheduler": "slurm", "job_id": "4500", "node": "n1", "reader": "cgroup-v1",
        "sampled_at": T, "epoch": "cg1", "run": "r1", "cpu_s": 12.5, "cpu_user_s": 12.0,
        "cpu_system_s": 0.5, "interval_s": 30.0, "cpu_interval_s": 6.25,
        "mem_bytes": 2**20, "mem_peak_bytes": 2**21, "mem_rss_bytes": 2**20,
        "mem_file_bytes": 0, "mem_limit_bytes": 2**30, "processes": 2, "gpus": [],
        "gpu_busy_s": 0.0, "gpu_s": 0.0, "gpu_idle_since": None, "final": False,
        "reason": None}
    return dumps({**sample, **fields})


def corpus() -> dict[str, bytes]:
    good_body = raw_value("bad", "flux", "flux-journal", journal(4201, submit()))
    files: dict[str, bytes] = {
        # -- flux-journal payloads
        "flux-journal-truncated.json": journal(4101, submit())[:37],
        "flux-journal-invalid-utf8.json":
            journal(4102, submit()).replace(b'"submit"', b'"sub\xff\xfemit"'),
        "flux-journal-not-an-object.json": b"[4103, \"submit\"]",
        "flux-journal-id-wrong-type.json": dumps({"id": {"job": 4104}, "events": [submit()]}),
        "flux-journal-events-wrong-type.json": dumps({"id": 4105, "events": "submit"}),
        "flux-journal-status-wrong-type.json": journal(
            4106, {"timestamp": T, "name": "finish", "context": {"status": "0"}}),
        "flux-journal-timestamp-string.json": journal(4107, {**submit(), "timestamp": "now"}),
        "flux-journal-negative-timestamp.json": journal(4108, submit(ts=-5.0)),
        "flux-journal-nan-timestamp.json":
            journal(4109, submit()).replace(str(T).encode(), b"NaN"),
        "flux-journal-far-future-timestamp.json": journal(4110, submit(ts=4_102_444_800.0)),
        "flux-journal-jobid-out-of-range.json": journal(2**70, submit()),
        "flux-journal-deeply-nested.json": b'{"id": 4111, "events": ' + b"[" * 100_000,
        "flux-journal-context-too-deep.json": journal(
            4112, submit(), {"timestamp": T + 1, "name": "memo", "context": nested(40)}),
        "flux-journal-duplicate-keys.json": b'{"id":4113,"id":4114,"events":['
                                            + dumps(submit()) + b"]}",
        "flux-journal-missing-field.json": journal(4115, {"timestamp": T, "name": "submit",
                                                          "context": {"urgency": 16}}),
        # accepted on purpose
        "flux-journal-unknown-event.json": journal(
            4116, submit(), {"timestamp": T + 1, "name": "frobnicate",
                             "context": {"level": 3}}),
        "flux-journal-unknown-job.json": journal(
            4117, {"timestamp": T, "name": "finish", "context": {"status": 0}},
            {"timestamp": T + 1, "name": "clean"}),
        "flux-journal-old-timestamp.json": journal(4118, submit(ts=31_536_000.0)),
        "flux-journal-resource-count-overflow.json": journal(4121, submit(), jobspec={
            **jobspec({}), "resources": [{"type": "node", "count": 2**32, "with": [
                {"type": "core", "count": 2**32}]}]}),
        # -- slurm-jobcomp payloads
        "slurm-jobcomp-truncated.json": dumps(JOBCOMP)[:-20],
        "slurm-jobcomp-wrong-types.json": dumps({**JOBCOMP, "jobid": "4301",
                                                 "total_cpus": "many"}),
        "slurm-jobcomp-negative-time.json": dumps({**JOBCOMP, "jobid": 4302, "@start": -5}),
        "slurm-jobcomp-far-future-time.json": dumps({**JOBCOMP, "jobid": 4303,
                                                     "@end": "2999-01-01T00:00:00"}),
        "slurm-jobcomp-unknown-state.json": dumps({**JOBCOMP, "jobid": 4304,
                                                   "state": "EXPLODED"}),
        "slurm-jobcomp-duplicate-keys.json":
            dumps({**JOBCOMP, "jobid": 4305})[:-1] + b',"jobid":4306}',
        "slurm-jobcomp-invalid-utf8.json":
            dumps({**JOBCOMP, "jobid": 4307}).replace(b'"alice"', b'"al\xc3\x28ice"', 1),
        "slurm-jobcomp-uid-out-of-range.json": dumps({**JOBCOMP, "jobid": 4308,
                                                      "user_id": 2**70}),
        # -- slurm-hook payloads
        "slurm-hook-no-context.env": env({k: v for k, v in HOOK.items()
                                          if k != "SLURM_SCRIPT_CONTEXT"}),
        "slurm-hook-unknown-context.env": env({**HOOK, "SLURM_SCRIPT_CONTEXT": "prolog_odd"}),
        "slurm-hook-bad-jobid.env": env({**HOOK, "SLURM_JOB_ID": "forty-two"}),
        # -- slurm-submit-plugin lines (job_submit.lua, cli_filter.lua)
        "slurm-submit-plugin-refused.json": dumps({
            "kind": "refused", "time": int(T), "uid": 1001, "user": "alice",
            "partition": "short", "reason": "jobs named bad are not allowed"}),
        "slurm-submit-plugin-no-jobid.json": dumps({
            "kind": "modify", "time": int(T), "uid": 1001, "by_uid": 0, "time_limit": 7}),
        "slurm-submit-plugin-bad-time.json": dumps({
            "kind": "submit", "time": int(T), "job_id": 4244, "uid": 1001,
            "time_str": "soon"}),
        # -- slurm-squeue / slurm-sacct payloads
        "slurm-squeue-jobs-not-a-list.json": dumps({"meta": {}, "errors": [], "jobs": 5}),
        "slurm-sacct-truncated.json": b'{"meta": {"plugin": {"type": "openapi/v0.0.38"}}, '
                                      b'"jobs": [{"job_id": 4401, "state": {"cur',
        # -- node-usage samples (jobstream edge node)
        "node-usage-bad-jobid.json": usage_sample(job_id="42.batch"),
        "node-usage-bad-flux-jobid.json": usage_sample(scheduler="flux", job_id="ƒ0OIl"),
        "node-usage-negative-counter.json": usage_sample(cpu_s=-3.5),
        "node-usage-unknown-scheduler.json": usage_sample(scheduler="pbs"),
        "node-usage-not-an-object.json": b'["node-usage", 4501]',
        # accepted on purpose: a job never seen, and a sample whose clock stepped back
        "node-usage-unknown-job.json": usage_sample(job_id="4502"),
        "node-usage-clock-back.json": usage_sample(job_id="4503", sampled_at=T - 3600.0,
                                                   interval_s=None, cpu_interval_s=None),
        # -- whole raw-topic values
        "raw-unknown-schema-id.bin": b"\x00" + struct.pack(">I", 4242) + good_body,
        "raw-unknown-fingerprint.bin": b"\xc3\x01" + bytes(range(8)) + good_body,
        "raw-truncated-avro.bin": single_object(good_body)[:-7],
        "raw-trailing-bytes.bin": single_object(good_body) + b"\x00\x01",
        "raw-not-avro.bin": journal(4202, submit()),
        "raw-empty.bin": b"",
        "raw-unknown-format.bin": single_object(raw_value("bad", "slurm", "pbs-accounting",
                                                          b"Q;4203;queue=batch")),
        "raw-scheduler-mismatch.bin": single_object(raw_value("bad", "slurm", "flux-journal",
                                                              journal(4204, submit()))),
    }
    big = "x" * 10_000_000
    files["flux-journal-10mb-user-attribute.json.gz"] = journal(
        4119, submit(), jobspec=jobspec({"user": {"blob": big}}))
    files["flux-journal-10mb-batch-script.json.gz"] = journal(
        4120, submit(), jobspec=jobspec({"system": {
            "duration": 60, "queue": "batch",
            "files": {"script": {"data": "#!/bin/sh\n# " + big + "\n", "encoding": "utf-8"}}}}))
    return files


def main() -> None:
    for name, data in corpus().items():
        if name.endswith(".gz"):
            # mtime 0: the same bytes every time
            data = gzip.compress(data, mtime=0)
        (HERE / name).write_bytes(data)


if __name__ == "__main__":
    main()
