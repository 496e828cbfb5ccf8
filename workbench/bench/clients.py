"""`workbench bench clients`: R reader ranks, started by torchrun or mpirun, each reading its shard of one
dataset through the normal loaders for one epoch, as data-parallel training (or MLPerf Storage's DLIO) reads.

One row per run: the aggregate rate (all samples / the slowest rank's wall time), the slowest rank's rate,
every rank's rate and accelerator utilisation (with emulated compute per batch), the topology and the
launcher, and an exactly-once check: the ranks together read every sample id of the split exactly once
(missing, duplicated and unexpected counts; a failed check makes the row's status "error"). The ranks send
their ids to rank 0 over gloo; the expected ids come from the backend itself (`expected_ids`), not from a
loader. `run_clients` is one point (what a sweep axis `clients` calls); `bench_clients` prepares a dataset,
runs it and writes the results like the other bench commands.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any, Literal

from tqdm import tqdm

from workbench import catalog
from workbench.backends import backend_class, make_backend
from workbench.bench.clients_launch import LaunchPlan, free_port, launch, launcher_command, settings_env
from workbench.bench.clients_metrics import RankResult, exactly_once, summarise_ranks
from workbench.bench.clients_rank import RESULTS_FILE, read_json
from workbench.bench.loaders import prepare_data, prepare_peer_layouts
from workbench.config import Settings
from workbench.environment import describe_environment
from workbench.errors import WorkbenchError
from workbench.loaders import loader_class
from workbench.net.toxiproxy import Toxiproxy
from workbench.registry import validated
from workbench.results import RUNS, check_writable, write_results

DEFAULT_RESULTS = RUNS / "bench-clients"
Expected = Literal["split", "stored"]
# Loader settings each rank sets itself: a caller's values would be overwritten, so they are refused.
RANK_SETTINGS = ("shard_id", "num_shards")


def expected_ids(settings: Settings, loader: str, dataset: str, split: str = "train", mode: Expected = "split",
                 progress: bool = True) -> set[str]:
    """The ids the ranks must read together, asked of the loader's backend (layout options from the catalog).

    "split": the split's ids from a scan of the backend (reads every stored sample once, after the timed run);
    "stored": every id the backend holds, without reading the data (cheap; right when the dataset has one split).
    """
    backend = loader_class(loader).backend
    entry = catalog.entry(settings, backend, dataset) or {}
    fields = backend_class(backend).Options.model_fields
    target = make_backend(backend, settings, dataset, **{k: v for k, v in entry.items() if k in fields})
    if mode == "stored":
        return {str(i) for i in target.stored_ids()}
    samples = tqdm(target.scan(), desc=f"exactly-once: ids of {dataset}/{split}", unit="sample", disable=not progress)
    return {str(s.id) for s in samples if s.split == split}


def _rank_args(loader: str, config: dict, work_dir: Path, compute_ms: float, max_seconds: float,
               plan: LaunchPlan, shards: list[int] | None) -> list[str]:
    args = ["--loader", loader, "--config", json.dumps(config), "--work-dir", str(work_dir),
            "--compute-ms", str(compute_ms), "--max-seconds", str(max_seconds),
            "--start-timeout", str(plan.start_timeout_s)]
    return [*args, "--shards", ",".join(map(str, shards))] if shards else args


def _environment(settings: Settings, plan: LaunchPlan) -> tuple[dict[str, str], list[str]]:
    """(the ranks' environment, the names mpirun forwards to other hosts)."""
    own = {**settings_env(settings), "OMP_NUM_THREADS": "1"}
    if plan.launcher == "mpirun":  # torchrun sets these itself; mpirun's ranks meet at rank 0's gloo store
        own["MASTER_ADDR"] = plan.hosts.split(",")[0].split(":")[0] if plan.hosts else plan.master_addr
        own["MASTER_PORT"] = str(plan.master_port or free_port(plan.master_addr))
    forwarded = [*own, *(n for n in ("PYTHONPATH",) if n in os.environ)]
    return {**os.environ, **own}, forwarded


def run_clients(settings: Settings, loader: str, config: dict[str, Any], ranks: int, launcher: str = "torchrun",
                compute_ms: float = 0.0, max_seconds: float = 600.0, *, plan: LaunchPlan | None = None,
                shards: list[int] | None = None, expected: set[str] | None = None,
                expected_mode: Expected = "split", start_timeout_s: float = 120.0, stall_s: float | None = None,
                work_dir: Path | None = None, progress: bool = True) -> dict[str, Any] | None:
    """One run of `ranks` ranks reading `config["dataset"]` with `loader`: its result row.

    `config`: the loader's settings (dataset, split, batch_size, concurrency, via_proxy, ...), validated here
    before any rank starts. `shards`: the shard id of each rank (default: its rank; anything else is how the
    exactly-once check is tested). `expected`: the split's ids when the caller already has them (a sweep
    computes them once per dataset). `stall_s`: how long a rank may read nothing before it counts as hung
    (default: 6 network timeouts, at least a minute, plus 3 compute steps). `work_dir`: where the ranks'
    progress files and the launcher's log go (default: a temporary folder, removed after a run that
    succeeded). A rank that fails, dies, hangs or never starts raises one line naming
    it, with every rank stopped. None: rank 0 ran on another host (torchrun --nnodes), which writes the row.
    """
    plan = plan or LaunchPlan(launcher, ranks, start_timeout_s=start_timeout_s)
    if (plan.launcher, plan.ranks) != (launcher, ranks):
        raise WorkbenchError(f"launch plan ({plan.launcher}, {plan.ranks} ranks) differs from the run's "
                             f"({launcher}, {ranks} ranks)")
    given = sorted(set(config) & set(RANK_SETTINGS))
    if given:
        raise WorkbenchError(f"loader setting {', '.join(given)}: every rank sets its own (use `shards` to choose)")
    if shards is not None and (len(shards) != ranks or any(not 0 <= s < ranks for s in shards)):
        raise WorkbenchError(f"shards {shards}: one shard id in 0..{ranks - 1} per rank")
    cls = loader_class(loader)
    checked = validated(cls.Config, {**config, "num_shards": ranks}, f"{loader} loader setting", "settings")
    keep = work_dir is not None
    work_dir = work_dir or Path(tempfile.mkdtemp(prefix="workbench-clients-"))
    work_dir.mkdir(parents=True, exist_ok=True)
    env, forwarded = _environment(settings, plan)
    rank_args = _rank_args(loader, config, work_dir, compute_ms, max_seconds, plan, shards)
    command = launcher_command(plan, rank_args, forwarded)
    stall_s = stall_s or max(60.0, 6 * settings.timeout_s) + 3 * compute_ms / 1000
    with tqdm(desc=f"{ranks} {loader} ranks ({plan.launcher})", unit="sample", disable=not progress,
              mininterval=1.0) as bar:
        def show(samples: int) -> None:
            bar.update(samples - bar.n)

        launch(command, env, plan, work_dir, max_seconds, stall_s, show)  # raises, keeping work_dir's log
    gathered = read_json(work_dir / RESULTS_FILE)
    if not keep:
        shutil.rmtree(work_dir, ignore_errors=True)
    if gathered is None:
        if plan.single_host:
            raise WorkbenchError(f"rank 0 wrote no {RESULTS_FILE} although every rank finished")
        return None
    results = [RankResult(**r) for r in gathered]
    if expected is None:
        expected = expected_ids(settings, loader, checked.dataset, checked.split, expected_mode, progress)
    check = exactly_once(expected, [r.ids for r in results])
    return {
        "loader": loader, "backend": cls.backend, "dataset": checked.dataset, "split": checked.split,
        "ranks": ranks, "launcher": plan.launcher, "nnodes": plan.nnodes, "hosts": plan.hosts or "",
        "compute_ms": compute_ms, "batch_size": checked.batch_size, "concurrency": checked.concurrency,
        "via_proxy": checked.via_proxy, "shards": [r.shard_id for r in sorted(results, key=lambda r: r.rank)],
        **summarise_ranks(results),
        "exactly_once": check.ok, "expected_samples": check.expected, "expected_from": expected_mode,
        "distinct_samples": check.distinct, "missing": check.missing, "duplicated": check.duplicated,
        "unexpected": check.unexpected, "status": "ok" if check.ok else "error",
        "error": "" if check.ok else check.line(),
        "topology": {**settings.topology(), "client_ranks": ranks, "launcher": plan.launcher},
    }


def bench_clients(settings: Settings, loader: str, ranks: int, launcher: str = "torchrun", *,
                  dataset: str | None = None, count: int = 1000, mean_kb: float = 110.0, compute_ms: float = 0.0,
                  config: dict[str, Any] | None = None, via_proxy: bool | None = None, max_seconds: float = 600.0,
                  plan: LaunchPlan | None = None, expected_mode: Expected = "split",
                  results_dir: Path = DEFAULT_RESULTS, progress: bool = True) -> dict[str, Any] | None:
    """`workbench bench clients`: a synthetic dataset unless one is named, one run, results under `results_dir`.

    `via_proxy` None: through toxiproxy when the loader's backend has a proxy (as `bench loaders` and sweeps).
    """
    check_writable(results_dir)
    cls = loader_class(loader)
    if dataset is None:  # the same synthetic dataset `bench loaders` uses: a re-run reuses it
        dataset = prepare_data(settings, [cls.backend], count, mean_kb)
        prepare_peer_layouts(settings, [loader], dataset, count, mean_kb)
    proxied = backend_class(cls.backend).proxy is not None
    via_proxy = proxied if via_proxy is None else via_proxy and proxied
    if via_proxy:
        Toxiproxy(settings).ensure_proxies()
    run_config = {**(config or {}), "dataset": dataset, "via_proxy": via_proxy}
    row = run_clients(settings, loader, run_config, ranks, launcher, compute_ms, max_seconds, plan=plan,
                      expected_mode=expected_mode, start_timeout_s=plan.start_timeout_s if plan else 120.0,
                      progress=progress)
    if row is not None:
        name = time.strftime(f"clients-{loader}-{ranks}r-%Y%m%d-%H%M%S")
        write_results(results_dir, name, [row], describe_environment(settings))
    return row
