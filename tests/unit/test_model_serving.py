"""The pure parts of checkpoint-to-serving: repository writing, checkpoint URIs, one preprocessing definition."""

from __future__ import annotations

import importlib.util
import io
import sys
from pathlib import Path

import numpy as np
import pytest

from workbench.config import Settings
from workbench.errors import WorkbenchError
from workbench.model_serving import MODELS, checkpoint_uri, checkpoint_writer, write_repository
from workbench.preprocessing import IMAGENET_MEAN, IMAGENET_STD, MEAN_255, STD_255, resize_shorter
from workbench.triton_python import param

ROOT = Path(__file__).resolve().parents[2]
META = {"arch": "small", "num_classes": 10, "size": 32, "decode": "dali", "resize_shorter": 36}


def test_repository_points_the_classifier_at_the_checkpoint_and_sizes_preprocess(tmp_path):
    repository = write_repository(tmp_path / "models", "s3://workbench/checkpoints/d.pt", META)
    assert sorted(p.name for p in repository.iterdir()) == sorted(MODELS)
    classifier = (repository / "classifier" / "config.pbtxt").read_text()
    preprocess = (repository / "preprocess" / "config.pbtxt").read_text()
    assert '{ key: "checkpoint", value: { string_value: "s3://workbench/checkpoints/d.pt" } }' in classifier
    assert 'name: "PIXELS", data_type: TYPE_FP32, dims: [ 3, 32, 32 ]' in classifier
    assert 'name: "PIXELS", data_type: TYPE_FP32, dims: [ 3, 32, 32 ]' in preprocess
    assert '{ key: "resize_shorter", value: { string_value: "36" } }' in preprocess
    assert (repository / "classifier" / "1" / "model.py").is_file()
    assert (repository / "cass_to_inference" / "1").is_dir()  # ensembles need their empty version folder
    shared = (ROOT / "triton_models" / "classifier" / "config.pbtxt").read_text()  # the original is untouched
    assert '{ key: "checkpoint", value: { string_value: "" } }' in shared and "dims: [ 3, 224, 224 ]" in shared


def test_checkpoint_uris_name_s3_or_ignite():
    settings = Settings(s3_bucket="bucket")
    assert checkpoint_uri(settings, "s3", "run") == "s3://bucket/checkpoints/run.pt"
    assert checkpoint_uri(settings, "ignite", "run") == "ignite://WORKBENCH_CHECKPOINTS/run"
    with pytest.raises(WorkbenchError, match="use s3 or ignite"):
        checkpoint_uri(settings, "gcs", "run")
    with pytest.raises(WorkbenchError, match="s3://bucket/key or ignite://CACHE/name"):
        checkpoint_writer("http://host/x", settings)
    with pytest.raises(WorkbenchError, match="ignite://CACHE/name"):
        checkpoint_writer("ignite://cache-only", settings)
    with pytest.raises(WorkbenchError, match="s3://bucket/key or ignite://CACHE/name"):
        write_repository(Path("/nonexistent-never-written"), "file:///tmp/x", META)


def test_resize_rules_follow_the_training_decoders():
    assert resize_shorter(224, "dali") == 256 and resize_shorter(32, "dali") == 36
    assert resize_shorter(32, "torch") == 32
    with pytest.raises(ValueError, match="decode must be one of"):
        resize_shorter(32, "pil")


def test_model_parameters_fall_back_to_defaults():
    config = {"parameters": {"a": {"string_value": "x"}, "b": {"string_value": ""}}}
    assert param(config, "a", "d") == "x" and param(config, "b", "d") == "d" and param(config, "c", "d") == "d"


def test_training_and_serving_share_the_normalisation():
    """The torch pipelines normalise with the same statistics Triton's preprocess (this module) uses."""
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    from pipelines.common import IMAGENET_MEAN as torch_mean
    from pipelines.common import IMAGENET_STD as torch_std

    assert tuple(torch_mean) == IMAGENET_MEAN and tuple(torch_std) == IMAGENET_STD
    assert np.allclose(MEAN_255, np.array(IMAGENET_MEAN) * 255) and np.allclose(STD_255, np.array(IMAGENET_STD) * 255)


@pytest.mark.skipif(importlib.util.find_spec("nvidia.dali") is None, reason="DALI is not installed")
def test_dali_training_graph_equals_the_serving_graph():
    """`workbench.adapters.dali.decode_and_crop` (training) and the preprocess model's graph give the same pixels."""
    from nvidia.dali import fn, pipeline_def, types
    from PIL import Image

    from workbench.adapters.dali import decode_and_crop
    from workbench.preprocessing import dali_decode_resize_crop

    rng = np.random.default_rng(0)
    blobs = []
    for shape in ((40, 52, 3), (64, 48, 3)):
        buffer = io.BytesIO()
        Image.fromarray(rng.integers(0, 255, shape, dtype=np.uint8)).save(buffer, format="PNG")
        blobs.append(np.frombuffer(buffer.getvalue(), dtype=np.uint8))

    def run(graph):
        @pipeline_def(batch_size=len(blobs), num_threads=1, device_id=None, prefetch_queue_depth=1, exec_dynamic=True)
        def pipeline():
            return graph(fn.external_source(name="IMAGE", dtype=types.UINT8))

        pipe = pipeline()
        pipe.build()
        (images,) = pipe.run(IMAGE=blobs)
        return np.asarray(images.as_array())

    training = run(lambda jpegs: decode_and_crop(jpegs, False, 32))
    serving = run(lambda jpegs: dali_decode_resize_crop(jpegs, False, 32))
    assert training.shape == (2, 3, 32, 32)
    np.testing.assert_array_equal(training, serving)


def test_triton_gets_the_checkpoint_readers_settings_in_its_environment_only():
    """The classifier reads its checkpoint with Settings() inside Triton: S3 and Ignite logins travel in the
    child's environment (never its command line)."""
    from pydantic import SecretStr

    from workbench.stack.triton import Triton

    settings = Settings(s3_access_key=SecretStr("AKEY-x1"), s3_secret_key=SecretStr("SKEY-x2"), s3_port=9100,
                        ignite_username="reader", ignite_password=SecretStr("IPASS-x3"), ignite_port=10900,
                        triton_model_repository=ROOT / "triton_models")
    launch = Triton(settings).launch()
    env = launch.env
    assert (env["WORKBENCH_S3_ACCESS_KEY"], env["WORKBENCH_S3_SECRET_KEY"]) == ("AKEY-x1", "SKEY-x2")
    assert (env["WORKBENCH_IGNITE_USERNAME"], env["WORKBENCH_IGNITE_PASSWORD"]) == ("reader", "IPASS-x3")
    assert env["WORKBENCH_S3_PORT"] == "9100" and env["WORKBENCH_IGNITE_PORT"] == "10900"
    assert not any(secret in part for part in launch.command for secret in ("AKEY", "SKEY", "IPASS"))
