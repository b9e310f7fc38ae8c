"""``jobstream parse`` and ``jobstream fold`` through the real command group."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result
from datafiles import vector

from pipeline.cli import main
from pipeline.core.model import JobEvent
from pipeline.fold import DOC_FIELDS, doc_id

JOBCOMP = vector("slurm", "jobcomp_22.05_sample.jsonl")


def run(*args: str, stdin: bytes | None = None, env: dict[str, str] | None = None) -> Result:
    runner = CliRunner()
    with runner.isolated_filesystem():  # no ./jobstream.toml of the caller
        return runner.invoke(main, list(args), input=stdin,
                             env={"JOBSTREAM_CONFIG": "", **(env or {})})


def lines(result: Result) -> list[dict[str, Any]]:
    return [json.loads(line) for line in result.stdout.splitlines()]


def test_fold_prints_documents_sorted_by_doc_id() -> None:
    result = run("fold", "--format", "slurm-jobcomp", str(JOBCOMP))
    assert result.exit_code == 0, result.stderr
    docs = lines(result)
    assert [doc_id(d) for d in docs] == ["testcluster:1", "testcluster:10", "testcluster:2"]
    assert all(list(d) == list(DOC_FIELDS) for d in docs)
    assert docs[2]["result"] == "failed" and docs[2]["exit_code"] == 3
    assert result.stderr == ""


def test_parse_prints_canonical_events() -> None:
    result = run("parse", "--format", "slurm-jobcomp", str(JOBCOMP))
    assert result.exit_code == 0
    events = [JobEvent.from_dict(d) for d in lines(result)]
    assert {e.job_id for e in events} == {"1", "2", "10"}
    assert [e.event for e in events if e.job_id == "2"] == ["submit", "eligible", "start", "end"]
    assert "#!/bin/bash" not in result.stdout  # the batch script stays out


@pytest.mark.parametrize("command", ["parse", "fold"])
def test_bad_record_is_one_line_on_stderr_skipped_and_exit_1(command: str,
                                                             tmp_path: Path) -> None:
    good = JOBCOMP.read_bytes().splitlines()[0]
    src = tmp_path / "mixed.jsonl"
    src.write_bytes(b"\n".join([good, b"{not json", b"", b'{"jobid": 7}']) + b"\n")
    result = run(command, "--format", "slurm-jobcomp", str(src))
    assert result.exit_code == 1
    errors = result.stderr.splitlines()
    assert errors[0].startswith(f"{src}:2: invalid-json: ")
    assert errors[1] == f"{src}:4: missing-field: jobcomp record of job 7 has no state"
    assert len(errors) == 2
    out = lines(result)
    assert out and {d["job_id"] for d in out} == {"2"}  # the good record still went through


def test_stdin_and_default_cluster_from_config() -> None:
    data = vector("flux", "journal-backlog_DERIVED.jsonl").read_bytes()
    result = run("fold", "--format", "flux-journal", "-", stdin=data,
                 env={"JOBSTREAM_CLUSTER": "zeta"})
    assert result.exit_code == 0, result.stderr
    (doc,) = lines(result)
    assert (doc["cluster"], doc["job_id"], doc["job_id_f58"]) == ("zeta", "263721058304",
                                                                  "ƒ7vo8MjM")
    assert doc["result"] == "completed"


def test_stdin_errors_are_named_stdin() -> None:
    result = run("parse", "--format", "flux-journal", "--cluster", "x", "-", stdin=b"[1]\n")
    assert result.exit_code == 1
    assert result.stderr.startswith("<stdin>:1: ")


def test_flux_eventlog_with_jobspec_r_and_id() -> None:
    args = ["--format", "flux-eventlog", "--cluster", "x",
            "--jobspec", str(vector("flux", "jobspec_dump-0.46.0.json")),
            "--R", str(vector("flux", "R_rfc20-example1.json")), "--id", "ƒ7vo8MjM",
            str(vector("flux", "eventlog-v1_dump-0.46.0.jsonl"))]
    result = run("fold", *args)
    assert result.exit_code == 0, result.stderr
    (doc,) = lines(result)
    assert (doc["job_id"], doc["ngpus"], doc["nnodes"]) == ("263721058304", 32, 4)
    assert len(lines(run("parse", *args))) == 10


def test_flux_eventlog_without_id_is_a_bad_record() -> None:
    path = vector("flux", "eventlog-v1_dump-0.46.0.jsonl")
    result = run("fold", "--format", "flux-eventlog", "--cluster", "x",
                 "--R", str(vector("flux", "R_dump-0.46.0.json")), str(path))
    assert result.exit_code == 1 and result.stdout == ""
    assert result.stderr.startswith(f"{path}:1: missing-field: ")


def test_unknown_format_is_a_usage_error() -> None:
    result = run("fold", "--format", "pbs", str(JOBCOMP))
    assert result.exit_code == 2
