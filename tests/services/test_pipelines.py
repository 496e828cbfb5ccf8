"""The reference training pipelines (pipelines/) train a few steps from every backend of the real stack.

Tiny data (48 JPEGs of about 8 KB), tiny models at 64 px, 3 steps of 8 images, 2 CPU threads: each run
checks that a real model is fed end to end (finite loss), that images/s is measured and that the ratio
to the same model's no-I/O ceiling is computed. The GPU test (resnet50, AMP, DALI nvJPEG decoding) runs
only where nvidia-smi finds a GPU.
"""

from __future__ import annotations

import importlib.util
import json
import math
import sys
import uuid
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:  # pipelines/ is a folder of scripts beside the package, not part of it
    sys.path.insert(0, str(ROOT))

from workbench.backends import make_backend  # noqa: E402
from workbench.data import SyntheticSource  # noqa: E402
from workbench.ingest import ingest  # noqa: E402

pytestmark = [pytest.mark.services, pytest.mark.slow, pytest.mark.usefixtures("torch_two_threads")]

MAIN_LOADERS = ["cassandra", "s3-shards", "s3-objects", "ignite", "fs"]
LAYOUTS = {"cassandra": {}, "s3-objects": {}, "s3-shards": {"maxcount": 6}, "ignite": {}, "fs": {}}
COUNT, MEAN_KB = 48, 8
SMALL = {"steps": 3, "batch_size": 8, "size": 64}


@pytest.fixture(scope="module")
def datasets(stack):
    """One classification dataset in every backend; segmentation and multilabel ones in Cassandra (blob labels)."""
    base = f"pipe_{uuid.uuid4().hex[:8]}"
    names = {"classification": base, "segmentation": f"{base}_seg", "multilabel": f"{base}_ml"}
    backends = []
    try:
        source = SyntheticSource(COUNT, mean_kb=MEAN_KB, seed=7, name=base)
        for name, layout in LAYOUTS.items():
            backends.append(make_backend(name, stack, base, **layout))
            ingest(source, backends[-1], progress=False)
        for kind in ("segmentation", "multilabel"):
            backends.append(make_backend("cassandra", stack, names[kind], label_type="blob"))
            ingest(SyntheticSource(COUNT, kind=kind, mean_kb=MEAN_KB, seed=7, name=names[kind]), backends[-1],
                   progress=False)
        yield names
    finally:
        for backend in backends:
            backend.drop()


def assert_measured(result: dict) -> None:
    assert math.isfinite(result["loss"]), result
    assert result["images_per_s"] > 0, result
    assert result["ceiling"] > 0, result
    assert math.isfinite(result["ratio"]) and result["ratio"] > 0, result
    assert result["ratio"] == pytest.approx(result["images_per_s"] / result["ceiling"])


@pytest.mark.parametrize("loader", MAIN_LOADERS)
def test_torch_pipeline_from_each_backend(stack, datasets, loader):
    from pipelines.train_torch import train

    result = train(loader, datasets["classification"], stack, decode="torch", model="tiny", workers=1,
                   num_classes=10, **SMALL)
    assert_measured(result)
    assert result["decode"] == "torch" and result["loader"] == loader and result["model"] == "tiny"


def test_torch_pipeline_dali_decoding_on_cpu(stack, datasets, tmp_path):
    from pipelines.train_torch import train

    result = train("cassandra", datasets["classification"], stack, decode="dali", model="tiny", device="cpu",
                   num_classes=10, results_dir=tmp_path, **SMALL)
    assert_measured(result)
    assert result["decode"] == "dali"
    row = json.loads((tmp_path / "train_torch-cassandra-dali.json").read_text())["rows"][0]
    assert row["ratio"] == pytest.approx(result["ratio"], abs=1e-3)
    assert row["environment"]["packages"]["torch"]


def test_torch_pipeline_command_line(stack, datasets, capsys):
    from pipelines.train_torch import main

    result = main(["--loader", "fs", "--dataset", datasets["classification"], "--steps", "3", "--batch-size", "8",
                   "--model", "tiny", "--size", "64", "--num-classes", "10", "--workers", "0", "--device", "cpu",
                   "-o", "concurrency=4"])
    assert_measured(result)
    out = capsys.readouterr().out
    assert "images/s while training" in out and "ratio" in out


@pytest.mark.parametrize("source", ["ignite-dataset", "ignite", "cassandra"])
def test_keras_pipeline(stack, datasets, source):
    if importlib.util.find_spec("tensorflow") is None:  # not importorskip: TF must load through workbench.tf_import
        pytest.skip("tensorflow is not installed")
    from pipelines.train_keras import train

    result = train(source, datasets["classification"], stack, model="tiny", num_classes=10, **SMALL)
    assert_measured(result)


def test_lightning_pipeline(stack, datasets):
    pytest.importorskip("lightning")
    from pipelines.train_lightning import train

    result = train("s3-shards", datasets["classification"], stack, model="tiny", num_classes=10, workers=1,
                   val_batches=1, **SMALL)
    assert_measured(result)
    assert result["steps"] == SMALL["steps"]
    assert math.isfinite(result["val"]["val_loss"])


def test_segmentation_pipeline(stack, datasets):
    from pipelines.segmentation import train

    result = train(datasets["segmentation"], stack, loader="cassandra", model="tiny", workers=1, **SMALL)
    assert_measured(result)
    assert 0.0 <= result["pixel_accuracy"] <= 1.0


def test_multilabel_pipeline(stack, datasets):
    from pipelines.multilabel import train

    result = train(datasets["multilabel"], stack, loader="cassandra", model="tiny", workers=1, **SMALL)
    assert_measured(result)
    assert 0.0 <= result["exact_match"] <= 1.0


@pytest.mark.gpu
def test_resnet50_amp_with_dali_gpu_decoding(stack, datasets):
    from pipelines.train_torch import train

    result = train("cassandra", datasets["classification"], stack, decode="dali", model="resnet50", size=224,
                   batch_size=16, steps=5, num_classes=10, device="cuda")
    assert_measured(result)
    assert result["amp"] is True and result["device"].startswith("cuda")
