"""Multi-label classification fed from Cassandra: multi-hot vectors stored as ``np.save`` blob labels.

    workbench ingest --source synthetic:200:multilabel --backend cassandra -o label_type=blob
    python -m pipelines.multilabel --dataset synthetic-multilabel-200-s0 --steps 20
    python -m pipelines.multilabel --dataset ml_demo --ingest 200      # ingest synthetic data first

As in the cassandra-dali-plugin multilabel example, each label is a serialised numpy tensor (here
``np.save`` bytes, decoded with `workbench.data.decode_multilabel`, never unpickled). One sigmoid output
per class, ``BCEWithLogitsLoss``. The model is the classifier of `train_torch` (resnet50 + mixed
precision on a GPU, resnet18 at 112 px on a CPU; ``--model tiny`` for a few-millisecond step). Any loader
works (``--loader``) on a layout ingested with ``label_type=blob``. Reported: images/s, the ratio to the
same model's no-I/O ceiling, the final loss and the exact-match ratio of the last batch; with ``--val-split`` also
that split's (learnable data: `LearnableSyntheticSource(kind="multilabel")`, a disc per present class).
"""

from __future__ import annotations

import argparse
import functools
import sys
from typing import Any

import torch
from torch import nn

from pipelines.common import (
    BlobTask,
    TrainStep,
    blob_label,
    blob_label_main,
    blob_label_parser,
    build_classifier,
    run_cli,
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


MULTILABEL = BlobTask("multilabel", build_classifier, nn.BCEWithLogitsLoss, multilabel_batch, multilabel_transform,
                      ("exact_match", exact_match))


def train(dataset: str, settings=None, steps: int = 20, batch_size: int | None = None, **options: Any) -> dict:
    """Train the multi-label classifier `steps` steps (label_type blob); returns the report row.

    Options as `pipelines.common.train_blob_labels`: loader (default cassandra), model, size, num_classes
    (10), workers, threads, warmup, lr, ceiling, results_dir, then loader settings.
    """
    return train_blob_labels(MULTILABEL, dataset, settings, steps, batch_size, **options)


def parser() -> argparse.ArgumentParser:
    return blob_label_parser("python -m pipelines.multilabel", __doc__.split("\n\n")[0], "multilabel",
                             "length of the multi-hot vectors (synthetic: 10)",
                             help="tiny or a torchvision classifier (default: resnet50 GPU, resnet18 CPU)")


def main(argv: list[str] | None = None) -> dict:
    return blob_label_main(parser().parse_args(argv), MULTILABEL)


if __name__ == "__main__":
    run_cli(main, sys.argv[1:])
