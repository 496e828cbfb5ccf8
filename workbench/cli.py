"""The `workbench` command line: stack management now; ingest, bench, sweep and report grow here."""

from __future__ import annotations

import sys
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from workbench.config import Settings, ensure_credentials, get_settings
from workbench.errors import WorkbenchError

app = typer.Typer(no_args_is_help=True, add_completion=False, help=__doc__)
stack_app = typer.Typer(no_args_is_help=True, help="Run the real servers: Cassandra, MinIO, Ignite, Triton, toxiproxy.")
app.add_typer(stack_app, name="stack")
console = Console()

StackMode = Annotated[
    str | None, typer.Option("--stack", help="local: run the servers here; compose/external: only connect")
]
Services = Annotated[list[str] | None, typer.Argument(help="services to act on (default: all)", show_default=False)]


def settings_for(stack: str | None) -> Settings:
    if stack is None:
        return get_settings()
    if stack not in ("local", "compose", "external"):
        raise WorkbenchError(f"unknown --stack '{stack}': use local, compose or external")
    return get_settings().model_copy(update={"stack": stack})


def print_status(rows) -> None:
    table = Table("service", "version", "address", "healthy", "pid", "detail", title="workbench stack")
    for row in rows:
        healthy = "[green]yes[/green]" if row.healthy else "[red]no[/red]"
        table.add_row(row.service, row.version, row.address, healthy, str(row.pid or "-"), row.detail)
    console.print(table)


@app.command("init")
def init() -> None:
    """Write generated S3 root credentials to .env (mode 600) unless some are configured already."""
    console.print("wrote generated credentials to .env" if ensure_credentials() else "credentials already configured")


@stack_app.command("up")
def stack_up(services: Services = None, stack: StackMode = None) -> None:
    """Provision (first time only) and start the servers; wait until each answers a real request."""
    from workbench.stack import up

    if ensure_credentials():
        console.print("wrote generated S3 credentials to .env (kept out of git)")
    rows = up(settings_for(stack), services)
    print_status(rows)
    if not all(r.healthy for r in rows):
        raise typer.Exit(1)


@stack_app.command("down")
def stack_down(services: Services = None) -> None:
    """Stop the servers this stack started (by pid file, never by name)."""
    from workbench.stack import down

    stopped = down(get_settings(), services)
    console.print(f"stopped: {', '.join(stopped) or 'nothing was running'}")


@stack_app.command("status")
def stack_status(services: Services = None) -> None:
    """Service, version, address, healthy, pid."""
    from workbench.stack import status

    rows = status(get_settings(), services)
    print_status(rows)
    if not all(r.healthy for r in rows):
        raise typer.Exit(1)


@stack_app.command("logs")
def stack_logs(service: str, lines: Annotated[int, typer.Option("-n", help="last N lines")] = 50) -> None:
    """The last lines of a server's log."""
    from workbench.stack import logs

    print(logs(get_settings(), service, lines))


@stack_app.command("probe")
def stack_probe(repeats: Annotated[int, typer.Option(min=1)] = 20) -> None:
    """Write and read one 110 KB sample through every service, directly and through toxiproxy."""
    from workbench.stack.probe import probe_all

    results = probe_all(get_settings(), repeats)
    table = Table("service", "path", "bytes", "read RTT median ms", "min ms", "round trip ok",
                  title=f"one sample written and read back ({repeats} reads each)")
    for r in results:
        table.add_row(r.service, r.path, str(r.bytes), f"{r.rtt_ms_median:.2f}", f"{r.rtt_ms_min:.2f}",
                      "[green]yes[/green]" if r.ok else f"[red]no[/red] {r.detail}")
    console.print(table)
    if not all(r.ok for r in results):
        raise typer.Exit(1)


def main() -> None:
    """Entry point: user mistakes print one line, not a traceback."""
    try:
        app()
    except WorkbenchError as exc:
        console.print(f"[red]error:[/red] {exc}", highlight=False, soft_wrap=True)
        sys.exit(2)


if __name__ == "__main__":
    main()
