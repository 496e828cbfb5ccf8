"""A committed result is stale once a commit touches the code it measures (report/staleness.py): counted in a
real git repository made here, shown on the index and by `workbench results stale`."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from workbench.report.index import build_index
from workbench.report.staleness import Staleness, stale_results, staleness


def _git(repo: Path, *args: str) -> str:
    done = subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True, text=True, timeout=30)
    return done.stdout.strip()


def _commit(repo: Path, path: str, text: str) -> str:
    (repo / path).parent.mkdir(parents=True, exist_ok=True)
    (repo / path).write_text(text)
    _git(repo, "add", path)
    _git(repo, "commit", "-q", "-m", f"change {path}")
    return _git(repo, "rev-parse", "--short", "HEAD")


def _result(repo: Path, name: str, commit: str) -> Path:
    folder = repo / "results" / "studies" / name
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "environment.json").write_text(json.dumps({"git_commit": commit, "python": "3.11"}))
    return folder


@pytest.fixture
def repo(tmp_path):
    _git(tmp_path, "init", "-q")
    _git(tmp_path, "config", "user.email", "t@example.invalid")
    _git(tmp_path, "config", "user.name", "t")
    return tmp_path


def test_a_result_is_current_until_a_commit_touches_its_code_and_then_says_how_many(repo):
    made = _commit(repo, "workbench/loaders/a.py", "x = 1\n")
    folder = _result(repo, "s", made)
    assert not staleness(folder, repo / "results").stale
    assert staleness(folder, repo / "results").describe().startswith(f"current: made on {made} (")
    _commit(repo, "README.md", "docs only\n")  # not measured code
    assert staleness(folder, repo / "results").commits_since == 0
    _commit(repo, "workbench/loaders/a.py", "x = 2\n")
    _commit(repo, "native/src/lib.rs", "// faster\n")
    standing = staleness(folder, repo / "results")
    assert (standing.stale, standing.commits_since) == (True, 2)
    assert standing.describe().endswith("; 2 commits touching its code since")


def test_dirty_unknown_and_foreign_commits_are_stale_and_a_kept_folder_says_why(repo):
    made = _commit(repo, "workbench/bench/b.py", "y = 1\n")
    dirty = _result(repo, "dirty", f"{made}-dirty")
    unknown = _result(repo, "unknown", "unknown")
    foreign = _result(repo, "foreign", "0123abc")
    assert staleness(dirty, repo).describe() == (f"made on {made} from a dirty tree "
                                                 f"({staleness(dirty, repo).date}); 0 commits touching its code since")
    assert staleness(unknown, repo).describe() == "no commit recorded: made by an older workbench"
    assert staleness(foreign, repo).describe() == "made on 0123abc, a commit this history lacks"
    (foreign / "KEPT").write_text("GPU results need a lent machine\n")
    assert staleness(foreign, repo).describe().endswith("; kept: GPU results need a lent machine")
    assert sorted(s.folder.name for s in stale_results(repo / "results", repo)) == ["dirty", "foreign", "unknown"]


def test_the_freshest_of_several_runs_in_a_folder_counts(repo):
    old = _commit(repo, "workbench/storage/s.py", "1\n")
    new = _commit(repo, "workbench/storage/s.py", "2\n")
    folder = _result(repo, "two", old)
    (folder / "runs.csv").write_text(f"point,git_commit\n1,{new}\n")
    assert staleness(folder, repo) == Staleness(folder, new, False, staleness(folder, repo).date, 0, "")


def test_the_index_shows_each_result_standing(repo):
    made = _commit(repo, "workbench/clients/c.py", "1\n")
    _result(repo, "fresh", made)
    _commit(repo, "workbench/clients/c.py", "2\n")
    _result(repo, "fresher", _git(repo, "rev-parse", "--short", "HEAD"))
    page = build_index(repo / "results").read_text()
    assert f"made on {made}" in page and "1 commit touching its code since" in page
    assert "current: made on" in page
