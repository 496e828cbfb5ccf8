"""Whether a committed result still measures the current code: the commit it was made on (recorded in its files'
`git_commit`), and how many commits since then touched the code it measures.

Why: a result made on older code is stale evidence; the index and `make lint` say so, so nobody reads an old number
as today's. A folder kept on purpose though stale (GPU results need a lent machine) holds a one-line `KEPT` file
saying why, and the index shows that reason.
"""

from __future__ import annotations

import csv
import json
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

# the code a measurement depends on: a commit touching any of these makes older results stale
# (workbench/concurrency.py: the package's one module before it was split, so older commits count too)
MEASURED_CODE = ("workbench/loaders", "workbench/backends", "workbench/layouts", "workbench/storage",
                 "workbench/clients", "workbench/bench", "workbench/concurrency", "workbench/concurrency.py",
                 "workbench/net", "workbench/adapters", "native", "ceilings")
KEPT_FILE = "KEPT"
UNKNOWN = "unknown"
GIT_TIMEOUT_S = 20


@dataclass(frozen=True)
class Staleness:
    """One result folder's standing against the current code."""

    folder: Path
    commit: str  # the short commit it was made on ("unknown": none recorded)
    dirty: bool  # made from a tree with uncommitted changes
    date: str  # the commit's date (YYYY-MM-DD), "" when git does not know the commit
    commits_since: int | None  # commits touching MEASURED_CODE since; None: not in this history
    kept_because: str  # the KEPT file's line ("" when there is none)

    @property
    def stale(self) -> bool:
        return self.dirty or self.commits_since != 0

    def describe(self) -> str:
        """One line for the index and `make lint`: fresh, or what makes it stale (and why it is kept)."""
        if self.commit == UNKNOWN:
            text = "no commit recorded: made by an older workbench"
        elif self.commits_since is None:
            text = f"made on {self.commit}, a commit this history lacks"
        else:
            made = f"made on {self.commit}{' from a dirty tree' if self.dirty else ''} ({self.date})"
            text = made if not self.stale else (
                f"{made}; {self.commits_since} commit{'s' if self.commits_since != 1 else ''} touching its code since")
        if self.stale and self.kept_because:
            text += f"; kept: {self.kept_because}"
        return text if self.stale else f"current: {text}"


def _commits_in(value) -> Iterator[str]:
    if isinstance(value, dict):
        for key, inner in value.items():
            if key == "git_commit" and isinstance(inner, str):
                yield inner
            else:
                yield from _commits_in(inner)
    elif isinstance(value, list):
        for inner in value:
            yield from _commits_in(inner)


def recorded_commits(folder: Path) -> list[str]:
    """Every `git_commit` its JSON files and CSV columns record (a folder may hold several runs)."""
    found: list[str] = []
    for path in sorted(folder.rglob("*")):
        if path.suffix == ".json" and path.is_file():
            try:
                found.extend(_commits_in(json.loads(path.read_text(encoding="utf-8"))))
            except (OSError, ValueError):
                continue
        elif path.suffix == ".csv" and path.is_file():
            with path.open(encoding="utf-8", newline="") as handle:
                found.extend(row["git_commit"] for row in csv.DictReader(handle) if row.get("git_commit"))
    return found


def _git(repo: Path, *args: str) -> str | None:
    try:
        done = subprocess.run(["git", *args], cwd=repo, capture_output=True, text=True, timeout=GIT_TIMEOUT_S,
                              check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout.strip() if done.returncode == 0 else None


def commits_since(repo: Path, commit: str, paths: tuple[str, ...] = MEASURED_CODE) -> int | None:
    """Commits after `commit` up to HEAD that touch `paths`; None when `commit` is not in this history."""
    if _git(repo, "cat-file", "-e", f"{commit}^{{commit}}") is None:
        return None
    count = _git(repo, "rev-list", "--count", f"{commit}..HEAD", "--", *(f":(top){path}" for path in paths))
    return int(count) if count is not None else None


def uncommitted_measured_code(repo: Path) -> list[str]:
    """The files of MEASURED_CODE with uncommitted changes (a result made now would measure no commit)."""
    status = _git(repo, "status", "--porcelain", "--", *(f":(top){path}" for path in MEASURED_CODE))
    return [line.split(maxsplit=1)[1] for line in (status or "").splitlines() if len(line.split(maxsplit=1)) == 2]


def staleness(folder: Path, repo: Path) -> Staleness:
    """The folder's freshest recorded run against HEAD of `repo`."""
    kept = folder / KEPT_FILE
    kept_because = kept.read_text(encoding="utf-8").strip().splitlines()[0] if kept.is_file() else ""
    best: Staleness | None = None
    for recorded in dict.fromkeys(recorded_commits(folder)):
        commit, dirty = recorded.removesuffix("-dirty"), recorded.endswith("-dirty")
        if commit == UNKNOWN:
            continue
        since = commits_since(repo, commit)
        date = (_git(repo, "show", "-s", "--format=%cs", commit) or "") if since is not None else ""
        candidate = Staleness(folder, commit, dirty, date, since, kept_because)
        if best is None or _rank(candidate) < _rank(best):
            best = candidate
    return best or Staleness(folder, UNKNOWN, False, "", None, kept_because)


def _rank(s: Staleness) -> tuple[int, int, bool]:
    return (s.commits_since is None, s.commits_since or 0, s.dirty)


def result_folders(root: Path) -> list[Path]:
    """The committed result folders under `root`: each study, and every other top-level folder."""
    folders: list[Path] = []
    for child in sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith((".", "_"))):
        if child.name == "runs":  # git-ignored user runs
            continue
        if child.name == "studies":
            folders.extend(sorted(p for p in child.iterdir() if p.is_dir()))
        else:
            folders.append(child)
    return folders


def stale_results(root: Path, repo: Path) -> list[Staleness]:
    """Every result folder under `root` that does not measure HEAD's code."""
    return [s for s in (staleness(f, repo) for f in result_folders(root)) if s.stale]
