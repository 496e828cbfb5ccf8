"""`workbench inference sweep|perf|perf-install`: the inference sweep (`workbench.bench.inference`) and Triton's
perf_analyzer swept over the same points (`workbench.bench.perf_analyzer`)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from workbench.bench.inference import DEFAULT_RESULTS
from workbench.cli_options import key_values
from workbench.cli_spec import run_spec
from workbench.errors import WorkbenchError
from workbench.experiments import ExperimentSpec, make_spec
from workbench.experiments.inference import InferenceSpec, PerfSpec

# ------------------------------------------------------------------------------------ command line


def _ints(values: list[str] | None, default: list[int] | None) -> list[int] | None:
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
ConcurrencyOpt = Annotated[ListOpt, typer.Option("--concurrency", "-c",
                                                 help="requests in flight (repeatable or 1,4,8)")]
BatchSizeOpt = Annotated[ListOpt, typer.Option("--batch-size", "-b", help="samples per request (repeatable or 1,8)")]
SplitOpt = Annotated[str, typer.Option(help="split to read")]


def inference_command(
    dataset: Annotated[str, typer.Option("--dataset", "-d", help="dataset name as ingested")],
    model: ModelOpt = "ensemble",
    loader: Annotated[str, typer.Option("--loader", "-l", help="registered loader feeding the client")] = "cassandra",
    protocol: Annotated[ListOpt, typer.Option("--protocol", "-p", help="http|grpc (repeatable, default grpc)")] = None,
    concurrency: ConcurrencyOpt = None,
    batch_size: BatchSizeOpt = None,
    split: SplitOpt = "train",
    samples: Annotated[int, typer.Option(min=1, help="inferences measured per point (after warm-up)")] = 256,
    table: Annotated[str | None, typer.Option(help="cass_to_inference: keyspace.table (default: catalog)")] = None,
    option: Annotated[ListOpt, typer.Option("--option", "-o", help="loader setting KEY=VALUE (repeatable)")] = None,
    via_proxy: Annotated[bool, typer.Option(help="talk to Triton through toxiproxy")] = False,
    results_dir: Annotated[Path, typer.Option(help="CSV + JSON go here")] = DEFAULT_RESULTS,
    name: Annotated[str | None, typer.Option(help="results file name (default: model-loader-dataset)")] = None,
) -> list[dict]:
    """Triton inference throughput (inferences/s) and latency p50/p95/p99, fed from a loader."""
    spec = make_spec(InferenceSpec, "inference sweep", dataset=dataset, model=model, loader=loader, protocol=protocol,
                     concurrency=_ints(concurrency, None), batch_size=_ints(batch_size, None), split=split,
                     samples=samples, table=table, via_proxy=via_proxy, results_dir=results_dir, name=name,
                     loader_options=key_values(option, "loader option", "-o concurrency=32"))
    return _run(spec)


def perf_command(
    dataset: Annotated[str, typer.Option("--dataset", "-d", help="dataset name as ingested (its samples are the "
                                         "requests' data)")],
    model: ModelOpt = "ensemble",
    loader: Annotated[str, typer.Option("--loader", "-l", help="registered loader that reads the samples (or, "
                                        "for cass_to_inference, their UUIDs)")] = "cassandra",
    protocol: Annotated[str, typer.Option("--protocol", "-p", help="http|grpc")] = "grpc",
    concurrency: ConcurrencyOpt = None,
    batch_size: BatchSizeOpt = None,
    split: SplitOpt = "train",
    samples: Annotated[int, typer.Option(min=1, help="samples in perf_analyzer's input data (sent round-robin)")] = 64,
    mode: Annotated[str, typer.Option(help="count_windows | time_windows")] = "count_windows",
    request_count: Annotated[int, typer.Option(min=1, help="count_windows: requests per measurement window")] = 50,
    interval_ms: Annotated[int, typer.Option(min=1, help="time_windows: window length (ms)")] = 5000,
    stability: Annotated[float, typer.Option(help="stable when windows differ by less than this (%)")] = 10.0,
    max_trials: Annotated[int, typer.Option(min=1, help="windows tried per point before giving up")] = 10,
    table: Annotated[str | None, typer.Option(help="cass_to_inference: keyspace.table (default: catalog)")] = None,
    option: Annotated[ListOpt, typer.Option("--option", "-o", help="loader setting KEY=VALUE (repeatable)")] = None,
    via_proxy: Annotated[bool, typer.Option(help="talk to Triton through toxiproxy")] = False,
    timeout_s: Annotated[float, typer.Option(min=1, help="limit of one perf_analyzer run (s)")] = 300.0,
    results_dir: Annotated[Path, typer.Option(help="CSV + JSON + PNG go here")] = DEFAULT_RESULTS,
    name: Annotated[str | None, typer.Option(help="results file name (default: perf_analyzer-model-protocol)")] = None,
) -> list[dict]:
    """Triton's perf_analyzer at every concurrency x batch size, fed the dataset's samples: throughput, latency
    p50/p90/p99 and the client/server breakdown."""
    spec = make_spec(PerfSpec, "inference perf", dataset=dataset, model=model, loader=loader, protocol=protocol,
                     concurrency=_ints(concurrency, None), batch_size=_ints(batch_size, None), split=split,
                     samples=samples, mode=mode, request_count=request_count, interval_ms=interval_ms,
                     stability=stability, max_trials=max_trials, table=table, via_proxy=via_proxy,
                     timeout_s=timeout_s, results_dir=results_dir, name=name,
                     loader_options=key_values(option, "loader option", "-o concurrency=32"))
    return _run(spec)


def _run(spec: ExperimentSpec) -> list[dict]:
    """The rows too: the notebooks call these commands as functions."""
    from rich.console import Console

    return run_spec(spec, Console()).rows


def perf_install_command() -> None:
    """Unpack a perf_analyzer that runs here into the venv (tritonclient 2.51's, with its two libraries)."""
    from workbench.bench.perf_analyzer import TOOL_DIR, install_perf_analyzer

    binary = install_perf_analyzer()
    typer.echo(f"perf_analyzer {binary.version}: {binary.path} (libraries in {TOOL_DIR / 'lib'})")


inference_app = typer.Typer(no_args_is_help=True, help="Triton inference fed from remote storage.")
inference_app.command("sweep")(inference_command)
inference_app.command("perf")(perf_command)
inference_app.command("perf-install")(perf_install_command)


@inference_app.callback()
def _inference_group() -> None:
    """Triton inference fed from remote storage: `sweep` measures inferences/s and latency with our client,
    `perf` with Triton's perf_analyzer (`perf-install` fetches one that runs here)."""
