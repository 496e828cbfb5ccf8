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


def build_model(arch: str, size: int, num_classes: int):
    """``tiny``: three strided conv blocks; ``small``: conv blocks keeping a 4x4 map (for the digits, as
    `pipelines.common.small_cnn`); ``resnet50``: keras.applications.ResNet50 (random weights)."""
    import keras
    from keras import layers

    if arch == "resnet50":
        return keras.applications.ResNet50(weights=None, input_shape=(size, size, 3), classes=num_classes,
                                           classifier_activation=None)
    if arch == "small":
        return _small_model(size, num_classes)
    if arch != "tiny":
        raise ValueError(f"unknown keras model '{arch}': use tiny, small or resnet50")
    inputs = keras.Input((size, size, 3))
    x = inputs
    for width in (16, 32, 64):
        x = layers.Conv2D(width, 3, strides=2, padding="same", use_bias=False)(x)
        x = layers.BatchNormalization()(x)
        x = layers.ReLU()(x)
    x = layers.GlobalAveragePooling2D()(x)
    outputs = layers.Dense(num_classes, dtype="float32")(x)
    return keras.Model(inputs, outputs, name="tiny_cnn")


def _small_model(size: int, num_classes: int):
    import keras
    from keras import layers

    inputs = keras.Input((size, size, 3))
    x = inputs
    for width, pool in ((32, True), (64, True), (64, False)):
        x = layers.Conv2D(width, 3, strides=1 if pool else 2, padding="same")(x)
        x = layers.ReLU()(layers.BatchNormalization()(x))
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
    # binary objects name their fields as written (split, label, data), SQL tables in upper case
    names = {name.lower(): name for name in scan.element_spec["val"]}
    missing = {"split", "label", "data"} - set(names)
    if missing:
        raise WorkbenchError(f"Ignite cache {cache} has no {', '.join(sorted(missing))} field: not a workbench layout")
    wanted = tf.constant(split)
    chosen = scan.filter(lambda e: tf.equal(e["val"][names["split"]], wanted)).map(
        lambda e: {"data": e["val"][names["data"]], "label": tf.cast(e["val"][names["label"]], tf.int64)})
    if _flag(config.get("shuffle", False)):  # a new order each epoch (each repetition of the scan)
        chosen = chosen.shuffle(int(config.get("shuffle_buffer", 1024)), seed=int(config.get("seed", 0)),
                                reshuffle_each_iteration=True)
    return chosen.repeat() if repeat else chosen


def _flag(value: Any) -> bool:
    """A boolean option as given in Python or by ``-o key=value`` (JSON true/false, or the strings)."""
    return value.lower() in ("1", "true", "yes") if isinstance(value, str) else bool(value)


def input_pipeline(source: str, dataset: str, settings, batch_size: int, size: int, split: str = "train",
                   repeat: bool = True, **config: Any):
    """(float32 NHWC images in [-1, 1], int64 labels) batches: decode_images in parallel, prefetched."""
    from workbench.tf_import import tensorflow
    tf = tensorflow()

    from workbench.adapters.tf import decode_images

    decoded = decode_images(elements(source, dataset, settings, split, repeat, **config), size)
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


def train(source: str, dataset: str, settings=None, steps: int = 20, batch_size: int | None = None, *,
          model: str | None = None, size: int | None = None, num_classes: int = 1000, split: str = "train",
          threads: int | None = None, warmup: int | None = None, lr: float = 0.01, seed: int | None = 0,
          ceiling: bool = True, results_dir=None, val_split: str | None = None, **loader_config: Any) -> dict:
    """``model.fit`` for `steps` steps from `source`; returns the report row (images_per_s, ceiling, ratio, loss).

    With `val_split`, the model then classifies that split once, read the same way (``val_accuracy``).
    `seed` fixes the initial weights, so that two runs differ only by what the loader delivers: Keras' own
    `set_random_seed`, which also seeds Python's, NumPy's and TensorFlow's global generators (None: leaves them).
    """
    configure_threads(threads)
    import keras

    from workbench.tf_import import tensorflow
    tf = tensorflow()

    settings = settings_or_default(settings)
    gpu = tf_gpu()
    arch = model or ("resnet50" if gpu else "tiny")
    size = size or (224 if gpu else 112)
    batch_size = batch_size or (128 if gpu else 32)
    warmup = default_warmup(steps) if warmup is None else min(warmup, steps - 1)
    if gpu:
        keras.mixed_precision.set_global_policy("mixed_float16")

    if seed is not None:
        keras.utils.set_random_seed(seed)
    net = compile_model(build_model(arch, size, num_classes), lr)
    twin = compile_model(keras.models.clone_model(net), lr)
    data = input_pipeline(source, dataset, settings, batch_size, size, split, **loader_config)
    meter = _throughput_callback(warmup, batch_size)
    started = time.perf_counter()
    history = net.fit(data, epochs=1, steps_per_epoch=steps, callbacks=[meter], verbose=0, shuffle=False)
    wall = time.perf_counter() - started
    loss = float(history.history["loss"][-1])
    images_per_s = meter.meter.images_per_s

    top = math.nan
    if ceiling:
        fake = (tf.random.uniform((batch_size, size, size, 3), -1.0, 1.0),
                tf.random.uniform((batch_size,), 0, num_classes, dtype=tf.int64))
        ceiling_meter = _throughput_callback(warmup, batch_size)
        twin.fit(tf.data.Dataset.from_tensors(fake).repeat(), epochs=1, steps_per_epoch=steps,
                 callbacks=[ceiling_meter], verbose=0, shuffle=False)
        top = ceiling_meter.meter.images_per_s

    config = {"source": source, "dataset": dataset, "split": split, "model": arch, "size": size,
              "batch_size": batch_size, "steps": steps, "warmup": warmup, "seed": seed, "gpu": gpu,
              "loader_config": public_config(loader_config)}
    extra = {"loss": round(loss, 4), "timed_images": meter.meter.images, "wall_seconds": round(wall, 2)}
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
    add_run_flags(p, option_help="loader setting (or page_size, cache_name, shuffle, shuffle_buffer, seed for "
                  "ignite-dataset)")
    return p


def main(argv: list[str] | None = None) -> dict:
    return call_with_flags(train, parser().parse_args(argv))


if __name__ == "__main__":
    run_cli(main, sys.argv[1:])
