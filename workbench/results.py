"""Write result rows atomically, each carrying its full configuration and environment.

A results file appears complete or not at all (write to a temporary name, then rename), and a
folder that cannot be written is reported before any measurement starts.
"""

from __future__ import annotations

import csv
import io
import json
import os
import time
from collections.abc import Callable
from pathlib import Path

from workbench.errors import WorkbenchError

PROGRESS_FILE = "progress.json"  # a sweep's {"runs_done", "runs_total", "complete"}
# Where a user's runs go by default: git-ignored, so a run never rewrites the committed reference results
# (results/<study>/). Committing a run as a reference is an explicit step: copy its folder there.
RUNS = Path("results") / "runs"
SPEC_FILE = "spec.yaml"  # the experiment spec a result folder was made from (workbench/experiments), beside it


def check_writable(folder: Path) -> Path:
    """Fail early, with the path, if results could not be saved there."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
        probe = folder / f".write-test-{os.getpid()}"
        probe.write_text("ok")
        probe.unlink()
    except OSError as exc:
        raise WorkbenchError(f"cannot write results to {folder}: {exc.strerror}; choose another --results-dir") from exc
    return folder


def write_atomically(path: Path, write: Callable[[Path], object]) -> Path:
    """`write(tmp)` then rename to `path`: the file is complete or absent, never half-written.

    A full or read-only disk (any OSError) removes the temporary file and becomes one clear error
    naming the path, instead of a traceback and a truncated result.
    """
    tmp = path.with_name(f".{path.name}.tmp")
    try:
        write(tmp)
        tmp.replace(path)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise WorkbenchError(
            f"cannot write results to {path}: {exc.strerror or exc}; free space or choose another --results-dir"
        ) from exc
    return path


def _atomic_write(path: Path, data: str) -> None:
    write_atomically(path, lambda tmp: tmp.write_text(data, encoding="utf-8"))


def _flat(row: dict, prefix: str = "") -> dict:
    """Nested dicts become dotted columns, so every row is one tidy CSV line."""
    out = {}
    for key, value in row.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            out.update(_flat(value, f"{name}."))
        elif isinstance(value, list | tuple):
            out[name] = json.dumps(value, default=str)
        else:
            out[name] = value
    return out


def write_results(folder: Path, name: str, rows: list[dict], environment: dict) -> tuple[Path, Path]:
    """`<name>.json` (rows + environment) and `<name>.csv` (flat rows with the environment columns)."""
    check_writable(folder)
    full = [{**row, "environment": environment} for row in rows]
    json_path, csv_path = folder / f"{name}.json", folder / f"{name}.csv"
    _atomic_write(json_path, json.dumps({"written": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "rows": full},
                                        indent=2, default=str))
    flat = [_flat(row) for row in full]
    columns = list(dict.fromkeys(key for row in flat for key in row))
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=columns)
    writer.writeheader()
    writer.writerows(flat)
    _atomic_write(csv_path, buffer.getvalue())
    return json_path, csv_path
