"""The unit and property suites pass in a clone with nothing beside it.

A user's first ``./run test tests/unit tests/property`` runs in a fresh clone without
``../shared``: the tests must find the project's own records inside the repository
(``tests/data/vectors``), skip those that need other projects' files, and fail under
``CI=true`` instead of skipping (CI always has ``../shared`` beside the clone).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from datafiles import REPO

# A quoted absolute path that ends in a folder named shared, as /work/shared or /home/x/shared.
ABSOLUTE_SHARED = re.compile(r"""['"]/[A-Za-z0-9_.-]+(/[A-Za-z0-9_.-]+)*/shared\b""")
THIS = Path(__file__).relative_to(REPO).as_posix()


def _tracked_files() -> list[str]:
    """The files a clone would have: tracked, plus new ones not yet committed."""
    out = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z"],
                         cwd=REPO, capture_output=True, check=True).stdout
    return [name for name in out.decode().split("\0") if name and os.path.lexists(REPO / name)]


@pytest.fixture(scope="module")
def lone_clone(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of the repository's files in a folder of its own: no ``../shared`` beside it."""
    if shutil.which("git") is None or not (REPO / ".git").exists():
        pytest.skip("not a git checkout")
    clone = tmp_path_factory.mktemp("lone") / "jobstream"
    for name in _tracked_files():
        target = clone / name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO / name, target, follow_symlinks=False)  # pipeline/_schemas
    assert not (clone.parent / "shared").exists()
    return clone


def _pytest(clone: Path, *args: str, ci: bool) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "CI"}
    if ci:
        env["CI"] = "true"
    # the clone's own package, not the one the venv installed in editable mode
    env["PYTHONPATH"] = str(clone)
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                           "-o", "addopts=-rs", *args],
                          cwd=clone, env=env, capture_output=True, text=True, timeout=1200)


def test_no_absolute_path_of_the_shared_folder() -> None:
    found = []
    for name in _tracked_files():
        code = name.endswith((".py", ".sh", ".toml", ".cfg", ".ini")) or name in ("run", ".ci/run")
        if not code or (REPO / name).is_symlink():
            continue
        for n, line in enumerate((REPO / name).read_text(errors="replace").splitlines(), 1):
            if ABSOLUTE_SHARED.search(line):
                found.append(f"{name}:{n}: {line.strip()}")
    assert found == [], "find ../shared relative to the repository root (tests/datafiles.py)"


#: how a module names ../shared: the helper that finds it, or the folder's name
NAMES_SHARED = re.compile(r"\bdatafiles\b|\bSHARED\b|\.\./shared")


def _modules_naming_shared(root: Path) -> list[str]:
    """The unit and property modules (and their subfolders') that name ../shared or the
    helper that finds it (tests/datafiles.py): the ones its absence can change. The others
    read only the repository (the product names no ../shared, checked below) and pass in
    every run of the suite: running all of them again here cost a third of its time."""
    return sorted(path.relative_to(root).as_posix()
                  for folder in ("tests/unit", "tests/property")
                  for path in (root / folder).rglob("test_*.py")
                  if path.relative_to(root).as_posix() != THIS
                  and NAMES_SHARED.search(path.read_text(errors="replace")))


def test_the_product_names_no_shared_folder() -> None:
    found = [f"{path.relative_to(REPO)}:{n}"
             for folder in ("pipeline", "agents") for path in (REPO / folder).rglob("*.py")
             for n, line in enumerate(path.read_text(errors="replace").splitlines(), 1)
             if re.search(r"""['"/]shared['"/]""", line)]
    assert found == [], "only tests may read ../shared"


def test_unit_and_property_suites_pass_without_shared(lone_clone: Path) -> None:
    modules = _modules_naming_shared(lone_clone)
    assert len(modules) >= 10, modules  # the selection finds the modules that use it
    run = _pytest(lone_clone, *modules, ci=False)
    assert run.returncode == 0, run.stdout[-6000:] + run.stderr[-3000:]
    assert " passed" in run.stdout.splitlines()[-1]
    # what was skipped, was skipped for want of ../shared, with the reason said
    skips = [ln for ln in run.stdout.splitlines() if ln.startswith("SKIPPED")]
    assert skips, "no test uses ../shared any more? then this test's premise changed"
    assert all("../shared" in ln for ln in skips), "\n".join(skips)


def test_under_ci_a_missing_shared_folder_fails(lone_clone: Path) -> None:
    run = _pytest(lone_clone, "tests/unit/test_fold.py", "-k", "rfc20", ci=True)
    assert run.returncode == 1, run.stdout[-3000:]
    assert "under CI ../shared must be beside the clone" in run.stdout
