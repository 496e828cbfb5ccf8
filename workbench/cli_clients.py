"""`workbench bench clients`: the command line of many reader ranks (`workbench.bench.clients`)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from workbench.bench.clients import DEFAULT_RESULTS, bench_clients
from workbench.bench.clients_launch import LaunchPlan
from workbench.concurrency import parse_concurrency
from workbench.config import get_settings
from workbench.errors import WorkbenchError

console = Console()


def _number(value: float, digits: int = 0) -> str:
    return f"{value:.{digits}f}" if value is not None and math.isfinite(value) else "-"


def show_row(row: dict) -> None:
    """Per-rank table, the aggregate line and the exactly-once verdict."""
    table = Table("rank", "host", "shard", "samples", "seconds", "samples/s", "accelerator util.",
                  title=f"{row['ranks']} {row['loader']} ranks ({row['launcher']}) on {row['dataset']}/{row['split']}, "
                        f"compute {row['compute_ms']:g} ms/batch")
    for rank, (host, shard, samples, seconds, rate, util) in enumerate(zip(
            row["rank_hosts"], row["shards"], row["rank_samples"], row["rank_seconds"], row["rank_samples_per_s"],
            row["rank_accelerator_utilisation"], strict=True)):
        table.add_row(str(rank), host, str(shard), str(samples), _number(seconds, 2), _number(rate),
                      _number(util, 3) if util is not None else "-")
    console.print(table)
    console.print(f"aggregate {_number(row['samples_per_s'])} samples/s ({_number(row['mb_per_s'], 1)} MB/s) over "
                  f"{_number(row['seconds'], 2)} s; slowest rank {row['slowest_rank']} at "
                  f"{_number(row['slowest_rank_samples_per_s'])} samples/s; imbalance "
                  f"{_number(row['rank_imbalance'], 2)}x", highlight=False)
    if row["exactly_once"]:
        console.print(f"exactly once: {row['samples']} reads of {row['expected_samples']} samples "
                      f"(expected ids: {row['expected_from']})", highlight=False)
    else:
        console.print(f"[red]{row['error']}[/red]", highlight=False)


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
    settings = get_settings()
    if expected not in ("split", "stored"):
        raise WorkbenchError(f"--expected {expected!r}: use split or stored")
    plan = LaunchPlan(launcher or settings.launcher, ranks or settings.client_ranks, nnodes=nnodes,
                      rdzv_endpoint=rdzv_endpoint, hosts=hosts, start_timeout_s=start_timeout)
    config = {"split": split, "batch_size": batch_size, "concurrency": parse_concurrency(concurrency)}
    row = bench_clients(settings, loader, plan.ranks, plan.launcher, dataset=dataset, count=count, mean_kb=mean_kb,
                        compute_ms=compute_ms, config=config, via_proxy=via_proxy, max_seconds=max_seconds,
                        plan=plan, expected_mode=expected, results_dir=results_dir)  # type: ignore[arg-type]
    if row is None:
        console.print("this host's ranks finished; the host that ran rank 0 checks and writes the row")
        return
    show_row(row)
    console.print(f"results: {results_dir}")
    if row["status"] != "ok":
        raise typer.Exit(1)


app = typer.Typer(no_args_is_help=True, help="Many reader ranks against one storage service.")
app.command("clients")(clients_command)


@app.callback()
def _clients_group() -> None:
    """Many reader ranks: `clients` starts them with torchrun or mpirun."""
