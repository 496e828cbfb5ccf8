"""A PyTorch image classifier fed by ANY registered loader, decoded by DALI or by torchvision.

    python -m pipelines.train_torch --loader cassandra --dataset synthetic-classification-200-s0 --steps 20
    python -m pipelines.train_torch --loader s3-shards --dataset D --decode dali -o concurrency=32

Two decode paths, the same model and the same report:

* ``--decode dali``: the loader feeds a DALI pipeline (`workbench.adapters.dali.image_pipeline`):
  ``fn.decoders.image`` with ``device="mixed"`` (nvJPEG) on a GPU, on the CPU otherwise, then resize,
  crop and normalise; batches reach torch through DALI's PyTorch iterator.
* ``--decode torch``: `LoaderDataset` + `decode_transform` (torchvision decode, resize, center-crop)
  in DataLoader worker processes (each worker its own loader and connections); uint8 batches are
  normalised on the device.

The model is torchvision resnet50 at 224 px with mixed precision (``torch.autocast`` + ``GradScaler``,
channels-last) on a GPU, resnet18 at 112 px in float32 on a CPU (``--model``/``--size`` override).
After training, a copy of the same model trains as many steps on synthetic tensors in memory: the
no-I/O ceiling. Printed: images/s while training, the ceiling, and their ratio.

Outputs, as the article kept them in IGFS: ``--checkpoint-url`` writes the trained model's state dict
(``torch.save``) and ``--events-url`` a TensorBoard event file (the loss of every step, images/s) into
that directory; both take any fsspec URL, ``ignite://CACHE/path`` included (`workbench.storage.ignite_fs`)::

    python -m pipelines.train_torch --loader ignite --dataset D --steps 20 \
        --checkpoint-url ignite://RUNS/run1/model.pt --events-url ignite://RUNS/run1/events
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from collections.abc import Callable, Iterable
from typing import Any

from pipelines.common import (
    TrainStep,
    add_classifier_flags,
    add_run_flags,
    build_classifier,
    call_with_flags,
    classification_batch,
    default_model,
    default_warmup,
    no_io_ceiling,
    pick_device,
    ratio_of,
    report,
    run_cli,
    run_steps,
    seeded_weights,
    set_cpu_threads,
    torch_loader_epochs,
)
from workbench.errors import WorkbenchError

DECODERS = ("torch", "dali")


def make_step(arch: str, size: int, num_classes: int, device, amp: bool | None = None, lr: float = 0.01,
              seed: int | None = 0) -> TrainStep:
    """The classifier, its optimiser and loss as one `TrainStep` (with the ceiling's batch maker).

    `seed`: the initial weights (`seeded_weights`).
    """
    from torch import nn

    with seeded_weights(seed):
        model = build_classifier(arch, num_classes)
    return TrainStep(model, nn.CrossEntropyLoss(), device, lr=lr, amp=amp,
                     make_batch=classification_batch(size, num_classes, device))


# ---------------------------------------------------------------------------------------------- decoders


def torch_epochs(loader: str, settings, dataset: str, batch_size: int, size: int, workers: int, device,
                 **config: Any) -> Callable[[int], Iterable[tuple]]:
    """epoch -> DataLoader of (uint8 NCHW images, int64 labels), decoded by torchvision in `workers` processes."""
    from torch.utils.data import default_collate

    from workbench.adapters.torch import decode_transform, skip_none

    on_corrupt = config.get("on_corrupt", "raise")
    epochs = torch_loader_epochs(loader, settings, dataset, decode_transform(size, on_corrupt), batch_size, workers,
                                 device, skip_none(default_collate) if on_corrupt == "skip" else None, **config)
    label_type = epochs.dataset.config["label_type"]
    if label_type != "int":
        raise WorkbenchError(f"the classifier needs int labels; loader {loader} is configured with label_type "
                         f"{label_type} (see pipelines/segmentation.py and multilabel.py)")
    return epochs


def dali_epochs(loader: str, settings, dataset: str, batch_size: int, size: int, device, threads: int = 2,
                fetch_workers: int = 0, **config: Any) -> tuple[Callable[[int], Iterable[tuple]], Callable[[], None]]:
    """epoch -> DALI batches (normalised float NCHW on the device, int64 labels); and a closer.

    DALI decodes with nvJPEG (``device="mixed"``) when training on a GPU, on the CPU otherwise.
    With `fetch_workers` > 0 the loader runs in that many processes (`ProcessBatchSource`), away
    from the training loop's interpreter.
    """
    from nvidia.dali.plugin.base_iterator import LastBatchPolicy
    from nvidia.dali.plugin.pytorch import DALIGenericIterator

    from workbench.adapters.dali import ProcessBatchSource, image_pipeline
    from workbench.loaders import make_loader

    source = make_loader(loader, settings, dataset=dataset, **config)
    if source.config.label_type != "int":
        source.close()
        raise WorkbenchError(f"the classifier needs int labels; loader {loader} is configured with label_type "
                         f"{source.config.label_type}")
    gpu = device.type == "cuda"
    feed = (ProcessBatchSource(loader, settings, fetch_workers, dataset=dataset, batch_size=batch_size, **config)
            if fetch_workers else source)
    pipe = image_pipeline(feed, batch_size, size=size, gpu=gpu, num_threads=threads)
    # external_source with cycle="raise": an epoch ends when the loader does; PARTIAL keeps the short last batch
    iterator = DALIGenericIterator(pipe, ["images", "labels"], last_batch_policy=LastBatchPolicy.PARTIAL,
                                   auto_reset=True, prepare_first_batch=False)

    def epoch(e: int):
        for out in iterator:  # the source's own epoch counter advances with each reset (one per epoch)
            batch = out[0]
            yield batch["images"], batch["labels"].view(-1).long()

    def close():
        source.close()

    return epoch, close


# ------------------------------------------------------------------------------------------------- train


def train(loader: str, dataset: str, settings=None, steps: int = 20, decode: str = "torch",
          batch_size: int | None = None, *, model: str | None = None, size: int | None = None,
          num_classes: int = 1000, workers: int = 2, device: str | None = None, amp: bool | None = None,
          threads: int | None = None, dali_threads: int = 2, fetch_workers: int = 0, warmup: int | None = None,
          lr: float = 0.01, seed: int | None = 0, val_split: str | None = None,
          wrap_batches: Callable[[Callable[[int], Iterable[tuple]]], Callable[[int], Iterable[tuple]]] | None = None,
          ceiling: bool = True, results_dir=None, quiet: bool = False, checkpoint_url: str | None = None,
          events_url: str | None = None, **loader_config: Any) -> dict:
    """Train the classifier `steps` steps from `loader` and measure; returns the report row as a dict.

    Keys include ``images_per_s``, ``ceiling`` (no-I/O images/s of the same model), ``ratio``,
    ``loss`` (the last step's), ``timed_images`` and ``timed_seconds`` (after `warmup` untimed steps),
    ``wall_seconds`` and the configuration.
    With `val_split`, the trained model then classifies that split once, read and decoded the same way
    (``val_accuracy``, ``val_correct``, ``val_samples``); `wrap_batches` wraps the training batches (the
    accuracy tests' label scrambler, `pipelines.accuracy.scramble_labels`).
    `seed`: the model's initial weights (see `make_step`; every rank starts from the same ones).
    `checkpoint_url`: where the trained state dict goes (``torch.save``); `events_url`: a directory for a
    TensorBoard event file of the run (rank 0 writes both; see `write_outputs`).
    Extra keyword arguments are loader settings (``concurrency``, ``split``, ``via_proxy``...).
    """
    if decode not in DECODERS:
        raise ValueError(f"decode must be one of {', '.join(DECODERS)}, got {decode!r}")
    if steps < 1:
        raise ValueError("steps must be >= 1")
    if settings is None:
        from workbench.config import Settings

        settings = Settings()
    set_cpu_threads(threads)
    dev = pick_device(device)
    arch, default_size = default_model(dev)
    arch, size = model or arch, size or default_size
    batch_size = batch_size or (128 if dev.type == "cuda" else 32)
    warmup = default_warmup(steps) if warmup is None else min(warmup, steps - 1)

    rank, world, joined = join_ranks(dev)
    if world > 1:  # torchrun: this rank's shard of the data, gradients averaged by DDP, no ceiling
        loader_config = {"shard_id": rank, "num_shards": world, **loader_config}
        ceiling = False
        if dev.type == "cuda" and dev.index is None:
            import os

            dev = pick_device(f"cuda:{os.environ.get('LOCAL_RANK', '0')}")
    step = make_step(arch, size, num_classes, dev, amp=amp, lr=lr, seed=seed)
    if world > 1:
        from torch.nn.parallel import DistributedDataParallel

        step.model = DistributedDataParallel(step.model)
    if decode == "dali":
        make_epoch, close = dali_epochs(loader, settings, dataset, batch_size, size, dev, dali_threads,
                                        fetch_workers, **loader_config)
    else:
        make_epoch, close = torch_epochs(loader, settings, dataset, batch_size, size, workers, dev,
                                         **loader_config), (lambda: None)
    if wrap_batches is not None:
        make_epoch = wrap_batches(make_epoch)

    def check(images, labels) -> None:
        low, high = int(labels.min()), int(labels.max())
        if low < 0 or high >= num_classes:
            raise WorkbenchError(f"labels in [{low}, {high}] do not fit num_classes {num_classes}: pass --num-classes")

    losses: list = []  # the loss tensor of every step (kept on the device: read once, after training)

    def train_step(images, labels):
        loss = step(images, labels)
        if events_url:
            losses.append(loss)
        return loss

    started = time.perf_counter()
    try:
        meter = run_steps(train_step, make_epoch, steps, warmup, dev, check)
    finally:
        close()
    images_per_s = meter.images_per_s
    loss = step.last_loss
    wall = time.perf_counter() - started
    top = no_io_ceiling(step.clone(), batch_size, steps, warmup=warmup) if ceiling else math.nan
    if val_split is not None:
        val = validate(step, loader, settings, dataset, batch_size, size, decode, workers, dali_threads,
                       {**loader_config, "split": val_split, "shuffle": False})
    outputs = write_outputs(step, settings, checkpoint_url, events_url, losses, images_per_s) if rank == 0 else {}
    if joined:
        import torch.distributed as dist

        dist.destroy_process_group()
    config = {"loader": loader, "dataset": dataset, "decode": decode, "model": arch, "size": size,
              "batch_size": batch_size, "steps": steps, "warmup": warmup, "seed": seed, "device": str(dev),
              "amp": step.amp, "workers": workers if decode == "torch" else fetch_workers, "ranks": world,
              "loader_config": {k: v for k, v in loader_config.items() if "password" not in k}}
    extra = {"loss": round(loss, 4), "timed_images": meter.images, "timed_seconds": round(meter.seconds, 3),
             "wall_seconds": round(wall, 2), **(val if val_split is not None else {}), **outputs}
    name = f"train_torch-{loader}-{decode}"
    if quiet:
        row = {"pipeline": name, **config, "images_per_s": images_per_s, "ceiling_images_per_s": top,
               "ratio": ratio_of(images_per_s, top), **extra}
    else:
        row = report(name, images_per_s, top, config, results_dir if rank == 0 else None, settings=settings,
                     extra=extra)
    return {**row, "images_per_s": images_per_s, "ceiling": top, "ratio": ratio_of(images_per_s, top),
            "loss": loss}


def write_outputs(step: TrainStep, settings, checkpoint_url: str | None, events_url: str | None, losses: list,
                  images_per_s: float) -> dict[str, str]:
    """The trained state dict to `checkpoint_url`, an event file of the run into the directory `events_url`;
    the row's ``checkpoint_url`` / ``events_file``. A failed write leaves no partial ignite:// file."""
    import torch

    from workbench.checkpoints.events import EventWriter, event_file_name
    from workbench.checkpoints.files import join_url, open_url

    written: dict[str, str] = {}
    if checkpoint_url:
        model = getattr(step.model, "module", step.model)  # DistributedDataParallel wraps it
        with open_url(checkpoint_url, "wb", settings) as f:
            torch.save(model.state_dict(), f)
        written["checkpoint_url"] = checkpoint_url
    if events_url:
        url = join_url(events_url, event_file_name())
        now = time.time()
        with EventWriter(open_url(url, "wb", settings)) as events:
            for i, loss in enumerate(losses, start=1):
                events.scalars(i, {"train/loss": float(loss.float().item())}, wall_time=now)
            events.scalars(len(losses), {"train/images_per_s": images_per_s}, wall_time=now)
        written["events_file"] = url
    return written


def validate(step: TrainStep, loader: str, settings, dataset: str, batch_size: int, size: int, decode: str,
             workers: int, dali_threads: int, config: dict[str, Any]) -> dict[str, Any]:
    """One pass of the trained model over `config`'s split, decoded as in training: accuracy keys for the row."""
    from pipelines.accuracy import accuracy_row, classify_epoch, step_predictor

    dev = step.device
    if decode == "dali":
        make_epoch, close = dali_epochs(loader, settings, dataset, batch_size, size, dev, dali_threads, 0, **config)
    else:
        make_epoch, close = torch_epochs(loader, settings, dataset, batch_size, size, workers, dev,
                                         **config), (lambda: None)
    try:
        correct, seen = classify_epoch(step_predictor(step), make_epoch(0))
    finally:
        close()
        step.model.train()
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():  # each rank classified its shard: add them up
        import torch

        counts = torch.tensor([correct, seen], dtype=torch.int64)
        dist.all_reduce(counts)
        correct, seen = int(counts[0]), int(counts[1])
    return {**accuracy_row(correct, seen, config["split"]), "val_correct": correct}


def join_ranks(device) -> tuple[int, int, bool]:
    """(rank, world size, joined here) under torchrun (WORLD_SIZE > 1): gloo on a CPU, nccl on GPUs."""
    import os

    import torch.distributed as dist

    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world <= 1:
        return 0, 1, False
    joined = not dist.is_initialized()
    if joined:
        dist.init_process_group("nccl" if device.type == "cuda" else "gloo")
    return dist.get_rank(), dist.get_world_size(), joined


# ---------------------------------------------------------------------------------------------------- CLI


def parser() -> argparse.ArgumentParser:
    from workbench.loaders import LOADERS

    p = argparse.ArgumentParser(prog="python -m pipelines.train_torch", description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--loader", required=True, choices=sorted(LOADERS), help="registered loader")
    p.add_argument("--dataset", required=True, help="dataset name as ingested")
    p.add_argument("--decode", choices=DECODERS, default="torch", help="dali (GPU decode when present) or torch")
    add_classifier_flags(p)
    p.add_argument("--workers", type=int, default=2, help="torch decode: DataLoader worker processes")
    p.add_argument("--dali-threads", type=int, default=2, help="dali decode: CPU threads of the pipeline")
    p.add_argument("--fetch-workers", type=int, default=0,
                   help="dali decode: fetch in this many processes (0: in the training process)")
    p.add_argument("--device", default=None, help="cuda, cuda:1, cpu (default: cuda when present)")
    p.add_argument("--no-amp", action="store_true", help="float32 even on a GPU")
    p.add_argument("--checkpoint-url", default=None,
                   help="write the trained state dict here (torch.save): ignite://CACHE/path, file://, s3://...")
    p.add_argument("--events-url", default=None,
                   help="write a TensorBoard event file of the run into this directory (ignite://CACHE/dir, ...)")
    add_run_flags(p)
    return p


def main(argv: list[str] | None = None) -> dict:
    args = parser().parse_args(argv)
    return call_with_flags(train, args, amp=False if args.no_amp else None, split=args.split)  # split: a loader setting


if __name__ == "__main__":
    run_cli(main, sys.argv[1:])
