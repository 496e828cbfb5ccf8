import pytest

from workbench.bench.sweep_config import load_sweep_config
from workbench.errors import WorkbenchError

BASE = {"name": "t", "loaders": ["cassandra", "s3-shards"]}


def test_defaults_give_the_issue_network_grid():
    cfg = load_sweep_config(BASE)
    assert cfg.network.rtt_ms == [0, 1, 10, 50, 100]
    assert cfg.repetitions >= 3


def test_grid_varies_shard_layout_only_for_shard_loaders():
    cfg = load_sweep_config({**BASE, "network": {"rtt_ms": [0, 50]},
                             "layout": {"shard_maxcount": [10, 100], "shard_maxsize": [1e6]}})
    points = cfg.points()
    cassandra = [p for p in points if p["loader"] == "cassandra"]
    shards = [p for p in points if p["loader"] == "s3-shards"]
    assert len(cassandra) == 2 and all(p["shard_maxcount"] is None for p in cassandra)
    assert len(shards) == 4 and {p["shard_maxcount"] for p in shards} == {10, 100}


def test_unknown_parameter_lists_valid_ones():
    with pytest.raises(WorkbenchError, match=r"unknown parameter 'network.latency' \(valid: rtt_ms, bandwidth_mbps"):
        load_sweep_config({**BASE, "network": {"latency": [1]}})
    with pytest.raises(WorkbenchError, match="unknown parameter 'repeats'"):
        load_sweep_config({**BASE, "repeats": 3})


def test_invalid_values_and_unknown_loaders_are_rejected():
    with pytest.raises(WorkbenchError, match="rtt_ms"):
        load_sweep_config({**BASE, "network": {"rtt_ms": [-5]}})
    with pytest.raises(WorkbenchError, match=r"unknown loader.*nfs.*valid:.*cassandra"):
        load_sweep_config({**BASE, "loaders": ["nfs"]})
    with pytest.raises(WorkbenchError, match="repetitions"):
        load_sweep_config({**BASE, "repetitions": 0})


def test_bad_files(tmp_path):
    with pytest.raises(WorkbenchError, match="does not exist"):
        load_sweep_config(tmp_path / "missing.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: [unclosed\n")
    with pytest.raises(WorkbenchError, match="not valid YAML"):
        load_sweep_config(bad)


def test_shipped_sweeps_are_valid():
    from pathlib import Path

    for path in (Path(__file__).parents[2] / "notebooks" / "sweeps").glob("*.yaml"):
        assert load_sweep_config(path).points()


def test_accelerators_axis_is_validated_and_in_every_point():
    cfg = load_sweep_config({**BASE, "network": {"rtt_ms": [0]},
                             "compute": {"ms_per_batch": [50], "accelerators": [1, 2, 4, 8]}})
    assert sorted({p.accelerators for p in cfg.points()}) == [1, 2, 4, 8]
    assert all(p.as_row()["accelerators"] in (1, 2, 4, 8) for p in cfg.points())
    with pytest.raises(WorkbenchError, match=r"'compute.accelerators.0': .*greater than or equal to 1"):
        load_sweep_config({**BASE, "compute": {"ms_per_batch": [50], "accelerators": [0]}})
    with pytest.raises(WorkbenchError, match=r"'compute.accelerators.0': .*less than or equal to 64"):
        load_sweep_config({**BASE, "compute": {"ms_per_batch": [50], "accelerators": [65]}})
    with pytest.raises(WorkbenchError, match=r"accelerators \[1, 4\] need a compute time: set compute.ms_per_batch"):
        load_sweep_config({**BASE, "compute": {"accelerators": [1, 4]}})
    with pytest.raises(WorkbenchError, match=r"compute\.ms_per_batch"):
        load_sweep_config({**BASE, "compute": {"ms_per_batch": [-1]}})


def test_question_and_ceilings_options():
    cfg = load_sweep_config({**BASE, "question": "Which is fastest?", "ceilings": True})
    assert cfg.question == "Which is fastest?" and cfg.ceilings
    assert not load_sweep_config(BASE).ceilings
    with pytest.raises(WorkbenchError, match="'ceilings': Input should be a valid boolean"):
        load_sweep_config({**BASE, "ceilings": "sometimes"})
