"""Write the papermill notebooks of this folder from their source here, outputs cleared.

    .venv/bin/python notebooks/make_notebooks.py          # rewrites notebooks/0*.ipynb
    .venv/bin/python notebooks/make_notebooks.py --check  # exit 1 if a committed notebook differs

Edit the cells here, not in Jupyter, so the notebooks stay reproducible and reviewable. Each notebook has
one cell tagged `parameters`; papermill injects overrides after it, e.g.

    papermill notebooks/02-loader-sweep.ipynb out.ipynb -p backends '["cassandra","s3-shards"]' -p rtt_ms '[0, 50]'

`-p` passes such lists as text: the notebooks parse list parameters given as JSON/YAML text or "a,b,c".
"""

from __future__ import annotations

import sys
from pathlib import Path

import nbformat
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

HERE = Path(__file__).resolve().parent

# Every notebook runs from the checkout's root (.env, .stack/ and results/ are relative to it), also when
# Jupyter starts the kernel in notebooks/; list parameters may arrive as text from `papermill -p`.
SETUP = '''\
import os
import sys
from pathlib import Path

import yaml

ROOT = next((p for p in [Path.cwd(), *Path.cwd().parents]
             if (p / "pyproject.toml").is_file() and (p / "workbench").is_dir()), Path.cwd())
os.chdir(ROOT)
print(f"python {sys.executable}, in {ROOT}")


def as_list(value):
    """A list parameter: a list, JSON/YAML text such as '["a", "b"]' or '[0, 50]', "a,b", or one value."""
    if value is None or isinstance(value, list | tuple):
        return None if value is None else list(value)
    if isinstance(value, str):
        parsed = yaml.safe_load(value)
        if isinstance(parsed, list):
            return parsed
        return [yaml.safe_load(part.strip()) for part in value.split(",") if part.strip()]
    return [value]'''


def notebook(stem: str, cells: list[tuple[str, str] | tuple[str, str, list[str]]]) -> nbformat.NotebookNode:
    """Cells as (kind, source[, tags]); ids are stable so that regenerating changes nothing."""
    nb = new_notebook()
    nb.metadata = {
        "kernelspec": {"display_name": "Python 3 (ipykernel)", "language": "python", "name": "python3"},
        "language_info": {"name": "python"},
    }
    for index, (kind, source, *rest) in enumerate(cells):
        make = new_markdown_cell if kind == "md" else new_code_cell
        cell = make(source.strip("\n"))
        cell["id"] = f"{stem[:2]}-{index:02d}"
        if rest and rest[0]:
            cell.metadata["tags"] = rest[0]
        nb.cells.append(cell)
    nbformat.validate(nb)
    return nb


STACK_AND_INGEST = [
    ("md", """
# 01 · Stack and ingest

Is every server of the stack up, and does a synthetic dataset go into every storage layout and come back
byte for byte? Prints the stack's status, ingests `count` synthetic JPEGs (mean `mean_kb` KB) into each of
`backends` (idempotent: a re-run adds nothing), and verifies each one against the source.

Start the stack first: `.venv/bin/workbench stack up` (or `make stack-up`).
"""),
    ("code", """
count = 200  # synthetic JPEGs
mean_kb = 110.0  # their mean size
backends = ["cassandra", "s3-objects", "s3-shards", "ignite", "fs"]
dataset = None  # default: notebook_<count>_<mean_kb>kb
""", ["parameters"]),
    ("code", SETUP),
    ("md", "## The stack"),
    ("code", """
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
"""),
    ("md", "## Ingest and verify"),
    ("code", """
from workbench.backends import make_backend
from workbench.data import SyntheticSource
from workbench.ingest import ingest, verify

backends = as_list(backends)
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
"""),
    ("code", """
failed = results[~results["ok"]]
if len(failed):
    raise RuntimeError(f"verify failed for {', '.join(failed['backend'])}")
"""),
]

LOADER_SWEEP = [
    ("md", """
# 02 · Loader sweep

Runs a sweep (`workbench.bench.sweep.run_sweep`) over the given loaders, round-trip times and loader settings
on a synthetic dataset, and shows the per-point summary. Results go to `<results_root>/<name>/` (runs.parquet,
runs.csv, config.json, environment.json); `04-report` turns them into plots. Give `backends` instead of
`loaders` to run every registered loader that reads one of those backends, peers included:

    papermill notebooks/02-loader-sweep.ipynb out.ipynb -p backends '["cassandra","s3-shards"]' -p rtt_ms '[0, 50]'
"""),
    ("code", """
name = "notebook-sweep"  # results folder name
loaders = ["cassandra", "s3-shards", "s3-objects", "ignite", "fs"]
backends = None  # e.g. ["cassandra", "s3-shards"]: all loaders of these backends (replaces `loaders`)
rtt_ms = [0, 50]
count = 200  # synthetic JPEGs
mean_kb = 110.0
repetitions = 3
epochs = 2
concurrency = [32]
batch_size = [32]
compute_ms = [0]  # emulated accelerator time per batch
results_root = "results"
seed = 0  # of the synthetic data (part of the dataset names the sweep ingests)
""", ["parameters"]),
    ("code", SETUP),
    ("code", """
import pandas as pd

from workbench.bench.sweep import run_sweep
from workbench.bench.sweep_config import load_sweep_config
from workbench.config import Settings
from workbench.loaders import LOADERS, loader_class
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
    loaders = as_list(loaders)

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
"""),
    ("code", """
folder = run_sweep(Settings(), cfg, Path(results_root))
print(f"results: {folder}")
"""),
    ("md", "## Summary (median over repetitions; failed runs left out and counted)"),
    ("code", """
runs = pd.read_parquet(folder / "runs.parquet")
summary = summarise(runs)
columns = ["loader", "rtt_ms", "shard_maxcount", "concurrency", "batch_size", "compute_ms", "runs_ok", "runs_failed",
           "samples_per_s_median", "samples_per_s_min", "samples_per_s_max", "mb_per_s_median",
           "batch_p50_ms_median", "batch_p99_ms_median", "time_to_first_batch_s_median"]
summary[[c for c in columns if c in summary.columns]].round(2)
"""),
    ("code", """
failed = runs[runs["status"] != "ok"]
print(f"{len(runs)} runs, {len(failed)} failed")
for row in failed.itertuples():
    print(f"  point {row.point_id} rep {row.repetition} {row.loader} @ {row.rtt_ms:g} ms: {row.error}")
"""),
]

TRITON = [
    ("md", """
# 03 · Triton inference

Checks the Triton server the stack runs: its status, its model repository, and the transport, by sending
`count` JPEG blobs like the ingested ones through the `echo` model (python backend) over HTTP and gRPC.

Then it sweeps the inference ensembles fed from storage: `ensemble` (JPEG bytes in, classes out: DALI
preprocessing and a torch classifier) fed with bytes read by the local-disk loader, against
`cass_to_inference` (sample UUIDs in: Triton fetches the blobs from Cassandra itself), over client
concurrency and batch size, and plots throughput and latency. Rows go to `results_dir`.
"""),
    ("code", """
protocol = "grpc"  # for the status queries and the sweep: grpc or http
count = 8  # blobs sent through the echo model
sweep_samples = 32  # inferences per sweep point (0: skip the sweep)
concurrencies = [1, 4]  # requests in flight
batch_sizes = [1, 4]  # images per request
results_dir = "results/triton-inference"
""", ["parameters"]),
    ("code", SETUP),
    ("code", """
import statistics
import time

import numpy as np
import pandas as pd
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

from workbench.clients import triton_client
from workbench.config import Settings

settings = Settings()
client = triton_client(settings, protocol)
as_json = {"as_json": True} if protocol == "grpc" else {}
metadata = client.get_server_metadata(**as_json)
print(f"Triton {metadata['version']} over {protocol}: live {client.is_server_live()}, "
      f"ready {client.is_server_ready()}")
print("extensions:", ", ".join(metadata.get("extensions", [])))
index = client.get_model_repository_index(**as_json)
models = index.get("models", []) if isinstance(index, dict) else index
pd.DataFrame(models)
"""),
    ("code", """
from workbench.data import SyntheticSource

blobs = [sample.data for sample in SyntheticSource(count, mean_kb=110.0, name="notebook-triton")]
print(f"{len(blobs)} blobs, {sum(map(len, blobs)) / 1e3:.0f} KB in all")

MODULES = {"http": httpclient, "grpc": grpcclient}


def echo(client, module, batch):
    data = np.array([[blob] for blob in batch], dtype=np.object_)
    tensor = module.InferInput("INPUT", list(data.shape), "BYTES")
    tensor.set_data_from_numpy(data)
    outputs = [module.InferRequestedOutput("OUTPUT"), module.InferRequestedOutput("NBYTES")]
    result = client.infer("echo", [tensor], outputs=outputs)
    back, sizes = result.as_numpy("OUTPUT"), result.as_numpy("NBYTES")
    assert [b[0] for b in back] == list(batch), "echo returned other bytes"
    assert [int(s[0]) for s in sizes] == [len(b) for b in batch]


rows = []
for name, module in MODULES.items():
    client = triton_client(settings, name)
    if not client.is_model_ready("echo"):
        raise RuntimeError(f"model echo is not ready on {name}")
    echo(client, module, blobs[:1])  # warm-up: connection, first request
    single = []
    for blob in blobs:
        start = time.perf_counter()
        echo(client, module, [blob])
        single.append((time.perf_counter() - start) * 1000)
    start = time.perf_counter()
    for at in range(0, len(blobs), 64):  # max_batch_size of the echo model
        echo(client, module, blobs[at:at + 64])
    batched = (time.perf_counter() - start) * 1000
    rows.append({"protocol": name, "requests": len(single), "median ms": statistics.median(single),
                 "min ms": min(single), "max ms": max(single),
                 "one batched request ms": batched,
                 "batched MB/s": sum(map(len, blobs)) / 1e6 / (batched / 1000)})
latency = pd.DataFrame(rows).round(2)
print(latency.to_string(index=False))
"""),
    ("code", """
from pathlib import Path

import matplotlib.pyplot as plt

from workbench.backends import make_backend
from workbench.environment import describe_environment
from workbench.bench.inference import sweep_inference
from workbench.ingest import ingest

concurrencies = [int(c) for c in as_list(concurrencies)]\nbatch_sizes = [int(b) for b in as_list(batch_sizes)]
frame = pd.DataFrame()
if sweep_samples:
    # The same images in Cassandra (the table cass_to_inference reads) and on local disk.
    dataset = "notebook_triton"
    source = SyntheticSource(max(sweep_samples, 16), mean_kb=110.0, name=dataset)
    ingest(source, make_backend("cassandra", settings, dataset, keyspace="workbench_triton"), progress=False)
    ingest(source, make_backend("fs", settings, dataset), progress=False)
    runs = [("ensemble", "fs"), ("cass_to_inference", "cassandra")]
    rows = [row for model, loader in runs
            for row in sweep_inference(settings, model, loader, dataset, concurrencies, batch_sizes, protocol,
                                       samples=sweep_samples, results_dir=Path(results_dir) if results_dir else None,
                                       name=f"{model}-{protocol}")]
    frame = pd.DataFrame(rows)
    columns = ["model", "concurrency", "batch_size", "inferences_per_s", "latency_ms_p50", "latency_ms_p95"]
    print(frame[columns].round(2).to_string(index=False))
    both = frame.pivot_table(index=["concurrency", "batch_size"], columns="model", values="inferences_per_s")
    print()
    print("cass_to_inference / ensemble fed with local bytes:")
    print((both["cass_to_inference"] / both["ensemble"]).round(2).to_string())
"""),
    ("code", """
if not frame.empty:
    figure, (left, right) = plt.subplots(1, 2, figsize=(11, 4))
    for (model, batch), group in frame.groupby(["model", "batch_size"]):
        group = group.sort_values("concurrency")
        left.plot(group.concurrency, group.inferences_per_s, marker="o", label=f"{model}, batch {batch}")
        right.plot(group.concurrency, group.latency_ms_p95, marker="o", label=f"{model}, batch {batch}")
    left.set(xlabel="client requests in flight", ylabel="inferences/s", title="Triton throughput")
    right.set(xlabel="client requests in flight", ylabel="p95 latency (ms)", title="Triton latency")
    for axis in (left, right):
        axis.grid(alpha=0.3)
        axis.legend(fontsize=8)
    machine = describe_environment()
    figure.suptitle(f"{protocol}, {sweep_samples} inferences per point; machine: {machine['cpu']} "
                    f"({machine['cpu_count']} cores), GPUs: {', '.join(machine['gpus']) or 'none'}", fontsize=9)
    plt.show()
"""),
]

REPORT = [
    ("md", """
# 04 · Report

Builds the report of one sweep (`workbench.report.build_report`): `summary.csv` beside the results, and
`report/` with one PNG per plot and a self-contained `report.html`. The plots are shown below.
"""),
    ("code", """
results_dir = "results/notebook-sweep"
""", ["parameters"]),
    ("code", SETUP),
    ("code", """
import pandas as pd
from IPython.display import Image, Markdown, display

from workbench.report import build_report

page = build_report(Path(results_dir))
print(f"report: {page}")
print(f"summary: {Path(results_dir) / 'summary.csv'}")
"""),
    ("code", """
ORDER = ["throughput_vs_rtt", "throughput_vs_shard_size", "batch_latency_cdf", "accelerator_utilisation",
         "loaders_by_backend"]
pngs = sorted(page.parent.glob("*.png"), key=lambda p: (ORDER.index(p.stem) if p.stem in ORDER else 99, p.stem))
for png in pngs:
    display(Markdown(f"### {png.stem.replace('_', ' ')}"))
    display(Image(filename=str(png)))
skipped = [name for name in ORDER if name not in {p.stem for p in pngs}]
if skipped:
    print(f"not drawn for this sweep (see report.html for why): {', '.join(skipped)}")
"""),
    ("code", """
runs = pd.read_parquet(Path(results_dir) / "runs.parquet")
failed = runs[runs["status"] != "ok"]
print(f"{len(runs)} runs, {len(failed)} failed (left out of the plots)")
for row in failed.itertuples():
    print(f"  point {row.point_id} rep {row.repetition} {row.loader} @ {row.rtt_ms:g} ms: {row.error}")
"""),
]

NOTEBOOKS = {
    "01-stack-and-ingest": STACK_AND_INGEST,
    "02-loader-sweep": LOADER_SWEEP,
    "03-triton-inference": TRITON,
    "04-report": REPORT,
}


def main(argv: list[str]) -> int:
    check = "--check" in argv
    stale = []
    for stem, cells in NOTEBOOKS.items():
        path = HERE / f"{stem}.ipynb"
        text = nbformat.writes(notebook(stem, cells)) + "\n"
        if check:
            if not path.exists() or path.read_text() != text:
                stale.append(path.name)
            continue
        path.write_text(text)
        print(path)
    if stale:
        print(f"out of date (run notebooks/make_notebooks.py): {', '.join(stale)}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
