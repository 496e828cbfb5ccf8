"""`workbench chaos`: the chaos soak's command line, a preset of the experiment kind `chaos`."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from workbench.chaos import FAULTS, NODE_WINDOW_S, fault_names
from workbench.config import get_settings
from workbench.experiments import SPEC_FILE, make_spec
from workbench.experiments import run as run_experiment
from workbench.experiments.chaos import ChaosSpec, report_of, summary
from workbench.results import RUNS

console = Console()


def chaos_command(
    dataset: Annotated[str, typer.Option(help="dataset name, as ingested into every loader's backend")],
    loaders: Annotated[str, typer.Option(help="comma-separated loaders")] = "cassandra,s3-objects,s3-shards,ignite",
    duration: Annotated[float, typer.Option(help="seconds of soak (the last epoch may overrun)")] = 60.0,
    seed: Annotated[int, typer.Option(help="seed of the fault choice and timing")] = 0,
    faults: Annotated[str, typer.Option(help=f"comma-separated fault kinds ({', '.join(FAULTS)}; node faults "
                                             "only strike a cluster: `stack up --nodes N`)")] = ",".join(FAULTS),
    retries: Annotated[int, typer.Option(min=0, help="loader setting: re-tries per request")] = 60,
    retry_budget: Annotated[float, typer.Option(min=0, help="loader setting retry_budget_s: seconds per request")] = (
        120.0),
    node_window: Annotated[float, typer.Option(min=0, help="seconds a node fault keeps its node killed or cut "
                                                           "off")] = NODE_WINDOW_S,
    json_out: Annotated[Path | None, typer.Option("--json", help="also write the report, every fault's record "
                                                                 "included, as JSON to this file")] = None,
    results_dir: Annotated[Path, typer.Option(help="the report (JSON and text) and its spec go here")] = RUNS / "chaos",
) -> None:
    """Run a chaos soak and print faults injected/survived, samples lost/duplicated and failed epochs."""
    spec = make_spec(ChaosSpec, "chaos", dataset=dataset, loaders=[n.strip() for n in loaders.split(",") if n.strip()],
                     duration_s=duration, seed=seed, faults=fault_names(faults), retries=retries,
                     retry_budget_s=retry_budget, node_window_s=node_window, results_dir=results_dir)
    outcome = run_experiment(spec, settings=get_settings())
    console.print(summary(spec, outcome), highlight=False)
    console.print(f"results: {outcome.folder} (spec: {outcome.folder / SPEC_FILE})", highlight=False)
    if json_out is not None:
        json_out.parent.mkdir(parents=True, exist_ok=True)
        json_out.write_text(json.dumps(outcome.rows[0], indent=1) + "\n")
    report = report_of(outcome)
    if report.samples_lost or report.samples_duplicated:  # failed epochs with a clear error are not bugs
        raise typer.Exit(1)
