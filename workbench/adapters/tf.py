"""Any registered loader as a tf.data.Dataset of dicts {key, label, data} (decode with `decode_images`),
per sample or per batch."""

from __future__ import annotations

import itertools
from typing import Any

from workbench.config import Settings
from workbench.loaders import loader_class, make_loader
from workbench.tf_import import tensorflow

tf = tensorflow()


def tf_batches(loader: str, settings: Settings, **config: Any) -> tf.data.Dataset:
    """Elements are whole batches {"key": string [n], "label": int64 | string [n], "data": string [n]}.

    Why: the loader hands over one buffer per batch (`workbench.data.Batch`); it crosses into TensorFlow as
    one string scalar per batch and the graph cuts it into samples (`tf.strings.substr`), so Python runs
    once per batch, not once per sample. Each iteration (each round of `.repeat()`) runs the next epoch,
    with its own shuffle order, starting at `epoch` from the config.
    """
    epochs = itertools.count(int(config.pop("epoch", 0)))
    validated = loader_class(loader).Config(**config)
    label_spec = {"int": tf.TensorSpec((None,), tf.int64),
                  "blob": tf.TensorSpec((None,), tf.string)}.get(validated.label_type)
    signature: dict[str, tf.TensorSpec] = {"key": tf.TensorSpec((None,), tf.string),
                                           "buffer": tf.TensorSpec((), tf.string),
                                           "offsets": tf.TensorSpec((None,), tf.int64)}
    if label_spec is not None:
        signature["label"] = label_spec

    def generate():
        with make_loader(loader, settings, **validated.model_dump()) as source:
            source.set_epoch(next(epochs))
            for batch in source.batches():
                element = {"key": batch.keys, "buffer": batch.buffer.tobytes(), "offsets": batch.offsets}
                if label_spec is not None:
                    element["label"] = [-1 if label is None else label for label in batch.labels] \
                        if validated.label_type == "int" else [label or b"" for label in batch.labels]
                yield element

    def cut(element: dict) -> dict:
        offsets = element["offsets"]
        starts, sizes = offsets[:-1], offsets[1:] - offsets[:-1]
        samples = {name: value for name, value in element.items() if name not in ("buffer", "offsets")}
        # the scalar buffer broadcasts against the vectors: each sample is copied out once
        return {**samples, "data": tf.strings.substr(element["buffer"], starts, sizes)}

    return tf.data.Dataset.from_generator(generate, output_signature=signature).map(cut)


def tf_dataset(loader: str, settings: Settings, **config: Any) -> tf.data.Dataset:
    """Elements {"key": string, "label": int64 | string, "data": string}, one per sample (`tf_batches`
    unbatched); one epoch per iteration."""
    return tf_batches(loader, settings, **config).unbatch()


def decode_images(dataset: tf.data.Dataset, size: int = 224) -> tf.data.Dataset:
    """Decode JPEG/PNG, resize the short side to `size` and center-crop (as the torch and DALI paths do)."""

    def decode(element: dict) -> dict:
        image = tf.io.decode_image(element["data"], channels=3, expand_animations=False)
        shape = tf.cast(tf.shape(image)[:2], tf.float32)
        scale = size / tf.reduce_min(shape)
        resized = tf.image.resize(image, tf.cast(tf.math.ceil(shape * scale), tf.int32), antialias=True)
        image = tf.image.resize_with_crop_or_pad(resized, size, size)
        return {**element, "image": tf.cast(tf.clip_by_value(image, 0, 255), tf.uint8)}

    return dataset.map(decode, num_parallel_calls=tf.data.AUTOTUNE)
