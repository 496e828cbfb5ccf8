"""Any registered loader as a tf.data.Dataset of dicts {key, label, data} (decode with `decode_images`)."""

from __future__ import annotations

from typing import Any

import tensorflow as tf

from workbench.config import Settings
from workbench.loaders import loader_class, make_loader


def tf_dataset(loader: str, settings: Settings, **config: Any) -> tf.data.Dataset:
    """Elements {"key": string, "label": int64 | string, "data": string}; one epoch per iteration.

    Each iteration of the dataset runs one epoch; `epoch` in the config picks the shuffle order.
    """
    epoch = int(config.pop("epoch", 0))
    validated = loader_class(loader).Config(**config)
    label_spec = {"int": tf.TensorSpec((), tf.int64), "blob": tf.TensorSpec((), tf.string)}.get(validated.label_type)
    signature: dict[str, tf.TensorSpec] = {"key": tf.TensorSpec((), tf.string), "data": tf.TensorSpec((), tf.string)}
    if label_spec is not None:
        signature["label"] = label_spec

    def generate():
        with make_loader(loader, settings, **validated.model_dump()) as source:
            source.set_epoch(epoch)
            for item in source:
                element = {"key": item.key, "data": item.data}
                if label_spec is not None:
                    element["label"] = item.label
                yield element

    return tf.data.Dataset.from_generator(generate, output_signature=signature)


def decode_images(dataset: tf.data.Dataset, size: int = 224) -> tf.data.Dataset:
    """Decode JPEG/PNG, resize and center-crop to `size` x `size`, in parallel."""

    def decode(element: dict) -> dict:
        image = tf.io.decode_image(element["data"], channels=3, expand_animations=False)
        image = tf.image.resize_with_crop_or_pad(tf.image.resize(image, (size, size), preserve_aspect_ratio=True),
                                                 size, size)
        return {**element, "image": tf.cast(image, tf.uint8)}

    return dataset.map(decode, num_parallel_calls=tf.data.AUTOTUNE)
