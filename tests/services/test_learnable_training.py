"""Training from storage learns: >= 95 % validation accuracy on sklearn's digits read from every backend.

The digits (1,797 images, 32 px PNGs, fixed train/val split of 1,442/355) are ingested into Cassandra,
S3 shards, S3 objects, Ignite and fs; the reference pipelines (torch with torchvision or DALI CPU
decoding, Lightning, Keras through tf.data, and Keras from `IgniteDataset` as in the Ignite article)
train a small CNN on the CPU for a bounded number of steps (torch from each backend, Lightning and Keras from
Cassandra and S3 shards), with shuffling, out-of-order
delivery (ordered=False; a scan of the cache has none, it is shuffled by tf.data instead) and 2
DataLoader workers (torch, Lightning), on one rank and on two (torchrun: torch's DDP, Lightning's
``strategy="ddp"``, gloo), then classify the validation split read back through the same loader and
decoder; every validation image must be classified exactly once (all ranks together).

A pipeline that separated images from their labels (shuffle, out-of-order, workers, ranks, decoding)
would fail: `test_scrambled_labels_stay_near_chance` permutes the labels within each batch on purpose
and checks that the same training then sees chance accuracy, so the accuracy tests can fail.

Cost: each test trains 150 steps of 32 (120 per rank with 2 ranks) of a small CNN at 32 px; on an idle
2-core box a run takes tens of seconds, the whole file some minutes (the durations measured under load
are in the commit that parametrised Lightning and Keras over the backends).
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:  # pipelines/ is a folder of scripts beside the package, not part of it
    sys.path.insert(0, str(ROOT))

from workbench.backends import make_backend  # noqa: E402
from workbench.data import DigitsSource, LearnableSyntheticSource, Sample  # noqa: E402
from workbench.ingest import ingest  # noqa: E402

pytestmark = [pytest.mark.services, pytest.mark.slow, pytest.mark.usefixtures("torch_two_threads"),
              pytest.mark.timeout(1800)]  # ingest into 5 backends + 150 steps on 2 loaded cores: up to 15 min

BACKENDS = ["cassandra", "s3-shards", "s3-objects", "ignite", "fs"]
# Lightning and Keras take batches from the same adapters whatever the backend (the torch pipeline reads from
# every one): each learns from a row store and a sharded object layout, and Keras also through IgniteDataset.
FRAMEWORK_BACKENDS = ["cassandra", "s3-shards"]
LAYOUTS = {"s3-shards": {"maxcount": 50}}  # 29 train + 8 val shards: every rank x worker gets some
VAL_SAMPLES = 355
TARGET = 0.95
# small CNN at 32 px (the digits' stored size), SGD: 96-99 % after 120 steps of 32, so 150 (3.3 epochs) for margin
RECIPE = {"model": "small", "size": 32, "num_classes": 10, "batch_size": 32, "steps": 150, "lr": 0.02,
          "device": "cpu", "ceiling": False, "quiet": True}
OUT_OF_ORDER = {"shuffle": True, "ordered": False}
# Keras' SGD on s3-shards out of order: 0.961-0.986 in 8 runs at 150 steps here and 0.944 once in CI (stop 35);
# 0.972-0.986 in 8 runs at 200 steps: the margin the torch recipe has at 150
KERAS_STEPS = 200
# Per rank, batches of 32 on each. DDP averages the two ranks' gradients, so 60 were 60 updates of 64 images, fewer
# than one rank's recipe: torch on s3-shards out of order read 0.978-0.986 in 6 quiet runs and 0.935 once in CI;
# at 120, 0.989-0.994 in 6 quiet runs (stop 39).
TWO_RANK_STEPS = 120


class _Listed:
    """The digits encoded once, handed to every backend's ingest (re-encoding them per backend is wasted CPU)."""

    def __init__(self, source: DigitsSource) -> None:
        self.name, self.classes, self.splits = source.name, source.classes, source.splits
        self.samples: list[Sample] = list(source)

    def __len__(self) -> int:
        return len(self.samples)

    def __iter__(self):
        return iter(self.samples)

    def sample(self, i: int) -> Sample:
        return self.samples[i]


@pytest.fixture(scope="module")
def digits(stack) -> str:
    """The digits in every backend under one unique dataset name; dropped afterwards."""
    name = f"digits_{uuid.uuid4().hex[:8]}"
    source = _Listed(DigitsSource(name=name))
    assert sum(s.split == "val" for s in source) == VAL_SAMPLES
    backends = []
    try:
        for backend in BACKENDS:
            backends.append(make_backend(backend, stack, name, **LAYOUTS.get(backend, {})))
            ingest(source, backends[-1], progress=False)
        yield name
    finally:
        for backend in backends:
            backend.drop()


def _record(what: str, accuracy: float) -> float:
    """Print the measured accuracy (pytest -s / -rA shows it): the numbers the issue asks for."""
    print(f"validation accuracy {what}: {accuracy:.4f}")
    return accuracy


def _train_torch(stack, loader: str, dataset: str, **options):
    from pipelines.train_torch import train

    return train(loader, dataset, stack, val_split="val", **{**RECIPE, **options})


@pytest.mark.parametrize("loader", BACKENDS)
def test_torch_pipeline_learns_digits_from_each_backend(stack, digits, loader):
    result = _train_torch(stack, loader, digits, decode="torch", workers=2, **OUT_OF_ORDER)
    assert result["val_samples"] == VAL_SAMPLES  # every validation image once
    assert _record(f"torch {loader}", result["val_accuracy"]) >= TARGET, result


def test_scrambled_labels_stay_near_chance(stack, digits):
    """The same training with labels permuted inside every batch: the accuracy test must then fail."""
    from pipelines.accuracy import scramble_labels

    result = _train_torch(stack, "fs", digits, decode="torch", workers=2, wrap_batches=scramble_labels,
                          **OUT_OF_ORDER)
    assert result["val_samples"] == VAL_SAMPLES
    assert _record("torch fs, labels scrambled", result["val_accuracy"]) < 0.3, result  # 10 classes: chance is 0.1


def test_torch_pipeline_dali_cpu_decoding_learns_digits(stack, digits):
    if importlib.util.find_spec("nvidia.dali") is None:
        pytest.skip("DALI is not installed")
    # out of order, each run sees another order: 150 steps gave 0.97-0.99 here and once 0.949 in CI; 240 steps
    # (5 epochs) keep the 0.95 target a margin, as the other pipelines have
    result = _train_torch(stack, "cassandra", digits, decode="dali", **{**OUT_OF_ORDER, "steps": 240})
    assert result["val_samples"] == VAL_SAMPLES
    assert _record("torch cassandra, DALI CPU decoding", result["val_accuracy"]) >= TARGET, result


def _two_ranks(module: str, results: Path, *args: str) -> dict:
    """`module` run by torchrun --nproc-per-node=2 (gloo on the CPU, one thread each); its results row."""
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2", "-m", module,
               *args]
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=600,
                          env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(results.read_text())["rows"][0]


def test_torch_pipeline_two_ranks_learn_digits(stack, digits, tmp_path):
    """torchrun --nproc-per-node=2 (gloo, DDP): each rank trains and validates its shard; counts are summed."""
    row = _two_ranks("pipelines.train_torch", tmp_path / "train_torch-s3-shards-torch.json",
                     "--loader", "s3-shards", "--dataset", digits, "--decode", "torch", "--model", "small",
                     "--size", "32", "--num-classes", "10", "--batch-size", "32", "--steps", str(TWO_RANK_STEPS),
                     "--lr", "0.02", "--device", "cpu", "--threads", "1", "--workers", "2", "--val-split", "val",
                     "--results-dir", str(tmp_path), "-o", "ordered=false")
    assert row["ranks"] == 2
    assert row["val_samples"] == VAL_SAMPLES  # the two ranks' shards together: every validation image once
    assert _record("torch s3-shards, 2 ranks (DDP, gloo)", row["val_accuracy"]) >= TARGET, row


LIGHTNING = {"steps": RECIPE["steps"], "batch_size": 32, "model": "small", "size": 32, "num_classes": 10,
             "lr": RECIPE["lr"], "device": "cpu", "ceiling": False, "val_split": "val", "val_batches": 0,
             "validate_all": True}


@pytest.mark.parametrize("loader", FRAMEWORK_BACKENDS)
def test_lightning_pipeline_learns_digits_from_each_backend(stack, digits, loader):
    pytest.importorskip("lightning")
    from pipelines.train_lightning import train

    result = train(loader, digits, stack, workers=2, **LIGHTNING, **OUT_OF_ORDER)
    assert result["val_samples"] == VAL_SAMPLES  # every validation image once
    assert _record(f"lightning {loader}", result["val_accuracy"]) >= TARGET, result


def test_lightning_pipeline_two_ranks_learn_digits(stack, digits, tmp_path):
    """torchrun --nproc-per-node=2: Lightning's DDP strategy (gloo), each rank its shard, 2 workers per rank."""
    pytest.importorskip("lightning")
    row = _two_ranks("pipelines.train_lightning", tmp_path / "train_lightning-fs.json",
                     "--loader", "fs", "--dataset", digits, "--model", "small", "--size", "32", "--num-classes", "10",
                     "--batch-size", "32", "--steps", str(TWO_RANK_STEPS), "--lr", str(RECIPE["lr"]),
                     "--device", "cpu", "--threads", "1", "--workers", "2", "--val-split", "val",
                     "--val-batches", "0", "--validate-all", "--results-dir", str(tmp_path), "-o", "ordered=false")
    assert row["ranks"] == 2
    assert row["val_samples"] == VAL_SAMPLES  # the two ranks' shards together: every validation image once
    assert _record("lightning fs, 2 ranks (DDP, gloo)", row["val_accuracy"]) >= TARGET, row


@pytest.mark.parametrize("source", ["ignite-dataset", *FRAMEWORK_BACKENDS])
def test_keras_pipeline_learns_digits(stack, digits, source):
    """The Ignite article's path (IgniteDataset -> tf.data -> Keras) and every loader through tf_dataset."""
    if importlib.util.find_spec("tensorflow") is None:  # not importorskip: TF must load through workbench.tf_import
        pytest.skip("tensorflow is not installed")
    from pipelines.train_keras import train

    options = {"shuffle": True} if source == "ignite-dataset" else OUT_OF_ORDER  # a scan has no out-of-order mode
    result = train(source, digits, stack, steps=KERAS_STEPS, batch_size=32, model="small", size=32,
                   num_classes=10, lr=RECIPE["lr"], ceiling=False, val_split="val", **options)
    assert result["val_samples"] == VAL_SAMPLES
    assert _record(f"keras {source}", result["val_accuracy"]) >= TARGET, result


def test_ignite_digits_notebook_draws_the_first_five(stack, tmp_path):
    """notebooks/05-ignite-digits: the Ignite article's demo (IgniteDataset -> first five digits, matplotlib)."""
    papermill = pytest.importorskip("papermill")
    import nbformat

    name = f"nbdigits_{uuid.uuid4().hex[:8]}"
    out = tmp_path / "figure"
    try:
        papermill.execute_notebook(str(ROOT / "notebooks" / "05-ignite-digits.ipynb"), str(tmp_path / "05.ipynb"),
                                   parameters={"dataset": name, "results_dir": str(out)}, kernel_name="python3",
                                   cwd=str(ROOT), progress_bar=False, execution_timeout=240)
    finally:
        make_backend("ignite", stack, name).drop()
    printed = "".join(o.get("text", "") for c in nbformat.read(tmp_path / "05.ipynb", as_version=4).cells
                      for o in c.get("outputs", []))
    labels = json.loads(printed.split("labels: ", 1)[1].split(" figure:", 1)[0])
    assert len(labels) == 5 and all(0 <= label <= 9 for label in labels)
    assert "1797 samples" in printed
    assert (out / "first-digits.png").stat().st_size > 2000


def test_torch_pipeline_learns_the_learnable_synthetic_source(stack):
    """synthetic:N:learnable (photo-sized JPEGs, class drawn in the middle) trains as the digits do."""
    name = f"learnable_{uuid.uuid4().hex[:8]}"
    backend = make_backend("fs", stack, name)
    try:
        ingest(LearnableSyntheticSource(300, mean_kb=30, name=name), backend, progress=False)
        result = _train_torch(stack, "fs", name, decode="torch", workers=2, steps=60, **OUT_OF_ORDER)
    finally:
        backend.drop()
    assert result["val_samples"] == 60  # every 5th of 300
    assert _record("torch fs, learnable synthetic", result["val_accuracy"]) >= TARGET, result
