"""The crash guard, with real processes that die (``os._exit``, SIGKILL, an uncaught
exception) while handling a coordinate: the file they leave is what the next process
reads. No fsync is involved: the kernel keeps a dead process's dirty pages."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from pipeline.runtime.crashguard import CrashGuard, Death, GuardBusyError

CHILD = textwrap.dedent("""
    import json, os, signal, sys
    from pipeline.runtime.crashguard import CrashGuard

    path, how, coord, *others = sys.argv[1:]
    guard = CrashGuard(path, threshold=2)
    last = guard.last_death
    print(json.dumps({
        "poisoned": guard.poisoned(coord), "deaths": guard.deaths(coord),
        "others": {o: guard.poisoned(o) for o in others},
        "last": None if last is None else [last.coord, last.deaths],
        "pid": os.getpid()}), flush=True)
    if how == "exit":          # os._exit: no cleanup of any kind
        guard.begin(coord)
        os._exit(3)
    if how == "kill":          # what the OOM killer does
        with guard.handling(coord):
            os.kill(os.getpid(), signal.SIGKILL)
    if how == "raise":         # a bug: an exception nothing catches
        with guard.handling(coord):
            raise RuntimeError("a bug")
    if how == "survive-then-exit":   # handles coord, then dies between records
        with guard.handling(coord):
            pass
        os._exit(4)
    if how == "idle-exit":     # dies between records, having handled nothing
        os._exit(5)
    if how == "clean":
        with guard.handling(coord):
            pass
        guard.close()
""")

COORD = "hpc.jobs.state[3]@1234"


def child(path: Path, how: str, coord: str = COORD, *others: str) -> dict[str, Any]:
    proc = subprocess.run([sys.executable, "-c", CHILD, str(path), how, coord, *others],
                          capture_output=True, text=True, timeout=60,
                          cwd=Path(__file__).resolve().parents[2])
    if how == "kill":
        assert proc.returncode == -signal.SIGKILL, proc.stderr
    elif how == "clean" or how == "report":
        assert proc.returncode == 0, proc.stderr
    else:
        assert proc.returncode != 0, proc.stderr
    return json.loads(proc.stdout.splitlines()[0])


def test_two_deaths_at_one_coordinate_poison_it_for_the_third_run(tmp_path: Path) -> None:
    path = tmp_path / "sink.crashguard"
    assert child(path, "kill")["deaths"] == 0
    second = child(path, "exit")
    assert second["deaths"] == 1 and not second["poisoned"]  # one death may be innocent
    third = child(path, "report", COORD, "hpc.jobs.state[3]@1235", "other")
    assert third["poisoned"] and third["deaths"] == 2
    assert third["last"] == [COORD, 2]
    assert third["others"] == {"hpc.jobs.state[3]@1235": False, "other": False}


def test_a_clean_run_resets_it(tmp_path: Path) -> None:
    path = tmp_path / "g"
    child(path, "kill")
    child(path, "kill")
    assert child(path, "clean", "elsewhere")["poisoned"] is False
    after = child(path, "report")
    assert after["deaths"] == 0 and after["last"] is None


def test_an_uncaught_exception_is_a_death(tmp_path: Path) -> None:
    path = tmp_path / "g"
    child(path, "raise")
    child(path, "raise")
    assert child(path, "report")["poisoned"]


def test_deaths_count_only_when_consecutive_at_the_same_coordinate(tmp_path: Path) -> None:
    path = tmp_path / "g"
    child(path, "kill", "a")
    child(path, "kill", "b")  # died elsewhere: a is forgiven
    report = child(path, "report", "b", "a")
    assert report["deaths"] == 1 and report["others"] == {"a": False}


def test_handling_the_coordinate_and_surviving_forgives_it(tmp_path: Path) -> None:
    path = tmp_path / "g"
    child(path, "kill")
    child(path, "survive-then-exit")  # it got past the coordinate, then died
    assert child(path, "report")["deaths"] == 0


def test_a_death_between_coordinates_says_nothing_about_them(tmp_path: Path) -> None:
    path = tmp_path / "g"
    child(path, "kill")
    child(path, "idle-exit")  # died before it reached the coordinate again
    child(path, "kill")
    assert child(path, "report")["poisoned"]


# -- in-process: the API's other promises -------------------------------------------------

def test_a_second_process_cannot_hold_the_same_file(tmp_path: Path) -> None:
    path = tmp_path / "g"
    with CrashGuard(path):
        with pytest.raises(GuardBusyError):
            CrashGuard(path)


def test_claim_takes_the_next_free_slot(tmp_path: Path) -> None:
    first = CrashGuard.claim(tmp_path / "state", "sink-group")
    second = CrashGuard.claim(tmp_path / "state", "sink-group")
    try:
        assert first.path is not None and second.path is not None
        assert first.path.name == "sink-group.crashguard"
        assert second.path.name == "sink-group.1.crashguard"
    finally:
        first.close()
        second.close()
    again = CrashGuard.claim(tmp_path / "state", "sink-group")
    assert again.path == first.path
    again.close()


def test_tuples_are_coordinates_too(tmp_path: Path) -> None:
    path = tmp_path / "g"
    guard = CrashGuard(path)
    guard.begin(("hpc.jobs.state", 3, 1234))
    guard.close(clean=False)  # as a death would leave it
    guard = CrashGuard(path, threshold=1)
    assert guard.poisoned(("hpc.jobs.state", 3, 1234)) and guard.poisoned(COORD)
    assert guard.last_death == Death(COORD, 1)
    guard.close()


def test_a_coordinate_too_long_for_the_file_is_kept_as_its_hash(tmp_path: Path) -> None:
    path = tmp_path / "g"
    long = "x" * 100_000
    guard = CrashGuard(path)
    guard.begin(long)
    guard.close(clean=False)
    guard = CrashGuard(path, threshold=1)
    assert guard.poisoned(long) and not guard.poisoned("x" * 99_999)
    assert guard.last_death is not None and len(guard.last_death.coord) < 100
    guard.close()


def test_a_damaged_file_is_started_afresh(tmp_path: Path) -> None:
    path = tmp_path / "g"
    path.write_bytes(b"not a guard file")
    guard = CrashGuard(path)
    assert guard.last_death is None
    guard.close()
    assert path.stat().st_size == CrashGuard.SIZE


def test_the_file_is_fixed_size_and_written_in_place(tmp_path: Path) -> None:
    path = tmp_path / "g"
    guard = CrashGuard(path)
    inode = path.stat().st_ino
    for n in range(1000):
        with guard.handling(("t", 0, n)):
            pass
    assert path.stat().st_size == CrashGuard.SIZE and path.stat().st_ino == inode
    guard.close()


def test_innocent_exceptions_end_the_coordinate(tmp_path: Path) -> None:
    path = tmp_path / "g"
    guard = CrashGuard(path, innocent=(LookupError,))
    with pytest.raises(KeyError):
        with guard.handling("c"):
            raise KeyError("the application's own, deliberate error")
    guard.close(clean=False)
    guard = CrashGuard(path)
    assert guard.last_death is None
    guard.close()


def test_an_in_memory_guard_for_when_no_file_can_be_written() -> None:
    guard = CrashGuard(None)
    with guard.handling("c"):
        pass
    assert guard.path is None and guard.last_death is None
    guard.close()


def test_closing_twice_is_harmless(tmp_path: Path) -> None:
    guard = CrashGuard(tmp_path / "g")
    guard.close()
    guard.close(clean=False)
    assert os.path.exists(tmp_path / "g")
