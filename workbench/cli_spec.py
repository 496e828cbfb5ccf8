"""What every command that runs an experiment spec does alike: run it, print its summary and where it went."""

from __future__ import annotations

from rich.console import Console

from workbench.config import get_settings
from workbench.experiments import SPEC_FILE, ExperimentSpec, Outcome, experiment_kind
from workbench.experiments import run as run_experiment


def run_spec(spec: ExperimentSpec, console: Console) -> Outcome:
    """Run `spec` with this process's settings; print its kind's summary, its results folder and its spec file."""
    outcome = run_experiment(spec, settings=get_settings())
    kind = experiment_kind(spec.kind)
    if kind.summary is not None:
        console.print(kind.summary(spec, outcome))
    console.print(f"results: {outcome.folder} (spec: {outcome.folder / SPEC_FILE})", highlight=False)
    if outcome.report is not None:
        console.print(f"report: {outcome.report}", highlight=False)
    return outcome
