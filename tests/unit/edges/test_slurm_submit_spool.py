"""jobstream's lua plugins run by Debian's Lua 5.1 (the library Slurm's lua plugins link)
with a stand-in ``slurm`` table, their lines in the submit spool, and the edge's ingester
of that spool down to its own spool. The real Slurm runs them in test_slurm_e2e."""

from __future__ import annotations

import ctypes
import ctypes.util
import json
import os
from pathlib import Path
from typing import Any

import pytest
from datafiles import unavailable

from pipeline.edges.base import EdgeRuntime
from pipeline.edges.slurm.hooks import install_lua
from pipeline.edges.slurm.submit import SubmitSpoolIngester
from pipeline.runtime.config import Config

#: the parts of Slurm's lua API the scripts use; cli_store keeps what pre_submit stored
STAND_IN = """
slurm = {SUCCESS = 0, ERROR = -1, said = {}, store = {}}
function slurm.log_user(fmt, ...) slurm.said[#slurm.said + 1] = string.format(fmt, ...) end
function slurm.log_error(fmt, ...) end
function slurm.cli_store(offset, text) slurm.store[offset] = text end
function slurm.cli_retrieve(offset) return slurm.store[offset] end
"""


def _lua() -> ctypes.CDLL:
    # never CDLL(""): that is the running python itself, which has no Lua in it
    for name in filter(None, ("liblua5.1.so.0", ctypes.util.find_library("lua5.1"))):
        try:
            return ctypes.CDLL(name)
        except OSError:
            continue
    why = "no Lua 5.1 library (Debian: liblua5.1-0, which slurm-wlm's lua plugins need)"
    unavailable(why, f"{why}: ./run test installs it")


def run_lua(*chunks: str) -> None:
    """Run the chunks in one Lua state, in order; a Lua error fails the test."""
    lua = _lua()
    lua.luaL_newstate.restype = ctypes.c_void_p
    lua.luaL_openlibs.argtypes = [ctypes.c_void_p]
    lua.luaL_loadbuffer.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_size_t,
                                    ctypes.c_char_p]
    lua.lua_pcall.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_int, ctypes.c_int]
    lua.lua_tolstring.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_void_p]
    lua.lua_tolstring.restype = ctypes.c_char_p
    lua.lua_close.argtypes = [ctypes.c_void_p]
    state = lua.luaL_newstate()
    lua.luaL_openlibs(state)
    try:
        for n, chunk in enumerate(chunks):
            code = chunk.encode()
            rc = lua.luaL_loadbuffer(state, code, len(code), f"chunk{n}".encode())
            if rc == 0:
                rc = lua.lua_pcall(state, 0, 0, 0)
            if rc != 0:
                raise AssertionError(f"lua chunk {n}: {lua.lua_tolstring(state, -1, None)!r}")
    finally:
        lua.lua_close(state)


@pytest.fixture
def scripts(tmp_path: Path) -> dict[str, Path]:
    spool = tmp_path / "spool"
    spool.mkdir()
    policy = tmp_path / "site.lua"
    policy.write_text("""
function slurm_job_submit(job_desc, part_list, submit_uid)
    if job_desc.name == "bad" then
        slurm.log_user("no jobs named %s", job_desc.name)
        return slurm.ERROR
    end
    return slurm.SUCCESS
end
""")
    return {p.name: p for p in install_lua(spool, tmp_path / "etc", site_policy=policy)}


def dofile(path: Path) -> str:
    """A chunk that runs the installed script from its file, as Slurm does (so that it
    finds the module installed beside it)."""
    return f"dofile({json.dumps(str(path))})\n"


def spool_lines(tmp_path: Path, name: str) -> list[dict[str, Any]]:
    return [json.loads(x) for x in (tmp_path / "spool" / name).read_text().splitlines()]


def test_install_lua_writes_the_configured_paths(scripts: dict[str, Path],
                                                 tmp_path: Path) -> None:
    assert sorted(scripts) == ["cli_filter.lua", "job_submit.lua", "jobstream_json.lua"]
    assert {p.parent for p in scripts.values()} == {tmp_path / "etc"}
    spool = json.dumps(str(tmp_path / "spool"))
    for name in ("cli_filter.lua", "job_submit.lua"):
        assert f"local SPOOL_DIR = {spool} -- jobstream:submit_spool_dir" in \
            scripts[name].read_text()
    assert f'local SITE_POLICY = {json.dumps(str(tmp_path / "site.lua"))}' in \
        scripts["job_submit.lua"].read_text()


def test_the_json_module_writes_integers_a_double_holds_exactly(
        scripts: dict[str, Path], tmp_path: Path) -> None:
    out = tmp_path / "out.jsonl"
    run_lua(STAND_IN, f"""
package.path = {json.dumps(str(tmp_path / "etc") + "/?.lua")}
local json = require("jobstream_json")
local f = io.open({json.dumps(str(out))}, "w")
f:write(json.line({{n = -5, big = 2^53, low = -2^53, over = 2^53 + 2, half = 1.5,
                   s = 'a"' .. string.char(92, 9), yes = true}}))
f:close()
""")
    assert json.loads(out.read_text()) == {"n": -5, "big": 2**53, "low": -(2**53),
                                           "s": 'a"\\\t', "yes": True}


def test_a_plugin_without_its_json_module_never_fails_a_submission(
        scripts: dict[str, Path], tmp_path: Path) -> None:
    scripts["jobstream_json.lua"].unlink()
    run_lua(STAND_IN, dofile(scripts["cli_filter.lua"]),
            "assert(slurm_cli_pre_submit({}, 0) == slurm.SUCCESS)\n"
            "assert(slurm_cli_post_submit(0, 42, 0) == slurm.SUCCESS)\n")
    assert not (tmp_path / "spool" / f"{os.getuid()}.log").exists()


def test_cli_filter_records_the_job_id_and_what_was_asked(scripts: dict[str, Path],
                                                          tmp_path: Path) -> None:
    run_lua(STAND_IN, dofile(scripts["cli_filter.lua"]), """
local opts = {partition = "short", account = "physics", ["job-name"] = 'a "q" b',
              time = "1-0", hold = "set"}
assert(slurm_cli_pre_submit(opts, 0) == slurm.SUCCESS)
assert(slurm_cli_post_submit(0, 42, 4294967294) == slurm.SUCCESS)
""")
    [rec] = spool_lines(tmp_path, f"{os.getuid()}.log")
    assert rec == {"kind": "submit", "time": rec["time"], "job_id": 42, "uid": os.getuid(),
                   "partition": "short", "account": "physics", "job_name": 'a "q" b',
                   "time_str": "1-0", "hold": True, "step_id": 4294967294}


def test_cli_filter_passes_on_only_what_the_user_set(scripts: dict[str, Path],
                                                     tmp_path: Path) -> None:
    run_lua(STAND_IN, dofile(scripts["cli_filter.lua"]), """
assert(slurm_cli_pre_submit({hold = "unset", time = "INFINITE", partition = ""}, 0)
       == slurm.SUCCESS)
assert(slurm_cli_post_submit(0, "43", 0) == slurm.SUCCESS)
""")
    [rec] = spool_lines(tmp_path, f"{os.getuid()}.log")
    assert {k: v for k, v in rec.items() if k != "time"} == {
        "kind": "submit", "job_id": 43, "uid": os.getuid(), "step_id": 0}


def test_cli_filter_never_fails_a_submission_without_a_spool(scripts: dict[str, Path],
                                                             tmp_path: Path) -> None:
    (tmp_path / "spool").rmdir()
    run_lua(STAND_IN, dofile(scripts["cli_filter.lua"]),
            "assert(slurm_cli_pre_submit({}, 0) == slurm.SUCCESS)\n"
            "assert(slurm_cli_post_submit(0, 42, 0) == slurm.SUCCESS)\n"
            "assert(slurm_cli_post_submit(0, nil, nil) == slurm.SUCCESS)\n")


def test_job_submit_records_changes_and_refusals(scripts: dict[str, Path],
                                                 tmp_path: Path) -> None:
    run_lua(STAND_IN, dofile(scripts["job_submit.lua"]), """
local NO_VAL = 4294967294
assert(slurm_job_submit({name = "ok", partition = "debug"}, {}, 1001) == slurm.SUCCESS)
assert(slurm_job_submit({name = "bad", partition = "short", user_name = "alice"}, {}, 1001)
       == slurm.ERROR)
assert(slurm.said[1] == "no jobs named bad")
local job = {job_id = 42, user_id = 1001}
assert(slurm_job_modify({time_limit = 7, priority = NO_VAL, nice = NO_VAL}, job, {}, 0)
       == slurm.SUCCESS)
assert(slurm_job_modify({time_limit = NO_VAL, priority = 0}, job, {}, 1001) == slurm.SUCCESS)
assert(slurm_job_modify({time_limit = NO_VAL, priority = 4294967295, nice = 2147483658},
                        job, {}, 0) == slurm.SUCCESS)
""")
    refused, limit, hold, release = spool_lines(tmp_path, "slurmctld.log")
    assert {k: v for k, v in refused.items() if k != "time"} == {
        "kind": "refused", "uid": 1001, "user": "alice", "partition": "short",
        "job_name": "bad", "reason": "no jobs named bad"}
    assert {k: v for k, v in limit.items() if k != "time"} == {
        "kind": "modify", "job_id": 42, "uid": 1001, "by_uid": 0, "time_limit": 7}
    assert (hold["hold"], hold["by_uid"], "time_limit" in hold) == (True, 1001, False)
    assert (release["release"], release["nice"]) == (True, 10)


def test_job_submit_accepts_when_the_spool_is_gone_and_refuses_for_a_broken_policy(
        scripts: dict[str, Path], tmp_path: Path) -> None:
    (tmp_path / "spool").rmdir()
    run_lua(STAND_IN, dofile(scripts["job_submit.lua"]),
            'assert(slurm_job_submit({name = "ok"}, {}, 1) == slurm.SUCCESS)\n'
            'assert(slurm_job_submit({name = "bad"}, {}, 1) == slurm.ERROR)\n')
    (tmp_path / "site.lua").write_text("this is not lua")
    run_lua(STAND_IN, dofile(scripts["job_submit.lua"]),
            'assert(slurm_job_submit({name = "ok"}, {}, 1) == slurm.ERROR)\n')


def test_without_a_site_policy_everything_is_accepted(scripts: dict[str, Path],
                                                      tmp_path: Path) -> None:
    (tmp_path / "site.lua").unlink()
    run_lua(STAND_IN, dofile(scripts["job_submit.lua"]),
            'assert(slurm_job_submit({name = "bad"}, {}, 1) == slurm.SUCCESS)\n')
    assert not (tmp_path / "spool" / "slurmctld.log").exists()


def test_ingester_spools_trusted_lines_keyed_by_job(edge_cfg: Config, tmp_path: Path,
                                                    read_spool) -> None:
    spool = tmp_path / "submit"
    runtime = EdgeRuntime(edge_cfg, "slurm")
    ingester = SubmitSpoolIngester(runtime, spool, 1.0, settle_s=0)
    try:
        ingester.prepare()
        assert spool.stat().st_mode & 0o7777 == 0o1733
        me = os.getuid()
        mine = json.dumps({"kind": "submit", "time": 1780000000, "job_id": 7, "uid": me})
        other = json.dumps({"kind": "submit", "time": 1780000000, "job_id": 8, "uid": me + 1})
        (spool / f"{me}.log").write_text(f"{mine}\n{other}\n")
        # a file named for another uid than its owner's: somebody else's words
        (spool / f"{me + 1}.log").write_text(other + "\n")
        ctld = json.dumps({"kind": "modify", "time": 1780000001, "job_id": 7, "uid": 5,
                           "time_limit": 3})
        (spool / "slurmctld.log").write_text(ctld + "\n" + "not json\n")
        assert ingester.scan() == 3
        assert ingester.untrusted == 2
        recs = read_spool(runtime.spool)
    finally:
        runtime.spool.close()
    assert not list(spool.iterdir())
    got = sorted(((k, r.payload) for k, r in recs), key=repr)
    assert got == sorted([(b"testcluster:7", mine.encode()), (b"testcluster:7", ctld.encode()),
                          (None, b"not json")], key=repr)
    assert {r.format for _, r in recs} == {"slurm-submit-plugin"}


def test_ingester_takes_leftovers_of_a_crash_at_start(edge_cfg: Config, tmp_path: Path,
                                                      read_spool) -> None:
    spool = tmp_path / "submit"
    spool.mkdir()
    line = json.dumps({"kind": "submit", "time": 1780000000, "job_id": 9, "uid": os.getuid()})
    (spool / f"{os.getuid()}.log.123.taken").write_text(line + "\n")
    runtime = EdgeRuntime(edge_cfg, "slurm")
    try:
        assert SubmitSpoolIngester(runtime, spool, 1.0, settle_s=0).scan() == 1
        assert [r.payload for _, r in read_spool(runtime.spool)] == [line.encode()]
    finally:
        runtime.spool.close()


def test_the_edge_runs_the_ingester_when_configured(edge_cfg: Config, tmp_path: Path) -> None:
    from pipeline.edges.slurm import SlurmEdge

    spool = tmp_path / "submit"
    off = {"receiver": False, "hooks": False, "poller": False, "nodes": False}
    assert SlurmEdge(edge_cfg.replace(edge={"slurm": off})).submits is None
    cfg = edge_cfg.replace(edge={"slurm": {**off, "submit_plugins": True,
                                           "submit_spool_dir": str(spool)}})
    e = SlurmEdge(cfg).start()
    try:
        assert e.components == [e.submits]
        assert spool.stat().st_mode & 0o7777 == 0o1733
    finally:
        e.stop(timeout=0)
