"""Workbench: measure how fast training and inference can be fed from remote storage.

The public API is the names below; everything else in the package is internal. They load lazily (PEP 562), so
``import workbench`` and the storage, loader and ingest names import neither torch nor TensorFlow: only the
framework adapters do, when asked for.

    from workbench import Settings, make_loader, LoaderDataset
    loader = make_loader("s3-shards", Settings(), dataset="demo", concurrency="auto")
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

# name -> the module that defines it: the one list of what is public
_PUBLIC = {
    "Settings": "workbench.config",
    "WorkbenchError": "workbench.errors",
    "parse_source": "workbench.data",
    "ingest": "workbench.ingest",
    "make_backend": "workbench.backends",
    "register_backend": "workbench.backends",
    "make_loader": "workbench.loaders",
    "register_loader": "workbench.loaders",
    "Loader": "workbench.loaders",
    "LoaderConfig": "workbench.loaders",
    "Store": "workbench.storage",
    "LoaderDataset": "workbench.adapters.torch",
    "BatchDataset": "workbench.adapters.torch",
    "tf_dataset": "workbench.adapters.tf",
    "image_pipeline": "workbench.adapters.dali",
}
__all__ = sorted(_PUBLIC)


def __getattr__(name: str) -> Any:
    module = _PUBLIC.get(name)
    if module is None:
        raise AttributeError(f"module 'workbench' has no attribute {name!r} (public names: {', '.join(__all__)})")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return [*__all__, "__version__"]
