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
# # 06 · Train from storage, serve the checkpoint with Triton, check the answers
#
# scikit-learn's handwritten digits (`workbench.data.DigitsSource`) are ingested into the chosen backend
# (and into Cassandra, where `cass_to_inference` reads them). The PyTorch pipeline trains the small CNN
# from that backend on the CPU for a bounded number of steps (`pipelines.train_and_serve`, which runs
# `pipelines.train_torch.train`), and writes the weights with the workbench's S3 or Ignite checkpoint
# writer. A Triton of its own (beside the shared stack) then serves a model repository whose classifier
# loads that checkpoint and whose preprocessing is training's; the validation digits go through it twice:
# by UUID (`cass_to_inference`: Triton reads the images from Cassandra) and as bytes (`ensemble`).
# The table and the plot put accuracy and throughput side by side.

# %% tags=["parameters"]
backend = "cassandra"  # train from this backend's loader: cassandra, s3-shards, s3-objects, ignite, fs
decode = "dali"  # training's decoder (dali on the CPU here, or torch); Triton's preprocess follows it
store = "s3"  # checkpoint store: s3 or ignite
dataset = "digits-32px-png"  # the digits dataset to create (idempotent) and read
steps = 300  # training steps of 32 images (150 left no margin on few, large shards: 0.93 once)
batch_size = 32  # images per Triton request
concurrency = 2  # Triton requests in flight
results_dir = "results/train-and-serve"  # the table (CSV) and the plot go here

# %%
import sys
from pathlib import Path

import matplotlib.pyplot as plt
import pandas as pd

from workbench.backends import make_backend
from workbench.config import Settings
from workbench.data import DigitsSource
from workbench.ingest import ingest
from workbench.model_serving import checkpoint_uri
from workbench.notebook import at_checkout_root

ROOT = at_checkout_root()
sys.path.insert(0, str(ROOT))  # pipelines/ is a folder beside the package (also when Jupyter starts in notebooks/)
from pipelines.train_and_serve import serve_and_check, train_to_checkpoint

settings = Settings()

# %%
digits = DigitsSource(name=dataset)
for name in dict.fromkeys([backend, "cassandra"]):
    print(ingest(digits, make_backend(name, settings, dataset), progress=False).line())
val = [s for s in digits if s.split == "val"]
print(f"{len(val)} validation digits")

# %%
checkpoint = checkpoint_uri(settings, store, f"{dataset}-{backend}-{decode}")
trained = train_to_checkpoint(backend, dataset, settings, checkpoint, decode=decode, steps=steps, batch_size=32,
                              lr=0.02, device="cpu", ceiling=False, quiet=True, val_split="val", shuffle=True,
                              ordered=False)
print(f"trained from {backend} ({decode} decoding): {trained['images_per_s']:.0f} images/s, validation accuracy "
      f"{trained['val_accuracy']:.4f}; checkpoint {checkpoint}")

# %%
served = serve_and_check(settings, dataset, checkpoint, trained["checkpoint_meta"], val, batch_size=batch_size,
                         concurrency=concurrency)
print(f"served: cass_to_inference {served['uuid_accuracy']:.4f}, ensemble {served['bytes_accuracy']:.4f}, "
      f"agreement {served['agreement']:.4f}")

# %%
table = pd.DataFrame([
    {"path": f"training ({backend}, {decode})", "accuracy": trained["val_accuracy"],
     "images_per_s": trained["images_per_s"]},
    {"path": "Triton cass_to_inference (UUIDs)", "accuracy": served["uuid_accuracy"],
     "images_per_s": served["uuid_images_per_s"]},
    {"path": "Triton ensemble (bytes)", "accuracy": served["bytes_accuracy"],
     "images_per_s": served["bytes_images_per_s"]},
])
out = Path(results_dir)
out.mkdir(parents=True, exist_ok=True)
table.to_csv(out / "accuracy-throughput.csv", index=False)
print(table.to_string(index=False, float_format=lambda v: f"{v:.4f}" if v <= 1 else f"{v:.1f}"))

# %%
figure, (left, right) = plt.subplots(1, 2, figsize=(10, 3))
left.barh(table["path"], table["accuracy"], color="tab:green")
left.set_xlim(0, 1)
left.set_xlabel("validation accuracy")
right.barh(table["path"], table["images_per_s"], color="tab:blue")
right.set_xlabel("images/s")
right.set_yticks([])
figure.suptitle(f"digits: trained from {backend}, checkpoint on {store}, served by Triton")
figure.savefig(out / "accuracy-throughput.png", dpi=80, bbox_inches="tight")
print("figure:", out / "accuracy-throughput.png")
