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
# # 04 · Report
#
# Builds the report of one sweep (`workbench.report.build_report`): `summary.csv` beside the results, and
# `report/` with one PNG per plot and a self-contained `report.html`. The plots are shown below.

# %% tags=["parameters"]
results_dir = "results/runs/notebook-sweep"

# %%
from pathlib import Path

from workbench.notebook import at_checkout_root

ROOT = at_checkout_root()


# %%
import pandas as pd
from IPython.display import Image, Markdown, display

from workbench.report import make_report

page, plots = make_report(Path(results_dir))
print(f"report: {page}")
print(f"summary: {Path(results_dir) / 'summary.csv'}")

# %%
for plot in plots:
    display(Markdown(f"### {plot.title}"))
    if plot.path is not None:
        display(Image(filename=str(plot.path)))
    if plot.note:
        print(plot.note)

# %%
runs = pd.read_parquet(Path(results_dir) / "runs.parquet")
failed = runs[runs["status"] != "ok"]
print(f"{len(runs)} runs, {len(failed)} failed (left out of the plots)")
for row in failed.itertuples():
    print(f"  point {row.point_id} rep {row.repetition} {row.loader} @ {row.rtt_ms:g} ms: {row.error}")
