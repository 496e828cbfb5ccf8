"""Studies without a server: the run-time estimate, the shipped configs, the time limit, ceiling points,
publishing (complete runs only) and combining (same code and topology unless --mix)."""

import json
from pathlib import Path

import pandas as pd
import pytest
import yaml
from typer.testing import CliRunner

from workbench.bench.loaders import raw_ceiling_loader
from workbench.bench.study import (
    PLANNING,
    STUDIES,
    Study,
    check_time,
    combine,
    estimate_seconds,
    find_study,
    list_studies,
    prepare_seconds,
    publish,
)
from workbench.bench.sweep_ceilings import CEILING_AXES, ceiling_depth, ceiling_points
from workbench.bench.sweep_config import load_sweep_config
from workbench.cli_study import app
from workbench.errors import WorkbenchError
from workbench.results import PROGRESS_FILE

ROOT = Path(__file__).parents[2]
ONE = {"name": "one", "loaders": ["s3-objects"], "data": {"count": 1000}, "network": {"rtt_ms": [0]},
       "loader": {"concurrency": [8]}, "epochs": 2, "repetitions": 3, "warmup_batches": 0,
       "max_seconds_per_epoch": 10}


def test_estimate_is_the_grid_times_each_points_predicted_time():
    cfg = load_sweep_config(ONE)
    prepare = 1000 / PLANNING.ingest_samples_per_s  # one layout
    epoch = PLANNING.epoch_overhead_s + 1000 / PLANNING.samples_per_s  # 0 ms: the nominal rate binds
    assert prepare_seconds(cfg, cfg.points()) == pytest.approx(prepare)
    assert estimate_seconds(cfg) == pytest.approx(prepare + 3 * 2 * epoch)
    # at 100 ms with 8 in flight Little's law allows 80 samples/s: 12.5 s, cut at max_seconds_per_epoch
    slow = load_sweep_config({**ONE, "network": {"rtt_ms": [100]}})
    slow_epoch = PLANNING.epoch_overhead_s + PLANNING.round_trips_to_start * 0.1 + 10
    assert estimate_seconds(slow) == pytest.approx(prepare + 3 * 2 * slow_epoch)
    # a ceiling reads the whole dataset once per repetition
    with_ceilings = load_sweep_config({**ONE, "ceilings": True})
    ceiling = PLANNING.ceiling_start_s + 1000 / PLANNING.ceiling_samples_per_s
    assert estimate_seconds(with_ceilings) == pytest.approx(estimate_seconds(cfg) + 3 * ceiling)


def test_estimate_follows_bandwidth_compute_and_workers():
    base = estimate_seconds(load_sweep_config(ONE))
    for change in ({"network": {"rtt_ms": [0], "bandwidth_mbps": [10]}},  # 10 Mbit/s: ~11 samples/s
                   {"compute": {"ms_per_batch": [1000]}},  # one batch of 32 per second
                   {"loader": {"concurrency": [8], "workers": [2]}}):  # worker processes start every epoch
        assert estimate_seconds(load_sweep_config({**ONE, **change})) > base, change


def test_shipped_studies_answer_a_question_within_20_minutes():
    studies = list_studies(ROOT / STUDIES)
    assert {s.name for s in studies} >= {"latency-hiding", "long-fat-network", "shard-size", "workers-batch",
                                         "accelerators"}
    for study in studies:
        assert study.config.question.endswith("?"), study.name
        assert study.minutes <= 20, f"{study.name}: {study.minutes:.1f} min"
        assert study.path.stem == study.name
    accelerators = next(s for s in studies if s.name == "accelerators")
    assert accelerators.config.compute.accelerators == [1, 2, 4, 8]
    network = find_study(str(ROOT / "notebooks" / "sweeps" / "network.yaml"))
    assert network.minutes > 20 * 60  # the big-machine grid: hours here


def test_a_study_over_the_limit_needs_yes(tmp_path):
    study = Study(tmp_path / "s.yaml", load_sweep_config({**ONE, "network": {"rtt_ms": [100]}}))
    with pytest.raises(WorkbenchError, match=r"estimated at \d+ minutes, over the 1-minute limit: add --yes"):
        check_time(study, 1, yes=False)
    check_time(study, 1, yes=True)
    check_time(study, 60, yes=False)


def test_find_study_by_name_or_path(tmp_path):
    (tmp_path / "mine.yaml").write_text(json.dumps(ONE))
    assert find_study("mine", tmp_path).name == "one"
    assert find_study(str(tmp_path / "mine.yaml")).config.repetitions == 3
    with pytest.raises(WorkbenchError, match=r"no study 'nope' in .* \(studies: mine\)"):
        find_study("nope", tmp_path)


def test_ceiling_points_one_per_backend_layout_network_and_concurrency():
    cfg = load_sweep_config({"name": "c", "loaders": ["s3-shards", "webdataset", "s3-objects"],
                             "network": {"rtt_ms": [0, 50]}, "layout": {"shard_maxcount": [20, 200]},
                             "loader": {"concurrency": [8, "auto"], "batch_size": [16, 64]},
                             "compute": {"ms_per_batch": [10], "accelerators": [1, 2]}})
    ceilings = ceiling_points(cfg.points())
    shards = [c for c in ceilings if c.loader == "ceiling:s3-shards"]
    objects = [c for c in ceilings if c.loader == "ceiling:s3-objects"]
    assert len(shards) == 2 * 2 * 2 and len(objects) == 2 * 2  # rtt x concurrency (x maxcount for shards)
    assert all(c.batch_size is None and c.accelerators is None and c.compute_ms is None for c in ceilings)
    assert set(CEILING_AXES) == {"rtt_ms", "bandwidth_mbps", "shard_maxcount", "shard_maxsize", "concurrency"}
    auto = next(c for c in objects if c.concurrency == "auto" and c.rtt_ms == 50)
    row = {"status": "ok", "backend": "s3-objects", "loader": "s3-objects", **auto.as_row()}
    rows = [{**row, "loader": "s3-objects", "window": 48}, {**row, "loader": "s3torchconnector", "window": 96},
            {**row, "rtt_ms": 0.0, "window": 500}, {**row, "status": "error", "window": 700}]
    assert ceiling_depth(auto, rows) == 96  # the widest window at the same point, failed runs left out
    assert ceiling_depth(auto, []) == 32  # none recorded: the reference depth
    assert ceiling_depth(next(c for c in objects if c.concurrency == 8), rows) == 8
    assert raw_ceiling_loader("cassandra") == "cassandra"  # the namesake's loop (acsylla) before cassandra-py's


def run_folder(path: Path, complete: bool | None = True, commit="abc123", nodes=1) -> Path:
    path.mkdir(parents=True)
    pd.DataFrame([{"sweep": path.name, "point_id": i, "loader": "fs", "backend": "fs", "rtt_ms": 0.0,
                   "concurrency": 8, "samples_per_s": 100.0 + i, "status": "ok", "git_commit": commit,
                   "topology_cassandra_nodes": nodes} for i in range(2)]).to_parquet(path / "runs.parquet")
    (path / "config.json").write_text(json.dumps({"name": path.name, "question": f"{path.name}?"}))
    (path / "environment.json").write_text("{}")
    if complete is not None:
        (path / PROGRESS_FILE).write_text(json.dumps({"runs_done": 2 if complete else 1, "runs_total": 2,
                                                     "complete": complete}))
    (path / "report").mkdir()
    (path / "report" / "report.html").write_text("<html></html>")
    return path


def test_publish_copies_complete_runs_only(tmp_path):
    with pytest.raises(WorkbenchError, match=r"not a complete run \(1 of 2 runs\)"):
        publish(run_folder(tmp_path / "half", complete=False), root=tmp_path / "studies")
    with pytest.raises(WorkbenchError, match=r"not a complete run \(no progress.json\)"):
        publish(run_folder(tmp_path / "unknown", complete=None), root=tmp_path / "studies")
    assert not (tmp_path / "studies" / "half").exists()
    target = publish(run_folder(tmp_path / "whole"), root=tmp_path / "studies")
    assert target == tmp_path / "studies" / "whole"
    assert {p.name for p in target.iterdir()} >= {"runs.parquet", "config.json", PROGRESS_FILE, "report"}
    assert (target / "report" / "report.html").exists()
    with pytest.raises(WorkbenchError, match="exists: add --replace"):
        publish(tmp_path / "whole", root=tmp_path / "studies")
    assert publish(tmp_path / "whole", name="renamed", root=tmp_path / "studies").name == "renamed"
    assert not (tmp_path / "studies" / "renamed" / "spec.yaml").exists()  # a run made before specs has none
    publish(tmp_path / "whole", root=tmp_path / "studies", replace=True)
    assert not [p for p in (tmp_path / "studies").iterdir() if p.name.startswith(".")]  # no staging left


def test_a_published_spec_remakes_the_published_folder_itself(tmp_path):
    from workbench.experiments import load_spec

    run = run_folder(tmp_path / "whole")
    (run / "spec.yaml").write_text(yaml.safe_dump({"kind": "sweep", "results_dir": str(tmp_path / "runs"),
                                                   "sweep": {"name": "whole", "loaders": ["fs"]}}))
    target = publish(run, name="renamed", root=tmp_path / "studies")
    spec = load_spec(target / "spec.yaml")
    assert (spec.results_dir, spec.sweep.name, spec.sweep.loaders) == (tmp_path / "studies", "renamed", ["fs"])
    assert load_spec(run / "spec.yaml").results_dir == tmp_path / "runs"  # the run's own is left as it was


def test_combine_refuses_other_code_or_topology_unless_mixed(tmp_path):
    a, b = run_folder(tmp_path / "a"), run_folder(tmp_path / "b")
    other_commit, other_nodes = run_folder(tmp_path / "c", commit="def456"), run_folder(tmp_path / "d", nodes=3)
    with pytest.raises(WorkbenchError, match=r"git_commit: .*abc123.*def456.*add --mix"):
        combine([a, other_commit], tmp_path / "out")
    with pytest.raises(WorkbenchError, match=r"topology_cassandra_nodes: .*1.*3"):
        combine([a, other_nodes], tmp_path / "out")
    with pytest.raises(WorkbenchError, match="not a complete run"):
        combine([a, run_folder(tmp_path / "e", complete=False)], tmp_path / "out")
    out = combine([a, b], tmp_path / "out")
    runs = pd.read_parquet(out / "runs.parquet")
    assert len(runs) == 4 and sorted(runs.point_id) == [0, 1, 2, 3]
    assert set(runs.source_run) == {str(a), str(b)}
    assert json.loads((out / PROGRESS_FILE).read_text())["complete"] is True
    assert json.loads((out / "config.json").read_text())["question"] == "a?; b?"
    mixed = combine([a, other_commit], tmp_path / "mixed", mix=True)
    assert json.loads((mixed / "config.json").read_text())["mixed"] is True


def test_cli_list_run_refusal_and_publish_refusal(tmp_path):
    runner = CliRunner()
    (tmp_path / "slow.yaml").write_text(json.dumps({**ONE, "question": "Slow?", "network": {"rtt_ms": [100]}}))
    listed = runner.invoke(app, ["list", "--folder", str(tmp_path)], env={"COLUMNS": "200"})
    assert listed.exit_code == 0 and "Slow?" in listed.output and "one" in listed.output
    refused = runner.invoke(app, ["run", "slow", "--folder", str(tmp_path), "--max-minutes", "1",
                                  "--out", str(tmp_path / "runs")])
    assert "estimated" in refused.output
    assert isinstance(refused.exception, WorkbenchError) and "--yes" in str(refused.exception)
    assert not (tmp_path / "runs").exists()  # refused before anything ran or was written
    incomplete = runner.invoke(app, ["publish", str(run_folder(tmp_path / "half", complete=False)),
                                     "--root", str(tmp_path / "studies")])
    assert isinstance(incomplete.exception, WorkbenchError) and "not a complete run" in str(incomplete.exception)
