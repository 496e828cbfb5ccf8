"""Keras checkpoints at any fsspec URL (``ignite://CACHE/run/model.keras`` included): the model and how far it got.

A checkpoint is Keras' own ``.keras`` archive (architecture, weights and the optimizer's state, so that
``keras.models.load_model`` reads it anywhere) with one more member, ``workbench_progress.json``: the
step (optimizer updates) and epoch the run had reached and what it was training (model, size, classes,
batch size), which a resumed run needs and Keras does not record. Keras' public API saves and loads
``.keras`` files by path only, so the archive passes through a temporary local file; the URL is written
in one go with `open_url` (on ``ignite://``: atomically, the previous checkpoint stays until the new one
is whole).
"""

from __future__ import annotations

import json
import tempfile
import zipfile
from pathlib import Path
from typing import Any

from workbench.checkpoints.files import open_url
from workbench.config import Settings
from workbench.errors import WorkbenchError, first_line

PROGRESS_MEMBER = "workbench_progress.json"
FORMAT = "workbench-keras-checkpoint"


def save_checkpoint(model: Any, url: str, progress: dict[str, Any], settings: Settings | None = None) -> int:
    """`model` (with its optimizer) and `progress` (``step``, ``epoch``, ...) to `url`; the bytes written."""
    if not isinstance(progress.get("step"), int) or progress["step"] < 0:
        raise WorkbenchError(f"a checkpoint's progress needs a step >= 0, got {progress.get('step')!r}")
    with tempfile.TemporaryDirectory(prefix="wb-keras-") as tmp:
        path = Path(tmp) / "model.keras"
        model.save(path)
        with zipfile.ZipFile(path, "a") as archive:
            archive.writestr(PROGRESS_MEMBER, json.dumps({"format": FORMAT, **progress}))
        data = path.read_bytes()
    with open_url(url, "wb", settings) as f:
        f.write(data)
    return len(data)


def read_progress(data: bytes, url: str) -> dict[str, Any]:
    """The progress member of checkpoint bytes `data` (read from `url`, named in errors)."""
    import io

    try:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            raw = archive.read(PROGRESS_MEMBER)
        progress = json.loads(raw)
    except (zipfile.BadZipFile, KeyError, ValueError) as exc:
        raise WorkbenchError(f"{url} is not a Keras checkpoint written by --checkpoint-url ({first_line(exc)}): "
                             "resume from a URL a run wrote") from None
    if not isinstance(progress, dict) or progress.get("format") != FORMAT or not isinstance(progress.get("step"), int):
        raise WorkbenchError(f"{url} holds no workbench progress record (step, epoch): resume from a URL "
                             "--checkpoint-url wrote")
    return progress


def load_checkpoint(url: str, settings: Settings | None = None) -> tuple[Any, dict[str, Any]]:
    """(compiled Keras model with its optimizer state, progress) of the checkpoint at `url`."""
    import keras

    try:
        with open_url(url, "rb", settings) as f:
            data = f.read()
    except FileNotFoundError:
        raise WorkbenchError(f"no checkpoint at {url}: resume from a URL that --checkpoint-url wrote") from None
    progress = read_progress(data, url)
    with tempfile.TemporaryDirectory(prefix="wb-keras-") as tmp:
        path = Path(tmp) / "model.keras"
        path.write_bytes(data)
        try:
            model = keras.models.load_model(path)
        except (ValueError, OSError, KeyError) as exc:
            raise WorkbenchError(f"Keras cannot load the checkpoint at {url}: {first_line(exc)}") from None
    return model, progress
