# ---
# jupyter:
#   jupytext:
#     text_representation:
#       extension: .py
#       format_name: percent
#       format_version: '1.3'
#       jupytext_version: 1.19.6
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # 02 · Loader sweep
#
# Runs a sweep (`workbench.bench.sweep.run_sweep`) over the given loaders, round-trip times and loader settings
# on a synthetic dataset, and shows the per-point summary. Results go to `<results_root>/<name>/` (runs.parquet,
# runs.csv, config.json, environment.json); `04-report` turns them into plots. Give `backends` instead of
# `loaders` to run every registered loader that reads one of those backends, peers included:
#
#     papermill notebooks/02-loader-sweep.ipynb out.ipynb -p backends '["cassandra","s3-shards"]' -p rtt_ms '[0, 50]'

# %% tags=["parameters"]
name = "notebook-sweep"  # results folder name
loaders = None  # default: every loader measured by default (workbench.loaders.default_loaders)
backends = None  # e.g. ["cassandra", "s3-shards"]: all loaders of these backends (replaces `loaders`)
rtt_ms = [0, 50]
count = 200  # synthetic JPEGs
mean_kb = 110.0
repetitions = 3
epochs = 2
concurrency = [32]
batch_size = [32]
compute_ms = [0]  # emulated accelerator time per batch
results_root = "results/runs"  # git-ignored: never the committed reference results
seed = 0  # of the synthetic data (part of the dataset names the sweep ingests)

# %%
from pathlib import Path

from workbench.notebook import as_list, at_checkout_root

ROOT = at_checkout_root()


# %%
import pandas as pd

from workbench.bench.sweep import run_sweep
from workbench.bench.sweep_config import load_sweep_config
from workbench.config import Settings
from workbench.loaders import LOADERS, default_loaders, loader_class
from workbench.report import summarise

if backends:
    wanted, loaders = set(as_list(backends)), []
    for loader in LOADERS:
        try:
            backend = loader_class(loader).backend
        except Exception as exc:  # an optional dependency (DALI, a peer's package) missing here
            print(f"skipping loader {loader}: {type(exc).__name__}: {exc}")
            continue
        if backend in wanted:
            loaders.append(loader)
    if not loaders:
        raise ValueError(f"no registered loader reads {', '.join(sorted(wanted))}")
else:
    loaders = as_list(loaders) or default_loaders()

cfg = load_sweep_config({
    "name": name,
    "loaders": loaders,
    "data": {"count": count, "mean_kb": mean_kb, "seed": seed},
    "network": {"rtt_ms": as_list(rtt_ms)},
    "loader": {"concurrency": as_list(concurrency), "batch_size": as_list(batch_size)},
    "compute": {"ms_per_batch": as_list(compute_ms)},
    "epochs": epochs,
    "repetitions": repetitions,
})
print(f"sweep {cfg.name}: loaders {', '.join(cfg.loaders)}; RTT {cfg.network.rtt_ms} ms; "
      f"{len(cfg.points())} points x {cfg.repetitions} repetitions")

# %%
folder = run_sweep(Settings(), cfg, Path(results_root))
print(f"results: {folder}")

# %% [markdown]
# ## Summary (median over repetitions; failed runs left out and counted)

# %%
runs = pd.read_parquet(folder / "runs.parquet")
summary = summarise(runs)
columns = ["loader", "rtt_ms", "shard_maxcount", "concurrency", "batch_size", "compute_ms", "runs_ok", "runs_failed",
           "samples_per_s_median", "samples_per_s_min", "samples_per_s_max", "mb_per_s_median",
           "batch_p50_ms_median", "batch_p99_ms_median", "time_to_first_batch_s_median"]
summary[[c for c in columns if c in summary.columns]].round(2)

# %%
failed = runs[runs["status"] != "ok"]
print(f"{len(runs)} runs, {len(failed)} failed")
for row in failed.itertuples():
    print(f"  point {row.point_id} rep {row.repetition} {row.loader} @ {row.rtt_ms:g} ms: {row.error}")
