"""A tiny grid against the real stack: the expected rows, and a failing point that does not stop it."""

import json
import os

import pandas as pd
import pytest

from workbench.bench.sweep import run_sweep
from workbench.bench.sweep_config import load_sweep_config
from workbench.errors import WorkbenchError
from workbench.results import check_writable

pytestmark = [pytest.mark.services, pytest.mark.slow]


def test_tiny_grid_yields_expected_rows_and_records_failures(stack, tmp_path):
    cfg = load_sweep_config({
        "name": "tiny", "loaders": ["s3-objects", "cassandra-plugin"], "data": {"count": 24, "mean_kb": 8, "seed": 9},
        "network": {"rtt_ms": [0, 20]}, "loader": {"batch_size": [8]}, "compute": {"ms_per_batch": [0, 5]},
        "epochs": 2, "repetitions": 2, "warmup_batches": 0,
    })
    folder = run_sweep(stack, cfg, tmp_path, progress=False)
    runs = pd.read_parquet(folder / "runs.parquet")
    assert len(runs) == 2 * 2 * 2 * 2  # loaders x rtt x compute x repetitions
    ok = runs[runs.loader == "s3-objects"]
    assert (ok.status == "ok").all(), ok.error.tolist()
    assert (ok.samples == 24 * 2).all()  # two full epochs each
    assert (ok.samples_per_s > 0).all() and ok.batch_p99_ms.ge(ok.batch_p50_ms).all()
    slow, fast = ok[ok.rtt_ms == 20].samples_per_s.median(), ok[ok.rtt_ms == 0].samples_per_s.median()
    assert slow < fast
    with_compute = ok[ok.compute_ms == 5]
    assert with_compute.accelerator_utilisation.between(0, 1).all()
    assert len(json.loads(ok.iloc[0].batch_latencies_ms)) == 6  # 24 samples / 8 per batch x 2 epochs
    failed = runs[runs.loader == "cassandra-plugin"]
    assert (failed.status == "error").all() and failed.error.str.contains("not loadable here").all()
    assert {"git_commit", "servers", "packages", "cpu_model"} <= set(runs.columns)
    assert (folder / "runs.csv").exists() and json.loads((folder / "config.json").read_text())["name"] == "tiny"
    environment = json.loads((folder / "environment.json").read_text())
    assert environment["worker_start"] == stack.worker_start and environment["tls"] == stack.tls
    assert environment["servers"]  # versions read from the real servers


def test_unwritable_results_dir_is_reported_first(tmp_path):
    if os.geteuid() == 0:
        target = tmp_path / "file-not-dir"
        target.write_text("x")
        folder = target / "sweep"
    else:
        folder = tmp_path / "ro" / "sweep"
        (tmp_path / "ro").mkdir(mode=0o500)
    with pytest.raises(WorkbenchError, match="cannot write results to"):
        check_writable(folder)
