"""Real ranks (torchrun, and mpirun where installed) on the filesystem backend, so no servers are needed:
exactly once across ranks of a two-split dataset, a wrong sharding caught, a killed, a stopped and a failing
rank each ending the run with one line that names it, and no process left behind."""

from __future__ import annotations

import json
import os
import shutil
import signal
import threading
import time
import uuid
from pathlib import Path

import pytest
from shared_sources import TwoSplits
from typer.testing import CliRunner

from workbench.backends.registry import make_backend
from workbench.bench.clients import run_clients
from workbench.bench.clients_rank import progress_file
from workbench.config import Settings, get_settings
from workbench.data import SyntheticSource
from workbench.errors import WorkbenchError
from workbench.ingest import ingest

pytestmark = pytest.mark.slow

N = 40


@pytest.fixture(scope="module")
def fs_dataset(tmp_path_factory):
    """(settings, loader config, train ids) of a 40-sample two-split dataset in a folder of its own."""
    tmp = tmp_path_factory.mktemp("clients-fs")
    settings = Settings(state_dir=tmp / "state")
    source = TwoSplits(SyntheticSource(N, mean_kb=4, name=f"clients-{uuid.uuid4().hex[:6]}"))
    root = tmp / "data"
    ingest(source, make_backend("fs", settings, source.name, root=root), progress=False)
    train = {str(s.id) for s in source if s.split == "train"}
    return settings, {"dataset": source.name, "root": str(root), "batch_size": 4}, train


def processes_mentioning(text: str) -> list[int]:
    """Pids whose command line contains `text` (each run's work folder is unique: its processes name it)."""
    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            if text.encode() in cmdline.read_bytes():
                found.append(int(cmdline.parent.name))
        except OSError:
            continue
    return found


def when_reading(work_dir: Path, rank: int, act) -> threading.Thread:
    """Call act(pid) once `rank` has read a sample (in a thread, while the run goes on)."""

    def wait() -> None:
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline:
            try:
                state = json.loads(progress_file(work_dir, rank).read_text())
            except (FileNotFoundError, ValueError):
                state = {}
            if state.get("state") == "reading" and state.get("samples", 0) >= 1:
                act(state["pid"])
                return
            time.sleep(0.1)

    thread = threading.Thread(target=wait, daemon=True)
    thread.start()
    return thread


def test_two_ranks_read_the_split_exactly_once(fs_dataset, tmp_path):
    settings, config, train = fs_dataset
    row = run_clients(settings, "fs", config, 2, compute_ms=5, work_dir=tmp_path / "work", progress=False)
    assert row["status"] == "ok" and row["exactly_once"], row["error"]
    assert (row["expected_samples"], row["samples"]) == (len(train), len(train))
    assert (row["missing"], row["duplicated"], row["unexpected"]) == (0, 0, 0)
    assert row["shards"] == [0, 1] and sum(row["rank_samples"]) == len(train)
    assert all(0 < u <= 1 for u in row["rank_accelerator_utilisation"])
    assert row["topology"]["client_ranks"] == 2 and row["topology"]["launcher"] == "torchrun"
    assert not processes_mentioning(str(tmp_path / "work"))


def test_two_ranks_on_shard_zero_fail_the_check(fs_dataset, tmp_path):
    settings, config, train = fs_dataset
    row = run_clients(settings, "fs", config, 2, shards=[0, 0], expected=train, progress=False)
    shard0 = row["rank_samples"][0]
    assert row["status"] == "error" and not row["exactly_once"]
    assert row["duplicated"] == shard0 and row["missing"] == len(train) - shard0
    assert row["error"].startswith(f"exactly-once check failed: {len(train) - shard0} missing, {shard0} duplicated")


def test_a_killed_rank_ends_the_run_naming_it(fs_dataset, tmp_path):
    settings, config, _ = fs_dataset
    work = tmp_path / "work"
    killer = when_reading(work, 1, lambda pid: os.kill(pid, signal.SIGKILL))
    with pytest.raises(WorkbenchError, match=r"^rank 1 \(pid \d+\) died without an error"):
        run_clients(settings, "fs", {**config, "batch_size": 1}, 2, compute_ms=500, work_dir=work, progress=False)
    killer.join(5)
    assert not processes_mentioning(str(work))


def test_a_stopped_rank_counts_as_hung(fs_dataset, tmp_path):
    settings, config, _ = fs_dataset
    work = tmp_path / "work"
    stopper = when_reading(work, 0, lambda pid: os.kill(pid, signal.SIGSTOP))
    with pytest.raises(WorkbenchError, match=r"^rank 0 read nothing for 5 s"):
        run_clients(settings, "fs", {**config, "batch_size": 1}, 2, compute_ms=200, stall_s=5, work_dir=work,
                    progress=False)
    stopper.join(5)
    assert not processes_mentioning(str(work))


def test_a_failing_rank_reports_its_error(fs_dataset, tmp_path):
    settings = fs_dataset[0]
    work = tmp_path / "work"
    with pytest.raises(WorkbenchError, match=r"^rank \d: .*never_ingested"):
        run_clients(settings, "fs", {"dataset": "never_ingested"}, 2, work_dir=work, progress=False)
    assert not processes_mentioning(str(work))


def test_bad_loader_settings_fail_before_any_rank_starts(fs_dataset):
    settings, config, _ = fs_dataset
    with pytest.raises(WorkbenchError, match="invalid fs loader setting 'no_such_knob'"):
        run_clients(settings, "fs", {**config, "no_such_knob": 1}, 2)
    with pytest.raises(WorkbenchError, match="every rank sets its own"):
        run_clients(settings, "fs", {**config, "shard_id": 1}, 2)


@pytest.mark.skipif(shutil.which("mpirun") is None, reason="mpirun is not installed (apt-get install -y openmpi-bin)")
def test_mpirun_ranks_read_exactly_once(fs_dataset, tmp_path):
    settings, config, train = fs_dataset
    row = run_clients(settings, "fs", config, 2, "mpirun", work_dir=tmp_path / "work", progress=False)
    assert row["status"] == "ok", row["error"]
    assert row["launcher"] == "mpirun" and row["samples"] == len(train)
    assert not processes_mentioning(str(tmp_path / "work"))


def test_the_command_line_runs_ranks_and_writes_results(tmp_path, monkeypatch):
    """`bench clients` on its own synthetic dataset (fs: no servers), results under --results-dir."""
    from workbench.cli_clients import app

    monkeypatch.setenv("WORKBENCH_STATE_DIR", str(tmp_path / "state"))
    get_settings.cache_clear()
    try:
        result = CliRunner().invoke(app, ["clients", "--loader", "fs", "--ranks", "2", "--count", "20",
                                          "--mean-kb", "2", "--batch-size", "4", "--compute-ms", "1",
                                          "--results-dir", str(tmp_path / "results")])
    finally:
        get_settings.cache_clear()
    assert result.exit_code == 0, result.output
    assert "exactly once: 20 reads of 20 samples" in result.output
    rows = json.loads(next((tmp_path / "results").glob("clients-fs-2r-*.json")).read_text())["rows"]
    assert rows[0]["status"] == "ok" and rows[0]["environment"]
    assert next((tmp_path / "results").glob("clients-fs-2r-*.csv")).read_text().count("\n") == 2


    from workbench.cli import app as workbench  # the spec the preset wrote, run again: the same row
    get_settings.cache_clear()
    try:
        again = CliRunner().invoke(workbench, ["run", str(tmp_path / "results" / "spec.yaml"),
                                               "-o", f"results_dir={tmp_path / 'again'}"])
    finally:
        get_settings.cache_clear()
    assert again.exit_code == 0, again.output
    [row] = json.loads(next((tmp_path / "again").glob("clients-fs-2r-*.json")).read_text())["rows"]
    assert row["status"] == "ok" and sorted(row) == sorted(rows[0]) and row["samples"] == rows[0]["samples"] == 20
