"""Kind `sweep`: a grid over loader x network x layout x loader settings (`workbench sweep`), its report after."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field

from workbench.bench.sweep import run_sweep
from workbench.bench.sweep_config import SweepConfig
from workbench.config import Settings
from workbench.experiments.kind import Kind, Outcome
from workbench.experiments.spec import ExperimentSpec
from workbench.report import build_report
from workbench.results import RUNS


class SweepSpec(ExperimentSpec):
    kind: Literal["sweep"] = "sweep"
    results_dir: Path = Field(RUNS, description="the sweep's results go to RESULTS_DIR/<sweep name>/")
    sweep: SweepConfig = Field(description="the sweep's grid, as in a sweep YAML (notebooks/sweeps/)")
    report: bool = Field(True, description="build the report when the sweep ends")


def run(settings: Settings, spec: SweepSpec) -> Outcome:
    folder = run_sweep(settings, spec.sweep, spec.results_dir)
    return Outcome(folder, report=build_report(folder) if spec.report else None)


KIND = Kind("sweep", SweepSpec, run)
