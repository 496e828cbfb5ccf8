"""`workbench spark ingest`: ingest with Apache Spark tasks (`workbench.ingest_spark`), local[N] or a cluster."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.console import Console

from workbench.catalog import catalog_path
from workbench.config import get_settings
from workbench.errors import WorkbenchError
from workbench.ingest import ON_BAD, BadImagesError
from workbench.ingest_spark import MAX_FAILURES, ingest_with_spark

app = typer.Typer(no_args_is_help=True)
console = Console()


@app.callback()
def spark() -> None:
    """Apache Spark: ingest with Spark tasks (local[N] here, a cluster URL elsewhere)."""


def key_values(pairs: list[str] | None, what: str, example: str) -> dict[str, str]:
    """KEY=VALUE pairs as a dict; a malformed pair is one error line naming it."""
    out = {}
    for pair in pairs or []:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise WorkbenchError(f"{what} {pair!r} is not KEY=VALUE (e.g. {example})")
        out[key] = value
    return out


@app.command("ingest")
def spark_ingest_command(
    source: Annotated[str, typer.Option(
        help="synthetic:N[:classification|segmentation|multilabel] | imagefolder:PATH (on a cluster: a path every "
        "executor reads)")],
    backend: Annotated[str, typer.Option("--backend", "-b", help="cassandra | s3-objects | s3-shards | ignite | fs")],
    dataset: Annotated[str | None, typer.Option(help="dataset name (default: the source's own name)")] = None,
    option: Annotated[list[str] | None, typer.Option(
        "--option", "-o", help="layout option KEY=VALUE, repeatable (e.g. workers=8, maxcount=1000)")] = None,
    master: Annotated[str, typer.Option(help="local[N] (N tasks at once here) or a cluster URL: spark://HOST:7077, "
                                        "yarn, k8s://...")] = "local[2]",
    partitions: Annotated[int | None, typer.Option(min=1, help="Spark tasks (default: one per 10,000 samples, at "
                                                   "least the master's parallelism)")] = None,
    max_failures: Annotated[int, typer.Option(min=1, help="attempts per task before the ingest fails")] = MAX_FAILURES,
    conf: Annotated[list[str] | None, typer.Option(
        "--conf", help="Spark setting KEY=VALUE, repeatable (e.g. spark.executor.memory=4g)")] = None,
    on_bad: Annotated[str, typer.Option("--on-bad", help="bad images: skip (report each, ingest the rest) or fail "
                                        "(check all first, write nothing)")] = "skip",
) -> None:
    """Write a dataset into a backend with Spark tasks; re-running adds nothing, retried tasks duplicate nothing."""
    if on_bad not in ON_BAD:
        raise WorkbenchError(f"unknown --on-bad '{on_bad}': use {' or '.join(ON_BAD)}")
    layout = {k.replace("-", "_"): v for k, v in key_values(option, "layout option", "-o maxcount=1000").items()}
    settings = get_settings()
    try:
        summary = ingest_with_spark(source, backend, settings, dataset, master=master, partitions=partitions,
                                    on_bad=on_bad, max_failures=max_failures,
                                    conf=key_values(conf, "Spark setting", "--conf spark.executor.memory=4g"),
                                    **layout)
    except BadImagesError as exc:
        for bad in exc.bad:
            console.print(f"[red]bad image[/red] {bad}", highlight=False, soft_wrap=True)
        console.print(f"[red]error:[/red] {exc}", highlight=False, soft_wrap=True)
        raise typer.Exit(1) from None
    for bad in summary.skipped_bad:
        console.print(f"[yellow]skipped bad image[/yellow] {bad}", highlight=False, soft_wrap=True)
    console.print(summary.line(), highlight=False)
    console.print(f"catalog: {catalog_path(settings, backend, dataset or summary.dataset)}")
