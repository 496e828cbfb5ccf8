"""Any registered loader as a tf.data.Dataset of dicts {key, label, data} (decode with `decode_images`),
per sample or per batch; `TFLoaderDataset` the same elements, resumable mid-epoch."""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Mapping
from typing import Any

from workbench.config import Settings
from workbench.data.batch import Batch
from workbench.loaders import LoaderConfig, loader_class, make_loader
from workbench.loaders.consumed import ConsumedState
from workbench.tf_import import tensorflow

tf = tensorflow()


def _signature(validated: LoaderConfig, per_sample: bool = False) -> tuple[dict[str, Any], Any]:
    """The generator's output signature and the label spec (None: label_type none)."""
    shape = () if per_sample else (None,)
    label_spec = {"int": tf.TensorSpec(shape, tf.int64),
                  "blob": tf.TensorSpec(shape, tf.string)}.get(validated.label_type)
    if per_sample:
        signature = {"key": tf.TensorSpec((), tf.string), "data": tf.TensorSpec((), tf.string)}
    else:
        signature = {"key": tf.TensorSpec((None,), tf.string), "buffer": tf.TensorSpec((), tf.string),
                     "offsets": tf.TensorSpec((None,), tf.int64)}
    if label_spec is not None:
        signature["label"] = label_spec
    return signature, label_spec


def _label(label: Any, label_type: str) -> Any:
    return (-1 if label is None else label) if label_type == "int" else (label or b"")


def _batch_element(batch: Batch, label_type: str) -> dict[str, Any]:
    element = {"key": batch.keys, "buffer": batch.tobytes(), "offsets": batch.offsets}
    if label_type != "none":
        element["label"] = [_label(label, label_type) for label in batch.labels]
    return element


def _cut(element: dict) -> dict:
    """A batch element's buffer cut into its samples' bytes, in the graph."""
    offsets = element["offsets"]
    starts, sizes = offsets[:-1], offsets[1:] - offsets[:-1]
    samples = {name: value for name, value in element.items() if name not in ("buffer", "offsets")}
    # the scalar buffer broadcasts against the vectors: each sample is copied out once
    return {**samples, "data": tf.strings.substr(element["buffer"], starts, sizes)}


def tf_batches(loader: str, settings: Settings, **config: Any) -> tf.data.Dataset:
    """Elements are whole batches {"key": string [n], "label": int64 | string [n], "data": string [n]}.

    Why: the loader hands over one buffer per batch (`workbench.data.Batch`); it crosses into TensorFlow as
    one string scalar per batch and the graph cuts it into samples (`tf.strings.substr`), so Python runs
    once per batch, not once per sample. Each iteration (each round of `.repeat()`) runs the next epoch,
    with its own shuffle order, starting at `epoch` from the config.
    """
    epochs = itertools.count(int(config.pop("epoch", 0)))
    validated = loader_class(loader).Config(**config)
    signature, _ = _signature(validated)

    def generate():
        with make_loader(loader, settings, **validated.model_dump()) as source:
            source.set_epoch(next(epochs))
            for batch in source.batches():
                yield _batch_element(batch, validated.label_type)

    return tf.data.Dataset.from_generator(generate, output_signature=signature).map(_cut)


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


class TFLoaderDataset:
    """A loader's elements for TensorFlow that resume mid-epoch (torchdata's Stateful convention).

    Iterate it (eager tensors: the elements of `tf_batches`, or with `per_sample` those of `tf_dataset`) and
    `state_dict()` says where the iteration stands: the loader's own state recorded with the last element
    taken, not the state of the loader, which tf.data runs ahead of the consumer
    (`workbench.loaders.consumed`). A fresh object given that state by `load_state_dict` delivers the rest of
    the epoch, none twice, none missed; the loader skips what was read (`Loader.load_state_dict`). Call
    `set_epoch(e)` before each epoch, as with `LoaderDataset`. `dataset` is the tf.data.Dataset itself (for
    `model.fit`; there tf.data takes the elements, so only iterating this object counts them).
    """

    def __init__(self, loader: str, settings: Settings, per_sample: bool = False, **config: Any) -> None:
        self.loader, self.settings, self.per_sample = loader, settings, per_sample
        self._class = loader_class(loader)
        self.config = self._class.Config(**config)  # validated now, before any reading
        self.epoch = 0
        self._pending: dict[str, Any] | None = None  # loaded, for the next iteration
        self._resume: dict[str, Any] | None = None  # what the iteration starting now resumes from
        self._consumed = ConsumedState(self._start(0))
        signature, _ = _signature(self.config, per_sample)
        dataset = tf.data.Dataset.from_generator(self._generate, output_signature=signature)
        self.dataset = dataset if per_sample else dataset.map(_cut)

    def _start(self, epoch: int) -> dict[str, Any]:
        return self._class.make_state(self.config, 0, 1, epoch)

    def set_epoch(self, epoch: int) -> None:
        if epoch != self.epoch:
            self._pending = None
            self._consumed.restart(self._start(epoch))
        self.epoch = epoch

    def state_dict(self) -> dict[str, Any]:
        return self._consumed.state_dict()

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Resume from `state` (checked now: a state of another loader or setting is one WorkbenchError line)."""
        resume = self._class.check_state(state, self.config, 0, 1)
        self.epoch, self._pending = resume.epoch, dict(state)
        self._consumed.restart(self._pending)

    def _generate(self) -> Iterator[dict[str, Any]]:
        resume, label_type = self._resume, self.config.label_type
        with make_loader(self.loader, self.settings, **self.config.model_dump()) as source:
            source.set_epoch(self.epoch)
            if resume is not None:
                source.load_state_dict(resume)
            if self.per_sample:
                for item in source:
                    self._consumed.produced(source.state_dict())  # before tf can hand the element on
                    element = {"key": item.key, "data": item.data}
                    if label_type != "none":
                        element["label"] = _label(item.label, label_type)
                    yield element
            else:
                for batch in source.batches():
                    self._consumed.produced(source.state_dict())
                    yield _batch_element(batch, label_type)
            self._consumed.finished(source.state_dict())

    def __iter__(self) -> Iterator[dict[str, Any]]:
        self._resume, self._pending = self._pending, None
        self._consumed.restart(self._resume or self._start(self.epoch))
        for element in self.dataset:
            self._consumed.taken()
            yield element
        self._consumed.exhausted()
