"""Studies: sweep configs that each answer one question, with their run time estimated before they run.

A study is a sweep config with a `question` (notebooks/sweeps/studies/<name>.yaml). `estimate_seconds`
predicts its run time from the grid alone, so `workbench study run` can refuse a study over a time limit
before anything starts. A run goes to a git-ignored folder (results/runs/<name>/); `publish` is the explicit
step that copies a complete run and its report to results/studies/<name>/, the committed reference.
`combine` joins several runs into one folder for one report, refusing runs of different code or topology.
"""

from __future__ import annotations

import dataclasses
import json
import math
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import yaml

from workbench import catalog
from workbench.backends import backend_class
from workbench.bench.loaders import overrides
from workbench.bench.points import AXIS_TOPOLOGY, SweepPoint
from workbench.bench.sweep import dataset_name
from workbench.bench.sweep_ceilings import CEILING_PREFIX, backend_of, ceiling_points
from workbench.bench.sweep_config import SweepConfig, load_sweep_config
from workbench.concurrency import AUTO
from workbench.config import Settings
from workbench.errors import WorkbenchError
from workbench.loaders import loader_class
from workbench.results import PROGRESS_FILE, SPEC_FILE, check_writable, write_atomically

STUDIES = Path("notebooks") / "sweeps" / "studies"  # the study configs
PUBLISHED = Path("results") / "studies"  # the committed reference runs, one folder per study
RUN_FILES = ("runs.parquet", "runs.csv", "config.json", "environment.json", PROGRESS_FILE)
TOPOLOGY_PREFIX = "topology_"
Ingested = Callable[[str, str], bool]  # (backend, dataset) -> already ingested?


@dataclass(frozen=True)
class Planning:
    """The planning figures of the estimate, from this 2-core machine shared by client and servers (docs/JOURNAL.md):
    loaders read 350-2,700 samples/s at 0 ms, so a middle figure; each knob that binds lowers it."""

    samples_per_s: float = 400.0  # a loader's rate when neither the network nor decoding nor compute binds
    ceiling_samples_per_s: float = 650.0  # a native ceiling's rate, the same
    decode_samples_per_s: float = 200.0  # JPEG decode + resize to 224 per loading process (430 per CPU second)
    auto_depth: int = 64  # the window "auto" is taken to open
    shards_in_flight: int = 4  # shard GETs a sharded loader keeps in flight, where "auto" starts (maxcount each)
    epoch_overhead_s: float = 1.0  # building and closing a loader, connecting
    round_trips_to_start: int = 10  # round trips before the first batch (connect, login, listing)
    worker_start_s: float = 4.0  # DataLoader worker processes, per epoch (2-6 s measured under load)
    ceiling_start_s: float = 1.5  # a ceiling program's start and connect (a JVM for Ignite)
    ingest_samples_per_s: float = 60.0  # generating and writing the dataset, per layout (31/s at load 13)
    ranks_start_s: float = 6.0  # a launcher (torchrun) and its gloo rendezvous, per run of reader ranks
    rank_start_s: float = 2.5  # each rank's interpreter, torch import and loader, on the 2 shared cores


PLANNING = Planning()


def _rate(cfg: SweepConfig, point: SweepPoint, base: float, plan: Planning) -> float:
    """Samples/s of a point: the base rate, or what the network, bandwidth, decoding or compute allow."""
    rate = base
    if point.rtt_ms > 0:
        if backend_class(backend_of(point)).sharded:
            window = plan.shards_in_flight * (point.shard_maxcount or 1)
        else:
            window = plan.auto_depth if point.concurrency == AUTO else int(point.concurrency)
        rate = min(rate, window / (point.rtt_ms / 1000))  # Little's law: in flight / round-trip time
    if point.bandwidth_mbps > 0:
        rate = min(rate, point.bandwidth_mbps * 1e6 / 8 / (cfg.data.mean_kb * 1000))
    if point.decode:
        rate = min(rate, plan.decode_samples_per_s * max(1, point.workers or 0))
    if point.compute_ms:
        rate = min(rate, (point.accelerators or 1) * (point.batch_size or 1) / (point.compute_ms / 1000))
    return rate


def epoch_seconds(cfg: SweepConfig, point: SweepPoint, plan: Planning = PLANNING) -> float:
    """One epoch of a loader point: start-up, then the dataset at its rate or until max_seconds_per_epoch."""
    start = plan.epoch_overhead_s + plan.round_trips_to_start * point.rtt_ms / 1000
    if point.workers:
        start += plan.worker_start_s
    return start + min(cfg.max_seconds_per_epoch, cfg.data.count / _rate(cfg, point, plan.samples_per_s, plan))


def ranks_seconds(cfg: SweepConfig, point: SweepPoint, plan: Planning = PLANNING) -> float:
    """One run of `point.clients` reader ranks: the launcher and every rank starting, then the whole dataset
    (ranks read whole shards, no max_seconds_per_epoch) at no more than one loader's rate: the ranks share
    the machine's cores, and each rank's compute time binds alone (one accelerator per rank)."""
    clients = int(point.clients or 1)
    start = plan.ranks_start_s + clients * plan.rank_start_s + plan.round_trips_to_start * point.rtt_ms / 1000
    rate = min(_rate(cfg, dataclasses.replace(point, compute_ms=0), plan.samples_per_s, plan),
               _rate(cfg, dataclasses.replace(point, accelerators=clients), math.inf, plan))
    return start + cfg.data.count / rate


def run_seconds(cfg: SweepConfig, point: SweepPoint, plan: Planning = PLANNING) -> float:
    """One repetition of a point: warm-up and epochs for a loader (or one run of its reader ranks), one whole
    read of the dataset for a ceiling."""
    if point.loader.startswith(CEILING_PREFIX):
        return plan.ceiling_start_s + cfg.data.count / _rate(cfg, point, plan.ceiling_samples_per_s, plan)
    warmup = plan.epoch_overhead_s + cfg.warmup_batches * (point.batch_size or 1) / _rate(
        cfg, point, plan.samples_per_s, plan) if cfg.warmup_batches else 0.0
    if point.clients is not None:
        return warmup + ranks_seconds(cfg, point, plan)
    return warmup + cfg.epochs * epoch_seconds(cfg, point, plan)


def prepare_seconds(cfg: SweepConfig, points: list[SweepPoint], plan: Planning = PLANNING,
                    ingested: Ingested = lambda backend, dataset: False) -> float:
    """Ingesting every layout the grid reads that is not `ingested` yet (ingest is idempotent), and the copies
    of loaders that keep a layout of their own (taken as made when their base layout is)."""
    todo = {(loader_class(p.loader).backend, dataset_name(cfg, p)) for p in points}
    todo = {layout for layout in todo if not ingested(*layout)}
    copies = {(p.loader, dataset_name(cfg, p)) for p in points if overrides(loader_class(p.loader), "prepare_dataset")
              and (loader_class(p.loader).backend, dataset_name(cfg, p)) in todo}
    return (len(todo) + len(copies)) * cfg.data.count / plan.ingest_samples_per_s


def measure_seconds(cfg: SweepConfig, plan: Planning = PLANNING) -> float:
    """Every run of the sweep: its points' repetitions, then its ceilings'; with reader ranks, one scan of
    each dataset for the ids the exactly-once check expects."""
    points = cfg.points()
    every = points + (ceiling_points(points) if cfg.ceilings else [])
    scans = {(loader_class(p.loader).backend, dataset_name(cfg, p)) for p in points if p.clients is not None}
    return (cfg.repetitions * sum(run_seconds(cfg, p, plan) for p in every)
            + len(scans) * cfg.data.count / plan.samples_per_s)


def estimate_seconds(cfg: SweepConfig, plan: Planning = PLANNING,
                     ingested: Ingested = lambda backend, dataset: False) -> float:
    """The whole sweep's predicted run time: data preparation (what is not `ingested` yet) and measurement."""
    return prepare_seconds(cfg, cfg.points(), plan, ingested) + measure_seconds(cfg, plan)


def in_catalog(settings: Settings) -> Ingested:
    """Whether a layout was ingested already, as this stack's catalog records it."""
    return lambda backend, dataset: catalog.entry(settings, backend, dataset) is not None


# ------------------------------------------------------------------------------------------- the studies


@dataclass(frozen=True)
class Study:
    """A study config and its estimate (data preparation counted for the layouts not ingested yet)."""

    path: Path
    config: SweepConfig
    ingested: Ingested = lambda backend, dataset: False

    @property
    def name(self) -> str:
        return self.config.name

    @property
    def runs(self) -> int:
        points = self.config.points()
        return self.config.repetitions * (len(points) + (len(ceiling_points(points)) if self.config.ceilings else 0))

    @property
    def prepare_minutes(self) -> float:
        return prepare_seconds(self.config, self.config.points(), ingested=self.ingested) / 60

    @property
    def minutes(self) -> float:
        return estimate_seconds(self.config, ingested=self.ingested) / 60


def list_studies(folder: Path = STUDIES, ingested: Ingested = lambda backend, dataset: False) -> list[Study]:
    """Every study config in `folder`, by name; an invalid one fails with its file and problem."""
    if not folder.is_dir():
        raise WorkbenchError(f"no study folder {folder}: run from the repository root or pass the folder")
    return sorted((Study(path, load_sweep_config(path), ingested) for path in folder.glob("*.yaml")),
                  key=lambda s: s.name)


def find_study(name_or_path: str, folder: Path = STUDIES,
               ingested: Ingested = lambda backend, dataset: False) -> Study:
    """A study by name (<folder>/<name>.yaml) or by the path of any sweep YAML."""
    path = Path(name_or_path)
    if not path.suffix:
        path = folder / f"{name_or_path}.yaml"
        if not path.exists():
            known = ", ".join(p.stem for p in sorted(folder.glob("*.yaml"))) or "none"
            raise WorkbenchError(f"no study '{name_or_path}' in {folder} (studies: {known}); or give a YAML path")
    return Study(path, load_sweep_config(path), ingested)


def check_time(study: Study, max_minutes: float, yes: bool) -> None:
    """Refuse a study whose estimate is over `max_minutes` unless the user said --yes."""
    if study.minutes > max_minutes and not yes:
        raise WorkbenchError(
            f"study {study.name} is estimated at {study.minutes:.0f} minutes, over the {max_minutes:g}-minute "
            "limit: add --yes to run it anyway, or raise --max-minutes, or trim its grid in "
            f"{study.path}")


# ------------------------------------------------------------------------------- publish and combine


def check_complete(folder: Path) -> None:
    """Refuse a folder that is not a finished sweep: no runs, or progress.json missing or incomplete."""
    if not (folder / "runs.parquet").is_file():
        raise WorkbenchError(f"{folder} has no runs.parquet: not a sweep's results folder")
    progress = _json(folder / PROGRESS_FILE)
    if progress.get("complete") is not True:
        done = f"{progress.get('runs_done')} of {progress.get('runs_total')} runs" if progress else "no progress.json"
        raise WorkbenchError(f"{folder} is not a complete run ({done}): run the study to its end first")


def published_spec(text: str, root: Path, name: str) -> str:
    """A sweep's spec (YAML) rewritten to make the published folder <root>/<name>/ itself."""
    spec = yaml.safe_load(text)
    spec["results_dir"] = str(root)
    spec["sweep"] = {**spec["sweep"], "name": name}
    return yaml.safe_dump(spec, sort_keys=False)


def publish(run: Path, name: str | None = None, root: Path = PUBLISHED, replace: bool = False) -> Path:
    """Copy a complete run with its report to <root>/<name>/ (default name: the sweep's); returns the folder.

    The explicit step that makes a run the committed reference (`workbench study publish` builds the report
    first when missing). The copy is made beside the target and renamed into place, so a failed copy leaves
    the old one.
    """
    run = Path(run)
    check_complete(run)
    if not (run / "report" / "report.html").is_file():
        raise WorkbenchError(f"{run} has no report/report.html: build it with `workbench report {run}`")
    name = name or str(_config(run).get("name") or run.name)
    if not name or "/" in name or name.startswith("."):
        raise WorkbenchError(f"study name '{name}' is not a folder name: pass --name NAME")
    target = root / name
    if target.exists() and not replace:
        raise WorkbenchError(f"{target} exists: add --replace to publish over it")
    root.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{name}-", dir=root))
    try:
        for file in (*RUN_FILES, "summary.csv"):
            if (run / file).is_file():
                shutil.copy2(run / file, staging / file)
        shutil.copytree(run / "report", staging / "report")
        if (run / SPEC_FILE).is_file():  # remade where it is published: `workbench run <target>/spec.yaml`
            (staging / SPEC_FILE).write_text(published_spec((run / SPEC_FILE).read_text(), root, name))
        if target.exists():
            shutil.rmtree(target)
        staging.rename(target)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return target


def _json(path: Path) -> dict:
    """A JSON object file of a run folder ({} when absent or unreadable)."""
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _config(folder: Path) -> dict:
    return _json(folder / "config.json")


def provenance(frame) -> dict[str, list[str]]:
    """The code version and topology a run's rows record: {"git_commit": [...], "topology_<field>": [...]}.
    Topology a sweep axis sets per point (client ranks, from `clients`) is the sweep's grid, not provenance."""
    columns = ["git_commit", *sorted(c for c in frame.columns if c.startswith(TOPOLOGY_PREFIX)
                                     and c.removeprefix(TOPOLOGY_PREFIX) not in AXIS_TOPOLOGY)]
    return {c: sorted({str(v) for v in frame[c].dropna()}) if c in frame.columns else ["(not recorded)"]
            for c in columns}


def check_mixable(frames: dict[Path, object]) -> None:
    """Refuse runs whose git commit or topology differ (or that record none): their numbers do not compare."""
    seen = {folder: provenance(frame) for folder, frame in frames.items()}
    keys = sorted({k for p in seen.values() for k in p})
    differing = []
    for key in keys:
        values = {folder: tuple(p.get(key, ["(not recorded)"])) for folder, p in seen.items()}
        if len(set(values.values())) > 1 or any(len(v) > 1 for v in values.values()):
            differing.append(f"{key}: " + "; ".join(f"{f} {', '.join(v)}" for f, v in values.items()))
    if differing:
        raise WorkbenchError("these runs differ in code version or topology, so their numbers do not compare ("
                             + " | ".join(differing) + "): add --mix to combine them anyway")


def combine(folders: list[Path], out: Path, mix: bool = False) -> Path:
    """One folder of the runs of several complete sweeps (runs.parquet, runs.csv, config, environment), for
    one report; rows keep their sweep name and gain `source_run`. Refuses differing code or topology unless
    `mix`."""
    import pandas as pd

    if len(folders) < 2:
        raise WorkbenchError("combine needs at least two run folders")
    frames = {}
    for folder in folders:
        check_complete(Path(folder))
        frames[Path(folder)] = pd.read_parquet(Path(folder) / "runs.parquet")
    if not mix:
        check_mixable(frames)
    out = check_writable(Path(out))
    offset, parts = 0, []
    for folder, frame in frames.items():
        frame = frame.assign(source_run=str(folder))
        if "point_id" in frame.columns:  # point ids stay apart: one summary row per point of each run
            frame["point_id"] = frame["point_id"] + offset
            offset = int(frame["point_id"].max()) + 1
        parts.append(frame)
    combined = pd.concat(parts, ignore_index=True)
    if "concurrency" in combined.columns:
        combined["concurrency"] = combined["concurrency"].astype(str)
    names = [str(_config(f).get("name") or f.name) for f in frames]
    questions = dict.fromkeys(q for f in frames if (q := _config(f).get("question")))  # one study's runs: once
    config = {"name": out.name, "question": "; ".join(questions),
              "combined_from": [str(f) for f in frames], "sweeps": names, "mixed": mix}
    environment = {"combined_from": {str(f): _json(f / "environment.json") for f in frames}}
    write_atomically(out / "runs.parquet", lambda tmp: combined.to_parquet(tmp, index=False))
    write_atomically(out / "runs.csv", lambda tmp: combined.to_csv(tmp, index=False))
    write_atomically(out / "config.json", lambda tmp: tmp.write_text(json.dumps(config, indent=2)))
    write_atomically(out / "environment.json", lambda tmp: tmp.write_text(json.dumps(environment, indent=2)))
    done = len(combined)
    write_atomically(out / PROGRESS_FILE, lambda tmp: tmp.write_text(
        json.dumps({"runs_done": done, "runs_total": done, "complete": True})))
    return out
