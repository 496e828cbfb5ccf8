"""What every reference pipeline shares: models, a timed train step, the no-I/O ceiling and the report.

The number a pipeline reports is images/s *while training*, next to the ceiling: the same model, the
same batch size and the same number of steps, trained on synthetic tensors already in memory (no I/O,
no decode). ``ratio = images_per_s / ceiling``: 1.0 means storage and decoding keep the model fully
fed; 0.25 means the model waits for data three quarters of the time.

The first ``warmup`` steps (connections, worker start-up, cuDNN autotuning) are not timed, in both
the fed run and the ceiling.
"""

from __future__ import annotations

import argparse
import copy
import math
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from workbench.preprocessing import IMAGENET_MEAN, IMAGENET_STD  # the one definition, shared with Triton's preprocess

# ------------------------------------------------------------------------------------------------ devices


def pick_device(device: str | None = None):
    """The torch device to train on: CUDA when present (or asked for), else CPU."""
    import torch

    if device:
        return torch.device(device)
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def set_cpu_threads(threads: int | None) -> None:
    """Bound torch's intra-op threads (decode workers and the model share the CPU cores)."""
    import torch

    if threads:
        torch.set_num_threads(threads)


def synchronize(device) -> None:
    import torch

    if getattr(device, "type", str(device)) == "cuda":
        torch.cuda.synchronize(device)


# ------------------------------------------------------------------------------------------------- models


def default_model(device) -> tuple[str, int]:
    """(architecture, image size): resnet50 at 224 px on a GPU, resnet18 at 112 px on a CPU."""
    return ("resnet50", 224) if getattr(device, "type", str(device)) == "cuda" else ("resnet18", 112)


def classifier_defaults(device) -> tuple[str, int, int]:
    """(architecture, image size, batch size) of the classifiers: `default_model`, batches of 128 GPU / 32 CPU."""
    arch, size = default_model(device)
    return arch, size, 128 if getattr(device, "type", str(device)) == "cuda" else 32


@dataclass(frozen=True)
class RunPlan:
    """What a pipeline trains on and with: the device, the model, the image size, the batch and warm-up."""

    device: Any
    arch: str
    size: int
    batch_size: int
    warmup: int


def plan_run(steps: int, *, model: str | None = None, size: int | None = None, batch_size: int | None = None,
             warmup: int | None = None, threads: int | None = None, device: str | None = None,
             defaults: Callable[[Any], tuple[str, int, int]] = classifier_defaults) -> RunPlan:
    """The choices every pipeline makes first: CPU threads, device, then what the caller left open from
    `defaults(device)` -> (architecture, size, batch size); warm-up `default_warmup`, at most steps - 1."""
    set_cpu_threads(threads)
    dev = pick_device(device)
    arch, default_size, default_batch = defaults(dev)
    return RunPlan(dev, model or arch, size or default_size, batch_size or default_batch,
                   default_warmup(steps) if warmup is None else min(warmup, steps - 1))


def settings_or_default(settings=None):
    """`settings`, or the environment's `workbench.config.Settings()` when None (the pipelines' callers may omit it)."""
    if settings is not None:
        return settings
    from workbench.config import Settings

    return Settings()


def tiny_cnn(num_outputs: int):
    """A few conv layers: a few training steps take milliseconds on a CPU."""
    from torch import nn

    return nn.Sequential(
        nn.Conv2d(3, 16, 3, stride=2, padding=1), nn.BatchNorm2d(16), nn.ReLU(inplace=True),
        nn.Conv2d(16, 32, 3, stride=2, padding=1), nn.BatchNorm2d(32), nn.ReLU(inplace=True),
        nn.Conv2d(32, 64, 3, stride=2, padding=1), nn.BatchNorm2d(64), nn.ReLU(inplace=True),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(64, num_outputs),
    )


def small_cnn(num_outputs: int):
    """Three conv blocks that keep a 4x4 map for the classifier: 98 % on the digits in 100 steps on a CPU.

    Why beside `tiny_cnn`: its global average pooling throws away where strokes are, which digits need.
    """
    from torch import nn

    return nn.Sequential(
        nn.Conv2d(3, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(inplace=True), nn.MaxPool2d(2),
        nn.Conv2d(32, 64, 3, padding=1), nn.BatchNorm2d(64), nn.ReLU(inplace=True), nn.MaxPool2d(2),
        nn.Conv2d(64, 64, 3, stride=2, padding=1), nn.BatchNorm2d(64), nn.ReLU(inplace=True),
        nn.AdaptiveAvgPool2d(4), nn.Flatten(), nn.Linear(64 * 16, num_outputs),
    )


@contextmanager
def seeded_weights(seed: int | None) -> Iterator[None]:
    """Models built inside draw their initial weights from `seed` (None: from torch's global generator, as usual).

    Why: with the same first weights, two runs differ only by what the loader delivers, and an accuracy check
    does not hinge on a lucky start. Torch's global generator is left as it was.
    """
    import torch

    if seed is None:
        yield
        return
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        yield


def build_classifier(arch: str, num_outputs: int):
    """torchvision ``resnet18``/``resnet34``/``resnet50``/... (random weights), ``tiny`` or ``small``."""
    if arch == "tiny":
        return tiny_cnn(num_outputs)
    if arch == "small":
        return small_cnn(num_outputs)
    import torchvision

    try:
        factory = getattr(torchvision.models, arch)
    except AttributeError:
        raise ValueError(f"unknown model {arch!r}: use tiny, small or a torchvision model (resnet18...)") from None
    return factory(weights=None, num_classes=num_outputs)


# ------------------------------------------------------------------------------------------ training step


class TrainStep:
    """One optimiser step of `model` on (images, targets); mixed precision (autocast + GradScaler) on CUDA.

    Images may be uint8 NCHW (normalised here, on the device, with the ImageNet mean/std) or float
    (already normalised, as DALI delivers them). Calling it returns the loss as a detached tensor, so
    the GPU is never synchronised inside the loop; `last_loss` reads it.
    """

    def __init__(self, model, loss_fn, device, lr: float = 0.01, amp: bool | None = None,
                 channels_last: bool | None = None, optimizer=None,
                 make_batch: Callable[[int], tuple] | None = None) -> None:
        import torch

        self.device = device
        cuda = device.type == "cuda"
        self.amp = cuda if amp is None else amp
        self.amp_dtype = torch.float16 if cuda else torch.bfloat16  # CPU autocast speaks bfloat16
        self.channels_last = cuda if channels_last is None else channels_last
        self.model = model.to(device)
        if self.channels_last:
            self.model = self.model.to(memory_format=torch.channels_last)
        self.model.train()
        self.loss_fn = loss_fn
        self.optimizer = optimizer or torch.optim.SGD(self.model.parameters(), lr=lr, momentum=0.9)
        self.scaler = torch.amp.GradScaler(device.type, enabled=self.amp and cuda)
        self.mean = torch.tensor(IMAGENET_MEAN, device=device).view(1, 3, 1, 1) * 255
        self.std = torch.tensor(IMAGENET_STD, device=device).view(1, 3, 1, 1) * 255
        self.make_batch = make_batch  # synthetic (images, targets) on the device, for `no_io_ceiling`
        self.loss = None
        self.steps = 0

    def prepare(self, images):
        """To the device, float, normalised, channels-last on CUDA."""
        import torch

        images = images.to(self.device, non_blocking=True)
        if images.dtype == torch.uint8:
            images = (images.float() - self.mean) / self.std
        if self.channels_last and images.dim() == 4:
            images = images.contiguous(memory_format=torch.channels_last)
        return images

    def __call__(self, images, targets):
        import torch

        images = self.prepare(images)
        targets = targets.to(self.device, non_blocking=True)
        self.optimizer.zero_grad(set_to_none=True)
        with torch.autocast(self.device.type, dtype=self.amp_dtype, enabled=self.amp):
            loss = self.loss_fn(self.model(images), targets)
        self.scaler.scale(loss).backward()
        self.scaler.step(self.optimizer)
        self.scaler.update()
        self.loss = loss.detach()
        self.steps += 1
        return self.loss

    @property
    def last_loss(self) -> float:
        return float(self.loss.float().item()) if self.loss is not None else math.nan

    def clone(self) -> TrainStep:
        """An independent copy (model, optimiser, scaler): the ceiling never touches the trained weights."""
        twin = copy.copy(self)
        twin.model = copy.deepcopy(self.model)
        twin.optimizer = type(self.optimizer)(twin.model.parameters(), **self.optimizer.defaults)
        twin.scaler = copy.deepcopy(self.scaler)
        twin.loss, twin.steps = None, 0
        return twin


def classification_batch(size: int, num_classes: int, device) -> Callable[[int], tuple]:
    """A maker of synthetic (images, labels) batches already on `device`: what the ceiling trains on."""
    import torch

    def make(batch_size: int):
        images = torch.randn(batch_size, 3, size, size, device=device)
        labels = torch.randint(0, num_classes, (batch_size,), device=device)
        return images, labels

    return make


# --------------------------------------------------------------------------------------------- throughput


class Meter:
    """Images/s over the steps after the first `warmup` ones (the clock starts when warm-up ends)."""

    def __init__(self, warmup: int, device=None) -> None:
        self.warmup = warmup
        self.device = device
        self.steps = 0
        self.images = 0
        self.start: float | None = None
        self.stop: float | None = None
        self.first = time.perf_counter()

    def step(self, images: int) -> None:
        self.steps += 1
        if self.steps == self.warmup:
            if self.device is not None:
                synchronize(self.device)
            self.start = time.perf_counter()
        elif self.steps > self.warmup:
            self.images += images

    def finish(self) -> float:
        if self.device is not None:
            synchronize(self.device)
        self.stop = time.perf_counter()
        if self.start is None:  # warmup 0: everything was timed from construction
            self.start = self.first
        return self.images_per_s

    @property
    def seconds(self) -> float:
        return (self.stop or time.perf_counter()) - (self.start or self.first)

    @property
    def images_per_s(self) -> float:
        return self.images / self.seconds if self.images and self.seconds > 0 else 0.0


def default_warmup(steps: int) -> int:
    """One untimed step when there are at least two, more on longer runs (at most 10)."""
    return 0 if steps < 2 else min(10, max(1, steps // 10))


def cycle_epochs(make_epoch: Callable[[int], Iterable], steps: int) -> Iterator[Any]:
    """`steps` batches, starting a new epoch (make_epoch(epoch)) whenever one ends."""
    epoch, done = 0, 0
    while done < steps:
        produced = False
        for batch in make_epoch(epoch):
            produced = True
            yield batch
            done += 1
            if done >= steps:
                return
        if not produced:
            raise RuntimeError(f"epoch {epoch} delivered no batch: is the dataset (or this shard of it) empty?")
        epoch += 1


def run_steps(step: Callable, make_epoch: Callable[[int], Iterable], steps: int, warmup: int, device=None,
              check: Callable[[Any, Any], None] | None = None) -> Meter:
    """Train `steps` steps on the batches of `make_epoch` (epochs chained); the finished Meter of the timed ones."""
    meter = Meter(warmup, device)
    for inputs, targets in cycle_epochs(make_epoch, steps):
        if check is not None:
            check(inputs, targets)
        step(inputs, targets)
        meter.step(len(targets))
    meter.finish()
    return meter


def blob_label(item, what: str) -> bytes:
    """The sample's label bytes (a mask, a vector), or one line saying how to read blob labels."""
    from workbench.errors import WorkbenchError

    if not isinstance(item.label, bytes):
        raise WorkbenchError(f"sample {item.key}: the label is {type(item.label).__name__}, not {what}: "
                             "read with label_type=blob a dataset ingested with label_type=blob")
    return item.label


def torch_loader_epochs(loader: str, settings, dataset: str, transform: Callable, batch_size: int, workers: int,
                        device, collate_fn: Callable | None = None, **config: Any) -> Callable[[int], Iterable]:
    """epoch -> DataLoader over `LoaderDataset(loader, transform=...)`: decoding in `workers` processes.

    Each worker builds its own loader (own connections) for its share of the epoch; `set_epoch` picks
    the shuffle order, and reaches the workers because they start when the DataLoader is iterated.
    """
    from torch.utils.data import DataLoader

    from workbench.adapters.torch import LoaderDataset, worker_context

    data = LoaderDataset(loader, settings, transform=transform, dataset=dataset, **config)
    extra = {"prefetch_factor": 4, "persistent_workers": False} if workers > 0 else {}
    batches = DataLoader(data, batch_size=batch_size, num_workers=workers, pin_memory=device.type == "cuda",
                         collate_fn=collate_fn, multiprocessing_context=worker_context(settings, workers), **extra)

    def epoch(e: int):
        data.set_epoch(e)
        return batches

    epoch.dataset = data  # type: ignore[attr-defined]
    return epoch


def ingest_synthetic(loader: str, settings, dataset: str, count: int, kind: str = "classification",
                     num_classes: int = 10, mean_kb: float = 110.0, **layout: Any):
    """Ingest `count` synthetic samples of `kind` into the backend `loader` reads (idempotent); the backend."""
    from workbench.backends import make_backend
    from workbench.data import SyntheticSource
    from workbench.ingest import ingest
    from workbench.loaders import loader_class

    backend = make_backend(loader_class(loader).backend, settings, dataset, **layout)
    summary = ingest(SyntheticSource(count, num_classes=num_classes, kind=kind, mean_kb=mean_kb, name=dataset),
                     backend, progress=False)
    print(summary.line(), flush=True)
    return backend


def no_io_ceiling(model_step: Callable, batch_size: int, steps: int, make_batch: Callable[[int], tuple] | None = None,
                  warmup: int | None = None, device=None) -> float:
    """Images/s of `model_step(images, targets)` on one synthetic batch kept in memory: no I/O, no decode.

    `make_batch(batch_size)` builds the batch (default: `model_step.make_batch`); `device` (default:
    `model_step.device`) is synchronised before reading the clock. Use a `TrainStep.clone()` to leave
    the trained model untouched.
    """
    make_batch = make_batch or getattr(model_step, "make_batch", None)
    if make_batch is None:
        raise ValueError("no_io_ceiling needs make_batch (or a model_step with a make_batch attribute)")
    device = device if device is not None else getattr(model_step, "device", None)
    warmup = default_warmup(steps) if warmup is None else warmup
    images, targets = make_batch(batch_size)
    meter = Meter(warmup, device)
    for _ in range(max(steps, warmup + 1)):
        model_step(images, targets)
        meter.step(batch_size)
    return meter.finish()


# ------------------------------------------------------------------------------------------------- report


def ratio_of(images_per_s: float, ceiling: float) -> float:
    return images_per_s / ceiling if ceiling > 0 else math.nan


def report(name: str, images_per_s: float, ceiling: float, config: dict, write_results_dir: Path | str | None = None,
           settings=None, extra: dict | None = None) -> dict:
    """Print images/s and the ratio to the no-I/O ceiling; with `write_results_dir`, also a results row.

    The row (config + measurements) goes to `<dir>/<name>.json|csv` with the environment
    (`describe_environment`, server versions when `settings` is given). Returns the row.
    """
    ratio = ratio_of(images_per_s, ceiling)
    row = {"pipeline": name, **config, "images_per_s": round(images_per_s, 2), "ceiling_images_per_s":
           round(ceiling, 2), "ratio": round(ratio, 4) if not math.isnan(ratio) else ratio, **(extra or {})}
    print(f"{name}: {images_per_s:.1f} images/s while training, no-I/O ceiling {ceiling:.1f} images/s, "
          f"ratio {ratio:.2f}" + "".join(f", {k} {v}" for k, v in (extra or {}).items()), flush=True)
    if write_results_dir is not None:
        from workbench.environment import describe_environment
        from workbench.results import write_results

        json_path, _ = write_results(Path(write_results_dir), name, [row], describe_environment(settings))
        print(f"results: {json_path}", flush=True)
    return row


def loader_options(pairs: list[str] | None) -> dict[str, Any]:
    """``-o key=value`` pairs as loader config (values parsed as JSON when they are, else strings)."""
    import json

    options: dict[str, Any] = {}
    for pair in pairs or []:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise SystemExit(f"bad option '{pair}': use key=value")
        try:
            options[key.strip()] = json.loads(value)
        except json.JSONDecodeError:
            options[key.strip()] = value
    return options


@dataclass(frozen=True)
class BlobTask:
    """A pipeline whose labels are blobs (segmentation masks, multi-hot vectors): what differs between them.

    `build_model(arch, num_classes)`, `loss()`, `make_batch(size, num_classes, device)` (the ceiling's
    synthetic batches), `transform(size, num_classes)` (item -> (image, target), picklable for workers),
    `score` = (name, fn(step, images, targets)) on the last training batch, `defaults(device)` ->
    (architecture, size, batch size).
    """

    name: str
    build_model: Callable[[str, int], Any]
    loss: Callable[[], Any]
    make_batch: Callable[[int, int, Any], Callable[[int], tuple]]
    transform: Callable[[int, int], Callable]
    score: tuple[str, Callable[..., float]]
    defaults: Callable[[Any], tuple[str, int, int]] = classifier_defaults


def train_blob_labels(task: BlobTask, dataset: str, settings=None, steps: int = 20, batch_size: int | None = None,
                      *, loader: str = "cassandra", model: str | None = None, size: int | None = None,
                      num_classes: int = 10, workers: int = 2, threads: int | None = None, warmup: int | None = None,
                      lr: float = 0.01, seed: int | None = 0, val_split: str | None = None,
                      wrap_batches: Callable[[Callable[[int], Iterable[tuple]]], Callable[[int], Iterable[tuple]]]
                      | None = None, ceiling: bool = True, results_dir=None, **loader_config: Any) -> dict:
    """Train `task`'s model `steps` steps from `loader` (label_type blob), score the last batch, measure, report.

    Returns the report row with ``images_per_s``, ``ceiling``, ``ratio``, ``loss`` and the task's score.
    With `val_split`, the trained model then scores that split once, read and decoded the same way
    (``val_<score>``, ``val_samples``): a score on images it never trained on. `wrap_batches` wraps the
    training batches (the tests' label scrambler); `seed`: the initial weights (`seeded_weights`).
    Extra keyword arguments are loader settings.
    """
    settings = settings_or_default(settings)
    plan = plan_run(steps, model=model, size=size, batch_size=batch_size, warmup=warmup, threads=threads,
                    defaults=task.defaults)
    dev, arch, size, batch_size, warmup = plan.device, plan.arch, plan.size, plan.batch_size, plan.warmup
    loader_config = {"label_type": "blob", **loader_config}
    with seeded_weights(seed):
        net = task.build_model(arch, num_classes)
    step = TrainStep(net, task.loss(), dev, lr=lr, make_batch=task.make_batch(size, num_classes, dev))
    epochs = torch_loader_epochs(loader, settings, dataset, task.transform(size, num_classes), batch_size, workers,
                                 dev, **loader_config)
    if wrap_batches is not None:
        epochs = wrap_batches(epochs)
    last: list = []

    def keep(images, targets) -> None:
        last[:] = [images, targets]

    started = time.perf_counter()
    meter = run_steps(step, epochs, steps, warmup, dev, check=keep)
    wall = time.perf_counter() - started
    loss = step.last_loss
    score_name, score_fn = task.score
    value = score_fn(step, *last)
    top = no_io_ceiling(step.clone(), batch_size, steps, warmup=warmup) if ceiling else math.nan
    val: dict[str, Any] = {}
    if val_split is not None:
        val_epochs = torch_loader_epochs(loader, settings, dataset, task.transform(size, num_classes), batch_size,
                                         workers, dev, **{**loader_config, "split": val_split, "shuffle": False})
        val = score_split(score_fn, step, val_epochs(0), val_split, f"val_{score_name}")

    config = {"loader": loader, "dataset": dataset, "task": task.name, "model": arch, "size": size,
              "num_classes": num_classes, "batch_size": batch_size, "steps": steps, "warmup": warmup, "seed": seed,
              "device": str(dev), "amp": step.amp, "workers": workers, "loader_config": public_config(loader_config)}
    extra = {"loss": round(loss, 4), score_name: round(value, 4), "timed_images": meter.images,
             "wall_seconds": round(wall, 2), **{k: round(v, 4) if isinstance(v, float) else v for k, v in val.items()}}
    row = report(f"{task.name}-{loader}", meter.images_per_s, top, config, results_dir, settings=settings,
                 extra=extra)
    return {**row, "images_per_s": meter.images_per_s, "ceiling": top, "ratio": ratio_of(meter.images_per_s, top),
            "loss": loss, score_name: value, **val}


def score_split(score_fn: Callable[..., float], step: TrainStep, batches: Iterable[tuple], split: str,
                key: str) -> dict[str, Any]:
    """{key: the mean of `score_fn(step, images, targets)` over one pass, weighted by images; val_samples}.

    Both scores (pixel accuracy, exact match) are means over images of one size, so the weighted mean of the
    batches' scores is the split's score.
    """
    total = seen = 0.0
    for images, targets in batches:
        total += score_fn(step, images, targets) * len(targets)
        seen += len(targets)
    if not seen:
        from workbench.errors import WorkbenchError

        raise WorkbenchError(f"the validation split {split!r} delivered no sample: ingest a source that has one "
                             "(LearnableSyntheticSource) or pass another val_split")
    return {key: total / seen, "val_split": split, "val_samples": int(seen)}


def public_config(loader_config: dict[str, Any]) -> dict[str, Any]:
    """The loader settings a results row may show: passwords left out."""
    return {k: v for k, v in loader_config.items() if "password" not in k}


def add_run_flags(parser: argparse.ArgumentParser, option_help: str = "loader setting, repeatable "
                  "(concurrency=32, via_proxy=true, shuffle_buffer=500...)") -> None:
    """The flags every training pipeline shares: untimed warm-up steps, loader settings, where results go."""
    parser.add_argument("--warmup", type=int, default=None, help="untimed first steps (default: steps/10, 1..10)")
    parser.add_argument("-o", "--option", action="append", default=[], metavar="KEY=VALUE", help=option_help)
    parser.add_argument("--results-dir", default=None, help="also write a results row (json + csv) here")


def add_classifier_flags(parser: argparse.ArgumentParser, *, model_help: str = "tiny, small or a torchvision "
                         "model (default: resnet50 GPU, resnet18 CPU)", model_choices: list[str] | None = None,
                         threads_help: str = "torch intra-op threads (CPU training)",
                         val_split_help: str = "then classify this split once: validation accuracy") -> None:
    """The flags of the classifier pipelines (torch, Lightning, Keras): steps, model, batch, splits, learning rate."""
    parser.add_argument("--steps", type=int, default=50, help="training steps (the first few are warm-up, untimed)")
    parser.add_argument("--batch-size", type=int, default=None, help="default: 128 on a GPU, 32 on a CPU")
    parser.add_argument("--model", default=None, choices=model_choices, help=model_help)
    parser.add_argument("--size", type=int, default=None, help="image side (default: 224 GPU, 112 CPU)")
    parser.add_argument("--num-classes", type=int, default=1000)
    parser.add_argument("--threads", type=int, default=None, help=threads_help)
    parser.add_argument("--split", default="train")
    parser.add_argument("--val-split", default=None, help=val_split_help)
    parser.add_argument("--lr", type=float, default=0.01)
    parser.add_argument("--seed", type=int, default=0, help="the model's initial weights (default 0)")


def blob_label_parser(prog: str, description: str, kind: str, num_classes_help: str,
                      **model_argument: Any) -> argparse.ArgumentParser:
    """The CLI of the pipelines whose labels are blobs (segmentation masks, multi-hot vectors)."""
    from workbench.loaders import LOADERS

    p = argparse.ArgumentParser(prog=prog, description=description)
    p.add_argument("--dataset", required=True)
    p.add_argument("--loader", default="cassandra", choices=sorted(LOADERS))
    p.add_argument("--ingest", type=int, default=0, metavar="N",
                   help=f"first ingest N synthetic {kind} samples (label_type blob) under --dataset")
    p.add_argument("--mean-kb", type=float, default=110.0, help="--ingest: mean JPEG size")
    p.add_argument("--steps", type=int, default=50)
    p.add_argument("--batch-size", type=int, default=None)
    p.add_argument("--model", default=None, **model_argument)
    p.add_argument("--size", type=int, default=None)
    p.add_argument("--num-classes", type=int, default=10, help=num_classes_help)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--threads", type=int, default=None)
    p.add_argument("--val-split", default=None, help="then score this split once (LearnableSyntheticSource: val)")
    p.add_argument("--seed", type=int, default=0, help="the model's initial weights (default 0)")
    add_run_flags(p)
    return p


def call_with_flags(train: Callable[..., Any], args: argparse.Namespace, **extra: Any) -> Any:
    """`train` called with every parsed flag named like one of its parameters, `extra`, then the ``-o`` settings.

    Why: each pipeline names its flags after its function's parameters, so its main() need not copy them over
    one by one (and cannot forget one).
    """
    import inspect

    named = {name for name, parameter in inspect.signature(train).parameters.items()
             if parameter.kind in (parameter.POSITIONAL_OR_KEYWORD, parameter.KEYWORD_ONLY)}
    flags = {name: value for name, value in vars(args).items() if name in named and name not in extra}
    return train(**flags, **extra, **loader_options(args.option))


def blob_label_main(args: argparse.Namespace, task: BlobTask) -> dict:
    """Ingest first when asked (--ingest N synthetic samples of the task's kind), then train: the blob-label main."""
    settings = settings_or_default()
    if args.ingest:
        ingest_synthetic(args.loader, settings, args.dataset, args.ingest, task.name, args.num_classes, args.mean_kb,
                         label_type="blob")
    return call_with_flags(train_blob_labels, args, task=task, settings=settings)


def run_cli(main: Callable[[list[str]], Any], argv: list[str]) -> None:
    """Run a pipeline's `main`: a WorkbenchError (service down, unknown dataset...) is one line, not a traceback."""
    from workbench.errors import WorkbenchError

    try:
        main(argv)
    except WorkbenchError as exc:
        raise SystemExit(f"error: {exc}") from None
