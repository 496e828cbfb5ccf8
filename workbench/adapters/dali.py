"""Any registered loader feeding an NVIDIA DALI pipeline through `fn.external_source`.

The graph decodes with `fn.decoders.image` (`device="mixed"`: nvJPEG on the GPU when one is present,
"cpu" with `device_id=None` otherwise), then resizes, crops and normalises, as the
cassandra-dali-plugin examples do after `fn.crs4.cassandra`.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import numpy as np
from nvidia.dali import fn, pipeline_def, types

from workbench.loaders import Loader

IMAGENET_MEAN = [0.485 * 255, 0.456 * 255, 0.406 * 255]
IMAGENET_STD = [0.229 * 255, 0.224 * 255, 0.225 * 255]


def gpu_available() -> bool:
    """True when CUDA sees a device (asked through DALI, so no nvidia-smi is needed)."""
    try:
        from nvidia.dali.backend import GetCUDADeviceCount

        return GetCUDADeviceCount() > 0
    except Exception:  # no driver, no libcuda: a CPU machine
        return False


class BatchSource:
    """Batches of (encoded bytes as uint8 arrays, labels) from a loader; one epoch per iteration.

    Labels are int32 [1] arrays, or the raw label bytes as uint8 arrays with label_type "blob"
    (segmentation masks, multilabel vectors: decode them in the graph, as the plugin's examples do).
    """

    def __init__(self, loader: Loader, batch_size: int) -> None:
        self.loader = loader
        self.batch_size = batch_size
        self.blob_labels = loader.config.label_type == "blob"
        self.epoch = 0
        self._items: Iterator | None = None

    def __iter__(self) -> BatchSource:
        self.loader.set_epoch(self.epoch)
        self._items = iter(self.loader)
        self.epoch += 1
        return self

    def __next__(self) -> tuple[list[np.ndarray], list[np.ndarray]]:
        assert self._items is not None, "iterate the source first"
        data, labels = [], []
        for item in self._items:
            data.append(np.frombuffer(item.data, dtype=np.uint8))
            if self.blob_labels:
                labels.append(np.frombuffer(item.label or b"", dtype=np.uint8))
            else:
                labels.append(np.array([item.label if isinstance(item.label, int) else -1], dtype=np.int32))
            if len(data) == self.batch_size:
                break
        if not data:
            raise StopIteration
        return data, labels


def image_pipeline(loader: Loader, batch_size: int, size: int = 224, gpu: bool | None = None,
                   num_threads: int = 2, prefetch_queue_depth: int = 2, decode: bool = True,
                   device_id: int | None = None):
    """A built DALI pipeline yielding (images CHW float, labels) or, with decode=False, (bytes, labels).

    On a GPU the device is `device_id`, else this rank's LOCAL_RANK (torchrun), else 0.
    """
    gpu = gpu_available() if gpu is None else gpu
    if gpu and device_id is None:
        device_id = int(os.environ.get("LOCAL_RANK", "0"))
    label_dtype = types.UINT8 if loader.config.label_type == "blob" else types.INT32

    @pipeline_def(batch_size=batch_size, num_threads=num_threads, device_id=device_id if gpu else None,
                  prefetch_queue_depth=prefetch_queue_depth, exec_dynamic=True)
    def pipeline():
        jpegs, labels = fn.external_source(source=BatchSource(loader, batch_size), num_outputs=2,
                                           dtype=[types.UINT8, label_dtype], cycle="raise", batch=True)
        if not decode:
            return jpegs, labels
        images = fn.decoders.image(jpegs, device="mixed" if gpu else "cpu", output_type=types.RGB)
        images = fn.resize(images, resize_shorter=size * 256 // 224, antialias=True)
        images = fn.crop_mirror_normalize(images, crop=(size, size), mean=IMAGENET_MEAN, std=IMAGENET_STD,
                                          dtype=types.FLOAT, output_layout="CHW")
        return images, labels

    pipe = pipeline()
    pipe.build()
    return pipe
