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
# # 01 · Stack and ingest
#
# Is every server of the stack up, and does a synthetic dataset go into every storage layout and come back
# byte for byte? Prints the stack's status, ingests `count` synthetic JPEGs (mean `mean_kb` KB) into each of
# `backends` (idempotent: a re-run adds nothing), and verifies each one against the source.
#
# Start the stack first: `.venv/bin/workbench stack up` (or `make stack-up`).

# %% tags=["parameters"]
count = 200  # synthetic JPEGs
mean_kb = 110.0  # their mean size
backends = None  # default: every registered backend
dataset = None  # default: notebook_<count>_<mean_kb>kb

# %%

from workbench.notebook import as_list, at_checkout_root

ROOT = at_checkout_root()


# %% [markdown]
# ## The stack

# %%
from dataclasses import asdict

import pandas as pd

from workbench.config import Settings
from workbench.stack import status

settings = Settings()
stack = pd.DataFrame([asdict(row) for row in status(settings)])
print(stack.to_string(index=False))
unhealthy = stack[~stack["healthy"]]
if len(unhealthy):
    print(f"not healthy: {', '.join(unhealthy['service'])}: run `.venv/bin/workbench stack up`")

# %% [markdown]
# ## Ingest and verify

# %%
from workbench.backends import BACKENDS, make_backend
from workbench.data import SyntheticSource
from workbench.ingest import ingest, verify

backends = as_list(backends) or list(BACKENDS)
dataset = dataset or f"notebook_{count}_{mean_kb:g}kb".replace(".", "_")
source = SyntheticSource(count, mean_kb=mean_kb, name=dataset)
print(f"dataset {dataset}: {count} synthetic JPEGs, mean {mean_kb:g} KB, into {', '.join(backends)}")

results = []
for name in backends:
    target = make_backend(name, settings, dataset)
    summary = ingest(source, target, progress=False)
    print(summary.line())
    check = verify(source, target)
    print(f"  verify {name}/{dataset}: expected {check.expected}, found {check.found}, missing {len(check.missing)}, "
          f"extra {len(check.extra)}, mismatched {len(check.mismatched)} -> {'ok' if check.ok else 'FAILED'}")
    results.append({"backend": name, "samples": summary.samples, "already_stored": summary.already_stored,
                    "MB": round(summary.bytes / 1e6, 2), "MB/s": round(summary.mb_per_s, 1),
                    "verified": check.found, "ok": check.ok})
results = pd.DataFrame(results)
results

# %%
failed = results[~results["ok"]]
if len(failed):
    raise RuntimeError(f"verify failed for {', '.join(failed['backend'])}")
