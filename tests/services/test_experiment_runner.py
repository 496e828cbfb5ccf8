"""One runner for every experiment: a preset command and `workbench run` of the spec it wrote make the same rows.

Real servers: `bench loaders` on fs (the smallest real run: its Go ceiling and toxiproxy's round trip included).
"""

from __future__ import annotations

import json

import pytest
import yaml
from typer.testing import CliRunner

from workbench.bench.clients_launch import free_port
from workbench.cli import app
from workbench.config import get_settings
from workbench.experiments import SPEC_FILE, load_spec

pytestmark = pytest.mark.services

PRESET = ["bench", "loaders", "--loader", "fs", "--count", "20", "--mean-kb", "4", "--rtt-ms", "0", "--repeats", "1",
          "--warmup-epochs", "0", "--round-seconds", "0", "--concurrency", "4"]


def rows_of(folder):
    """The rows of the newest bench-loaders result in `folder` (its json file)."""
    return json.loads(sorted(folder.glob("loaders-*.json"))[-1].read_text())["rows"]


def shape(rows):
    """What must be equal between two runs of one spec: which readers ran where, and the fields of each row
    (the numbers are timings)."""
    return sorted((r["loader"], r["backend"], r["rtt_ms"], tuple(sorted(r))) for r in rows)


def test_a_preset_writes_its_spec_and_running_that_spec_makes_the_same_rows(stack, tmp_path):
    first, second = tmp_path / "preset", tmp_path / "again"
    ran = CliRunner().invoke(app, [*PRESET, "--results-dir", str(first)], terminal_width=200)
    assert ran.exit_code == 0, ran.output
    assert f"spec: {first / SPEC_FILE}" in ran.output.replace("\n", "")
    spec = load_spec(first / SPEC_FILE)
    assert (spec.kind, spec.loaders, spec.count, spec.rtt_ms, spec.concurrency) == ("loaders", ["fs"], 20, [0.0], 4)

    again = CliRunner().invoke(app, ["run", str(first / SPEC_FILE), "-o", f"results_dir={second}"],
                               terminal_width=200)
    assert again.exit_code == 0, again.output
    assert shape(rows_of(second)) == shape(rows_of(first)) and len(rows_of(first)) == 2  # fs and its ceiling
    remade = yaml.safe_load((second / SPEC_FILE).read_text())
    assert remade == {**yaml.safe_load((first / SPEC_FILE).read_text()), "results_dir": str(second)}

    remake = CliRunner().invoke(app, ["results", "remake", str(first), "--force", "--allow-dirty"],
                                terminal_width=200)  # what `make results` does (forced: the folder is current)
    assert remake.exit_code == 0, remake.output
    assert len(list(first.glob("loaders-*.json"))) == 2  # a new result beside the first, from the same spec


def test_a_bad_spec_runs_nothing_and_a_failed_run_writes_no_spec(stack, tmp_path, monkeypatch):
    bad = tmp_path / "bad.yaml"
    bad.write_text("kind: loaders\nloaders: [fs]\nrtt_ms: [-5]\n")
    refused = CliRunner().invoke(app, ["run", str(bad)], terminal_width=300)
    assert refused.exit_code != 0 and "'rtt_ms.0': Input should be greater than or equal to 0" in str(
        refused.exception or refused.output)

    folder = tmp_path / "failed"
    monkeypatch.setenv("WORKBENCH_TOXIPROXY_PORT", str(free_port()))  # the emulator is not there: the run fails
    get_settings.cache_clear()
    try:
        failed = CliRunner().invoke(app, [*PRESET, "--results-dir", str(folder)], terminal_width=200)
    finally:
        get_settings.cache_clear()
    assert failed.exit_code != 0 and "toxiproxy" in str(failed.exception).lower(), failed.output
    assert not (folder / SPEC_FILE).exists() and not list(folder.glob("loaders-*"))
