"""Experiment specs (workbench/experiments): read, validated before anything runs, written back, overridden."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml

from workbench.bench.sweep_config import load_sweep_config
from workbench.errors import WorkbenchError
from workbench.experiments import KINDS, experiment_kind, load_spec, make_spec
from workbench.experiments.chaos import ChaosSpec
from workbench.experiments.clients import ClientsSpec
from workbench.experiments.inference import InferenceSpec, PerfSpec
from workbench.experiments.ingest import IngestSpec
from workbench.experiments.loaders import LoadersSpec
from workbench.experiments.rss import RssSpec
from workbench.experiments.s3_clients import S3ClientsSpec
from workbench.experiments.sweep import SweepSpec

ROOT = Path(__file__).resolve().parents[2]


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "spec.yaml"
    path.write_text(text)
    return path


@pytest.mark.parametrize("spec", [
    LoadersSpec(loaders=["fs", "s3-objects"], rtt_ms=[0, 10], count=50, concurrency=8, results_dir=Path("out/a")),
    RssSpec(counts=[20, 200], concurrency="auto", results_dir=Path("out/b")),
    IngestSpec(backends=["fs", "ignite"], count=30, repeats=2, results_dir=Path("out/d")),
    ClientsSpec(loader="fs", ranks=2, launcher="mpirun", compute_ms=2.5, results_dir=Path("out/e")),
    S3ClientsSpec(clients=["boto3-threads", "native-batch"], repeats=5, results_dir=Path("out/f")),
    ChaosSpec(dataset="d", loaders=["s3-objects"], faults=["node_kill", "latency"], seed=3, results_dir=Path("o/g")),
    InferenceSpec(dataset="d", model="cass_to_inference", protocol=["http", "grpc"], concurrency=[2],
                  loader_options={"concurrency": 16}, results_dir=Path("o/h")),
    PerfSpec(dataset="d", mode="time_windows", interval_ms=800, batch_size=[4], results_dir=Path("o/i")),
    SweepSpec(sweep=load_sweep_config(ROOT / "notebooks" / "sweeps" / "demo.yaml"), results_dir=Path("out/c"),
              report=False),
], ids=["loaders", "rss", "ingest", "clients", "s3-clients", "chaos", "inference", "perf", "sweep"])
def test_a_written_spec_reads_back_equal(spec, tmp_path):
    back = load_spec(write(tmp_path, spec.to_yaml()))
    assert back == spec and type(back) is type(spec)
    if isinstance(spec, SweepSpec):
        assert back.sweep.points() == spec.sweep.points()


def test_every_kind_names_its_own_spec_and_run():
    for name in KINDS:
        kind = experiment_kind(name)
        assert kind.name == name and kind.Spec.model_fields["kind"].default == name and callable(kind.run)


def test_chaos_takes_node_kill_with_a_dash_as_the_command_line_does():
    assert load_spec({"kind": "chaos", "dataset": "d", "faults": ["node-kill"]}).faults == ["node_kill"]


def test_a_spec_is_frozen():
    spec = LoadersSpec()
    with pytest.raises(ValueError):
        spec.count = 5


def test_overrides_set_fields_and_sections_with_yaml_values(tmp_path):
    path = write(tmp_path, "kind: sweep\nsweep:\n  name: s\n  loaders: [fs]\n  network:\n    rtt_ms: [0]\n")
    spec = load_spec(path, ["sweep.network.rtt_ms=[0, 5]", "report=false", "sweep.repetitions=2"])
    assert spec.sweep.network.rtt_ms == [0, 5] and spec.report is False and spec.sweep.repetitions == 2
    assert load_spec({"kind": "loaders"}, ["loaders=[fs]", "concurrency=16"]).concurrency == 16


@pytest.mark.parametrize("text,overrides,message", [
    ("kind: loaders\ncount: 5\n", [], r"^{f}:2 'count': Input should be greater than or equal to 10$"),
    ("kind: loaders\nconcurency: 8\n", [],
     r"^{f}:2 unknown field 'concurency' \(valid: kind, results_dir, concurrency, loaders, count, .*\)$"),
    ("kind: loaders\nloaders: [fs, nope]\n", [], r"^{f}:2 'loaders': unknown loader nope \(valid: cassandra, .*\)$"),
    ("kind: loaders\nconcurrency: many\n", [],
     r"^{f}:2 'concurrency': concurrency 'many': give a number of requests in flight \(1 to 1024\) or 'auto'$"),
    ("kind: loader\n", [],
     r"^{f}:1 unknown kind 'loader': give one of loaders, ingest, clients, s3-clients, chaos, "
     r"inference, perf, rss, sweep \(kind: loaders\)$"),
    ("count: 10\n", [], r"^{f} no 'kind': give one of loaders, ingest, clients, s3-clients, chaos, inference, "),
    ("kind: perf\ndataset: d\nmodel: resnet\n", [], r"^{f}:3 'model': Input should be 'ensemble', .*"),
    ("kind: inference\ndataset: d\nconcurrency: [4, 0]\n", [],
     r"^{f}:3 'concurrency.1': Input should be greater than 0$"),
    ("kind: chaos\ndataset: d\nfaults: [flood]\n", [], r"^{f}:3 'faults.0': Input should be 'reset_peer', .*"),
    ("kind: rss\ncounts: [100, 5]\n", [], r"^{f}:2 'counts.1': Input should be greater than or equal to 10$"),
    ("kind: clients\nloader: nope\n", [], r"^{f}:2 'loader': unknown loader nope \(valid: cassandra, .*\)$"),
    ("kind: clients\n", [], r"^{f} 'loader': Field required$"),
    ("kind: s3-clients\nclients: [curl]\n", [], r"^{f}:2 'clients.0': Input should be 'boto3-threads', .*"),
    ("kind: ingest\nbackends: [s4]\n", [], r"^{f}:2 'backends': unknown backend s4 \(valid: cassandra, .*\)$"),
    ("kind: sweep\nsweep:\n  name: s\n  loaders: [fs]\n  network:\n    rtt_ms: [-1]\n", [],
     r"^{f}:6 'sweep.network.rtt_ms.0': Input should be greater than or equal to 0$"),
    ("kind: sweep\nsweep:\n  name: s\n  loaders: [fs]\n  netwrk: 1\n", [],
     r"^{f}:5 unknown field 'sweep.netwrk' \(valid: name, .*network.*\)$"),
    ("kind: loaders\ncount: 100\n", ["count=5"], r"^-o count=5 'count': Input should be greater than or equal to 10$"),
    ("kind: loaders\n", ["repeats"], r"^override 'repeats': write it as key=value \(e.g. -o repeats=5\)$"),
    ("kind: loaders\n", ["repeats=[1"], r"^override 'repeats=\[1': the value is not valid YAML$"),
    ("- kind: loaders\n", [], r"^spec {f}: expected a mapping with a 'kind', got list$"),
    ("kind: [loaders\n", [], r"^spec {f} is not valid YAML: "),
])
def test_a_bad_spec_is_one_line_naming_the_field_its_line_and_the_choices(tmp_path, text, overrides, message):
    path = write(tmp_path, text)
    with pytest.raises(WorkbenchError) as refused:
        load_spec(path, overrides)
    assert "\n" not in str(refused.value)
    assert re.search(message.format(f=re.escape(str(path))), str(refused.value)), str(refused.value)


def test_a_missing_spec_file_says_so(tmp_path):
    with pytest.raises(WorkbenchError, match=r"^spec .*nothing.yaml does not exist: give the path of a YAML spec"):
        load_spec(tmp_path / "nothing.yaml")


def test_a_preset_builds_its_spec_from_flags_and_refuses_bad_ones_in_one_line():
    spec = make_spec(LoadersSpec, "bench loaders", loaders=None, count=20, rtt_ms=None, concurrency="32")
    assert spec == LoadersSpec(count=20, concurrency=32)
    assert spec.loaders is None and spec.rtt_ms == [0.0, 50.0]  # unset flags keep the spec's defaults
    with pytest.raises(WorkbenchError, match=r"^bench loaders 'concurrency': concurrency 'lots'"):
        make_spec(LoadersSpec, "bench loaders", concurrency="lots")
    perf = make_spec(PerfSpec, "inference perf", dataset="d", model="preprocess", mode="time_windows")  # `model`
    assert (perf.model, perf.mode, perf.concurrency) == ("preprocess", "time_windows", [1, 2, 4])


def test_the_committed_example_specs_are_valid():
    specs = sorted((ROOT / "specs").glob("*.yaml"))
    assert specs, "specs/ holds an example of each kind"
    assert {yaml.safe_load(p.read_text())["kind"] for p in specs} == set(KINDS)
    for path in specs:
        load_spec(path)


def test_remake_refuses_a_folder_without_a_spec_and_checks_every_spec_before_running_any(tmp_path):
    from typer.testing import CliRunner

    from workbench.cli_report import app

    bare = tmp_path / "bare"
    bare.mkdir()
    refused = CliRunner().invoke(app, ["remake", str(bare)])
    assert refused.exit_code != 0 and f"no spec.yaml in {bare}" in str(refused.exception)
    good, bad = tmp_path / "good", tmp_path / "bad"
    good.mkdir(), bad.mkdir()
    (good / "spec.yaml").write_text(f"kind: loaders\nloaders: [fs]\nresults_dir: {good}\n")
    (bad / "spec.yaml").write_text("kind: loaders\nrepeats: 0\n")
    refused = CliRunner().invoke(app, ["remake", str(good), str(bad)])
    assert f"{bad / 'spec.yaml'}:2 'repeats'" in str(refused.exception)
    assert list(good.iterdir()) == [good / "spec.yaml"]  # the good one did not run either


def _git(repo: Path, *args: str) -> str:
    import subprocess

    return subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=repo, check=True,
                          capture_output=True, text=True).stdout.strip()


def test_remake_refuses_uncommitted_measured_code_and_skips_folders_that_measure_the_current_code(
        tmp_path, monkeypatch):
    from typer.testing import CliRunner

    from workbench.cli_report import app

    (tmp_path / "workbench" / "loaders").mkdir(parents=True)
    (tmp_path / "workbench" / "loaders" / "a.py").write_text("A = 1\n")
    _git(tmp_path, "init", "-q")
    _git(tmp_path, "add", ".")
    _git(tmp_path, "commit", "-qm", "one")
    head = _git(tmp_path, "rev-parse", "--short", "HEAD")
    folder = tmp_path / "results" / "bench-loaders"
    folder.mkdir(parents=True)
    (folder / "spec.yaml").write_text(f"kind: loaders\nloaders: [fs]\nresults_dir: {folder}\n")
    row = {"loader": "fs", "environment": {"git_commit": head}}
    (folder / "loaders-1.json").write_text(json.dumps({"rows": [row]}))
    monkeypatch.chdir(tmp_path)

    skipped = CliRunner().invoke(app, ["remake", str(folder)], terminal_width=300)
    assert skipped.exit_code == 0 and f"current: made on {head}" in skipped.output and "skipped" in skipped.output

    (tmp_path / "workbench" / "loaders" / "a.py").write_text("A = 2\n")
    refused = CliRunner().invoke(app, ["remake", str(folder), "--force"])
    assert str(refused.exception) == ("uncommitted changes to measured code (workbench/loaders/a.py): commit them "
                                      "first, or pass --allow-dirty")
    assert sorted(p.name for p in folder.iterdir()) == ["loaders-1.json", "spec.yaml"]  # nothing ran


def test_a_chaos_outcome_gives_back_the_report_the_soak_made():
    from dataclasses import asdict

    from workbench.chaos import ChaosReport, FaultRecord, format_report
    from workbench.experiments.chaos import report_of, summary
    from workbench.experiments.kind import Outcome

    report = ChaosReport(["s3-objects"], "d", 7, duration_s=12.0, epochs=1, faults_injected=1, faults_survived=1,
                         faults=[FaultRecord("s3-objects", 0, "latency", "s3", 20, survived=True, epoch_s=2.5)])
    outcome = Outcome(Path("x"), [asdict(report)])
    assert report_of(outcome) == report
    assert summary(ChaosSpec(dataset="d"), outcome).plain.splitlines() == format_report(report)


def test_run_takes_a_spec_or_a_spec_file_with_overrides_and_checks_it_before_running(tmp_path):
    from workbench import run

    with pytest.raises(WorkbenchError, match=r"^overrides apply to a spec file"):
        run(LoadersSpec(), "count=20")
    path = write(tmp_path, f"kind: loaders\nloaders: [fs]\nresults_dir: {tmp_path / 'out'}\n")
    with pytest.raises(WorkbenchError, match=r"^-o count=5 'count': Input should be greater than or equal to 10$"):
        run(path, "count=5")
    assert not (tmp_path / "out").exists()  # nothing ran
