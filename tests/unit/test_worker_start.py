"""DataLoader workers start by forkserver (or spawn): what they receive must pickle, and every sample still
arrives exactly once. Why: workers forked from a process running threads (TF, gRPC, drivers) can crash."""

from __future__ import annotations

import pickle
import threading
import uuid
from collections import Counter

import pytest
import torch
from torch.utils.data import DataLoader, default_collate

from pipelines.multilabel import multilabel_transform
from pipelines.segmentation import segmentation_transform
from workbench.adapters.torch import LoaderDataset, decode_transform, skip_none, worker_context
from workbench.backends.registry import make_backend
from workbench.config import Settings
from workbench.data import SyntheticSource
from workbench.errors import WorkbenchError
from workbench.ingest import ingest
from workbench.loaders import Item


def settings_for(tmp_path, method: str = "forkserver") -> Settings:
    return Settings(state_dir=tmp_path / "state", s3_access_key=None, s3_secret_key=None, worker_start=method)


def test_in_process_loading_has_no_context(tmp_path):
    assert worker_context(settings_for(tmp_path), 0) is None


@pytest.mark.parametrize("method", ["forkserver", "spawn", "fork"])
def test_the_setting_picks_the_start_method(tmp_path, method):
    assert worker_context(settings_for(tmp_path, method), 2).get_start_method() == method


def test_forkserver_is_the_default(monkeypatch, tmp_path):
    monkeypatch.delenv("WORKBENCH_WORKER_START", raising=False)
    assert Settings(state_dir=tmp_path).worker_start == "forkserver"
    monkeypatch.setenv("WORKBENCH_WORKER_START", "fork")
    assert Settings(state_dir=tmp_path).worker_start == "fork"


def test_an_unknown_start_method_is_refused(tmp_path):
    with pytest.raises(ValueError, match="worker_start"):
        settings_for(tmp_path, "threads")


def samples(kind: str, n: int = 3) -> list[Item]:
    source = SyntheticSource(n, kind=kind, mean_kb=4, num_classes=5)
    return [Item(key=str(s.id), data=s.data, label=s.label) for s in source]


@pytest.mark.parametrize(("make", "kind"), [
    (lambda: decode_transform(32), "classification"),
    (lambda: decode_transform(32, on_corrupt="skip"), "classification"),
    (lambda: segmentation_transform(32, 5), "segmentation"),
    (lambda: multilabel_transform(32, 5), "multilabel"),
])
def test_transforms_pickle_and_transform_alike(make, kind):
    transform = make()
    clone = pickle.loads(pickle.dumps(transform))
    for item in samples(kind):
        (image, label), (image2, label2) = transform(item), clone(item)
        assert image.shape == (3, 32, 32) and image.dtype == torch.uint8
        assert torch.equal(image, image2)
        assert torch.equal(torch.as_tensor(label), torch.as_tensor(label2))


def test_a_corrupt_image_names_its_sample_or_is_skipped():
    item = Item(key="k-42", data=b"\xff\xd8 not a jpeg", label=1)
    with pytest.raises(WorkbenchError, match="sample k-42: cannot decode image"):
        decode_transform(32)(item)
    assert decode_transform(32, on_corrupt="skip")(item) is None
    collate = pickle.loads(pickle.dumps(skip_none(default_collate)))
    assert collate([None, (torch.zeros(2), 1), None])[1].tolist() == [1]


@pytest.mark.parametrize("method", ["forkserver", "spawn"])
def test_workers_started_cleanly_decode_every_sample_once(tmp_path, method):
    settings = settings_for(tmp_path, method)
    source = SyntheticSource(24, mean_kb=4, name=f"ws-{uuid.uuid4().hex[:6]}")
    root = tmp_path / "data"
    ingest(source, make_backend("fs", settings, source.name, layout="imagefolder", root=root), progress=False)
    stop = threading.Event()  # a thread running in this process while the workers start, as in a training job
    busy = threading.Thread(target=stop.wait, daemon=True)
    busy.start()
    try:
        data = LoaderDataset("fs", settings, transform=decode_transform(32), dataset=source.name, root=str(root))
        loader = DataLoader(data, batch_size=5, num_workers=2, multiprocessing_context=worker_context(settings, 2))
        batches = list(loader)
    finally:
        stop.set()
    images = torch.cat([b[0] for b in batches])
    assert images.shape == (24, 3, 32, 32)
    assert Counter(torch.cat([b[1] for b in batches]).tolist()) == Counter(s.label for s in source)

