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


def test_a_tiny_study_end_to_end(stack, tmp_path):
    """`study run` on a tiny study: two emulated accelerators at once, start-up apart from the steady rate,
    ceilings of both backends at each RTT through the same proxies, topology on every row, report, publish."""
    from typer.testing import CliRunner

    from workbench.cli_study import app

    study = tmp_path / "tiny-study.yaml"
    study.write_text(json.dumps({
        "name": "tiny-study", "question": "Does the study path work end to end?", "loaders": ["s3-objects", "fs"],
        "data": {"count": 96, "mean_kb": 8, "seed": 11}, "network": {"rtt_ms": [0, 20]},
        "loader": {"batch_size": [8], "concurrency": [4]}, "compute": {"ms_per_batch": [5], "accelerators": [1, 2]},
        "epochs": 1, "repetitions": 1, "warmup_batches": 1, "ceilings": True,
    }))
    runner = CliRunner()
    result = runner.invoke(app, ["run", str(study), "--yes", "--out", str(tmp_path / "runs")])
    assert result.exit_code == 0, f"{result.output}\n{result.exception!r}"
    folder = tmp_path / "runs" / "tiny-study"
    runs = pd.read_parquet(folder / "runs.parquet")
    assert (runs.status == "ok").all(), runs[runs.status != "ok"].error.tolist()
    loaders = runs[~runs.loader.str.startswith("ceiling:")]
    assert len(loaders) == 2 * 2 * 2  # loaders x rtt x accelerators
    assert (loaders.samples == 96).all()
    for row in loaders.itertuples():  # 12 batches: every accelerator gets the 2 steps AU needs (with 6, one
        # accelerator once took 5 of them and the other 1 in CI, an AU with no span: None)
        au = json.loads(row.au_per_accelerator)
        assert len(au) == row.accelerators and all(0 < a <= 1 for a in au)
        assert row.au_min <= row.au_mean <= 1 and row.accelerator_utilisation == row.au_mean
        assert 0 < row.startup_fraction < 1 and row.steady_samples_per_s > 0 and row.time_to_first_batch_s > 0
        assert (row.startup_note == "") == (row.startup_fraction < 0.05)
    ceilings = runs[runs.loader.str.startswith("ceiling:")]
    assert sorted(zip(ceilings.loader, ceilings.rtt_ms, strict=True)) == [
        ("ceiling:fs", 0.0), ("ceiling:fs", 20.0), ("ceiling:s3-objects", 0.0), ("ceiling:s3-objects", 20.0)]
    assert (ceilings.samples == 96).all() and ceilings.ceiling_program.str.startswith("go/").all()
    assert ceilings.accelerators.isna().all() and (ceilings.concurrency.astype(str) == "4").all()
    assert {f"topology_{k}" for k in stack.topology()} <= set(runs.columns)
    assert (runs.topology_cassandra_nodes == stack.cassandra_nodes).all()
    assert json.loads((folder / "progress.json").read_text())["complete"] is True
    assert (folder / "report" / "report.html").exists()
    published = runner.invoke(app, ["publish", str(folder), "--root", str(tmp_path / "studies")])
    assert published.exit_code == 0, repr(published.exception)
    assert (tmp_path / "studies" / "tiny-study" / "report" / "report.html").exists()
    from workbench.experiments import load_spec  # the run's spec, and the published one that remakes it in place

    assert load_spec(folder / "spec.yaml").sweep == load_sweep_config(study)
    remakes = load_spec(tmp_path / "studies" / "tiny-study" / "spec.yaml")
    assert remakes.results_dir == tmp_path / "studies" and remakes.sweep.name == "tiny-study"


def test_worker_and_decode_points_read_every_sample(stack, tmp_path):
    """DataLoader workers (batches in shared memory) and decoding points count each sample once per epoch."""
    cfg = load_sweep_config({
        "name": "workers", "loaders": ["s3-shards"], "data": {"count": 24, "mean_kb": 8, "seed": 9},
        "network": {"rtt_ms": [0]}, "layout": {"shard_maxcount": [6]},
        "loader": {"batch_size": [8], "workers": [0, 2], "decode": [False, True]},
        "epochs": 1, "repetitions": 1, "warmup_batches": 0,
    })
    runs = pd.read_parquet(run_sweep(stack, cfg, tmp_path, progress=False) / "runs.parquet")
    assert len(runs) == 4 and (runs.status == "ok").all(), runs.error.tolist()
    assert (runs.samples == 24).all()
    decoded = runs[runs.decode]
    assert (decoded.bytes == 24 * 3 * 224 * 224).all()  # decoded CHW uint8 images, not the encoded bytes
