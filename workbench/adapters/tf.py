"""Any registered loader as a tf.data.Dataset of dicts {key, label, data} (decode with `decode_images`)."""

from __future__ import annotations

import itertools
from typing import Any

from workbench.config import Settings
from workbench.loaders import loader_class, make_loader
from workbench.tf_import import tensorflow

tf = tensorflow()


def tf_dataset(loader: str, settings: Settings, **config: Any) -> tf.data.Dataset:
    """Elements {"key": string, "label": int64 | string, "data": string}; one epoch per iteration.

    Each iteration of the dataset (including each round of `.repeat()`) runs the next epoch, with its
    own shuffle order, starting at `epoch` from the config.
    """
    epochs = itertools.count(int(config.pop("epoch", 0)))
    validated = loader_class(loader).Config(**config)
    label_spec = {"int": tf.TensorSpec((), tf.int64), "blob": tf.TensorSpec((), tf.string)}.get(validated.label_type)
    signature: dict[str, tf.TensorSpec] = {"key": tf.TensorSpec((), tf.string), "data": tf.TensorSpec((), tf.string)}
    if label_spec is not None:
        signature["label"] = label_spec

    def generate():
        with make_loader(loader, settings, **validated.model_dump()) as source:
            source.set_epoch(next(epochs))
            for item in source:
                element = {"key": item.key, "data": item.data}
                if label_spec is not None:
                    element["label"] = item.label
                yield element

    return tf.data.Dataset.from_generator(generate, output_signature=signature)


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
