"""Kind `chaos`: a bounded soak of real loaders while the network and the servers fail under them (`workbench
chaos`): faults injected and survived, samples lost and duplicated, failed epochs (workbench/chaos.py)."""

from __future__ import annotations

import json
import time
from dataclasses import asdict
from pathlib import Path
from typing import Literal

from pydantic import Field, field_validator
from rich.console import Console
from rich.text import Text

from workbench.chaos import FAULTS, NODE_WINDOW_S, ChaosReport, FaultRecord, format_report, run_chaos
from workbench.config import Settings
from workbench.experiments.kind import Kind, LoaderNames, Outcome
from workbench.experiments.spec import ExperimentSpec
from workbench.results import RUNS


class ChaosSpec(ExperimentSpec):
    kind: Literal["chaos"] = "chaos"
    results_dir: Path = RUNS / "chaos"
    dataset: str = Field(min_length=1, description="dataset name, as ingested into every loader's backend")
    loaders: LoaderNames = Field(["cassandra", "s3-objects", "s3-shards", "ignite"], min_length=1)
    duration_s: float = Field(60.0, gt=0, description="seconds of soak (the last epoch may overrun)")
    seed: int = Field(0, description="seed of the fault choice and timing")
    faults: list[Literal[FAULTS]] = Field(list(FAULTS), min_length=1,  # type: ignore[valid-type]
                                          description="fault kinds drawn from (node faults only strike a cluster)")
    retries: int = Field(60, ge=0, description="loader setting: re-tries per request")
    retry_budget_s: float = Field(120.0, ge=0, description="loader setting: seconds of re-tries per request")
    node_window_s: float = Field(NODE_WINDOW_S, ge=0, description="seconds a node fault keeps its node away")

    @field_validator("faults", mode="before")
    @classmethod
    def _dashes(cls, value: object) -> object:  # `node-kill` is accepted for `node_kill`, as on the command line
        return [v.replace("-", "_") if isinstance(v, str) else v for v in value] if isinstance(value, list) else value


def run(settings: Settings, spec: ChaosSpec) -> Outcome:
    """The soak, each epoch's line printed as it ends (a soak runs for minutes); its report in results_dir."""
    report = run_chaos(settings, spec.loaders, spec.dataset, spec.duration_s, spec.seed, faults=list(spec.faults),
                       loader_config={"retries": spec.retries, "retry_budget_s": spec.retry_budget_s},
                       node_window_s=spec.node_window_s, log=lambda line: Console().print(line, highlight=False))
    spec.results_dir.mkdir(parents=True, exist_ok=True)
    name = time.strftime(f"chaos-seed{spec.seed}-%Y%m%d-%H%M%S")
    (spec.results_dir / f"{name}.json").write_text(json.dumps(asdict(report), indent=1) + "\n")
    (spec.results_dir / f"{name}.txt").write_text("\n".join(format_report(report)) + "\n")
    return Outcome(spec.results_dir, [asdict(report)])


def summary(spec: ChaosSpec, outcome: Outcome) -> Text:
    return Text("\n".join(format_report(report_of(outcome))))


def report_of(outcome: Outcome) -> ChaosReport:
    """The soak's report back from its row (a dict of the report, as written to its JSON file)."""
    row = dict(outcome.rows[0])
    return ChaosReport(**{**row, "faults": [FaultRecord(**f) for f in row["faults"]]})


KIND = Kind("chaos", ChaosSpec, run, summary)
