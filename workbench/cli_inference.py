"""`workbench inference sweep`: the command line of the inference sweep (`workbench.bench.inference`)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from workbench.bench.inference import DEFAULT_RESULTS, sweep_inference
from workbench.cli_options import key_values
from workbench.config import get_settings
from workbench.errors import WorkbenchError

# ------------------------------------------------------------------------------------ command line


def _ints(values: list[str] | None, default: list[int]) -> list[int]:
    if not values:
        return default
    out = []
    for value in values:
        for part in str(value).split(","):
            if part.strip():
                try:
                    out.append(int(part))
                except ValueError:
                    raise WorkbenchError(f"'{part}' is not an integer") from None
    return out


ModelOpt = Annotated[str, typer.Option("--model", "-m", help="ensemble (client sends bytes) | cass_to_inference "
                                      "(client sends UUIDs, Triton reads Cassandra) | preprocess")]
ListOpt = list[str] | None


def inference_command(
    dataset: Annotated[str, typer.Option("--dataset", "-d", help="dataset name as ingested")],
    model: ModelOpt = "ensemble",
    loader: Annotated[str, typer.Option("--loader", "-l", help="registered loader feeding the client")] = "cassandra",
    protocol: Annotated[ListOpt, typer.Option("--protocol", "-p", help="http|grpc (repeatable, default grpc)")] = None,
    concurrency: Annotated[ListOpt, typer.Option("--concurrency", "-c",
                                                 help="requests in flight (repeatable or 1,4,8)")] = None,
    batch_size: Annotated[ListOpt, typer.Option("--batch-size", "-b",
                                                help="samples per request (repeatable or 1,8)")] = None,
    split: Annotated[str, typer.Option(help="split to read")] = "train",
    samples: Annotated[int, typer.Option(min=1, help="inferences measured per point (after warm-up)")] = 256,
    table: Annotated[str | None, typer.Option(help="cass_to_inference: keyspace.table (default: catalog)")] = None,
    option: Annotated[ListOpt, typer.Option("--option", "-o", help="loader setting KEY=VALUE (repeatable)")] = None,
    via_proxy: Annotated[bool, typer.Option(help="talk to Triton through toxiproxy")] = False,
    results_dir: Annotated[Path, typer.Option(help="CSV + JSON go here")] = DEFAULT_RESULTS,
    name: Annotated[str | None, typer.Option(help="results file name (default: model-loader-dataset)")] = None,
) -> list[dict]:
    """Triton inference throughput (inferences/s) and latency p50/p95/p99, fed from a loader."""
    from rich.console import Console
    from rich.table import Table

    loader_options: dict[str, Any] = key_values(option, "loader option", "-o concurrency=32")
    console = Console()
    table_view = Table("protocol", "concurrency", "batch", "inferences/s", "p50 ms", "p95 ms", "p99 ms",
                       "loader wait ms", title=f"{model} fed by {loader} ({dataset}/{split})")

    def show(row: dict) -> None:
        console.print(f"{row['protocol']} c={row['concurrency']} b={row['batch_size']}: "
                      f"{row['inferences_per_s']:.1f} inferences/s, p50 {row['latency_ms_p50']:.1f} ms",
                      highlight=False)
        table_view.add_row(row["protocol"], str(row["concurrency"]), str(row["batch_size"]),
                           f"{row['inferences_per_s']:.1f}", f"{row['latency_ms_p50']:.1f}",
                           f"{row['latency_ms_p95']:.1f}", f"{row['latency_ms_p99']:.1f}",
                           f"{row['loader_wait_ms_mean']:.1f}")


    rows = sweep_inference(
        get_settings(), model, loader, dataset, _ints(concurrency, [1, 4, 8]), _ints(batch_size, [1, 8]),
        protocol or ["grpc"], split=split, samples=samples, loader_options=loader_options, table=table,
        via_proxy=via_proxy, results_dir=results_dir, name=name, progress=show,
    )
    console.print(table_view)
    console.print(f"results: {results_dir}")
    return rows


inference_app = typer.Typer(no_args_is_help=True, help="Triton inference fed from remote storage.")
inference_app.command("sweep")(inference_command)


@inference_app.callback()
def _inference_group() -> None:
    """Triton inference fed from remote storage: `sweep` measures inferences/s and latency."""
