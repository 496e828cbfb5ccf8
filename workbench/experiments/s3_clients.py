"""Kind `s3-clients`: one dataset's GETs through boto3, obstore, the AWS CRT and ours, interleaved (`bench
s3-clients`): samples/s and CPU per sample, each as a ratio to boto3 in the same run."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Literal

from pydantic import Field
from rich.text import Text

from workbench.bench.s3_clients import CLIENTS, DEFAULT_DATASET, table_lines
from workbench.bench.s3_clients import run as read_with_each_client
from workbench.config import Settings
from workbench.environment import describe_environment
from workbench.experiments.kind import Kind, Outcome
from workbench.experiments.spec import ExperimentSpec
from workbench.results import RUNS, write_results


class S3ClientsSpec(ExperimentSpec):
    kind: Literal["s3-clients"] = "s3-clients"
    results_dir: Path = RUNS / "bench-s3-clients"
    dataset: str = Field(DEFAULT_DATASET, min_length=1, description="an s3-objects dataset (ingest it first)")
    repeats: int = Field(3, ge=1, description="interleaved passes of every client; the median is reported")
    concurrency: int = Field(32, ge=1, le=1024, description="GETs in flight")
    clients: list[Literal[CLIENTS]] = Field(list(CLIENTS), min_length=1,  # type: ignore[valid-type]
                                            description="the clients compared (boto3-threads is the reference)")


def run(settings: Settings, spec: S3ClientsSpec) -> Outcome:
    rows = read_with_each_client(settings, spec.dataset, spec.repeats, spec.concurrency, tuple(spec.clients))
    write_results(spec.results_dir, time.strftime("s3-clients-%Y%m%d-%H%M%S"), rows, describe_environment(settings))
    return Outcome(spec.results_dir, rows)


def summary(spec: S3ClientsSpec, outcome: Outcome) -> Text:
    return Text("\n".join(table_lines(outcome.rows)))


KIND = Kind("s3-clients", S3ClientsSpec, run, summary)
