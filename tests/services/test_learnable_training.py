"""Training from storage learns: >= 95 % validation accuracy on sklearn's digits read from every backend.

The digits (1,797 images, 32 px PNGs, fixed train/val split of 1,442/355) are ingested into Cassandra,
S3 shards, S3 objects, Ignite and fs; the reference pipelines train a small CNN on the CPU for a bounded
number of steps from each, with shuffling, out-of-order delivery (ordered=False) and 2 DataLoader
workers, then classify the validation split read back through the same loader and decoder. A pipeline
that separated images from their labels (shuffle, out-of-order, workers, ranks, decoding) would fail:
`test_scrambled_labels_stay_near_chance` permutes the labels within each batch on purpose and checks
that the same test then sees chance accuracy, so the accuracy tests can fail.
"""

from __future__ import annotations

import importlib.util
import sys
import uuid
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:  # pipelines/ is a folder of scripts beside the package, not part of it
    sys.path.insert(0, str(ROOT))

from workbench.backends import make_backend  # noqa: E402
from workbench.data import DigitsSource, Sample  # noqa: E402
from workbench.ingest import ingest  # noqa: E402

pytestmark = [pytest.mark.services, pytest.mark.slow]

BACKENDS = ["cassandra", "s3-shards", "s3-objects", "ignite", "fs"]
LAYOUTS = {"s3-shards": {"maxcount": 50}}  # 29 train + 8 val shards: every rank x worker gets some
VAL_SAMPLES = 355
TARGET = 0.95
# small CNN at 32 px (the digits' stored size), SGD: about 97-98 % after 120 steps of 32 (2.7 epochs)
RECIPE = {"model": "small", "size": 32, "num_classes": 10, "batch_size": 32, "steps": 120, "lr": 0.02,
          "device": "cpu", "ceiling": False, "quiet": True}
OUT_OF_ORDER = {"shuffle": True, "ordered": False}


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


@pytest.fixture(scope="module", autouse=True)
def two_threads():
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(2)
    yield
    torch.set_num_threads(before)


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


def _train_torch(stack, loader: str, dataset: str, **options):
    from pipelines.train_torch import train

    return train(loader, dataset, stack, val_split="val", **{**RECIPE, **options})


@pytest.mark.parametrize("loader", BACKENDS)
def test_torch_pipeline_learns_digits_from_each_backend(stack, digits, loader):
    result = _train_torch(stack, loader, digits, decode="torch", workers=2, **OUT_OF_ORDER)
    assert result["val_samples"] == VAL_SAMPLES  # every validation image once
    assert result["val_accuracy"] >= TARGET, result


def test_scrambled_labels_stay_near_chance(stack, digits):
    """The same training with labels permuted inside every batch: the accuracy test must then fail."""
    from pipelines.accuracy import scramble_labels

    result = _train_torch(stack, "fs", digits, decode="torch", workers=2, wrap_batches=scramble_labels,
                          **OUT_OF_ORDER)
    assert result["val_samples"] == VAL_SAMPLES
    assert result["val_accuracy"] < 0.3, result  # 10 classes: chance is 0.1


def test_torch_pipeline_dali_cpu_decoding_learns_digits(stack, digits):
    if importlib.util.find_spec("nvidia.dali") is None:
        pytest.skip("DALI is not installed")
    result = _train_torch(stack, "cassandra", digits, decode="dali", **OUT_OF_ORDER)
    assert result["val_samples"] == VAL_SAMPLES
    assert result["val_accuracy"] >= TARGET, result
