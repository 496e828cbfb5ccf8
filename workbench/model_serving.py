"""A trained classifier from a checkpoint on remote storage to Triton, and how well the served model answers.

1. `save_classifier` writes the weights with the workbench's checkpoint writers (`S3Checkpoint` for
   ``s3://bucket/key``, `IgniteCheckpoint` for ``ignite://CACHE/name``), together with what serving needs
   to rebuild the model: architecture (a name `pipelines.common.build_classifier` knows), class count,
   image size and the resize rule its training decoder used (`workbench.preprocessing`).
2. `write_repository` copies the Triton models (preprocess, classifier, ensemble, cassandra_fetch,
   cass_to_inference) and points the classifier at the checkpoint (config parameter ``checkpoint``);
   the preprocess model gets the checkpoint's image size and resize rule, so the server decodes,
   resizes, crops and normalises exactly as training did. The classifier reads the checkpoint itself
   when Triton loads it (`load_classifier`), with the credentials the stack exports to Triton's
   environment: nothing secret is written into the repository.
3. `private_triton` serves such a repository from a Triton of its own (free ports, its own state dir),
   beside the shared stack, whose models stay as they are.
4. `classify_in_batches` sends samples through ``cass_to_inference`` (UUIDs) or ``ensemble`` (bytes) and
   times it: `served_accuracy` and `agreement` turn the answers into the numbers the checks assert.
"""

from __future__ import annotations

import contextlib
import re
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np

from workbench.bench.clients_launch import free_port
from workbench.checkpoints.ignite import DEFAULT_CACHE, IgniteCheckpoint
from workbench.checkpoints.s3 import S3Checkpoint
from workbench.config import Settings
from workbench.errors import WorkbenchError, first_line
from workbench.preprocessing import DECODERS, resize_shorter
from workbench.stack import down, up
from workbench.storage import parse_s3_uri
from workbench.storage.oss_access import OssAccess

FORMAT = "workbench-classifier"
MODELS = ("preprocess", "classifier", "ensemble", "cassandra_fetch", "cass_to_inference")
MAX_BATCH = 64  # the models' max_batch_size
PROJECT_ROOT = Path(__file__).resolve().parents[1]


# ------------------------------------------------------------------------------------------ checkpoints


def _ignite_name(uri: str) -> tuple[str, str]:
    cache, _, name = uri[len("ignite://"):].partition("/")
    if not cache or not name:
        raise WorkbenchError(f"checkpoint URI {uri!r} names no cache and checkpoint (want ignite://CACHE/name)")
    return cache, name


def _check_uri(uri: str) -> str:
    if not isinstance(uri, str) or not uri.startswith(("s3://", "ignite://")):
        raise WorkbenchError(f"checkpoint URI {uri!r}: use s3://bucket/key or ignite://CACHE/name")
    return uri


def checkpoint_uri(settings: Settings, store: str, name: str) -> str:
    """Where a checkpoint called `name` goes in `store`: s3 (the settings' bucket) or ignite (the default cache)."""
    if store == "s3":
        return f"s3://{settings.s3_bucket}/checkpoints/{name}.pt"
    if store == "ignite":
        return f"ignite://{DEFAULT_CACHE}/{name}"
    raise WorkbenchError(f"checkpoint store {store!r}: use s3 or ignite")


def checkpoint_writer(uri: str, settings: Settings) -> BinaryIO:
    """A file object whose bytes become the checkpoint `uri` when closed without error (S3 or Ignite)."""
    if _check_uri(uri).startswith("s3://"):
        return S3Checkpoint(settings).writer(uri)  # type: ignore[return-value]
    cache, name = _ignite_name(uri)
    return IgniteCheckpoint(settings, cache_name=cache).writer(name)  # type: ignore[return-value]


def checkpoint_reader(uri: str, settings: Settings) -> BinaryIO:
    """The checkpoint `uri` as a seekable file object (what torch.load reads)."""
    if _check_uri(uri).startswith("s3://"):
        return S3Checkpoint(settings).reader(uri)  # type: ignore[return-value]
    cache, name = _ignite_name(uri)
    return IgniteCheckpoint(settings, cache_name=cache).reader(name)


def delete_checkpoint(uri: str, settings: Settings) -> None:
    """Remove the checkpoint `uri` (tests and notebooks clean up after themselves)."""
    if _check_uri(uri).startswith("s3://"):
        bucket, key = parse_s3_uri(uri)
        OssAccess(settings).store(bucket, 2).delete([key])
        return
    cache, name = _ignite_name(uri)
    IgniteCheckpoint(settings, cache_name=cache).delete(name)


def save_classifier(model: Any, uri: str, settings: Settings, *, arch: str, num_classes: int, size: int,
                    decode: str) -> dict[str, Any]:
    """torch.save the model's weights and serving metadata to `uri`; returns the metadata."""
    import torch

    if decode not in DECODERS:
        raise WorkbenchError(f"decode must be one of {', '.join(DECODERS)} (the training decoder), got {decode!r}")
    model = getattr(model, "module", model)  # DistributedDataParallel wraps the trained model
    meta = {"format": FORMAT, "arch": arch, "num_classes": int(num_classes), "size": int(size), "decode": decode,
            "resize_shorter": resize_shorter(size, decode)}
    state = {k: v.detach().cpu().contiguous() for k, v in model.state_dict().items()}
    with checkpoint_writer(uri, settings) as f:
        torch.save({**meta, "state_dict": state}, f)
    return meta


def load_classifier(uri: str, settings: Settings) -> dict[str, Any]:
    """The checkpoint `save_classifier` wrote: its metadata and ``state_dict`` (tensors only: weights_only).
    A bare state dict (what `pipelines.train_torch` writes with ``checkpoint_url``) comes back as
    ``{"state_dict": ...}``: the caller supplies architecture and class count."""
    import torch

    with contextlib.closing(checkpoint_reader(uri, settings)) as f:
        try:
            checkpoint = torch.load(f, map_location="cpu", weights_only=True)
        except Exception as exc:
            raise WorkbenchError(f"checkpoint {uri} is not a torch checkpoint: {first_line(exc)}") from exc
    if isinstance(checkpoint, dict) and checkpoint.get("format") == FORMAT:
        return checkpoint
    if isinstance(checkpoint, dict) and checkpoint and all(isinstance(v, torch.Tensor) for v in checkpoint.values()):
        return {"state_dict": checkpoint}  # a bare state dict (train_torch --checkpoint-url): no metadata
    raise WorkbenchError(f"checkpoint {uri} holds neither a save_classifier checkpoint nor a state dict: write it with "
                         "workbench.model_serving.save_classifier")


def build_model(arch: str, num_classes: int) -> Any:
    """The training pipelines' architecture `arch` (`pipelines.common.build_classifier`: small, tiny or a
    torchvision name); torchvision alone where the pipelines folder is not importable.

    pipelines/ sits beside the package in a checkout (an editable install): its folder goes on sys.path
    here, because Triton's python stub does not read PYTHONPATH."""
    if (PROJECT_ROOT / "pipelines" / "common.py").is_file() and str(PROJECT_ROOT) not in sys.path:
        sys.path.append(str(PROJECT_ROOT))
    try:
        from pipelines.common import build_classifier
    except ImportError:
        import torchvision

        factory = getattr(torchvision.models, arch, None)
        if factory is None:
            raise WorkbenchError(f"model {arch!r} needs pipelines.common (a checkout of the workbench) or is not a "
                                 "torchvision model") from None
        return factory(weights=None, num_classes=num_classes)
    return build_classifier(arch, num_classes)


# ------------------------------------------------------------------------------------ model repository


def _set_parameter(config: str, key: str, value: str, model: str) -> str:
    pattern = re.compile(r'(\{\s*key:\s*"' + re.escape(key) + r'",\s*value:\s*\{\s*string_value:\s*)"[^"]*"')
    if not pattern.search(config):
        raise WorkbenchError(f"triton model {model}: config.pbtxt has no parameter '{key}' to set")
    return pattern.sub(lambda m: m.group(1) + '"' + value.replace('"', "") + '"', config, count=1)


def _set_pixels_dims(config: str, size: int, model: str) -> str:
    pattern = re.compile(r'(name:\s*"PIXELS",\s*data_type:\s*TYPE_FP32,\s*dims:\s*)\[[^\]]*\]')
    if not pattern.search(config):
        raise WorkbenchError(f"triton model {model}: config.pbtxt declares no PIXELS tensor")
    return pattern.sub(lambda m: f"{m.group(1)}[ 3, {size}, {size} ]", config, count=1)


def write_repository(destination: Path, checkpoint: str, meta: dict[str, Any],
                     source: Path | None = None) -> Path:
    """A Triton model repository in `destination` serving the checkpoint (see the module docstring)."""
    source = source or PROJECT_ROOT / "triton_models"
    size = int(meta["size"])
    destination.mkdir(parents=True, exist_ok=True)
    for model in MODELS:
        target = destination / model
        shutil.copytree(source / model, target, dirs_exist_ok=True, ignore=shutil.ignore_patterns("__pycache__"))
        config_path = target / "config.pbtxt"
        config = config_path.read_text()
        if model == "classifier":
            config = _set_parameter(_set_pixels_dims(config, size, model), "checkpoint", _check_uri(checkpoint), model)
        elif model == "preprocess":
            config = _set_parameter(_set_pixels_dims(config, size, model), "resize_shorter",
                                    str(int(meta["resize_shorter"])), model)
        config_path.write_text(config)
    return destination


@contextlib.contextmanager
def private_triton(settings: Settings, repository: Path, state_dir: Path | None = None) -> Iterator[Settings]:
    """A Triton of its own serving `repository` (free ports on settings.host, its own state dir), stopped on
    exit; yields its settings. The storage settings stay the shared stack's: cassandra_fetch and the
    classifier read from the same Cassandra, S3 and Ignite."""
    own_dir = state_dir is None
    state = Path(tempfile.mkdtemp(prefix="workbench-triton-")) if state_dir is None else state_dir
    private = settings.model_copy(update={
        "state_dir": state, "triton_model_repository": repository.resolve(),
        "triton_http_port": free_port(settings.host), "triton_grpc_port": free_port(settings.host),
        "triton_metrics_port": free_port(settings.host)})
    try:
        rows = up(private, ["triton"])
        broken = [f"{r.service}: {r.detail}" for r in rows if not r.healthy]
        if broken:
            raise WorkbenchError(f"the private Triton serving {repository} did not start: {'; '.join(broken)} "
                                 f"(its log: {state / 'triton'})")
        yield private
    finally:
        down(private, ["triton"])
        if own_dir:
            shutil.rmtree(state, ignore_errors=True)


# ------------------------------------------------------------------------------------------ answers


@dataclass
class Answers:
    """Classes Triton returned for a list of samples, in their order, and how long the requests took."""

    model: str
    classes: np.ndarray
    seconds: float
    batch_size: int
    concurrency: int

    @property
    def images_per_s(self) -> float:
        return len(self.classes) / self.seconds if self.seconds > 0 else 0.0


def classify_in_batches(settings: Settings, model: str, items: Sequence[Any], batch_size: int = 32,
                        concurrency: int = 2, protocol: str = "http", table: str | None = None) -> Answers:
    """Every item through `model` (``cass_to_inference``: UUIDs, ``ensemble``: encoded bytes) in requests of
    `batch_size`, `concurrency` in flight; the classes in the items' order and the wall time."""
    from workbench.serving import classify_images, classify_uuids

    if not items:
        raise WorkbenchError("no samples to classify")
    if not 1 <= batch_size <= MAX_BATCH:
        raise WorkbenchError(f"batch_size must be in [1, {MAX_BATCH}] (the models' max_batch_size), got {batch_size}")
    call: Callable[[Sequence[Any]], dict]
    if model == "cass_to_inference":
        def call(chunk):
            return classify_uuids(settings, chunk, protocol, table=table)
    elif model == "ensemble":
        def call(chunk):
            return classify_images(settings, chunk, protocol)
    else:
        raise WorkbenchError(f"model {model!r}: use cass_to_inference (UUIDs) or ensemble (bytes)")
    chunks = [items[i:i + batch_size] for i in range(0, len(items), batch_size)]
    started = time.perf_counter()
    with ThreadPoolExecutor(max(1, concurrency)) as pool:
        results = list(pool.map(call, chunks))
    seconds = time.perf_counter() - started
    classes = np.concatenate([r["CLASS"] for r in results]).astype(np.int64)
    return Answers(model, classes, seconds, batch_size, concurrency)


def served_accuracy(answers: Answers, labels: Sequence[int]) -> float:
    """Share of samples whose served class is their label."""
    labels = np.asarray(labels, dtype=np.int64)
    if len(labels) != len(answers.classes):
        raise WorkbenchError(f"{len(answers.classes)} answers for {len(labels)} labels")
    return float((answers.classes == labels).mean())


def agreement(first: Answers, second: Answers) -> float:
    """Share of samples both models classified the same."""
    if len(first.classes) != len(second.classes):
        raise WorkbenchError(f"{first.model} answered {len(first.classes)}, {second.model} {len(second.classes)}")
    return float((first.classes == second.classes).mean())
