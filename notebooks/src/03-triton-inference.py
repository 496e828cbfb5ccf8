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
# # 03 · Triton inference
#
# Checks the Triton server the stack runs: its status, its model repository, and the transport, by sending
# `count` JPEG blobs like the ingested ones through the `echo` model (python backend) over HTTP and gRPC.
#
# Then it sweeps the inference ensembles fed from storage: `ensemble` (JPEG bytes in, classes out: DALI
# preprocessing and a torch classifier) fed with bytes read by the local-disk loader, against
# `cass_to_inference` (sample UUIDs in: Triton fetches the blobs from Cassandra itself), over client
# concurrency and batch size, and plots throughput and latency. Rows go to `results_dir`.

# %% tags=["parameters"]
protocol = "grpc"  # for the status queries and the sweep: grpc or http
count = 8  # blobs sent through the echo model
sweep_samples = 32  # inferences per sweep point (0: skip the sweep)
concurrencies = [1, 4]  # requests in flight
batch_sizes = [1, 4]  # images per request
results_dir = "results/runs/triton-inference"

# %%
from pathlib import Path

from workbench.notebook import as_list, at_checkout_root

ROOT = at_checkout_root()


# %%
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

# %%
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

# %%

import matplotlib.pyplot as plt

from workbench.backends import make_backend
from workbench.bench.inference import sweep_inference
from workbench.environment import describe_environment
from workbench.ingest import ingest

concurrencies = [int(c) for c in as_list(concurrencies)]
batch_sizes = [int(b) for b in as_list(batch_sizes)]
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

# %%
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
