"""Any registered loader as a PyTorch IterableDataset, split across DataLoader workers and ranks."""

from __future__ import annotations

import io
from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch.utils.data import IterableDataset, get_worker_info

from workbench.config import Settings
from workbench.errors import WorkbenchError
from workbench.loaders import Item, loader_class, make_loader


class LoaderDataset(IterableDataset):
    """Yields `transform(item)` for this rank's and this DataLoader worker's share of an epoch.

    Each worker builds its own loader (own connections) for shard (rank, worker) of the flat
    shard space, so ranks x workers deliver every sample of the split exactly once per epoch.
    Call `set_epoch(e)` before each epoch when shuffling (as with DistributedSampler).
    """

    def __init__(self, loader: str, settings: Settings, transform: Callable[[Item], Any] | None = None,
                 **config: Any) -> None:
        super().__init__()
        self.loader = loader
        self.settings = settings
        self.config = loader_class(loader).Config(**config).model_dump()  # validate now, before any worker starts
        self.transform = transform or as_tuple
        self.epoch = 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __iter__(self) -> Iterator[Any]:
        info = get_worker_info()
        worker_id, num_workers = (info.id, info.num_workers) if info else (0, 1)
        with make_loader(self.loader, self.settings, worker_id, num_workers, **self.config) as loader:
            loader.set_epoch(self.epoch)
            for item in loader:
                yield self.transform(item)


def as_tuple(item: Item) -> tuple[bytes, int | bytes | None, str]:
    """The raw sample: (encoded bytes, label, key). Collate with `collate_raw`."""
    return item.data, item.label, item.key


def collate_raw(batch: list[tuple]) -> dict[str, list]:
    """Batches of raw samples stay lists: encoded images differ in length."""
    data, labels, keys = zip(*batch, strict=True)
    return {"data": list(data), "label": list(labels), "key": list(keys)}


def decode_transform(size: int = 224, on_corrupt: str = "raise") -> Callable[[Item], tuple | None]:
    """Decode (torchvision), resize the short side, center-crop to `size`: (CHW uint8 tensor, label).

    A corrupt image raises with its key, or yields None with on_corrupt="skip" (drop it with
    `skip_none` as collate function wrapper).
    """
    from torchvision.io import ImageReadMode, decode_image
    from torchvision.transforms.v2 import functional as F

    def transform(item: Item):
        try:
            image = decode_image(torch.frombuffer(bytearray(item.data), dtype=torch.uint8), mode=ImageReadMode.RGB)
        except RuntimeError as exc:
            if on_corrupt == "skip":
                return None
            raise WorkbenchError(f"sample {item.key}: cannot decode image ({str(exc).splitlines()[0]})") from exc
        image = F.center_crop(F.resize(image, [size], antialias=True), [size, size])
        if isinstance(item.label, bytes):
            raise WorkbenchError(f"sample {item.key}: decode_transform yields class labels, this one is a blob "
                                 "(label_type blob): decode masks/multilabels in a transform of your own")
        return image, -1 if item.label is None else item.label

    return transform


def skip_none(collate: Callable[[list], Any]) -> Callable[[list], Any]:
    def wrapped(batch: list) -> Any:
        return collate([b for b in batch if b is not None])

    return wrapped


def pil_transform(item: Item):
    """(PIL image, label): for torchvision transforms that expect PIL."""
    from PIL import Image

    return Image.open(io.BytesIO(item.data)).convert("RGB"), item.label
