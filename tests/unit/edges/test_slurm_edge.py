"""The Slurm edge's sources, driven for real (HTTP requests, the hook script, fake Slurm
commands), down to the spool. Kafka is unreachable here: nothing leaves the spool."""

from __future__ import annotations

import copy
import errno
import http.client
import io
import json
import os
import random
import shutil
import socket
import statistics
import subprocess
import tempfile
import time
import tracemalloc
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

import pytest
from datafiles import vector

from pipeline.edges.base import EdgeRuntime
from pipeline.edges.slurm import SlurmEdge
from pipeline.edges.slurm.bridge import strip_nul
from pipeline.edges.slurm.changes import DigestSet, DigestWriter
from pipeline.edges.slurm.documents import top_level
from pipeline.edges.slurm.hooks import DropDirIngester, install_hook
from pipeline.edges.slurm.poller import CHUNK, HWM_META, SlurmPoller
from pipeline.edges.slurm.polling import PollError
from pipeline.edges.spool import Spool
from pipeline.runtime.config import Config
from pipeline.runtime.errors import SpoolError

SQUEUE = vector("slurm", "squeue_running_22.05.json")
#: a real 22.05 sacct --json (dbv0.0.38) of the parser tests
SACCT = Path(__file__).parents[2] / "data" / "slurm" / "sacct_v0.0.38_22.05.json"
JOBCOMP = [ln for ln in vector("slurm", "jobcomp_22.05_sample.jsonl").read_bytes().split(b"\n")
           if ln.strip()]


def env_file(name: str) -> dict[str, str]:
    out = {}
    for line in (vector("slurm", "hooks") / name).read_text().splitlines():
        k, _, v = line.partition("=")
        out[k] = v
    return out


@pytest.fixture
def short_dir() -> Iterator[Path]:
    # unix socket paths must stay under 108 bytes; pytest's tmp_path can be longer
    d = Path(tempfile.mkdtemp(prefix="js-", dir="/tmp"))
    yield d
    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture
def slurm_cfg(edge_cfg: Config, short_dir: Path) -> Config:
    return edge_cfg.replace(edge={"slurm": {"hook_socket": str(short_dir / "hook.sock"),
                                            "hook_drop_dir": str(short_dir / "drop")}})


@pytest.fixture
def edge(slurm_cfg: Config) -> Iterator[SlurmEdge]:
    e = SlurmEdge(slurm_cfg).start()
    yield e
    e.stop(timeout=0)


def spool_of(edge: SlurmEdge) -> Spool:
    return edge.runtime.spool


def request(edge: SlurmEdge, method: str, path: str, body: bytes | None = None,
            headers: dict[str, str] | None = None) -> tuple[int, bytes]:
    assert edge.receiver is not None
    conn = http.client.HTTPConnection("127.0.0.1", edge.receiver.port, timeout=10)
    try:
        conn.request(method, path, body=body, headers=headers or {})
        resp = conn.getresponse()
        return resp.status, resp.read()
    finally:
        conn.close()


class TestJobcompReceiver:
    def test_answers_the_plugins_location_probe(self, edge: SlurmEdge) -> None:
        assert request(edge, "HEAD", "/slurm/_doc")[0] == 200
        status, body = request(edge, "GET", "/")
        assert status == 200 and "version" in json.loads(body)

    def test_post_is_spooled_then_answered_201(self, edge: SlurmEdge, read_spool) -> None:
        status, body = request(edge, "POST", "/slurm/_doc", JOBCOMP[0],
                               {"Content-Type": "application/json"})
        assert status == 201
        answer = json.loads(body)
        assert answer["result"] == "created" and answer["_index"] == "slurm"
        [(key, rec)] = read_spool(spool_of(edge))
        assert rec.payload == JOBCOMP[0] and rec.format == "slurm-jobcomp"
        assert rec.scheduler == "slurm" and rec.cluster == "testcluster"
        assert key == b"testcluster:2"

    def test_every_record_of_a_burst_is_spooled_in_order(self, edge: SlurmEdge,
                                                         read_spool) -> None:
        for line in JOBCOMP:
            assert request(edge, "POST", "/slurm/_doc", line)[0] == 201
        recs = read_spool(spool_of(edge))
        assert [r.payload for _, r in recs] == JOBCOMP
        assert [k for k, _ in recs] == [b"testcluster:2", b"testcluster:10",
                                        b"testcluster:1"]

    def test_curl_with_expect_100_continue_as_slurm_sends_it(self, edge: SlurmEdge,
                                                             read_spool) -> None:
        assert edge.receiver is not None
        big = json.loads(JOBCOMP[0])
        big["script"] = "#!/bin/sh\n" + "echo padding\n" * 400  # > curl's 1 KB threshold
        data = json.dumps(big).encode()
        out = subprocess.run(
            ["curl", "-sS", "-o", "/dev/null", "-w", "%{http_code}", "-X", "POST",
             "-H", "Content-Type: application/json", "-H", "Expect: 100-continue",
             "--data-binary", "@-", f"http://127.0.0.1:{edge.receiver.port}/slurm/_doc"],
            input=data, capture_output=True, timeout=30, check=True)
        assert out.stdout == b"201"
        assert [r.payload for _, r in read_spool(spool_of(edge))] == [data]

    def test_pre_20_11_path_is_accepted(self, edge: SlurmEdge) -> None:
        assert request(edge, "POST", "/slurm/jobcomp", JOBCOMP[1])[0] == 201

    def test_unknown_endpoint_is_404_and_spools_nothing(self, edge: SlurmEdge) -> None:
        assert request(edge, "POST", "/slurm/_search", b"{}")[0] == 404
        assert spool_of(edge).depth() == 0

    def test_a_body_that_is_not_json_is_spooled_for_the_dlq(self, edge: SlurmEdge,
                                                            read_spool) -> None:
        assert request(edge, "POST", "/slurm/_doc", b"not json")[0] == 201
        [(key, rec)] = read_spool(spool_of(edge))
        assert key is None and rec.payload == b"not json"

    def test_a_full_spool_answers_503_so_slurm_retries(self, slurm_cfg: Config) -> None:
        cfg = slurm_cfg.replace(edge={"spool_max_bytes": 64 * 1024})
        e = SlurmEdge(cfg).start()
        try:
            doc = json.loads(JOBCOMP[0])
            doc["script"] = "x" * 8000
            body = json.dumps(doc).encode()
            statuses = [request(e, "POST", "/slurm/_doc", body)[0] for _ in range(40)]
        finally:
            e.stop(timeout=0)
        assert 503 in statuses
        first = statuses.index(503)
        assert set(statuses[:first]) == {201}
        with Spool(e.runtime.spool.path) as spool:
            assert spool.depth() == first


class TestHookScript:
    RUNS = 15

    @pytest.fixture
    def hook(self, slurm_cfg: Config, short_dir: Path) -> Path:
        return install_hook(slurm_cfg, short_dir / "jobstream-hook")

    def run_hook(self, hook: Path, env: dict[str, str], **extra: str) -> tuple[int, float]:
        full = {"PATH": "/usr/bin:/bin", **env, **extra}
        t0 = time.perf_counter()
        proc = subprocess.run([str(hook)], env=full, capture_output=True, timeout=30)
        return proc.returncode, time.perf_counter() - t0

    def report(self, what: str, times: list[float], capsys: pytest.CaptureFixture[str]
               ) -> None:
        with capsys.disabled():
            print(f"\nhook run time, {what}: median {statistics.median(times) * 1000:.1f} ms, "
                  f"max {max(times) * 1000:.1f} ms over {len(times)} runs")

    def test_edge_up_delivers_over_the_socket(self, edge: SlurmEdge, hook: Path,
                                              read_spool, capsys) -> None:
        env = env_file("epilog_ctld_2.env")
        times = []
        for _ in range(self.RUNS):
            code, took = self.run_hook(hook, env)
            assert code == 0
            times.append(took)
        self.report("edge up", times, capsys)
        recs = read_spool(spool_of(edge))
        assert len(recs) == self.RUNS
        key, rec = recs[0]
        assert key == b"testcluster:2" and rec.format == "slurm-hook"
        sent = json.loads(rec.payload)
        assert sent["SLURM_JOB_EXIT_CODE2"] == "3:0" and "PWD" not in sent
        assert abs(float(sent["JOBSTREAM_HOOK_TIME"]) - time.time()) < 3600
        assert not any((edge.hook_drop_dir).iterdir())

    def test_edge_down_drops_a_file_the_edge_ingests_later(self, slurm_cfg: Config,
                                                           hook: Path, short_dir: Path,
                                                           read_spool, capsys) -> None:
        drop = short_dir / "drop"
        drop.mkdir(mode=0o700)  # the edge refuses a drop directory others can enter
        env = env_file("prolog_ctld_1.env")
        times = []
        for _ in range(self.RUNS):
            code, took = self.run_hook(hook, env)
            assert code == 0
            times.append(took)
        self.report("edge down", times, capsys)
        files = sorted(drop.iterdir())
        assert len(files) == self.RUNS and all(f.suffix == ".json" for f in files)
        dropped = [f.read_bytes() for f in files]
        runtime = EdgeRuntime(slurm_cfg, "slurm")
        try:
            assert DropDirIngester(runtime, drop, 1.0).scan() == self.RUNS
            recs = read_spool(runtime.spool)
        finally:
            runtime.spool.close()
        assert not list(drop.iterdir())
        assert [r.payload for _, r in recs] == dropped
        assert all(k == b"testcluster:1" for k, _ in recs)

    def test_edge_that_never_answers_costs_only_the_timeout(self, hook: Path,
                                                            short_dir: Path, capsys) -> None:
        drop = short_dir / "drop"
        drop.mkdir(mode=0o700)  # the edge refuses a drop directory others can enter
        sock_path = short_dir / "hook.sock"
        hung = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        hung.bind(str(sock_path))
        hung.listen(8)  # accepts connections, never reads or answers
        try:
            code, took = self.run_hook(hook, env_file("epilog_ctld_1.env"),
                                       JOBSTREAM_HOOK_TIMEOUT="0.2")
        finally:
            hung.close()
        assert code == 0
        self.report("edge hung (timeout 0.2 s)", [took], capsys)
        assert len(list(drop.glob("*.json"))) == 1

    def test_always_exits_0_even_with_nowhere_to_write(self, hook: Path,
                                                       short_dir: Path) -> None:
        code, _ = self.run_hook(hook, env_file("epilog_ctld_1.env"),
                                JOBSTREAM_HOOK_DROP_DIR=str(short_dir / "missing" / "dir"))
        assert code == 0

    def test_edge_ingests_drops_at_start(self, slurm_cfg: Config, hook: Path,
                                         short_dir: Path) -> None:
        drop = short_dir / "drop"
        drop.mkdir(mode=0o700)  # the edge refuses a drop directory others can enter
        assert self.run_hook(hook, env_file("prolog_ctld_1.env"))[0] == 0
        e = SlurmEdge(slurm_cfg).start()
        try:
            assert e.drops is not None and e.drops.ingested == 1
            assert e.runtime.spool.depth() == 1
        finally:
            e.stop(timeout=0)


FAKE_CMD = """#!/bin/sh
echo "$@" >> {log}
{body}
"""


@pytest.fixture
def fake_slurm(tmp_path: Path) -> dict[str, Path]:
    paths = {}
    for name in ("squeue", "sacct"):
        path = tmp_path / f"fake-{name}"
        state = tmp_path / f"{name}.mode"
        state.write_text("ok")
        doc = SQUEUE if name == "squeue" else SACCT
        body = (f'[ "$(cat {state})" = ok ] || {{ echo "slurm_load_jobs error: Unable to '
                f'contact slurm controller" >&2; exit 1; }}\n'
                f"cat {doc}")
        path.write_text(FAKE_CMD.format(log=tmp_path / f"{name}.log", body=body))
        path.chmod(0o755)
        paths[name] = path
        paths[f"{name}.mode"] = state
        paths[f"{name}.log"] = tmp_path / f"{name}.log"
    return paths


class TestPoller:
    @pytest.fixture
    def poller(self, edge_cfg: Config, fake_slurm: dict[str, Path]) -> Iterator[SlurmPoller]:
        cfg = edge_cfg.replace(edge={"slurm": {
            "squeue_command": str(fake_slurm["squeue"]),
            "sacct_command": f"{fake_slurm['sacct']} --json --allusers",
            "catchup_max_s": 3600.0}})
        runtime = EdgeRuntime(cfg, "slurm")
        yield SlurmPoller(runtime, clock=lambda: 1_800_000_000.0)
        runtime.spool.close()

    def test_one_record_per_job_keyed_by_job(self, poller: SlurmPoller, read_spool) -> None:
        assert poller.poll_once() == 8
        recs = read_spool(poller.runtime.spool)
        squeue = [(k, r) for k, r in recs if r.format == "slurm-squeue"]
        assert len(squeue) == 3
        for _, rec in squeue:
            doc = json.loads(rec.payload)
            assert len(doc["jobs"]) == 1 and doc["meta"]["Slurm"]["release"] == "22.05.8"
        assert [k for k, _ in squeue][:2] == [b"testcluster:1", b"testcluster:2"]
        sacct = [(k, r) for k, r in recs if r.format == "slurm-sacct"]
        assert [k for k, _ in sacct] == [b"testcluster:%d" % j for j in (1, 2, 10, 5, 30)]
        assert all(r.cluster == "testcluster" and r.scheduler == "slurm" for _, r in recs)

    def test_unchanged_jobs_are_not_published_again(self, poller: SlurmPoller) -> None:
        assert poller.poll_once() == 8
        assert poller.poll_once() == 0

    def test_sacct_window_starts_at_the_high_water_mark(self, poller: SlurmPoller,
                                                        fake_slurm: dict[str, Path]) -> None:
        poller.poll_once()
        assert poller.high_water_mark == 1_800_000_000.0
        poller.clock = lambda: 1_800_000_060.0
        poller.poll_once()
        first, second = fake_slurm["sacct.log"].read_text().splitlines()
        fmt = "%Y-%m-%dT%H:%M:%S"
        assert f"--starttime {time.strftime(fmt, time.localtime(1_800_000_000 - 3600))}" \
            in first  # no mark yet: the catch-up cap
        assert f"--starttime {time.strftime(fmt, time.localtime(1_800_000_000 - 1))}" \
            in second

    def test_failure_keeps_the_mark_and_raises(self, poller: SlurmPoller,
                                               fake_slurm: dict[str, Path]) -> None:
        poller.poll_once()
        fake_slurm["sacct.mode"].write_text("down")
        poller.clock = lambda: 1_800_000_060.0
        with pytest.raises(PollError, match="Unable to contact"):
            poller.poll_once()
        assert poller.high_water_mark == 1_800_000_000.0

    def test_missing_command_is_a_poll_error(self, edge_cfg: Config) -> None:
        cfg = edge_cfg.replace(edge={"slurm": {"squeue_command": "/nonexistent/squeue"}})
        runtime = EdgeRuntime(cfg, "slurm")
        try:
            with pytest.raises(PollError, match="not found"):
                SlurmPoller(runtime).poll_once()
        finally:
            runtime.spool.close()

    def test_backs_off_exponentially_while_slurm_is_down(self, edge_cfg: Config,
                                                         fake_slurm: dict[str, Path]) -> None:
        cfg = edge_cfg.replace(edge={"slurm": {
            "squeue_command": str(fake_slurm["squeue"]), "poll_interval_s": 60.0,
            "sacct_command": str(fake_slurm["sacct"]), "poll_backoff_max_s": 40.0}})
        runtime = EdgeRuntime(cfg, "slurm")
        waits: list[float] = []

        def sleep(delay: float) -> bool:
            waits.append(delay)
            # Slurm is down for 5 attempts, then back
            fake_slurm["squeue.mode"].write_text("down" if len(waits) < 5 else "ok")
            return len(waits) >= 8

        fake_slurm["squeue.mode"].write_text("down")
        poller = SlurmPoller(runtime, sleep=sleep)
        poller.run()
        runtime.spool.close()
        assert waits == [5.0, 10.0, 20.0, 40.0, 40.0, 60.0, 60.0, 60.0]
        assert poller.failures == 5

    def test_a_full_disk_fails_the_poll_not_the_poller(self, edge_cfg: Config,
                                                       fake_slurm: dict[str, Path],
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
        cfg = edge_cfg.replace(edge={"slurm": {
            "squeue_command": str(fake_slurm["squeue"]),
            "sacct_command": str(fake_slurm["sacct"])}})
        runtime = EdgeRuntime(cfg, "slurm")
        waits: list[float] = []

        def sleep(delay: float) -> bool:
            waits.append(delay)
            if len(waits) == 2:
                monkeypatch.undo()  # space again
            return len(waits) >= 3

        def full(*args: Any, **kwargs: Any) -> Any:
            raise OSError(errno.ENOSPC, "No space left on device")

        monkeypatch.setattr(tempfile, "TemporaryFile", full)
        poller = SlurmPoller(runtime, sleep=sleep)
        poller.run()
        runtime.spool.close()
        assert poller.failures == 2
        assert poller.polls == 1


@pytest.mark.parametrize("output", [b"squeue: error", b"", b'{"jobs":[{"job_id":1}', b"{}x"])
def test_top_level_refuses_non_json(output: bytes) -> None:
    with pytest.raises(PollError, match="^output is not JSON: [^\n]+$"):
        top_level(io.BytesIO(output), "jobs")


@pytest.mark.parametrize("output", [b"[]", b'{"meta":{}}', b'{"jobs":null}', b'{"jobs":{}}'])
def test_top_level_refuses_a_document_without_a_jobs_list(output: bytes) -> None:
    with pytest.raises(PollError, match="no jobs list"):
        top_level(io.BytesIO(output), "jobs")


class TestStreamingPoll:
    """The poller streams the output: what it publishes, and in chunks."""

    @staticmethod
    def squeue_doc(**top: Any) -> dict[str, Any]:
        doc = json.loads(SQUEUE.read_bytes())
        doc.update(top)
        return doc

    @pytest.fixture
    def outputs(self) -> dict[str, bytes]:
        """What the fake squeue and sacct print (sacct: no jobs)."""
        return {"squeue": json.dumps(self.squeue_doc()).encode(),
                "sacct": json.dumps({"meta": {}, "errors": [], "jobs": []}).encode()}

    @pytest.fixture
    def runtime(self, edge_cfg: Config) -> Iterator[EdgeRuntime]:
        cfg = edge_cfg.replace(edge={"slurm": {"squeue_command": "squeue",
                                               "sacct_command": "sacct"}})
        rt = EdgeRuntime(cfg, "slurm")
        yield rt
        rt.spool.close()

    @staticmethod
    def new_poller(runtime: EdgeRuntime, outputs: dict[str, bytes]) -> SlurmPoller:
        def runner(argv: list[str], timeout: float, out: IO[bytes]) -> None:
            out.write(outputs[argv[0]])
        return SlurmPoller(runtime, runner=runner, clock=lambda: 1_800_000_000.0)

    @pytest.fixture
    def poller(self, runtime: EdgeRuntime, outputs: dict[str, bytes]) -> SlurmPoller:
        return self.new_poller(runtime, outputs)

    def test_jobs_before_meta_gives_the_same_records(self, runtime: EdgeRuntime,
                                                     outputs: dict[str, bytes],
                                                     read_spool) -> None:
        doc = self.squeue_doc(last_backfill=1_799_999_990, last_update=1_799_999_999,
                              warnings=[])
        meta_first = json.dumps(doc).encode()
        # Slurm >= 23.02's order
        jobs_first = json.dumps({k: doc[k] for k in ("jobs", "last_backfill", "last_update",
                                                     "meta", "errors", "warnings")}).encode()
        results = []
        for output in (meta_first, jobs_first):
            outputs["squeue"] = output
            before = runtime.spool.depth()
            assert self.new_poller(runtime, outputs).poll_once() == 3  # nothing seen yet
            results.append(read_spool(runtime.spool)[before:])
        (first, second) = results
        assert [k for k, _ in first] == [k for k, _ in second] \
            == [b"testcluster:1", b"testcluster:2", b"testcluster:3"]
        for (_, a), (_, b) in zip(first, second, strict=True):
            assert json.loads(a.payload) == json.loads(b.payload)
            assert json.loads(b.payload)["last_update"] == 1_799_999_999
            assert len(json.loads(b.payload)["jobs"]) == 1

    def test_payload_is_the_document_cut_to_one_job(self, poller: SlurmPoller,
                                                    outputs: dict[str, bytes],
                                                    read_spool) -> None:
        doc = self.squeue_doc()
        job = doc["jobs"][0]
        # floats, a uint64 beyond int64 (memory with MEM_PER_CPU set), non-ASCII
        job.update(billable_tres=1.5, ratio=1e-7, memory_per_cpu=9223372036854777856,
                   name="caf\u00e9 \u2603")
        output = json.dumps(doc, indent=2, ensure_ascii=False).encode()  # as Slurm prints
        output = output.replace("caf\u00e9".encode(), b"caf\xff")  # not UTF-8
        outputs["squeue"] = output
        assert poller.poll_once() == 3
        # what the poller published when it read the whole output with json.loads
        whole = json.loads(output.decode(errors="replace"))
        rest = {k: v for k, v in whole.items() if k != "jobs"}
        expected = [json.dumps({**rest, "jobs": [j]}, separators=(",", ":")).encode()
                    for j in whole["jobs"]]
        assert [r.payload for _, r in read_spool(poller.runtime.spool)] == expected
        assert b'"memory_per_cpu":9223372036854777856' in expected[0]
        assert b'"ratio":1e-07' in expected[0] and b"caf\\ufffd" in expected[0]

    def test_changed_top_level_keys_do_not_republish_unchanged_jobs(
            self, poller: SlurmPoller, outputs: dict[str, bytes], read_spool) -> None:
        outputs["squeue"] = json.dumps(self.squeue_doc(last_update=1_799_999_999)).encode()
        assert poller.poll_once() == 3
        outputs["squeue"] = json.dumps(self.squeue_doc(last_update=1_800_000_059)).encode()
        assert poller.poll_once() == 0
        doc = self.squeue_doc(last_update=1_800_000_119)
        doc["jobs"][2]["job_state"] = "RUNNING"
        outputs["squeue"] = json.dumps(doc).encode()
        assert poller.poll_once() == 1
        _, rec = read_spool(poller.runtime.spool)[-1]
        assert json.loads(rec.payload)["jobs"][0]["job_state"] == "RUNNING"
        assert json.loads(rec.payload)["last_update"] == 1_800_000_119

    def test_a_large_queue_is_published_in_chunks(self, poller: SlurmPoller,
                                                  outputs: dict[str, bytes],
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
        jobs = 20_000
        doc = self.squeue_doc()
        template = doc["jobs"][2]  # pending
        doc["jobs"] = []
        for job_id in range(1000, 1000 + jobs):
            job = copy.deepcopy(template)
            job["job_id"] = job_id
            doc["jobs"].append(job)
        outputs["squeue"] = json.dumps(doc).encode()
        chunks: list[int] = []
        publish_many = poller.runtime.publish_many

        def counting(records: list[Any]) -> list[int]:
            chunks.append(len(records))
            return publish_many(records)

        monkeypatch.setattr(poller.runtime, "publish_many", counting)
        assert poller.poll_once() == jobs
        assert max(chunks) == CHUNK and sum(chunks) == jobs
        assert len(chunks) == -(-jobs // CHUNK)
        spool = poller.runtime.spool
        assert spool.depth() == jobs
        keys = {r.key for r in spool.read(0, jobs + 1)}
        assert keys == {b"testcluster:%d" % j for j in range(1000, 1000 + jobs)}
        assert poller.high_water_mark == 1_800_000_000.0

    def test_the_memory_of_a_poll_does_not_grow_with_the_queue(
            self, runtime: EdgeRuntime, outputs: dict[str, bytes]) -> None:
        # an edge has 50 MB for a queue of 500,000 jobs: the digests of the last poll and
        # of this one are on disk, and a poll holds no Python object per job
        peaks = []
        for jobs in (5_000, 25_000):
            doc = self.squeue_doc()
            template = doc["jobs"][2]
            doc["jobs"] = [{**template, "job_id": job_id}
                           for job_id in range(1000, 1000 + jobs)]
            outputs["squeue"] = json.dumps(doc).encode()
            poller = self.new_poller(runtime, outputs)
            assert poller.poll_once() == jobs
            tracemalloc.start()
            try:
                assert poller.poll_once() == 0  # every job unchanged
                peaks.append(tracemalloc.get_traced_memory()[1])
            finally:
                tracemalloc.stop()
            doc["jobs"][5]["job_state"] = "RUNNING"
            outputs["squeue"] = json.dumps(doc).encode()
            assert poller.poll_once() == 1  # the digests kept still find the others'
            poller.close()
        # held in memory, 20,000 more jobs' digests were 160 KB (320 KB while merged)
        assert peaks[1] - peaks[0] < 48 * 1024, peaks

    def test_a_failed_poll_keeps_the_last_polls_digests(
            self, poller: SlurmPoller, outputs: dict[str, bytes],
            monkeypatch: pytest.MonkeyPatch) -> None:
        assert poller.poll_once() == 3
        spool_dir = poller.runtime.spool.path.parent  # where the digest files are made
        open_before = len(_temporary_files_open_in(spool_dir))  # the last poll's digests
        doc = self.squeue_doc()
        doc["jobs"][1]["job_state"] = "RUNNING"
        outputs["squeue"] = json.dumps(doc).encode()
        publish_many = poller.runtime.publish_many

        def full(records: list[Any]) -> list[int]:
            raise SpoolError("the disk is full")

        monkeypatch.setattr(poller.runtime, "publish_many", full)
        with pytest.raises(SpoolError):
            poller.poll_once()
        monkeypatch.setattr(poller.runtime, "publish_many", publish_many)
        assert poller.poll_once() == 1  # the changed job, not the two others
        assert poller.poll_once() == 0
        assert len(_temporary_files_open_in(spool_dir)) == open_before  # none left open


def _temporary_files_open_in(directory: Path) -> list[str]:
    """The deleted files (temporary files, as the digests are) this process has open in
    ``directory``; other descriptors, which the spool's database or other tests' threads
    may open and close meanwhile, are not counted."""
    found = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:  # closed since listed
            continue
        if target.startswith(f"{directory}/") and target.endswith(" (deleted)"):
            found.append(target)
    return sorted(found)


class TestDigests:
    """The set of a poll's digests, on disk but for one digest in each block."""

    @staticmethod
    def build(directory: Path, digests: Iterator[int] | list[int]) -> DigestSet:
        writer = DigestWriter(directory)
        for digest in digests:
            writer.append(digest)
        return writer.finish()

    @pytest.mark.parametrize("run", [3, DigestWriter.RUN])
    def test_finds_every_digest_appended_and_no_other(self, tmp_path: Path, run: int,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setattr(DigestWriter, "RUN", run)
        rng = random.Random(11)
        kept = [rng.getrandbits(64) for _ in range(20_000)] + [0, 2**64 - 1]
        digests = self.build(tmp_path, iter(kept))
        try:
            assert all(d in digests for d in kept)
            others = {rng.getrandbits(64) for _ in range(20_000)} - set(kept)
            ordered = sorted(kept)
            # beside each block's first digest, where a lookup changes blocks
            others |= {d + 1 for d in ordered[::DigestSet.BLOCK]} - set(kept)
            others |= {d - 1 for d in ordered[1::DigestSet.BLOCK]} - set(kept)
            assert not any(d in digests for d in others)
        finally:
            digests.close()

    def test_an_empty_set_has_nothing(self, tmp_path: Path) -> None:
        digests = self.build(tmp_path, [])
        assert 0 not in digests and 2**64 - 1 not in digests
        digests.close()
        assert 0 not in DigestSet()

    def test_a_set_costs_no_memory_per_digest(self, tmp_path: Path) -> None:
        rng = random.Random(7)
        jobs = 200_000
        tracemalloc.start()
        try:
            digests = self.build(tmp_path, (rng.getrandbits(64) for _ in range(jobs)))
            current, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        digests.close()
        # in memory, 200,000 digests were 1.6 MB, twice while they were merged; now one
        # run being sorted, the merge's read buffers and a digest per block of 512
        assert peak < 768 * 1024
        assert current < 16 * 1024


def test_strip_nul_removes_only_the_trailing_nul() -> None:
    assert strip_nul(JOBCOMP[0] + b"\x00") == JOBCOMP[0]
    assert strip_nul(JOBCOMP[0]) == JOBCOMP[0]


def test_hwm_meta_name_is_stable() -> None:
    assert HWM_META == "slurm.sacct.hwm"


def test_edge_starts_with_every_source_off(edge_cfg: Config) -> None:
    cfg = edge_cfg.replace(edge={"slurm": {"receiver": False, "hooks": False,
                                           "poller": False, "nodes": False}})
    e = SlurmEdge(cfg).start()
    assert e.components == []
    e.stop(timeout=0)


def test_start_failure_on_a_taken_port_is_clear(slurm_cfg: Config) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(1)
        cfg = slurm_cfg.replace(edge={"slurm": {"receiver_port": s.getsockname()[1]}})
        from pipeline.runtime.errors import ServiceError
        with pytest.raises(ServiceError, match="receiver_port"):
            SlurmEdge(cfg).start()

