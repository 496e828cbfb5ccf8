"""`workbench catalog`: the datasets this checkout ingested, and whether the services still hold them."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from workbench.config import get_settings
from workbench.reconcile import check

app = typer.Typer(no_args_is_help=True, help="The ingested datasets the catalog records, checked against the services.")
console = Console()

@app.callback()
def catalog() -> None:
    """The ingested datasets the catalog records, checked against the services."""


STYLE = {"ok": "[green]ok[/green]", "stale": "[red]stale[/red]", "error": "[yellow]error[/yellow]"}


@app.command("check")
def check_command(
    backend: Annotated[list[str] | None, typer.Option(
        "--backend", "-b", help="only these backends (repeatable; default: every one with catalog entries)")] = None,
) -> None:
    """Compare every catalog entry with what its service holds; list stale datasets with the command that restores
    them. Exits 1 when a dataset is stale or could not be checked."""
    states = check(get_settings(), backend)
    if not states:
        console.print("the catalog records no dataset: `workbench ingest` adds one")
        return
    table = Table("backend", "dataset", "state", "recorded", "stored", "detail", title="workbench catalog")
    for s in states:
        table.add_row(s.backend, s.dataset, STYLE[s.state], str(s.recorded), "-" if s.stored is None else str(s.stored),
                      s.detail)
    console.print(table)
    stale = [s for s in states if s.state == "stale"]
    for s in stale:  # plain lines, one per dataset, to copy and run
        console.print(f"restore {s.backend}/{s.dataset}: {s.command or s.detail}", highlight=False, soft_wrap=True)
    if stale or any(s.state == "error" for s in states):
        raise typer.Exit(1)
