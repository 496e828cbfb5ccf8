"""Semantic segmentation fed from Cassandra: JPEG images with PNG masks stored as blob labels.

    workbench ingest --source synthetic:200:segmentation --backend cassandra -o label_type=blob
    python -m pipelines.segmentation --dataset synthetic-segmentation-200-s0 --steps 20
    python -m pipelines.segmentation --dataset seg_demo --ingest 200      # ingest synthetic data first

As in the cassandra-dali-plugin segmentation example, the label column holds an encoded mask
(``label_type="blob"``): here a PNG of class indices, decoded with torchvision, resized with
nearest-neighbour sampling and cropped exactly like its image. The model is a tiny fully convolutional
network on a CPU, torchvision's FCN-ResNet50 with mixed precision on a GPU; the loss is per-pixel
cross-entropy. Any loader works (``--loader``), as long as its layout was ingested with
``label_type=blob``. Reported: images/s, the ratio to the same model's no-I/O ceiling, final loss and
pixel accuracy of the last batch; with ``--val-split`` also that split's (``synthetic:N`` masks are random, so
learning shows only on `LearnableSyntheticSource(kind="segmentation")`, whose masks are in the pixels).
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
    run_cli,
    train_blob_labels,
)


class TinyFCN(nn.Module):
    """Three strided conv blocks (1/8 resolution), a 1x1 classifier, bilinear upsampling to the input size."""

    def __init__(self, num_classes: int) -> None:
        super().__init__()

        def block(cin: int, cout: int) -> nn.Sequential:
            return nn.Sequential(nn.Conv2d(cin, cout, 3, stride=2, padding=1, bias=False), nn.BatchNorm2d(cout),
                                 nn.ReLU(inplace=True))

        self.encoder = nn.Sequential(block(3, 16), block(16, 32), block(32, 64))
        self.classifier = nn.Conv2d(64, num_classes, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        logits = self.classifier(self.encoder(x))
        return nn.functional.interpolate(logits, size=x.shape[-2:], mode="bilinear", align_corners=False)


class _OutOnly(nn.Module):
    """torchvision segmentation models return {'out': ..., 'aux': ...}: keep 'out'."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.model(x)["out"]


def build_model(arch: str, num_classes: int) -> nn.Module:
    if arch == "tiny":
        return TinyFCN(num_classes)
    if arch == "fcn_resnet50":
        from torchvision.models.segmentation import fcn_resnet50

        return _OutOnly(fcn_resnet50(weights=None, weights_backbone=None, num_classes=num_classes, aux_loss=False))
    raise ValueError(f"unknown segmentation model {arch!r}: use tiny or fcn_resnet50")


def segmentation_transform(size: int, num_classes: int):
    """Item -> (uint8 CHW image, int64 HW mask): short side to `size`, center crop, same geometry for both.

    A partial of a module function, so it pickles into the DataLoader's forkserver workers.
    """
    return functools.partial(segmentation_item, size=size, num_classes=num_classes)


def segmentation_item(item, size: int, num_classes: int):
    """One sample of `segmentation_transform`."""
    from torchvision.transforms.v2 import InterpolationMode

    from workbench.adapters.torch import decode_image_bytes, resize_crop
    from workbench.errors import WorkbenchError

    mask = decode_image_bytes(blob_label(item, "an encoded mask"), f"{item.key} (mask)", mode="GRAY")
    image = decode_image_bytes(item.data, item.key)
    if mask.shape[-2:] != image.shape[-2:]:
        raise WorkbenchError(f"sample {item.key}: mask {tuple(mask.shape[-2:])} and image "
                             f"{tuple(image.shape[-2:])} differ in size")
    image = resize_crop(image, size, antialias=True)
    mask = resize_crop(mask, size, interpolation=InterpolationMode.NEAREST)[0].long()
    if int(mask.max()) >= num_classes:
        raise WorkbenchError(f"sample {item.key}: mask class {int(mask.max())} >= num_classes {num_classes}")
    return image, mask


def segmentation_batch(size: int, num_classes: int, device):
    def make(batch_size: int):
        return (torch.randn(batch_size, 3, size, size, device=device),
                torch.randint(0, num_classes, (batch_size, size, size), device=device))

    return make


def pixel_accuracy(step: TrainStep, images: torch.Tensor, masks: torch.Tensor) -> float:
    step.model.eval()
    with torch.no_grad(), torch.autocast(step.device.type, dtype=step.amp_dtype, enabled=step.amp):
        predicted = step.model(step.prepare(images)).argmax(1)
    step.model.train()
    return float((predicted == masks.to(step.device)).float().mean())


def segmentation_defaults(device) -> tuple[str, int, int]:
    """FCN-ResNet50 at 224 px in batches of 32 on a GPU, the tiny FCN at 96 px in batches of 16 on a CPU."""
    return ("fcn_resnet50", 224, 32) if device.type == "cuda" else ("tiny", 96, 16)


SEGMENTATION = BlobTask("segmentation", build_model, nn.CrossEntropyLoss, segmentation_batch, segmentation_transform,
                        ("pixel_accuracy", pixel_accuracy), segmentation_defaults)


def train(dataset: str, settings=None, steps: int = 20, batch_size: int | None = None, **options: Any) -> dict:
    """Train the segmentation model `steps` steps (label_type blob); returns the report row.

    Options as `pipelines.common.train_blob_labels`: loader (default cassandra), model, size, num_classes
    (10), workers, threads, warmup, lr, ceiling, results_dir, then loader settings.
    """
    return train_blob_labels(SEGMENTATION, dataset, settings, steps, batch_size, **options)


def parser() -> argparse.ArgumentParser:
    return blob_label_parser("python -m pipelines.segmentation", __doc__.split("\n\n")[0], "segmentation",
                             "mask classes (synthetic default: 10)", choices=["tiny", "fcn_resnet50"])


def main(argv: list[str] | None = None) -> dict:
    return blob_label_main(parser().parse_args(argv), SEGMENTATION)


if __name__ == "__main__":
    run_cli(main, sys.argv[1:])
