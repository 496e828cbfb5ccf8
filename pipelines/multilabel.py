"""Multi-label classification fed from Cassandra: multi-hot vectors stored as ``np.save`` blob labels.

    workbench ingest --source synthetic:200:multilabel --backend cassandra -o label_type=blob
    python -m pipelines.multilabel --dataset synthetic-multilabel-200-s0 --steps 20
    python -m pipelines.multilabel --dataset ml_demo --ingest 200      # ingest synthetic data first

As in the cassandra-dali-plugin multilabel example, each label is a serialised numpy tensor (here
``np.save`` bytes, decoded with `workbench.data.decode_multilabel`, never unpickled). One sigmoid output
per class, ``BCEWithLogitsLoss``. The model is the classifier of `train_torch` (resnet50 + mixed
precision on a GPU, resnet18 at 112 px on a CPU; ``--model tiny`` for a few-millisecond step). Any loader
works (``--loader``) on a layout ingested with ``label_type=blob``. Reported: images/s, the ratio to the
same model's no-I/O ceiling, the final loss and the exact-match ratio of the last batch.
"""

from __future__ import annotations

import argparse
import functools
import sys
from typing import Any

import torch
from torch import nn

from pipelines.common import (
    TrainStep,
    blob_label,
    blob_label_main,
    blob_label_parser,
    build_classifier,
    default_model,
    default_warmup,
    pick_device,
    run_cli,
    set_cpu_threads,
    train_blob_labels,
)


def multilabel_transform(size: int, num_classes: int):
    """Item -> (uint8 CHW image, float32 multi-hot vector of `num_classes`).

    A partial of a module function, so it pickles into the DataLoader's forkserver workers.
    """
    return functools.partial(multilabel_item, size=size, num_classes=num_classes)


def multilabel_item(item, size: int, num_classes: int):
    """One sample of `multilabel_transform`."""
    from workbench.adapters.torch import decode_image_bytes, resize_crop
    from workbench.data import decode_multilabel
    from workbench.errors import WorkbenchError

    label = blob_label(item, "an np.save vector")
    try:
        hot = decode_multilabel(label)
    except ValueError as exc:
        raise WorkbenchError(f"sample {item.key}: label is not an np.save vector ({exc})") from exc
    if hot.ndim != 1 or hot.shape[0] != num_classes:
        raise WorkbenchError(f"sample {item.key}: label vector of shape {hot.shape}, expected ({num_classes},): "
                             "pass --num-classes")
    image = resize_crop(decode_image_bytes(item.data, item.key), size, antialias=True)
    return image, torch.from_numpy(hot.astype("float32"))


def multilabel_batch(size: int, num_classes: int, device):
    def make(batch_size: int):
        return (torch.randn(batch_size, 3, size, size, device=device),
                (torch.rand(batch_size, num_classes, device=device) < 0.2).float())

    return make


def exact_match(step: TrainStep, images: torch.Tensor, targets: torch.Tensor) -> float:
    """Share of samples whose every class is predicted right (logit > 0), in eval mode."""
    step.model.eval()
    with torch.no_grad(), torch.autocast(step.device.type, dtype=step.amp_dtype, enabled=step.amp):
        predicted = step.model(step.prepare(images)) > 0
    step.model.train()
    return float((predicted == targets.to(step.device).bool()).all(1).float().mean())


def train(dataset: str, settings=None, steps: int = 20, batch_size: int | None = None, *, loader: str = "cassandra",
          model: str | None = None, size: int | None = None, num_classes: int = 10, workers: int = 2,
          threads: int | None = None, warmup: int | None = None, lr: float = 0.01, ceiling: bool = True,
          results_dir=None, **loader_config: Any) -> dict:
    """Train the multi-label classifier `steps` steps from `loader` (label_type blob); returns the report row."""
    if settings is None:
        from workbench.config import Settings

        settings = Settings()
    set_cpu_threads(threads)
    dev = pick_device()
    arch, default_size = default_model(dev)
    arch, size = model or arch, size or default_size
    batch_size = batch_size or (128 if dev.type == "cuda" else 32)
    warmup = default_warmup(steps) if warmup is None else min(warmup, steps - 1)
    loader_config = {"label_type": "blob", **loader_config}

    step = TrainStep(build_classifier(arch, num_classes), nn.BCEWithLogitsLoss(), dev, lr=lr,
                     make_batch=multilabel_batch(size, num_classes, dev))
    return train_blob_labels(
        "multilabel", step, multilabel_transform(size, num_classes), ("exact_match", exact_match),
        loader=loader, settings=settings,
        dataset=dataset, arch=arch, size=size, num_classes=num_classes, batch_size=batch_size, steps=steps,
        warmup=warmup, workers=workers, ceiling=ceiling, results_dir=results_dir, loader_config=loader_config)


def parser() -> argparse.ArgumentParser:
    return blob_label_parser("python -m pipelines.multilabel", __doc__.split("\n\n")[0], "multilabel",
                             "length of the multi-hot vectors (synthetic: 10)",
                             help="tiny or a torchvision classifier (default: resnet50 GPU, resnet18 CPU)")


def main(argv: list[str] | None = None) -> dict:
    return blob_label_main(parser().parse_args(argv), "multilabel", train)


if __name__ == "__main__":
    run_cli(main, sys.argv[1:])
