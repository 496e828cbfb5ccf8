"""`workbench bench clients`: the command line of many reader ranks (`workbench.bench.clients`)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from workbench.bench.clients import DEFAULT_RESULTS
from workbench.cli_spec import run_spec
from workbench.experiments import make_spec
from workbench.experiments.clients import ClientsSpec

console = Console()


def clients_command(
    loader: Annotated[str, typer.Option("--loader", "-l", help="registered loader each rank reads with")],
    ranks: Annotated[int | None, typer.Option("--ranks", "-r", min=1,
                                              help="reader ranks (default: WORKBENCH_CLIENT_RANKS)")] = None,
    launcher: Annotated[str | None, typer.Option(help="torchrun | mpirun (default: WORKBENCH_LAUNCHER)")] = None,
    dataset: Annotated[str | None, typer.Option("--dataset", "-d", help="an ingested dataset (default: a "
                                                "synthetic one of --count x --mean-kb, ingested if needed)")] = None,
    split: Annotated[str, typer.Option(help="split to read")] = "train",
    count: Annotated[int, typer.Option(min=10, help="synthetic samples (without --dataset)")] = 1000,
    mean_kb: Annotated[float, typer.Option(min=1, help="synthetic JPEG size (without --dataset)")] = 110.0,
    compute_ms: Annotated[float, typer.Option(min=0, help="emulated accelerator compute per batch")] = 0.0,
    batch_size: Annotated[int, typer.Option(min=1, help="samples per batch (one compute step)")] = 32,
    concurrency: Annotated[str, typer.Option(help="requests in flight per rank, or auto")] = "auto",
    via_proxy: Annotated[bool, typer.Option("--via-proxy/--direct", help="through toxiproxy (as bench loaders) "
                                            "or straight to the servers")] = True,
    expected: Annotated[str, typer.Option(help="split: the split's ids from a scan of the backend (reads the data "
                                          "once more, after the timed run); stored: every stored id (cheap, one "
                                          "split only)")] = "split",
    max_seconds: Annotated[float, typer.Option(min=1, help="longest a rank may read its shard")] = 600.0,
    start_timeout: Annotated[float, typer.Option(min=1, help="longest the ranks may take to start")] = 120.0,
    nnodes: Annotated[int, typer.Option(min=1, help="torchrun: hosts taking part (run this command on each)")] = 1,
    rdzv_endpoint: Annotated[str | None, typer.Option(help="torchrun on several hosts: HOST:PORT of the "
                                                      "rendezvous")] = None,
    hosts: Annotated[str | None, typer.Option(help="mpirun -H, e.g. node1:2,node2:2 (rank 0's host first)")] = None,
    results_dir: Annotated[Path, typer.Option(help="CSV + JSON go here")] = DEFAULT_RESULTS,
) -> None:
    """R reader ranks (torchrun or mpirun) read one epoch of their shards: aggregate and per-rank rates,
    accelerator utilisation, and a check that together they read every sample exactly once."""
    spec = make_spec(ClientsSpec, "bench clients", loader=loader, ranks=ranks, launcher=launcher, dataset=dataset,
                     split=split, count=count, mean_kb=mean_kb, compute_ms=compute_ms, batch_size=batch_size,
                     concurrency=concurrency, via_proxy=via_proxy, expected=expected, max_seconds=max_seconds,
                     start_timeout=start_timeout, nnodes=nnodes, rdzv_endpoint=rdzv_endpoint, hosts=hosts,
                     results_dir=results_dir)
    outcome = run_spec(spec, console)  # its kind's summary: the per-rank table, or "this host's ranks finished"
    if outcome.rows and outcome.rows[0]["status"] != "ok":
        raise typer.Exit(1)


app = typer.Typer(no_args_is_help=True, help="Many reader ranks against one storage service.")
app.command("clients")(clients_command)


@app.callback()
def _clients_group() -> None:
    """Many reader ranks: `clients` starts them with torchrun or mpirun."""
