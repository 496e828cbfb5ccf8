"""Checkpoint to serving: the digits trained from Cassandra, written to S3 / Ignite, served by Triton, answered right.

The PyTorch pipeline (`pipelines.train_torch.train`, the accuracy tests' function) trains the small CNN on
the digits read from Cassandra (DALI decoding on the CPU, shuffled, out of order), bounded steps; the
weights go to S3 with the workbench's S3 checkpoint writer. A private Triton (its own ports and state dir:
the shared stack's models stay untouched) serves a repository whose classifier loads that checkpoint.
The validation UUIDs through ``cass_to_inference`` must come back with the right class for >= 95 %, the
same images' bytes through ``ensemble`` must agree (>= 99 %), and Triton's preprocess must produce the
pixels training's DALI graph produces. The control trains on labels permuted within every batch and
writes to Ignite: served accuracy then stays near chance, so the checks can fail.
"""

from __future__ import annotations

import sys
import uuid
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:  # pipelines/ is a folder of scripts beside the package
    sys.path.insert(0, str(ROOT))

from workbench.backends import make_backend  # noqa: E402
from workbench.data import DigitsSource  # noqa: E402
from workbench.ingest import ingest  # noqa: E402
from workbench.model_serving import (  # noqa: E402
    agreement,
    checkpoint_uri,
    classify_in_batches,
    delete_checkpoint,
    load_classifier,
    private_triton,
    served_accuracy,
    write_repository,
)
from workbench.serving import cassandra_table, infer, pack_images  # noqa: E402

pytestmark = [pytest.mark.services, pytest.mark.slow, pytest.mark.usefixtures("torch_two_threads"),
              pytest.mark.timeout(1500)]  # bounded training and a Triton start on two loaded cores: minutes

TARGET = 0.95
AGREEMENT = 0.99
VAL_SAMPLES = 355
# as the accuracy tests (tests/services/test_learnable_training.py): 96-99 % after 120 steps; out of order the
# order differs each run, and CI runs on loaded cores trained to 0.9493 in 150 steps and 0.9352 in 200 (stop 36;
# 0.989-0.994 in 4 quiet runs here, 300 steps 0.986-0.992), so 300 (6.7 epochs) for margin
RECIPE = {"decode": "dali", "model": "small", "size": 32, "num_classes": 10, "batch_size": 32, "steps": 300,
          "lr": 0.02, "device": "cpu", "ceiling": False, "quiet": True, "val_split": "val", "shuffle": True,
          "ordered": False}


@pytest.fixture(scope="module")
def digits(stack):
    """The digits in Cassandra under a unique name: (name, validation samples, their Cassandra table)."""
    name = f"serve_{uuid.uuid4().hex[:8]}"
    source = DigitsSource(name=name)
    backend = make_backend("cassandra", stack, name)
    try:
        ingest(source, backend, progress=False)
        val = [s for s in source if s.split == "val"]
        assert len(val) == VAL_SAMPLES
        yield name, val, cassandra_table(stack, name, "val")
    finally:
        backend.drop()


def _train(stack, dataset: str, checkpoint: str, **options) -> dict:
    from pipelines.train_and_serve import train_to_checkpoint

    return train_to_checkpoint("cassandra", dataset, stack, checkpoint, **{**RECIPE, **options})


def _serve(stack, tmp_path: Path, checkpoint: str, meta: dict, val: list, table: str, pixels_of=None) -> dict:
    """Classify `val` by UUID and by bytes through a private Triton serving `checkpoint`."""
    repository = write_repository(tmp_path / "models", checkpoint, meta)
    with private_triton(stack, repository, tmp_path / "state") as served:
        by_uuid = classify_in_batches(served, "cass_to_inference", [s.id for s in val], 32, 2, table=table)
        by_bytes = classify_in_batches(served, "ensemble", [s.data for s in val], 32, 2)
        pixels = None if pixels_of is None else infer(served, "preprocess", pack_images(pixels_of))["PIXELS"]
    labels = [s.label for s in val]
    row = {"uuid_accuracy": served_accuracy(by_uuid, labels), "bytes_accuracy": served_accuracy(by_bytes, labels),
           "agreement": agreement(by_uuid, by_bytes), "uuid_images_per_s": by_uuid.images_per_s,
           "bytes_images_per_s": by_bytes.images_per_s, "pixels": pixels}
    print({k: v for k, v in row.items() if k != "pixels"})  # the measured numbers (pytest -s / -rA)
    return row


def _training_pixels(blobs: list[bytes], size: int, shorter: int) -> np.ndarray:
    """What training's DALI graph (CPU) makes of `blobs`."""
    from nvidia.dali import fn, pipeline_def, types

    from workbench.preprocessing import dali_decode_resize_crop

    @pipeline_def(batch_size=len(blobs), num_threads=1, device_id=None, prefetch_queue_depth=1, exec_dynamic=True)
    def pipeline():
        return dali_decode_resize_crop(fn.external_source(name="IMAGE", dtype=types.UINT8), False, size, shorter)

    pipe = pipeline()
    pipe.build()
    (images,) = pipe.run(IMAGE=[np.frombuffer(b, dtype=np.uint8) for b in blobs])
    return np.asarray(images.as_array(), dtype=np.float32)


def test_checkpoint_on_s3_served_by_triton_answers_right(stack, digits, tmp_path):
    name, val, table = digits
    checkpoint = checkpoint_uri(stack, "s3", f"test-{name}")
    try:
        trained = _train(stack, name, checkpoint)
        print(f"training validation accuracy {trained['val_accuracy']:.4f}")
        meta = trained["checkpoint_meta"]
        assert meta["arch"] == "small" and meta["size"] == 32 and meta["resize_shorter"] == 36
        assert sorted(load_classifier(checkpoint, stack)["state_dict"])  # readable back with the S3 reader
        row = _serve(stack, tmp_path, checkpoint, meta, val, table, pixels_of=[s.data for s in val[:8]])
    finally:
        delete_checkpoint(checkpoint, stack)
    assert trained["val_accuracy"] >= TARGET, trained
    assert row["uuid_accuracy"] >= TARGET, row
    assert row["bytes_accuracy"] >= TARGET, row
    assert row["agreement"] >= AGREEMENT, row
    expected = _training_pixels([s.data for s in val[:8]], 32, 36)
    assert row["pixels"].shape == expected.shape == (8, 3, 32, 32)
    np.testing.assert_allclose(row["pixels"], expected, atol=1e-5)  # Triton's preprocessing is training's


def test_scrambled_labels_checkpoint_on_ignite_is_served_near_chance(stack, digits, tmp_path):
    """Weights trained on labels permuted inside every batch: the served accuracy check must then fail."""
    from pipelines.accuracy import scramble_labels

    name, val, table = digits
    checkpoint = checkpoint_uri(stack, "ignite", f"test-scrambled-{name}")
    try:
        trained = _train(stack, name, checkpoint, wrap_batches=scramble_labels, steps=60)  # learns nothing anyway
        row = _serve(stack, tmp_path, checkpoint, trained["checkpoint_meta"], val, table)
    finally:
        delete_checkpoint(checkpoint, stack)
    assert row["uuid_accuracy"] < 0.3, row  # 10 classes: chance is 0.1
    assert row["uuid_accuracy"] < TARGET
