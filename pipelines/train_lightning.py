"""The classifier as PyTorch Lightning modules: a LightningDataModule over any loader + a LightningModule.

    python -m pipelines.train_lightning --loader cassandra --dataset D --steps 50
    python -m pipelines.train_lightning --loader s3-shards --dataset D --val-split val
    python -m torch.distributed.run --standalone --nproc-per-node=2 -m pipelines.train_lightning --loader fs \
        --dataset D --val-split val --device cpu        # 2 ranks: Lightning's DDP (gloo on a CPU)

Like the cassandra-dali-plugin's Lightning variant of its classification example: the data module
hands Lightning one DataLoader per stage (torchvision decode in worker processes, `LoaderDataset`),
the module holds the model (resnet50 + 16-bit mixed precision on a GPU, resnet18 at 112 px on a
CPU), and ``Trainer.fit`` runs ``limit_train_batches`` steps then a short validation.

Train/val: with ``--val-split NAME`` the two splits as ingested; otherwise the same split cut in two
with the loaders' own sharding (train = shard 2r, val = shard 2r+1 of 2 x world size for rank r), so
the halves never overlap and distributed ranks still read disjoint data.

Ranks: under torchrun (WORLD_SIZE > 1) the Trainer uses ``strategy="ddp"`` with one device per
process; each rank reads its own shard (the data module shards by ``global_rank``), and the validation
counts (correct, seen) are summed over the ranks, so ``val_samples`` is the whole split once.

Reported as the other pipelines: images/s over the timed training steps, and the ratio to the same
module fitted for the same steps on synthetic batches already on the device (no I/O, no decode; not
measured with several ranks). With ``--val-split`` and `validate_all`, ``val_accuracy`` is the share of
the whole validation split classified right.
"""

from __future__ import annotations

import argparse
import copy
import math
import os
import sys
import time
import warnings
from typing import Any

import lightning as L
import torch
from torch import nn
from torch.utils.data import DataLoader, IterableDataset

from pipelines.accuracy import accuracy_row
from pipelines.common import (
    IMAGENET_MEAN,
    IMAGENET_STD,
    Meter,
    add_classifier_flags,
    add_run_flags,
    build_classifier,
    call_with_flags,
    plan_run,
    public_config,
    ratio_of,
    report,
    run_cli,
    seeded_weights,
    settings_or_default,
)


class LoaderDataModule(L.LightningDataModule):
    """Train/val DataLoaders over a registered loader, decoded by torchvision in worker processes."""

    def __init__(self, loader: str, dataset: str, settings=None, batch_size: int = 32, size: int = 112,
                 workers: int = 2, split: str = "train", val_split: str | None = None, **loader_config: Any) -> None:
        super().__init__()
        self.loader, self.dataset, self.settings = loader, dataset, settings
        self.batch_size, self.size, self.workers = batch_size, size, workers
        self.split, self.val_split = split, val_split
        self.loader_config = loader_config
        self.train_set = self.val_set = None

    def _data(self, **config: Any):
        from workbench.adapters.torch import LoaderDataset, decode_transform

        self.settings = settings_or_default(self.settings)
        merged = {**self.loader_config, **config}
        return LoaderDataset(self.loader, self.settings, transform=decode_transform(self.size), dataset=self.dataset,
                             **merged)

    def setup(self, stage: str | None = None) -> None:
        rank, world = (self.trainer.global_rank, self.trainer.world_size) if self.trainer else (0, 1)
        if self.val_split:
            shard = {"shard_id": rank, "num_shards": world}
            self.train_set = self._data(split=self.split, **shard)
            self.val_set = self._data(split=self.val_split, shuffle=False, **shard)
        else:  # one split, two disjoint halves by the loaders' sharding
            self.train_set = self._data(split=self.split, shard_id=2 * rank, num_shards=2 * world)
            self.val_set = self._data(split=self.split, shard_id=2 * rank + 1, num_shards=2 * world, shuffle=False)

    def _loader(self, data) -> DataLoader:
        from workbench.adapters.torch import worker_context

        extra = {"prefetch_factor": 4} if self.workers > 0 else {}
        return DataLoader(data, batch_size=self.batch_size, num_workers=self.workers,
                          pin_memory=torch.cuda.is_available(),
                          multiprocessing_context=worker_context(data.settings, self.workers), **extra)

    def train_dataloader(self) -> DataLoader:
        return self._loader(self.train_set)

    def val_dataloader(self) -> DataLoader:
        return self._loader(self.val_set)


class Classifier(L.LightningModule):
    """An image classifier on uint8 NCHW batches (normalised here, on the device)."""

    def __init__(self, arch: str = "resnet18", num_classes: int = 1000, lr: float = 0.01,
                 channels_last: bool = False) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.model = build_classifier(arch, num_classes)
        if channels_last:
            self.model = self.model.to(memory_format=torch.channels_last)
        self.loss_fn = nn.CrossEntropyLoss()
        self.register_buffer("mean", torch.tensor(IMAGENET_MEAN).view(1, 3, 1, 1) * 255, persistent=False)
        self.register_buffer("std", torch.tensor(IMAGENET_STD).view(1, 3, 1, 1) * 255, persistent=False)
        self.last_loss = math.nan
        self.val_counts = torch.zeros(2, dtype=torch.int64)  # (correct, seen) of this rank's validation pass
        self.val_correct = self.val_seen = 0  # of the last validation pass, all ranks together

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        if images.dtype == torch.uint8:
            images = (images.float() - self.mean) / self.std
        if self.hparams.channels_last:
            images = images.contiguous(memory_format=torch.channels_last)
        return self.model(images)

    def training_step(self, batch, batch_idx: int):
        images, labels = batch
        loss = self.loss_fn(self(images), labels)
        self.log("train_loss", loss, prog_bar=True, batch_size=len(labels))
        self.last_loss = loss.detach()
        return loss

    def on_validation_epoch_start(self) -> None:
        self.val_counts = torch.zeros(2, dtype=torch.int64, device=self.device)

    def validation_step(self, batch, batch_idx: int):
        images, labels = batch
        logits = self(images)
        right = logits.argmax(1) == labels
        self.val_counts += torch.stack([right.sum(), torch.tensor(len(labels), device=right.device)])
        self.log("val_loss", self.loss_fn(logits, labels), batch_size=len(labels), sync_dist=True)
        self.log("val_acc", right.float().mean(), batch_size=len(labels), sync_dist=True)

    def on_validation_epoch_end(self) -> None:
        """Every rank validated its shard: the counts summed over the ranks (one all-reduce under DDP)."""
        counts = self.trainer.strategy.reduce(self.val_counts, reduce_op="sum")
        self.val_correct, self.val_seen = int(counts[0]), int(counts[1])

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=self.hparams.lr, momentum=0.9)


class ThroughputCallback(L.Callback):
    """Images/s of the training batches after `warmup`; sets the loaders' epoch (shuffle order) each epoch."""

    def __init__(self, warmup: int, steps: int) -> None:
        self.warmup, self.steps = warmup, steps
        self.meter: Meter | None = None

    def on_train_start(self, trainer, pl_module) -> None:
        self.meter = Meter(self.warmup, pl_module.device)

    def on_train_epoch_start(self, trainer, pl_module) -> None:
        data = getattr(trainer.datamodule, "train_set", None) if trainer.datamodule is not None else None
        if data is not None and hasattr(data, "set_epoch"):
            data.set_epoch(trainer.current_epoch)

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx: int) -> None:
        assert self.meter is not None
        self.meter.step(len(batch[1]))
        if self.meter.steps == self.steps:
            self.meter.finish()


class _Repeat(IterableDataset):
    """One batch, already on the device, `steps` times: the ceiling's input (no I/O, no decode)."""

    def __init__(self, batch, steps: int) -> None:
        self.batch, self.steps = batch, steps

    def __iter__(self):
        for _ in range(self.steps):
            yield self.batch


def ranks() -> int:
    """The world size torchrun gave this process (1 when not launched by it)."""
    return int(os.environ.get("WORLD_SIZE", "1"))


def _trainer(steps: int, device, callbacks: list, val_batches: int | float = 0) -> L.Trainer:
    """One process per device; under torchrun (WORLD_SIZE > 1) DDP over its processes (gloo on a CPU)."""
    cuda = device.type == "cuda"
    world = ranks()
    if world > 1:
        per_node = int(os.environ.get("LOCAL_WORLD_SIZE", str(world)))
        placement = {"strategy": "ddp", "devices": per_node, "num_nodes": world // per_node}
    else:
        placement = {"devices": 1}
    return L.Trainer(accelerator="gpu" if cuda else "cpu", precision="16-mixed" if cuda else "32-true",
                     max_steps=steps, max_epochs=-1, limit_train_batches=steps, limit_val_batches=val_batches,
                     num_sanity_val_steps=0, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                     enable_model_summary=False, use_distributed_sampler=False, callbacks=callbacks, **placement)


def train(loader: str, dataset: str, settings=None, steps: int = 20, batch_size: int | None = None, *,
          model: str | None = None, size: int | None = None, num_classes: int = 1000, workers: int = 2,
          val_split: str | None = None, val_batches: int = 2, threads: int | None = None, device: str | None = None,
          warmup: int | None = None, lr: float = 0.01, seed: int | None = 0, ceiling: bool = True,
          results_dir=None, validate_all: bool = False, **loader_config: Any) -> dict:
    """Fit the Lightning classifier `steps` steps (+ `val_batches` validation batches); returns the report row.

    `seed`: the initial weights (`pipelines.common.seeded_weights`; every rank starts from the same ones).
    `validate_all`: afterwards ``Trainer.validate`` over the whole validation set; its ``val_acc`` and
    ``val_loss`` replace those of the last in-fit validation, and the row gets ``val_accuracy``,
    ``val_correct`` and ``val_samples`` (all ranks together; the accuracy tests use them).
    """
    settings = settings_or_default(settings)
    plan = plan_run(steps, model=model, size=size, batch_size=batch_size, warmup=warmup, threads=threads,
                    device=device)
    dev, arch, size, batch_size, warmup = plan.device, plan.arch, plan.size, plan.batch_size, plan.warmup
    cuda = dev.type == "cuda"
    ceiling = ceiling and ranks() == 1  # one rank's ceiling says nothing of a DDP run's

    data = LoaderDataModule(loader, dataset, settings, batch_size, size, workers, val_split=val_split,
                            **loader_config)
    with seeded_weights(seed):
        module = Classifier(arch, num_classes, lr, channels_last=cuda)
    twin = copy.deepcopy(module)  # the ceiling trains an untouched copy
    meter = ThroughputCallback(warmup, steps)
    started = time.perf_counter()
    trainer = _trainer(steps, dev, [meter], val_batches)
    trainer.fit(module, datamodule=data)
    wall = time.perf_counter() - started
    assert meter.meter is not None
    images_per_s = meter.meter.images_per_s
    loss = float(module.last_loss) if torch.is_tensor(module.last_loss) else math.nan
    val = {k: round(float(v), 4) for k, v in trainer.callback_metrics.items() if k.startswith("val_")}
    accuracy: dict[str, Any] = {}
    if validate_all:
        checked = _trainer(steps, dev, [], 1.0).validate(module, datamodule=data, verbose=False)
        val = {k: round(float(v), 4) for k, v in checked[0].items() if k.startswith("val_")}
        accuracy = {**accuracy_row(module.val_correct, module.val_seen, val_split or "shard"),
                    "val_correct": module.val_correct}

    top = _ceiling(twin, steps, warmup, batch_size, size, num_classes, dev) if ceiling else math.nan
    config = {"loader": loader, "dataset": dataset, "decode": "torch", "model": arch, "size": size,
              "batch_size": batch_size, "steps": trainer.global_step, "warmup": warmup, "seed": seed,
              "device": str(dev),
              "precision": trainer.precision, "workers": workers, "ranks": trainer.world_size,
              "val_split": val_split or "shard", "loader_config": public_config(loader_config)}
    extra = {"loss": round(loss, 4), **val, **accuracy, "timed_images": meter.meter.images,
             "wall_seconds": round(wall, 2)}
    row = report(f"train_lightning-{loader}", images_per_s, top, config,
                 results_dir if trainer.global_rank == 0 else None, settings=settings, extra=extra)
    return {**row, "images_per_s": images_per_s, "ceiling": top, "ratio": ratio_of(images_per_s, top), "loss": loss,
            "val": val}


def _ceiling(twin: Classifier, steps: int, warmup: int, batch_size: int, size: int, num_classes: int, dev) -> float:
    """Images/s of `twin` fitted `steps` steps on one synthetic batch already on the device (no I/O, no decode)."""
    fake = (torch.randint(0, 256, (batch_size, 3, size, size), dtype=torch.uint8, device=dev),
            torch.randint(0, num_classes, (batch_size,), device=dev))
    meter = ThroughputCallback(warmup, steps)
    with warnings.catch_warnings():  # the ceiling has no val_dataloader on purpose
        warnings.filterwarnings("ignore", message=".*no `val_dataloader`.*")
        _trainer(steps, dev, [meter]).fit(twin, DataLoader(_Repeat(fake, steps), batch_size=None))
    assert meter.meter is not None
    return meter.meter.images_per_s


def parser() -> argparse.ArgumentParser:
    from workbench.loaders import LOADERS

    p = argparse.ArgumentParser(prog="python -m pipelines.train_lightning", description=__doc__.split("\n\n")[0])
    p.add_argument("--loader", required=True, choices=sorted(LOADERS))
    p.add_argument("--dataset", required=True)
    add_classifier_flags(p, val_split_help="validate on this split (default: half of --split by shard)")
    p.add_argument("--val-batches", type=int, default=2, help="limit_val_batches during fit")
    p.add_argument("--validate-all", action="store_true",
                   help="then validate on the whole validation set: val_accuracy, val_samples")
    p.add_argument("--workers", type=int, default=2, help="DataLoader worker processes (per rank)")
    p.add_argument("--device", default=None, help="cuda or cpu (default: cuda when present)")
    add_run_flags(p)
    return p


def main(argv: list[str] | None = None) -> dict:
    args = parser().parse_args(argv)
    return call_with_flags(train, args, split=args.split)  # split: a loader setting


if __name__ == "__main__":
    run_cli(main, sys.argv[1:])
