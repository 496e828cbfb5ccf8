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
# # 05 · Handwritten digits from Ignite (the TensorFlow-on-Ignite article's demo)
#
# The article stores MNIST in an Ignite cache and reads it back with `IgniteDataset`, then draws the first
# five digits. Nothing can be downloaded here, so the digits are scikit-learn's bundled ones
# (`workbench.data.DigitsSource`: 1,797 images, upscaled to 32 px PNGs, fixed train/val split), ingested
# into Ignite as a partitioned cache of binary objects. `IgniteDataset` scans that cache as `tf.data`
# elements `{'key', 'val': {'id', 'split', 'label', 'data', ...}}`; the image bytes are decoded with
# `tf.io.decode_png` and drawn with matplotlib, each titled with the label stored beside it.

# %% tags=["parameters"]
dataset = "digits-32px-png"  # the Ignite dataset to create (idempotent) and read
count = 5  # digits drawn
results_dir = "results/ignite-digits"  # the figure goes here

# %%
from pathlib import Path

import matplotlib.pyplot as plt

from workbench.backends import locate, make_backend
from workbench.compat.ignite_dataset import IgniteDataset
from workbench.config import Settings
from workbench.data import DigitsSource
from workbench.ingest import ingest
from workbench.notebook import at_checkout_root
from workbench.tf_import import tensorflow

ROOT = at_checkout_root()
tf = tensorflow()
settings = Settings()

# %%
summary = ingest(DigitsSource(name=dataset), make_backend("ignite", settings, dataset), progress=False)
print(summary.line())
cache = locate(settings, "ignite", dataset)["cache"]
print("cache:", cache)

# %%
digits = IgniteDataset(cache_name=cache, settings=settings)
print(digits.element_spec["val"].keys())

# %%
first = list(digits.take(count))
figure, axes = plt.subplots(1, count, figsize=(2 * count, 2.4))
for ax, element in zip(axes if count > 1 else [axes], first, strict=True):
    image = tf.io.decode_png(element["val"]["data"], channels=1)
    ax.imshow(image[:, :, 0].numpy(), cmap="gray")
    ax.set_title(f"label {int(element['val']['label'])} ({element['val']['split'].numpy().decode()})")
    ax.axis("off")
out = Path(results_dir)
out.mkdir(parents=True, exist_ok=True)
figure.savefig(out / "first-digits.png", dpi=80, bbox_inches="tight")
labels = [int(e["val"]["label"]) for e in first]
print("labels:", labels, "figure:", out / "first-digits.png")
