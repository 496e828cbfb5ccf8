"""Any registered loader feeding an NVIDIA DALI pipeline through `fn.external_source`.

The graph decodes with `fn.decoders.image` (`device="mixed"`: nvJPEG on the GPU when one is present,
"cpu" with `device_id=None` otherwise), then resizes, crops and normalises, as the
cassandra-dali-plugin examples do after `fn.crs4.cassandra`.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np
from nvidia.dali import fn, pipeline_def, types

from workbench.errors import WorkbenchError
from workbench.loaders import Loader
from workbench.loaders.consumed import ConsumedState
from workbench.preprocessing import dali_decode_resize_crop


def gpu_available() -> bool:
    """True when CUDA sees a device (asked through DALI, so no nvidia-smi is needed)."""
    try:
        from nvidia.dali.backend import GetCUDADeviceCount

        return GetCUDADeviceCount() > 0
    except Exception:  # no driver, no libcuda: a CPU machine
        return False


class BatchSource:
    """Batches of (encoded bytes as uint8 arrays, labels) from a loader; one epoch per iteration.

    The byte arrays are views of the loader's batch buffer (`workbench.data.Batch`): DALI copies them once,
    into its own input buffer. Labels are int32 [1] arrays, or the raw label bytes as uint8 arrays with
    label_type "blob" (segmentation masks, multilabel vectors: decode them in the graph, as the plugin's
    examples do).

    Resumable (torchdata's Stateful convention): DALI asks for batches ahead of the consumer (its prefetch
    queue), so take the outputs with `run(pipe)` instead of `pipe.run()`: `state_dict()` is then the loader's
    state recorded with the last batch the consumer took (`workbench.loaders.consumed`). A fresh source given
    it by `load_state_dict` (before the pipeline is built) delivers the rest of that epoch, none twice, none
    missed: the loader skips what was read.
    """

    def __init__(self, loader: Loader, batch_size: int) -> None:
        self.loader = loader
        self.batch_size = batch_size
        self.label_type = loader.config.label_type
        self.epoch = 0
        self._batches: Iterator[tuple[list[np.ndarray], list]] | None = None
        self._consumed = ConsumedState(loader.state_dict())

    def state_dict(self) -> dict[str, Any]:
        """Where the consumer stands: the loader's state after the last batch `run` returned."""
        return self._consumed.state_dict()

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Resume from `state` at the next iteration (the loader checks it: a mismatch is one WorkbenchError)."""
        self.loader.load_state_dict(state)
        self.epoch = self.loader.epoch
        self._consumed.restart(self.loader.state_dict())

    def run(self, pipe) -> Any:
        """`pipe.run()`, counted as taken by the consumer (StopIteration at the end of the epoch, as DALI's)."""
        try:
            outputs = pipe.run()
        except StopIteration:
            self._consumed.exhausted()
            raise
        self._consumed.taken()
        return outputs

    def epoch_batches(self, epoch: int) -> Iterator[tuple[list[np.ndarray], list]]:
        """(payload views, labels) of up to batch_size samples: this epoch's samples."""
        self.loader.set_epoch(epoch)
        self._consumed.restart(self.loader.state_dict())  # a loaded state, else the start of `epoch`
        for batch in self.loader.batches(self.batch_size):
            self._consumed.produced(self.loader.state_dict())  # before DALI can hand the batch on
            yield batch.views(), batch.labels
        self._consumed.finished(self.loader.state_dict())

    def __iter__(self) -> BatchSource:
        self._batches = self.epoch_batches(self.epoch)
        self.epoch += 1
        return self

    def __next__(self) -> tuple[list[np.ndarray], list[np.ndarray]]:
        assert self._batches is not None, "iterate the source first"
        data, labels = next(self._batches)  # StopIteration ends DALI's epoch (cycle="raise")
        if self.label_type == "blob":
            return data, [np.frombuffer(label or b"", dtype=np.uint8) for label in labels]
        return data, [np.array([label if isinstance(label, int) else -1], dtype=np.int32)
                      for label in labels]


class ProcessBatchSource(BatchSource):
    """The same batches, fetched by `workers` processes (a torch DataLoader over `BatchDataset`).

    Why: a Python loader in the training process shares its interpreter (and GIL) with the training
    loop and DALI's feeding; in worker processes each shard (rank x worker) fetches with its own
    connections beside it, while DALI still decodes on the GPU. Each batch crosses from its worker in
    shared memory (one tensor per batch), never as pickled bytes. Every sample arrives exactly once per
    epoch; a worker's last batch may be short. The batch size is the loader config's `batch_size`.
    """

    def __init__(self, loader: str, settings, workers: int, **config) -> None:
        from workbench.adapters.torch import BatchDataset

        if workers < 1:
            raise ValueError(f"workers must be >= 1, got {workers}")
        self.dataset = BatchDataset(loader, settings, **config)
        self.batch_size = self.dataset.config["batch_size"]
        self.workers = workers
        self.label_type = self.dataset.config["label_type"]
        self.epoch = 0
        self._batches = None

    def state_dict(self) -> dict[str, Any]:
        raise WorkbenchError("ProcessBatchSource does not resume mid-epoch (its state is spread over its worker "
                             "processes): use BatchSource, or a torchdata StatefulDataLoader over BatchDataset")

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.state_dict()

    def epoch_batches(self, epoch: int) -> Iterator[tuple[list[np.ndarray], list]]:
        from torch.utils.data import DataLoader

        from workbench.adapters.torch import payloads, worker_context

        self.dataset.set_epoch(epoch)
        batches = DataLoader(self.dataset, batch_size=None, num_workers=self.workers, prefetch_factor=4,
                             multiprocessing_context=worker_context(self.dataset.settings, self.workers))
        for element in batches:
            labels = element["label"].tolist() if hasattr(element["label"], "tolist") else element["label"]
            yield [view.numpy() for view in payloads(element)], labels


def decode_and_crop(jpegs, gpu: bool, size: int):
    """The graph after any reader: decode (nvJPEG when `gpu`), resize the shorter side, centre crop, normalise."""
    return dali_decode_resize_crop(jpegs, gpu, size)


def image_pipeline(loader: Loader | BatchSource, batch_size: int, size: int = 224, gpu: bool | None = None,
                   num_threads: int = 2, prefetch_queue_depth: int = 2, decode: bool = True,
                   device_id: int | None = None):
    """A built DALI pipeline yielding (images CHW float, labels) or, with decode=False, (bytes, labels).

    `loader` is a loader (fetched in this process) or a `BatchSource` such as `ProcessBatchSource`.

    On a GPU the device is `device_id`, else this rank's LOCAL_RANK (torchrun), else 0.
    """
    gpu = gpu_available() if gpu is None else gpu
    if gpu and device_id is None:
        device_id = int(os.environ.get("LOCAL_RANK", "0"))
    source = loader if isinstance(loader, BatchSource) else BatchSource(loader, batch_size)
    label_dtype = types.UINT8 if source.label_type == "blob" else types.INT32

    @pipeline_def(batch_size=batch_size, num_threads=num_threads, device_id=device_id if gpu else None,
                  prefetch_queue_depth=prefetch_queue_depth, exec_dynamic=True)
    def pipeline():
        jpegs, labels = fn.external_source(source=source, num_outputs=2,
                                           dtype=[types.UINT8, label_dtype], cycle="raise", batch=True)
        return (decode_and_crop(jpegs, gpu, size) if decode else jpegs), labels

    pipe = pipeline()
    pipe.build()
    return pipe
