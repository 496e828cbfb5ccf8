"""The sweep's `clients` axis without a server: the config (shorthand, defaults, what ranks refuse), the
points and their topology, a rank runner's row as a sweep row (a failed exactly-once check stays "error"),
studies' estimate and combine around it, and the scaling figure."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pandas as pd
import pytest

from workbench.bench.clients_sweep import sweep_columns
from workbench.bench.points import AXES, AXIS_TOPOLOGY, SERIES_KNOBS
from workbench.bench.study import PLANNING, check_mixable, estimate_seconds, find_study, provenance, run_seconds
from workbench.bench.sweep import point_topology
from workbench.bench.sweep_config import load_sweep_config
from workbench.errors import WorkbenchError
from workbench.report import load
from workbench.report.scaling import PLOTS, nodes_column, scaling_table, throughput_vs_clients

ROOT = Path(__file__).parents[2]
BASE = {"name": "c", "loaders": ["s3-shards", "cassandra"], "data": {"count": 64, "mean_kb": 8},
        "network": {"rtt_ms": [0]}, "loader": {"batch_size": [8]}, "repetitions": 1, "warmup_batches": 0}


def test_clients_is_an_axis_that_sets_the_client_ranks_topology():
    assert AXES["clients"].section == "clients" and AXES["clients"].option == "ranks"
    assert SERIES_KNOBS["clients"] == "ranks" and AXIS_TOPOLOGY == {"client_ranks": "clients"}


def test_the_shorthand_gives_one_point_per_rank_count_and_one_epoch():
    cfg = load_sweep_config({**BASE, "clients": [1, 2]})
    assert cfg.clients.ranks == [1, 2] and cfg.epochs == 1  # ranks read one epoch: the default follows
    points = cfg.points()
    assert [(p.loader, p.clients) for p in points] == [("s3-shards", 1), ("s3-shards", 2), ("cassandra", 1),
                                                        ("cassandra", 2)]
    assert point_topology(points[1]) == {"topology_client_ranks": 2}
    full = load_sweep_config({**BASE, "clients": {"ranks": [4], "launcher": "mpirun", "max_seconds": 30}})
    assert full.clients.launcher == "mpirun" and [p.clients for p in full.points()] == [4, 4]


def test_without_clients_points_read_in_process_as_before():
    cfg = load_sweep_config(BASE)
    assert cfg.clients.ranks is None and cfg.epochs == 2
    assert {p.clients for p in cfg.points()} == {None}
    assert point_topology(cfg.points()[0]) == {}


@pytest.mark.parametrize(("change", "named"), [
    ({"epochs": 2}, "epochs 2"),
    ({"loader": {"batch_size": [8], "workers": [2]}}, "loader.workers [2]"),
    ({"loader": {"batch_size": [8], "decode": [True]}}, "loader.decode [True]"),
    ({"compute": {"ms_per_batch": [5], "accelerators": [2]}}, "compute.accelerators [2]"),
    ({"compute": {"ms_per_batch": [5], "distribution": "normal"}}, "compute.distribution normal"),
])
def test_what_ranks_cannot_do_is_refused_naming_it(change, named):
    with pytest.raises(WorkbenchError, match=r"clients\.ranks") as error:
        load_sweep_config({**BASE, "clients": [2], **change})
    assert named in str(error.value)


@pytest.mark.parametrize(("clients", "message"), [
    ({"ranks": [0]}, "greater than or equal to 1"),
    ({"ranks": []}, "at least 1 item"),
    ({"ranks": [2], "launcher": "srun"}, "torchrun"),
    ({"rank": [2]}, "unknown parameter 'clients.rank' (valid: ranks, launcher, start_timeout_s, max_seconds)"),
])
def test_bad_clients_settings_are_one_clear_line(clients, message):
    with pytest.raises(WorkbenchError, match="clients") as error:
        load_sweep_config({**BASE, "clients": clients})
    assert message in str(error.value) and "\n" not in str(error.value)


def clients_row(ok: bool = True, **more) -> dict:
    """A row as run_clients returns it: two ranks, the second one's AU measured, the first one's not."""
    row = {"loader": "s3-shards", "backend": "s3-shards", "dataset": "d", "split": "train", "ranks": 2,
           "launcher": "torchrun", "nnodes": 1, "hosts": "", "compute_ms": 5.0, "batch_size": 8, "concurrency": 4,
           "via_proxy": True, "shards": [0, 1], "samples": 64, "bytes": 6400, "seconds": 2.0, "samples_per_s": 32.0,
           "mb_per_s": 0.0032, "slowest_rank": 1, "slowest_rank_samples_per_s": 16.0,
           "min_rank_samples_per_s": 16.0, "rank_imbalance": 1.5, "rank_samples": [32, 32],
           "rank_seconds": [1.5, 2.0], "rank_samples_per_s": [21.3, 16.0], "rank_hosts": ["h", "h"],
           "rank_steps": [4, 4], "rank_first_step_s": [0.5, 0.6], "rank_accelerator_utilisation": [0.4, 0.2],
           "accelerator_utilisation": 0.3, "min_accelerator_utilisation": 0.2, "time_to_first_batch_s": 0.6,
           "steady_samples_per_s": 40.0, "startup_fraction": 0.3,
           "exactly_once": ok, "expected_samples": 64, "expected_from": "split", "distinct_samples": 64 if ok else 60,
           "missing": 0 if ok else 4, "duplicated": 0 if ok else 4, "unexpected": 0,
           "status": "ok" if ok else "error", "error": "" if ok else "exactly-once check failed: 4 missing",
           "topology": {"cassandra_nodes": 3, "client_ranks": 2, "launcher": "torchrun"}}
    return {**row, **more}


def test_a_rank_row_becomes_flat_sweep_columns():
    out = sweep_columns(clients_row())
    assert not {"loader", "backend", "dataset", "compute_ms", "batch_size", "concurrency", "ranks",
                "topology"} & set(out)  # the point's own columns stay the point's
    assert json.loads(out["rank_samples"]) == [32, 32] and json.loads(out["shards"]) == [0, 1]
    assert (out["topology_client_ranks"], out["topology_launcher"], out["topology_cassandra_nodes"]) == (2, "torchrun",
                                                                                                      3)
    assert json.loads(out["au_per_accelerator"]) == [0.4, 0.2]  # one emulated accelerator per rank
    assert out["au_min"] == pytest.approx(0.2) and out["au_mean"] == pytest.approx(0.3)
    assert out["batches_per_s"] == pytest.approx(8 / 2.0) and out["first_epoch_samples_per_s"] == 32.0
    assert out["exactly_once"] is True and out["status"] == "ok"
    assert "start-up is 30%" in out["startup_note"]


def test_a_rank_without_compute_leaves_the_utilisation_unmeasured():
    out = sweep_columns(clients_row(rank_accelerator_utilisation=[None, 0.2]))
    assert math.isnan(out["au_min"]) and json.loads(out["au_per_accelerator"]) == [None, 0.2]


def test_a_failed_exactly_once_check_keeps_the_row_an_error():
    out = sweep_columns(clients_row(ok=False))
    assert out["status"] == "error" and out["exactly_once"] is False
    assert (out["missing"], out["duplicated"]) == (4, 4) and "exactly-once" in out["error"]
    row = {"status": "ok", "error": ""}
    row.update({"status": "ok", "error": "", **out})  # as run_sweep records a measured point
    assert row["status"] == "error"


def test_ranks_are_estimated_with_their_start_up_and_the_whole_dataset():
    cfg = load_sweep_config({**BASE, "loaders": ["cassandra"], "data": {"count": 1000}, "clients": [1, 4]})
    one, four = (run_seconds(cfg, p) for p in cfg.points())
    assert four - one == pytest.approx(3 * PLANNING.rank_start_s)
    assert one == pytest.approx(PLANNING.ranks_start_s + PLANNING.rank_start_s + 1000 / PLANNING.samples_per_s)
    scan = 1000 / PLANNING.samples_per_s  # the exactly-once check's ids, once per dataset
    prepare = 1000 / PLANNING.ingest_samples_per_s
    assert estimate_seconds(cfg) == pytest.approx(prepare + one + four + scan)


def test_the_scaling_study_is_within_20_minutes_and_has_every_backend():
    study = find_study("scaling", ROOT / "notebooks" / "sweeps" / "studies")
    assert study.config.question and "2-core" in study.config.question
    assert study.config.clients.ranks == [1, 2, 4] and study.minutes <= 20
    assert len(study.config.loaders) == 3


def frame(nodes: int, ranks: list[int], commit: str = "abc") -> pd.DataFrame:
    return pd.DataFrame([{"loader": "cassandra", "backend": "cassandra", "clients": r, "git_commit": commit,
                          "topology_cassandra_nodes": nodes, "topology_client_ranks": r, "status": "ok"}
                         for r in ranks])


def test_client_ranks_varied_by_the_axis_do_not_block_combining_but_nodes_do():
    assert "topology_client_ranks" not in provenance(frame(1, [1, 2, 4]))
    check_mixable({Path("a"): frame(1, [1, 2]), Path("b"): frame(1, [4])})  # the same cluster, other ranks
    with pytest.raises(WorkbenchError, match="topology_cassandra_nodes"):
        check_mixable({Path("a"): frame(1, [1, 2]), Path("b"): frame(3, [1, 2])})


def scaling_runs(folder: Path) -> Path:
    """A combined run: cassandra and s3-shards on 1 and 3 nodes x 1, 2, 4 ranks x 2 repetitions, one failed
    exactly-once check (3 nodes, 4 ranks, s3-shards), and a ceiling row that is no point."""
    rows = []
    for nodes in (1, 3):
        for loader in ("cassandra", "s3-shards"):
            for ranks in (1, 2, 4):
                for rep in range(2):
                    failed = (nodes, loader, ranks, rep) == (3, "s3-shards", 4, 0)
                    rows.append({"loader": loader, "backend": loader, "clients": ranks, "repetition": rep,
                                 "rtt_ms": 0.0, "samples_per_s": 100.0 * ranks / nodes + rep,
                                 "slowest_rank_samples_per_s": 100.0 / nodes, "au_min": 0.5,
                                 "exactly_once": not failed, "status": "error" if failed else "ok",
                                 "error": "exactly-once check failed" if failed else "",
                                 "topology_cassandra_nodes": nodes, "topology_s3_nodes": nodes,
                                 "topology_client_ranks": ranks})
    rows.append({"loader": "ceiling:cassandra", "backend": "cassandra", "clients": None, "rtt_ms": 0.0,
                 "samples_per_s": 1.0, "status": "ok", "error": "", "topology_cassandra_nodes": 1})
    folder.mkdir(parents=True)
    pd.DataFrame(rows).to_parquet(folder / "runs.parquet")
    return folder


def test_scaling_table_has_a_row_per_loader_nodes_and_ranks(tmp_path):
    ctx = load(scaling_runs(tmp_path / "run"))
    table = scaling_table(ctx)
    assert len(table) == 2 * 2 * 3
    assert nodes_column("s3-shards") == "topology_s3_nodes" and nodes_column("no-such-backend") is None
    row = table[(table.loader == "s3-shards") & (table.nodes == 3) & (table.clients == 4)].iloc[0]
    assert (row.runs_ok, row.runs_failed, row.exactly_once_failed) == (1, 1, 1)
    assert row.samples_per_s_median == pytest.approx(100 * 4 / 3 + 1)  # the failed run is left out
    one = table[(table.loader == "cassandra") & (table.nodes == 1) & (table.clients == 2)].iloc[0]
    assert one.samples_per_s_median == pytest.approx(200.5) and one.exactly_once_passed == 2


def test_the_scaling_figure_is_drawn_and_says_how_the_check_went(tmp_path):
    ctx = load(scaling_runs(tmp_path / "run"))
    out = tmp_path / "report"
    out.mkdir()
    plot = throughput_vs_clients(ctx, out)
    assert plot.path is not None and plot.path.stat().st_size > 10_000
    assert "23 of 24 run(s) passed" in plot.note and "1 FAILED" in plot.note
    assert plot.tables and len(plot.tables[0][1]) == 12
    assert throughput_vs_clients in PLOTS


def test_without_ranks_the_figure_is_skipped_with_a_note(tmp_path):
    folder = tmp_path / "plain"
    folder.mkdir()
    pd.DataFrame([{"loader": "cassandra", "backend": "cassandra", "rtt_ms": 0.0, "samples_per_s": 5.0,
                   "status": "ok"}]).to_parquet(folder / "runs.parquet")
    plot = throughput_vs_clients(load(folder), tmp_path)
    assert plot.path is None and "no clients axis" in plot.note


def test_runs_of_one_study_on_two_topologies_combine_with_mix_and_one_question(tmp_path):
    from workbench.bench.study import combine
    from workbench.results import PROGRESS_FILE

    folders = []
    for nodes in (1, 3):
        folder = tmp_path / f"{nodes}node"
        folder.mkdir()
        frame(nodes, [1, 2]).assign(point_id=[0, 1]).to_parquet(folder / "runs.parquet")
        (folder / "config.json").write_text(json.dumps({"name": "scaling", "question": "What scales?"}))
        (folder / PROGRESS_FILE).write_text(json.dumps({"runs_done": 2, "runs_total": 2, "complete": True}))
        folders.append(folder)
    with pytest.raises(WorkbenchError, match="--mix"):
        combine(folders, tmp_path / "refused")
    out = combine(folders, tmp_path / "scaling", mix=True)
    config = json.loads((out / "config.json").read_text())
    assert config["question"] == "What scales?" and config["mixed"] is True
    assert sorted(pd.read_parquet(out / "runs.parquet").point_id) == [0, 1, 2, 3]
