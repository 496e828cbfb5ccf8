"""A Keras classifier fed by tf.data straight from Ignite or Cassandra (or any registered loader).

    python -m pipelines.train_keras --source ignite-dataset --dataset D --steps 50   # TF IgniteDataset (scan)
    python -m pipelines.train_keras --source ignite --dataset D                       # the ignite loader (get_all)
    python -m pipelines.train_keras --source cassandra --dataset D -o concurrency=64

Sources:

* ``ignite-dataset``: `workbench.compat.ignite_dataset.IgniteDataset` over the dataset's cache, the API of the
  TensorFlow-on-Ignite article: elements ``{'key', 'val': {'id', 'split', 'label', 'data', ...}}``,
  filtered to ``--split``, reshaped to ``{'data', 'label'}``. One scan per epoch, cache order; with
  ``-o shuffle=true`` tf.data's buffer shuffle (``shuffle_buffer``, default 1024, ``seed``), a new
  order every epoch (the article's pipeline is plain tf.data, so `Dataset.shuffle` applies).
* any registered loader name (``ignite``, ``cassandra``, ``s3-shards``...): `workbench.adapters.tf.tf_dataset`,
  the loader's own strategy and per-epoch shuffle (``-o ordered=false``: out-of-order delivery).

Then `decode_images` (parallel JPEG decode, resize, center crop), batch, prefetch, and ``model.fit`` for
``--steps`` steps. The model is a small CNN (ResNet50 with mixed_float16 when TensorFlow sees a GPU;
the project installs tensorflow-cpu, whose GPU paths are torch and DALI). The ceiling is the same model
(`clone_model`) fitted the same number of steps on one batch held in memory.

Outputs and resuming, as the article kept them in IGFS (any fsspec URL, ``ignite://CACHE/path`` included)::

    python -m pipelines.train_keras --source ignite-dataset --dataset D --steps 200 \
        --checkpoint-url ignite://RUNS/run1/model.keras --checkpoint-every 50 --events-url ignite://RUNS/run1/events
    python -m workbench.checkpoints.follow ignite://RUNS/run1/events /tmp/tb/run1 &   # TensorBoard: --logdir /tmp/tb
    python -m pipelines.train_keras ... --steps 400 --resume-from ignite://RUNS/run1/model.keras

``--checkpoint-url`` gets a ``.keras`` archive (`workbench.checkpoints.keras_archive`: model, optimizer state,
the step and epoch reached) every ``--checkpoint-every`` steps and at the end; ``--events-url`` a TensorBoard
event file (``train/loss``: Keras' running mean of the epoch, per step; ``train/images_per_s`` at the end)
made visible every ``--events-flush-steps`` steps / ``--events-flush-seconds`` seconds while training
(`workbench.checkpoints.live_events`), which another process follows through `workbench.checkpoints.follow`.
``--resume-from`` loads such a checkpoint (weights, optimizer state; its model, size, classes and batch size
unless given) and trains from its step to ``--steps``, skipping the elements the saved steps consumed.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time
from functools import reduce
from typing import Any

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from pipelines.common import (
    Meter,
    add_classifier_flags,
    add_run_flags,
    call_with_flags,
    default_warmup,
    public_config,
    ratio_of,
    report,
    run_cli,
    settings_or_default,
)
from workbench.errors import WorkbenchError

IGNITE_DATASET = "ignite-dataset"
IGNITE_DATASET_OPTIONS = ("page_size", "cache_name", "shuffle", "shuffle_buffer", "seed")
EPOCHS_AHEAD = 16  # distinct shuffled epochs chained before the dataset repeats


def configure_threads(threads: int | None) -> None:
    """Bound TensorFlow's thread pools (call before TensorFlow runs anything)."""
    from workbench.tf_import import tensorflow
    tf = tensorflow()

    if threads:
        try:
            tf.config.threading.set_intra_op_parallelism_threads(threads)
            tf.config.threading.set_inter_op_parallelism_threads(threads)
        except RuntimeError:  # already initialised in this process: keep what it has
            pass


def tf_gpu() -> bool:
    from workbench.tf_import import tensorflow
    tf = tensorflow()

    return bool(tf.config.list_physical_devices("GPU"))


def build_model(arch: str, size: int, num_classes: int, synchronized_bn: bool = False):
    """``tiny``: three strided conv blocks; ``small``: conv blocks keeping a 4x4 map (for the digits, as
    `pipelines.common.small_cnn`); ``resnet50``: keras.applications.ResNet50 (random weights).

    `synchronized_bn` (tiny, small): batch statistics over every worker of a tf.distribute strategy, so that
    the workers' moving means stay the same (`pipelines.train_keras_partitions`)."""
    import keras
    from keras import layers

    if arch == "resnet50":
        return keras.applications.ResNet50(weights=None, input_shape=(size, size, 3), classes=num_classes,
                                           classifier_activation=None)
    if arch == "small":
        return _small_model(size, num_classes, synchronized_bn)
    if arch != "tiny":
        raise ValueError(f"unknown keras model '{arch}': use tiny, small or resnet50")
    inputs = keras.Input((size, size, 3))
    x = inputs
    for width in (16, 32, 64):
        x = layers.Conv2D(width, 3, strides=2, padding="same", use_bias=False)(x)
        x = layers.BatchNormalization(synchronized=synchronized_bn)(x)
        x = layers.ReLU()(x)
    x = layers.GlobalAveragePooling2D()(x)
    outputs = layers.Dense(num_classes, dtype="float32")(x)
    return keras.Model(inputs, outputs, name="tiny_cnn")


def _small_model(size: int, num_classes: int, synchronized_bn: bool = False):
    import keras
    from keras import layers

    inputs = keras.Input((size, size, 3))
    x = inputs
    for width, pool in ((32, True), (64, True), (64, False)):
        x = layers.Conv2D(width, 3, strides=1 if pool else 2, padding="same")(x)
        x = layers.ReLU()(layers.BatchNormalization(synchronized=synchronized_bn)(x))
        x = layers.MaxPooling2D()(x) if pool else x
    x = layers.Flatten()(x)  # 4x4 at 32 px
    outputs = layers.Dense(num_classes, dtype="float32")(x)
    return keras.Model(inputs, outputs, name="small_cnn")


def compile_model(model, lr: float = 0.01):
    import keras

    model.compile(optimizer=keras.optimizers.SGD(learning_rate=lr, momentum=0.9),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    return model


def elements(source: str, dataset: str, settings, split: str = "train", repeat: bool = True, **config: Any):
    """A tf.data.Dataset of {'data': encoded string, 'label': int64}, EPOCHS_AHEAD epochs then repeating.

    With ``repeat=False``: one epoch (one scan of the cache for ignite-dataset), for validation.
    """
    if source == IGNITE_DATASET:
        return _ignite_elements(dataset, settings, split, repeat, **config)
    from workbench.adapters.tf import tf_dataset

    def one(epoch: int):
        return tf_dataset(source, settings, dataset=dataset, split=split, epoch=epoch, **config)

    if not repeat:
        return one(0).map(lambda e: {"data": e["data"], "label": e["label"]})
    epochs = reduce(lambda a, b: a.concatenate(b), (one(e) for e in range(1, EPOCHS_AHEAD)), one(0))
    return epochs.map(lambda e: {"data": e["data"], "label": e["label"]}).repeat()


def _ignite_elements(dataset: str, settings, split: str, repeat: bool, **config: Any):
    """`elements` from TF's IgniteDataset (a scan of the cache), shuffled by tf.data when `shuffle` is set."""
    from workbench.backends import locate
    from workbench.compat.ignite_dataset import IgniteDataset
    from workbench.tf_import import tensorflow
    tf = tensorflow()

    unknown = sorted(set(config) - set(IGNITE_DATASET_OPTIONS))
    if unknown:
        raise WorkbenchError(f"{IGNITE_DATASET} takes only the options {', '.join(IGNITE_DATASET_OPTIONS)}, "
                             f"not {', '.join(unknown)}: the others are loader settings (use --source ignite)")
    page_size = int(config.get("page_size", 100))
    cache = config.get("cache_name") or locate(settings, "ignite", dataset).get("cache")
    if not cache:
        raise WorkbenchError(f"no Ignite cache recorded for dataset {dataset}: ingest it into ignite first")
    scan = IgniteDataset(cache, settings=settings, page_size=page_size)
    names = workbench_fields(scan, cache)
    wanted = tf.constant(split)
    chosen = scan.filter(lambda e: tf.equal(e["val"][names["split"]], wanted)).map(
        lambda e: {"data": e["val"][names["data"]], "label": tf.cast(e["val"][names["label"]], tf.int64)})
    if _flag(config.get("shuffle", False)):  # a new order each epoch (each repetition of the scan)
        chosen = chosen.shuffle(int(config.get("shuffle_buffer", 1024)), seed=int(config.get("seed", 0)),
                                reshuffle_each_iteration=True)
    return chosen.repeat() if repeat else chosen


def workbench_fields(scan, cache: str, needed: tuple[str, ...] = ("split", "label", "data")) -> dict[str, str]:
    """{lower-case name: field name} of an IgniteDataset's values; a missing workbench field is one line.

    Binary objects name their fields as written (split, label, data), SQL tables in upper case."""
    names = {name.lower(): name for name in scan.element_spec["val"]}
    missing = set(needed) - set(names)
    if missing:
        raise WorkbenchError(f"Ignite cache {cache} has no {', '.join(sorted(missing))} field: not a workbench layout")
    return names


def _flag(value: Any) -> bool:
    """A boolean option as given in Python or by ``-o key=value`` (JSON true/false, or the strings)."""
    return value.lower() in ("1", "true", "yes") if isinstance(value, str) else bool(value)


def input_pipeline(source: str, dataset: str, settings, batch_size: int, size: int, split: str = "train",
                   repeat: bool = True, skip: int = 0, **config: Any):
    """(float32 NHWC images in [-1, 1], int64 labels) batches: decode_images in parallel, prefetched.

    `skip` elements are dropped before decoding (a resumed run's consumed steps)."""
    from workbench.tf_import import tensorflow
    tf = tensorflow()

    from workbench.adapters.tf import decode_images

    chosen = elements(source, dataset, settings, split, repeat, **config)
    decoded = decode_images(chosen.skip(skip) if skip else chosen, size)
    pairs = decoded.map(lambda e: (tf.cast(e["image"], tf.float32) / 127.5 - 1.0, e["label"]),
                        num_parallel_calls=tf.data.AUTOTUNE)
    return pairs.batch(batch_size, drop_remainder=repeat).prefetch(tf.data.AUTOTUNE)


def _throughput_callback(warmup: int, batch_size: int):
    import keras

    class Throughput(keras.callbacks.Callback):
        def __init__(self) -> None:
            super().__init__()
            self.meter = Meter(warmup)

        def on_train_begin(self, logs=None) -> None:
            self.meter = Meter(warmup)

        def on_train_batch_end(self, batch, logs=None) -> None:
            self.meter.step(batch_size)

        def on_train_end(self, logs=None) -> None:
            self.meter.finish()

    return Throughput()


def _resumed(url: str, settings, model: str | None, size: int | None, num_classes: int | None, batch_size: int | None,
             steps: int):
    """(net, its progress) from the checkpoint at `url`; flags that contradict it are one line each."""
    from workbench.checkpoints.keras_archive import load_checkpoint

    net, progress = load_checkpoint(url, settings)
    saved = {"model": progress.get("model"), "size": progress.get("size"), "num_classes": progress.get("num_classes"),
             "batch_size": progress.get("batch_size")}
    asked = {"model": model, "size": size, "num_classes": num_classes, "batch_size": batch_size}
    for name, value in asked.items():
        if value is not None and saved[name] is not None and value != saved[name]:
            flag = f"--{name.replace('_', '-')}"
            raise WorkbenchError(f"the checkpoint at {url} was trained with {flag} {saved[name]}, not {value}: "
                                 f"pass {flag} {saved[name]} (or start a new run without --resume-from)")
    if progress["step"] >= steps:
        raise WorkbenchError(f"the checkpoint at {url} is at step {progress['step']}, so --steps {steps} leaves "
                             f"nothing to train: pass --steps greater than {progress['step']}")
    return net, progress


def _outputs_callback(start: int, steps: int, progress: dict, settings, checkpoint_url: str | None,
                      checkpoint_every: int, events):
    """Per step: the loss into `events` (a LiveEventWriter or None) and, every `checkpoint_every` steps, a
    checkpoint (the final one is written after fit)."""
    import keras

    from workbench.checkpoints.keras_archive import save_checkpoint

    class Outputs(keras.callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None) -> None:
            step = start + batch + 1
            if events is not None and logs and "loss" in logs:
                events.scalars(step, {"train/loss": float(logs["loss"])})
            if checkpoint_url and checkpoint_every and step % checkpoint_every == 0 and step < steps:
                save_checkpoint(self.model, checkpoint_url, {**progress, "step": step, "epoch": 0}, settings)

    return Outputs()


def train(source: str, dataset: str, settings=None, steps: int = 20, batch_size: int | None = None, *,
          model: str | None = None, size: int | None = None, num_classes: int | None = None, split: str = "train",
          threads: int | None = None, warmup: int | None = None, lr: float = 0.01, seed: int | None = 0,
          ceiling: bool = True, results_dir=None, val_split: str | None = None, checkpoint_url: str | None = None,
          checkpoint_every: int = 0, events_url: str | None = None, events_flush_steps: int = 0,
          events_flush_seconds: float = 5.0, resume_from: str | None = None, callbacks: list | None = None,
          **loader_config: Any) -> dict:
    """``model.fit`` for `steps` steps from `source`; returns the report row (images_per_s, ceiling, ratio, loss).

    With `val_split`, the model then classifies that split once, read the same way (``val_accuracy``).
    `seed` fixes the initial weights, so that two runs differ only by what the loader delivers: Keras' own
    `set_random_seed`, which also seeds Python's, NumPy's and TensorFlow's global generators (None: leaves them).
    `checkpoint_url`, `events_url`, `resume_from`: see the module docstring; `callbacks` (Keras callbacks) run
    after the pipeline's own at every step. `num_classes` defaults to 1000 (a resumed run's: the checkpoint's).
    """
    from workbench.checkpoints.files import check_url

    for flag, url, file in (("--checkpoint-url", checkpoint_url, True), ("--resume-from", resume_from, True),
                            ("--events-url", events_url, False)):
        if url is not None:
            check_url(url, flag, file)
    if checkpoint_every < 0:
        raise WorkbenchError(f"--checkpoint-every {checkpoint_every}: use a number of steps >= 1 (0: only at the end)")
    configure_threads(threads)
    import keras

    from workbench.tf_import import tensorflow
    tf = tensorflow()

    settings = settings_or_default(settings)
    gpu = tf_gpu()
    if gpu:
        keras.mixed_precision.set_global_policy("mixed_float16")
    if seed is not None:
        keras.utils.set_random_seed(seed)
    start = 0
    if resume_from is not None:
        net, saved = _resumed(resume_from, settings, model, size, num_classes, batch_size, steps)
        start = saved["step"]
        model, size, num_classes, batch_size = saved["model"], saved["size"], saved["num_classes"], saved["batch_size"]
    arch = model or ("resnet50" if gpu else "tiny")
    size = size or (224 if gpu else 112)
    batch_size = batch_size or (128 if gpu else 32)
    num_classes = num_classes or 1000
    warmup = default_warmup(steps - start) if warmup is None else min(warmup, steps - start - 1)
    if resume_from is None:
        net = compile_model(build_model(arch, size, num_classes), lr)
    twin = compile_model(keras.models.clone_model(net), lr)
    data = input_pipeline(source, dataset, settings, batch_size, size, split, skip=start * batch_size,
                          **loader_config)
    meter = _throughput_callback(warmup, batch_size)
    progress = {"model": arch, "size": size, "num_classes": num_classes, "batch_size": batch_size,
                "source": source, "dataset": dataset, "split": split}
    events = None
    if events_url:
        from workbench.checkpoints.live_events import LiveEventWriter

        events = LiveEventWriter(events_url, settings, flush_steps=events_flush_steps,
                                 flush_seconds=events_flush_seconds)
    outputs = _outputs_callback(start, steps, progress, settings, checkpoint_url, checkpoint_every, events)
    started = time.perf_counter()
    try:
        history = net.fit(data, epochs=1, steps_per_epoch=steps - start, callbacks=[meter, outputs, *(callbacks or [])],
                          verbose=0, shuffle=False)
        wall = time.perf_counter() - started
        loss = float(history.history["loss"][-1])
        images_per_s = meter.meter.images_per_s
        if events is not None:
            events.scalars(steps, {"train/images_per_s": images_per_s})
    finally:
        if events is not None:
            events.close()
    written: dict[str, Any] = {}
    if checkpoint_url:
        from workbench.checkpoints.keras_archive import save_checkpoint

        save_checkpoint(net, checkpoint_url, {**progress, "step": steps, "epoch": 1}, settings)
        written["checkpoint_url"] = checkpoint_url
    if events is not None:
        written["events_files"] = events.files
    if resume_from is not None:
        written |= {"resumed_from": resume_from, "start_step": start}

    top = math.nan
    if ceiling:
        fake = (tf.random.uniform((batch_size, size, size, 3), -1.0, 1.0),
                tf.random.uniform((batch_size,), 0, num_classes, dtype=tf.int64))
        ceiling_meter = _throughput_callback(warmup, batch_size)
        twin.fit(tf.data.Dataset.from_tensors(fake).repeat(), epochs=1, steps_per_epoch=steps - start,
                 callbacks=[ceiling_meter], verbose=0, shuffle=False)
        top = ceiling_meter.meter.images_per_s

    config = {"source": source, "dataset": dataset, "split": split, "model": arch, "size": size,
              "batch_size": batch_size, "steps": steps, "warmup": warmup, "seed": seed, "gpu": gpu,
              "loader_config": public_config(loader_config)}
    extra = {"loss": round(loss, 4), "timed_images": meter.meter.images, "wall_seconds": round(wall, 2), **written}
    if val_split is not None:
        extra |= validate(net, source, dataset, settings, batch_size, size, val_split, **loader_config)
    row = report(f"train_keras-{source}", images_per_s, top, config, results_dir, settings=settings, extra=extra)
    return {**row, "images_per_s": images_per_s, "ceiling": top, "ratio": ratio_of(images_per_s, top), "loss": loss}


def validate(net, source: str, dataset: str, settings, batch_size: int, size: int, split: str,
             **config: Any) -> dict[str, Any]:
    """One pass of `net` over `split` (inference mode), through the same input pipeline: accuracy keys."""
    from pipelines.accuracy import accuracy_row

    config = {**config, "shuffle": False}  # one pass in the stored order
    correct = seen = 0
    for images, labels in input_pipeline(source, dataset, settings, batch_size, size, split, repeat=False, **config):
        predicted = net(images, training=False).numpy().argmax(axis=1)
        correct += int((predicted == labels.numpy()).sum())
        seen += len(predicted)
    return {**accuracy_row(correct, seen, split), "val_correct": correct}


def parser() -> argparse.ArgumentParser:
    from workbench.loaders import LOADERS

    p = argparse.ArgumentParser(prog="python -m pipelines.train_keras", description=__doc__.split("\n\n")[0])
    p.add_argument("--source", required=True, choices=[IGNITE_DATASET, *sorted(LOADERS)],
                   help="ignite-dataset (TF IgniteDataset) or a registered loader through tf_dataset")
    p.add_argument("--dataset", required=True)
    add_classifier_flags(p, model_help="default: resnet50 when TensorFlow sees a GPU, tiny otherwise",
                         model_choices=["tiny", "small", "resnet50"], threads_help="TensorFlow intra/inter-op threads")
    p.add_argument("--checkpoint-url", default=None,
                   help="write a .keras checkpoint here (at the end): ignite://CACHE/path.keras, file://, s3://...")
    p.add_argument("--checkpoint-every", type=int, default=0, help="also every N steps (default 0: only at the end)")
    p.add_argument("--resume-from", default=None, help="a checkpoint URL --checkpoint-url wrote: train from its step")
    p.add_argument("--events-url", default=None,
                   help="write a TensorBoard event file into this directory (ignite://CACHE/dir, ...), readable "
                   "while training (python -m workbench.checkpoints.follow)")
    p.add_argument("--events-flush-steps", type=int, default=0, help="make events visible every N steps (0: off)")
    p.add_argument("--events-flush-seconds", type=float, default=5.0,
                   help="... and every S seconds (default 5; 0: off); always at the end")
    add_run_flags(p, option_help="loader setting (or page_size, cache_name, shuffle, shuffle_buffer, seed for "
                  "ignite-dataset)")
    p.set_defaults(num_classes=None)  # 1000, or a resumed checkpoint's (train's default)
    return p


def main(argv: list[str] | None = None) -> dict:
    return call_with_flags(train, parser().parse_args(argv))


if __name__ == "__main__":
    run_cli(main, sys.argv[1:])
