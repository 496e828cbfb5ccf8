"""`workbench study`: list, run, publish and combine studies (sweeps that each answer one question)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from workbench.bench.study import (
    PUBLISHED,
    STUDIES,
    check_complete,
    check_time,
    combine,
    find_study,
    in_catalog,
    list_studies,
    publish,
)
from workbench.cli_spec import run_spec
from workbench.config import get_settings
from workbench.experiments import make_spec
from workbench.experiments.sweep import SweepSpec
from workbench.report import build_report
from workbench.results import RUNS, check_writable

app = typer.Typer(no_args_is_help=True, add_completion=False, help=__doc__)
console = Console()


@app.command("list")
def list_command(folder: Annotated[Path, typer.Option(help="folder of study YAMLs")] = STUDIES) -> None:
    """Every study: its question, runs (points x repetitions, ceilings included) and estimated minutes."""
    table = Table("study", "question", "runs", "est. min", "of which data prep", title=f"studies in {folder}")
    for study in list_studies(folder, in_catalog(get_settings())):
        table.add_row(study.name, study.config.question or "-", str(study.runs), f"{study.minutes:.0f}",
                      f"{study.prepare_minutes:.0f}")
    console.print(table)


@app.command("run")
def run_command(
    study: Annotated[str, typer.Argument(help="a study name (see `study list`) or the path of a sweep YAML")],
    yes: Annotated[bool, typer.Option("--yes", help="run even when the estimate is over --max-minutes")] = False,
    max_minutes: Annotated[float, typer.Option(min=0, help="refuse longer studies without --yes")] = 20.0,
    out: Annotated[Path, typer.Option(help="the run goes to OUT/<study name>/ (git-ignored by default)")] = RUNS,
    folder: Annotated[Path, typer.Option(help="folder of study YAMLs")] = STUDIES,
) -> None:
    """Run a study (its sweep) and build its report; refuses, before anything starts, one estimated too long."""
    settings = get_settings()
    chosen = find_study(study, folder, in_catalog(settings))
    console.print(f"study {chosen.name}: {chosen.runs} runs, estimated {chosen.minutes:.0f} minutes "
                  f"({chosen.prepare_minutes:.0f} of them preparing data not ingested yet)", highlight=False)
    check_time(chosen, max_minutes, yes)
    check_writable(out / chosen.name)
    run_spec(make_spec(SweepSpec, "study run", sweep=chosen.config, results_dir=out, report=True), console)


@app.command("publish")
def publish_command(
    run: Annotated[Path, typer.Argument(help="a complete run folder, e.g. results/runs/latency-hiding")],
    name: Annotated[str | None, typer.Option(help="folder name under results/studies (default: the study's)")] = None,
    root: Annotated[Path, typer.Option(help="where published studies live")] = PUBLISHED,
    replace: Annotated[bool, typer.Option("--replace", help="publish over an existing study folder")] = False,
) -> None:
    """Copy a complete run and its report to results/studies/<name>/: the committed reference (then git add it)."""
    check_complete(run)
    if not (run / "report" / "report.html").is_file():
        build_report(run)
    console.print(f"published: {publish(run, name, root, replace)}", highlight=False)


@app.command("combine")
def combine_command(
    runs: Annotated[list[Path], typer.Argument(help="two or more complete run folders")],
    out: Annotated[Path, typer.Option(help="the combined folder (runs, config, report)")],
    mix: Annotated[bool, typer.Option("--mix", help="combine runs of different code versions or topologies")] = False,
) -> None:
    """One report over several runs; refuses runs of different git commits or topologies unless --mix."""
    folder = combine(runs, out, mix)
    console.print(f"combined: {folder}\nreport: {build_report(folder)}", highlight=False)
